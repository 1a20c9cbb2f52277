//! The step cursors: which step answers the next request. One cursor walks the top-level steps,
//! and one more each model with steps of its own. Shared by every wire API and by the
//! in-process provider.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::script::{Script, Step};

/// What the next request gets.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Turn {
    /// Answer with `step`; `number` counts the answers its step list served before this one.
    Answer { number: usize, step: Box<Step> },
    /// No step is left; `served` answers were given from the list. `model` names the model
    /// whose own list ran out (`None`: the top-level steps).
    Exhausted {
        served: usize,
        model: Option<String>,
    },
}

/// Routes each request to its step list (the model's own, else the top-level one) and walks
/// it, honouring `times` and `forever`. Safe to share between concurrent requests: each call to
/// [`Cursor::next`] takes exactly one turn of one list.
#[derive(Debug)]
pub(crate) struct Cursor {
    steps: Walk,
    models: BTreeMap<String, Walk>,
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
        }
    }

    /// Takes the next turn for a request asking for `model`.
    pub(crate) fn next(&self, model: &str) -> Turn {
        match self.models.get_key_value(model) {
            Some((name, walk)) => walk.next().unwrap_or_else(|served| Turn::Exhausted {
                served,
                model: Some(name.clone()),
            }),
            None => self.steps.next().unwrap_or_else(|served| Turn::Exhausted {
                served,
                model: None,
            }),
        }
    }
}

/// One step list and how far requests have got through it.
#[derive(Debug)]
struct Walk {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    steps: Vec<Step>,
    position: usize,
    used: u32,
    served: usize,
}

impl Walk {
    fn new(steps: Vec<Step>) -> Walk {
        Walk {
            state: Mutex::new(State {
                steps,
                position: 0,
                used: 0,
                served: 0,
            }),
        }
    }

    /// Takes the next answer, or fails with the number of answers served once none is left.
    fn next(&self) -> Result<Turn, usize> {
        // A panic while holding the lock cannot leave the state half-updated (every update
        // below is a plain assignment), so a poisoned lock is safe to keep using.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *state;
        while let Some(step) = state.steps.get(state.position) {
            // `times: 0` is rejected by validation; a step built in code with it answers once.
            let times = step.times.unwrap_or(1).max(1);
            if step.forever || state.used < times {
                state.used += 1;
                let number = state.served;
                state.served += 1;
                return Ok(Turn::Answer {
                    number,
                    step: Box::new(step.clone()),
                });
            }
            state.position += 1;
            state.used = 0;
        }
        Err(state.served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(cursor: &Cursor, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| match cursor.next("m") {
                Turn::Answer { step, .. } => step.text.unwrap_or_default(),
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
            Turn::Answer { number, step } => format!("{}#{number}", step.text.unwrap_or_default()),
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
}
