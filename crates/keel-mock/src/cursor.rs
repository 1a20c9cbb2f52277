//! The step cursor: which step answers the next request. Shared by every wire API and by the
//! in-process provider.

use std::sync::Mutex;

use crate::script::{Script, Step};

/// What the next request gets.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Turn {
    /// Answer with `step`; `number` counts the answers served before this one.
    Answer { number: usize, step: Box<Step> },
    /// No step is left; `served` answers were given.
    Exhausted { served: usize },
}

/// Walks a script, honouring `times` and `forever`. Safe to share between concurrent requests:
/// each call to [`Cursor::next`] takes exactly one turn.
#[derive(Debug)]
pub(crate) struct Cursor {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    steps: Vec<Step>,
    position: usize,
    used: u32,
    served: usize,
}

impl Cursor {
    pub(crate) fn new(script: Script) -> Cursor {
        Cursor {
            state: Mutex::new(State {
                steps: script.steps,
                position: 0,
                used: 0,
                served: 0,
            }),
        }
    }

    /// Takes the next turn.
    pub(crate) fn next(&self) -> Turn {
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
                return Turn::Answer {
                    number,
                    step: Box::new(step.clone()),
                };
            }
            state.position += 1;
            state.used = 0;
        }
        Turn::Exhausted {
            served: state.served,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(cursor: &Cursor, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| match cursor.next() {
                Turn::Answer { step, .. } => step.text.unwrap_or_default(),
                Turn::Exhausted { served } => format!("exhausted after {served}"),
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
            .map(|_| match cursor.next() {
                Turn::Answer { number, .. } => number,
                Turn::Exhausted { .. } => usize::MAX,
            })
            .collect();
        assert_eq!(numbers, [0, 1, 2]);
    }

    #[test]
    fn empty_script_is_exhausted_at_once() {
        let cursor = Cursor::new(Script::default());
        assert_eq!(cursor.next(), Turn::Exhausted { served: 0 });
    }
}
