//! Message fixup (`keel_core::fixup::fixup`), which runs on the history before every model
//! call, on histories of 100 and 1,000 messages: user turns, assistant turns with one or two
//! tool calls, tool results of a few hundred words, final answers.
//!
//! - `clean`: a well-formed history, the common case. Fixup checks it and hands it back
//!   without copying.
//! - `repair`: the same kind of history with a few defects in every ~100 messages, cycling
//!   through what goes wrong in practice: a tool result that answers no call, a call whose
//!   result never came (a worker died), a result stored twice, two user messages in a row, and
//!   a call id reused from earlier in the conversation (renamed with its result). Fixup then
//!   rebuilds the history in its three passes.
//!
//! The history is cloned outside the measurement (fixup takes it by value). Each fixture is
//! checked once: `clean` is well-formed, `repair` is not and comes out well-formed with every
//! user text kept.
//!
//! `cargo bench -p keel-core --bench fixup -- --warm-up-time 1 --measurement-time 2`

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel_core::fixup::{fixup, is_well_formed};
use keel_core::{Message, Role};

mod common;
use common::Conversation;

/// History sizes, in messages (a repaired history differs by a few).
const SIZES: [usize; 2] = [100, 1_000];
/// One turn in this many carries a defect (turns average ~8 messages).
const DEFECT_EVERY: usize = 4;

/// What goes wrong in a history, one kind after the other.
#[derive(Clone, Copy, Debug)]
enum Defect {
    /// A tool result that answers no call, after the user's message.
    OrphanResult,
    /// The turn's first tool result is missing.
    MissingResult,
    /// The turn's first tool result is stored twice.
    DuplicateResult,
    /// A second user message right after the first.
    DoubleUser,
    /// The turn's first call reuses the conversation's first call id.
    ReusedId,
}

const DEFECTS: [Defect; 5] = [
    Defect::OrphanResult,
    Defect::MissingResult,
    Defect::DuplicateResult,
    Defect::DoubleUser,
    Defect::ReusedId,
];

/// What the fixup bench adds to the shared generator.
impl Conversation {
    /// Puts `defect` into `turn`; false when the turn has nothing it applies to.
    fn spoil(&mut self, turn: &mut Vec<Message>, defect: Defect) -> bool {
        let first_result = turn.iter().position(|m| m.role == Role::Tool);
        match (defect, first_result) {
            (Defect::OrphanResult, _) => {
                let words = self.rng.between(20, 60);
                let orphan = Message::tool_result("call_lost", self.rng.text(words));
                turn.insert(1, orphan);
            }
            (Defect::DoubleUser, _) => {
                let words = self.rng.between(5, 20);
                turn.insert(1, Message::user(self.rng.text(words)));
            }
            (Defect::MissingResult, Some(at)) => {
                turn.remove(at);
            }
            (Defect::DuplicateResult, Some(at)) => {
                let copy = turn[at].clone();
                turn.insert(at + 1, copy);
            }
            (Defect::ReusedId, Some(at)) => {
                let reused = "call_000001".to_string();
                let old = turn[at - 1].tool_calls[0].id.clone();
                turn[at - 1].tool_calls[0].id.clone_from(&reused);
                if let Some(result) = turn
                    .iter_mut()
                    .find(|m| m.tool_call_id.as_deref() == Some(old.as_str()))
                {
                    result.tool_call_id = Some(reused);
                }
            }
            (_, None) => return false,
        }
        true
    }

    /// About `count` messages; with `defects`, every `DEFECT_EVERY`th turn carries the next
    /// defect.
    fn history(&mut self, count: usize, defects: bool) -> (Vec<Message>, usize) {
        let mut out = Vec::with_capacity(count + count / 10);
        let mut turns = 0;
        let mut spoiled = 0;
        let mut clean_len = 0;
        while clean_len < count {
            let size = self.rng.between(4, 12).min(count - clean_len);
            let mut turn = self.turn(size);
            clean_len += turn.len();
            turns += 1;
            if defects
                && turns % DEFECT_EVERY == 0
                && self.spoil(&mut turn, DEFECTS[spoiled % DEFECTS.len()])
            {
                spoiled += 1;
            }
            out.extend(turn);
        }
        (out, spoiled)
    }
}

/// The user texts of `messages`, joined: fixup must keep every one.
fn user_texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| m.content.split("\n\n").map(str::to_string))
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("fixup");
    for size in SIZES {
        for (shape, defects) in [("clean", false), ("repair", true)] {
            let (history, spoiled) = Conversation::new().history(size, defects);
            let fixed = fixup(history.clone());
            assert!(is_well_formed(&fixed), "{shape} {size}: fixed");
            assert_eq!(user_texts(&fixed), user_texts(&history), "{shape} {size}");
            if defects {
                assert!(!is_well_formed(&history), "{shape} {size}: has defects");
                assert!(
                    spoiled >= size / 100 * 2,
                    "{shape} {size}: {spoiled} defects"
                );
            } else {
                assert!(is_well_formed(&history));
                assert_eq!(fixed, history);
            }
            eprintln!(
                "{shape} {size}: {} messages, {spoiled} defects, {} after fixup",
                history.len(),
                fixed.len()
            );
            group.throughput(Throughput::Elements(history.len() as u64));
            group.bench_function(BenchmarkId::new(shape, size), |b| {
                b.iter_batched(|| history.clone(), fixup, BatchSize::SmallInput)
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
