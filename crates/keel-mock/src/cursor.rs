//! The step cursors: which step answers the next request. One cursor walks the top-level steps,
//! and one more each model with steps of its own. Shared by every wire API and by the
//! in-process provider. A per-turn script is not walked: each request's step is looked up by
//! its position in its turn.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::script::{Script, Step};

/// What the next request gets.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Turn {
    /// Answer with `step`. `number` counts the answers its step list served before this one
    /// (in a per-turn script: the request's position in its turn); `ids` is the number the
    /// answer's made-up tool-call ids are built from (`call_<ids>_<index>`): `number` when
    /// walking in order, a count of every answer served before when per turn, so ids never
    /// repeat within a conversation.
    Answer {
        number: usize,
        ids: usize,
        step: Arc<Step>,
    },
    /// No step is left; `served` answers were given from the list (in a per-turn script: the
    /// list covers `served` positions). `model` names the model whose own list ran out
    /// (`None`: the top-level steps).
    Exhausted {
        served: usize,
        model: Option<String>,
    },
}

/// Routes each request to its step list (the model's own, else the top-level one) and walks
/// it, honouring `times` and `forever`. Safe to share between concurrent requests: each call to
/// [`Cursor::next`] takes exactly one turn of one list, and [`Cursor::at`] takes none.
#[derive(Debug)]
pub(crate) struct Cursor {
    steps: Walk,
    models: BTreeMap<String, Walk>,
    per_turn: bool,
    /// Answers given by position, for their tool-call ids.
    positioned: AtomicUsize,
}

impl Cursor {
    pub(crate) fn new(script: Script) -> Cursor {
        Cursor {
            steps: Walk::new(script.steps),
            models: script
                .models
                .into_iter()
                .map(|(model, script)| (model, Walk::new(script.steps)))
                .collect(),
            per_turn: script.per_turn,
            positioned: AtomicUsize::new(0),
        }
    }

    /// The answer for a request asking for `model`: by its position in its turn (computed only
    /// then) in a per-turn script, else the next of its list.
    pub(crate) fn take(&self, model: &str, position: impl FnOnce() -> usize) -> Turn {
        if self.per_turn {
            self.at(model, position())
        } else {
            self.next(model)
        }
    }

    /// Takes the next turn for a request asking for `model`.
    pub(crate) fn next(&self, model: &str) -> Turn {
        let (walk, name) = self.route(model);
        walk.next().unwrap_or_else(|served| Turn::Exhausted {
            served,
            model: name.cloned(),
        })
    }

    /// The step at `position` of `model`'s list, without moving any cursor: the same position
    /// always gets the same step.
    pub(crate) fn at(&self, model: &str, position: usize) -> Turn {
        let (walk, name) = self.route(model);
        match walk.at(position) {
            Ok(step) => Turn::Answer {
                number: position,
                // Only uniqueness matters: no ordering with other memory is needed.
                ids: self.positioned.fetch_add(1, Ordering::Relaxed),
                step,
            },
            Err(served) => Turn::Exhausted {
                served,
                model: name.cloned(),
            },
        }
    }

    /// The list serving `model`, and the model's name if it is its own.
    fn route(&self, model: &str) -> (&Walk, Option<&String>) {
        match self.models.get_key_value(model) {
            Some((name, walk)) => (walk, Some(name)),
            None => (&self.steps, None),
        }
    }
}

/// One step list and how far requests have got through it.
#[derive(Debug)]
struct Walk {
    steps: Vec<Arc<Step>>,
    progress: Mutex<Progress>,
}

#[derive(Debug, Default)]
struct Progress {
    position: usize,
    used: u32,
    served: usize,
}

/// How many answers `step` gives before the next one: `None` for a `forever` step. `times: 0`
/// is rejected by validation; a step built in code with it answers once.
fn repeats(step: &Step) -> Option<u32> {
    (!step.forever).then(|| step.times.unwrap_or(1).max(1))
}

impl Walk {
    fn new(steps: Vec<Step>) -> Walk {
        Walk {
            steps: steps.into_iter().map(Arc::new).collect(),
            progress: Mutex::new(Progress::default()),
        }
    }

    /// Takes the next answer, or fails with the number of answers served once none is left.
    fn next(&self) -> Result<Turn, usize> {
        // A panic while holding the lock cannot leave the state half-updated (every update
        // below is a plain assignment), so a poisoned lock is safe to keep using.
        let mut progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let progress = &mut *progress;
        while let Some(step) = self.steps.get(progress.position) {
            if repeats(step).is_none_or(|times| progress.used < times) {
                progress.used += 1;
                let number = progress.served;
                progress.served += 1;
                return Ok(Turn::Answer {
                    number,
                    ids: number,
                    step: step.clone(),
                });
            }
            progress.position += 1;
            progress.used = 0;
        }
        Err(progress.served)
    }

    /// The step covering `position`, or the number of positions the list covers.
    fn at(&self, position: usize) -> Result<Arc<Step>, usize> {
        let mut start = 0usize;
        for step in &self.steps {
            let Some(times) = repeats(step) else {
                return Ok(step.clone());
            };
            start = start.saturating_add(times as usize);
            if position < start {
                return Ok(step.clone());
            }
        }
        Err(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(cursor: &Cursor, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| match cursor.next("m") {
                Turn::Answer { step, .. } => step.text.clone().unwrap_or_default(),
                Turn::Exhausted { served, model } => {
                    format!("exhausted after {served}{}", model.unwrap_or_default())
                }
            })
            .collect()
    }

    #[test]
    fn walks_steps_in_order_then_is_exhausted() {
        let cursor = Cursor::new(Script::new(vec![Step::text("a"), Step::text("b")]));
        assert_eq!(
            texts(&cursor, 4),
            ["a", "b", "exhausted after 2", "exhausted after 2"]
        );
    }

    #[test]
    fn times_repeats_a_step() {
        let cursor = Cursor::new(Script::new(vec![
            Step::text("a").repeat(3),
            Step::text("b"),
        ]));
        assert_eq!(texts(&cursor, 5), ["a", "a", "a", "b", "exhausted after 4"]);
    }

    #[test]
    fn forever_never_runs_out() {
        let cursor = Cursor::new(Script::new(vec![
            Step::text("a"),
            Step::text("b").repeat_forever(),
        ]));
        assert_eq!(texts(&cursor, 5), ["a", "b", "b", "b", "b"]);
    }

    #[test]
    fn numbers_count_answers_served() {
        let cursor = Cursor::new(Script::new(vec![
            Step::text("a").repeat(2),
            Step::text("b"),
        ]));
        let numbers: Vec<_> = (0..3)
            .map(|_| match cursor.next("m") {
                Turn::Answer { number, .. } => number,
                Turn::Exhausted { .. } => usize::MAX,
            })
            .collect();
        assert_eq!(numbers, [0, 1, 2]);
    }

    #[test]
    fn empty_script_is_exhausted_at_once() {
        let cursor = Cursor::new(Script::default());
        assert_eq!(
            cursor.next("m"),
            Turn::Exhausted {
                served: 0,
                model: None
            }
        );
    }

    fn text_for(cursor: &Cursor, model: &str) -> String {
        match cursor.next(model) {
            Turn::Answer { number, step, .. } => {
                format!("{}#{number}", step.text.clone().unwrap_or_default())
            }
            Turn::Exhausted { served, model } => {
                format!("exhausted after {served} ({})", model.unwrap_or_default())
            }
        }
    }

    #[test]
    fn models_with_steps_of_their_own_walk_them() {
        let script = Script::new(vec![Step::text("a"), Step::text("b").repeat(2)])
            .with_model("sum", vec![Step::text("s")]);
        let cursor = Cursor::new(script);
        let taken: Vec<_> = ["m", "sum", "other", "sum", "m", "m"]
            .iter()
            .map(|model| text_for(&cursor, model))
            .collect();
        assert_eq!(
            taken,
            [
                "a#0",
                "s#0",
                "b#1",
                "exhausted after 1 (sum)",
                "b#2",
                "exhausted after 3 ()"
            ]
        );
    }

    #[test]
    fn a_model_list_can_repeat_forever_alone() {
        let cursor = Cursor::new(
            Script::default().with_model("sum", vec![Step::text("s").repeat_forever()]),
        );
        assert_eq!(text_for(&cursor, "sum"), "s#0");
        assert_eq!(text_for(&cursor, "sum"), "s#1");
        assert_eq!(text_for(&cursor, "m"), "exhausted after 0 ()");
        assert_eq!(text_for(&cursor, "Sum"), "exhausted after 0 ()");
    }

    /// What `at` gives for each position, for requests asking for `model`.
    fn at_positions(cursor: &Cursor, model: &str, positions: &[usize]) -> Vec<String> {
        positions
            .iter()
            .map(|&position| match cursor.at(model, position) {
                Turn::Answer { number, step, .. } => {
                    assert_eq!(number, position, "the number is the position");
                    step.text.clone().unwrap_or_default()
                }
                Turn::Exhausted { served, model } => {
                    format!("exhausted after {served}{}", model.unwrap_or_default())
                }
            })
            .collect()
    }

    #[test]
    fn at_looks_steps_up_by_position_without_moving() {
        let cursor = Cursor::new(Script::new(vec![Step::text("a"), Step::text("b")]));
        assert_eq!(
            at_positions(&cursor, "m", &[1, 0, 0, 1, 2, 7]),
            ["b", "a", "a", "b", "exhausted after 2", "exhausted after 2"]
        );
        assert_eq!(texts(&cursor, 1), ["a"], "the walking cursor never moved");
    }

    #[test]
    fn at_honours_times_and_forever() {
        let cursor = Cursor::new(Script::new(vec![
            Step::text("a").repeat(3),
            Step::text("b"),
        ]));
        assert_eq!(
            at_positions(&cursor, "m", &[0, 1, 2, 3, 4]),
            ["a", "a", "a", "b", "exhausted after 4"]
        );
        let cursor = Cursor::new(Script::new(vec![
            Step::text("a"),
            Step::text("b").repeat_forever(),
        ]));
        assert_eq!(
            at_positions(&cursor, "m", &[0, 1, 2, 1000]),
            ["a", "b", "b", "b"]
        );
    }

    #[test]
    fn at_reads_model_lists_by_position_too() {
        let cursor = Cursor::new(
            Script::new(vec![Step::text("a")]).with_model("sum", vec![Step::text("s")]),
        );
        assert_eq!(
            at_positions(&cursor, "sum", &[0, 1]),
            ["s", "exhausted after 1sum"]
        );
        assert_eq!(at_positions(&cursor, "m", &[0]), ["a"]);
    }

    #[test]
    fn at_gives_every_answer_its_own_id_number() {
        let cursor = Cursor::new(Script::new(vec![Step::text("a").repeat_forever()]));
        let ids: Vec<_> = [0, 0, 1, 0]
            .iter()
            .map(|&position| match cursor.at("m", position) {
                Turn::Answer { ids, .. } => ids,
                Turn::Exhausted { .. } => usize::MAX,
            })
            .collect();
        assert_eq!(ids, [0, 1, 2, 3]);
    }

    #[test]
    fn take_dispatches_on_the_script_mode() {
        let steps = vec![Step::text("a"), Step::text("b")];
        let walked = Cursor::new(Script::new(steps.clone()));
        let positioned = Cursor::new(Script::new(steps).with_per_turn());
        let take = |cursor: &Cursor| match cursor.take("m", || 0) {
            Turn::Answer { step, .. } => step.text.clone().unwrap_or_default(),
            Turn::Exhausted { .. } => "exhausted".into(),
        };
        assert_eq!([take(&walked), take(&walked)], ["a", "b"]);
        assert_eq!([take(&positioned), take(&positioned)], ["a", "a"]);
    }
}
