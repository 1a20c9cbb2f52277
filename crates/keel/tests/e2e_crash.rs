//! End to end: crashes. A `keel run` is killed with SIGKILL — exactly at each safe boundary in
//! turn, then at random instants (its resumes too) — and `keel resume --force` brings it back.
//! Whatever the instant, a side effect that finished is never done twice, an interrupted one
//! halts the run for a human decision, no stored message is lost, and the run completes.

mod common;
mod crash;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{run, stderr, stdout};
use crash::*;
use serde_json::Value;

#[test]
fn a_run_killed_at_any_boundary_resumes_to_the_same_end() {
    let script = task_script(0, false);

    // The reference: the same task, never interrupted.
    let mut reference = Scenario::new(&script);
    let (mut command, _) = reference.run_command();
    let output = run(&mut command);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["state"], "completed");
    let final_text = report["final_text"].clone();
    let (run_id, _) = reference.the_run().unwrap();
    let shown = reference.show(&run_id);
    let boundaries = shown.checkpoints.clone();
    assert_eq!(boundaries.first().map(String::as_str), Some("input"));
    assert_eq!(boundaries.last().map(String::as_str), Some("final"));
    assert!(boundaries.len() >= 12, "{boundaries:?}");
    let log = reference.log();
    assert_eq!(log, "alpha\nbeta\ngamma\n");
    let transcript = conversation(&reference.messages(&shown.session));
    assert_eq!(transcript.len(), 13, "{transcript:#?}");
    drop(reference);

    for (n, boundary) in (1..).zip(&boundaries) {
        let context = format!("killed after checkpoint {n} ({boundary})");
        let mut scenario = Scenario::new(&script);
        let (mut command, _) = scenario.run_command();
        if let Some(ended) = run_and_kill_at(&mut command, n) {
            panic!("{context}: the run ended first: {}", ended.stderr);
        }
        let (run_id, state) = scenario.the_run().expect("the run is stored");

        if boundary == "final" {
            // Killed after its last commit: the run is over and there is nothing to resume.
            assert_eq!(state, "completed", "{context}");
            let (mut command, _) = scenario.resume_command(&run_id, None);
            let refused = run(&mut command);
            assert_eq!(refused.status.code(), Some(2), "{context}");
            assert!(
                stderr(&refused).contains("nothing to resume"),
                "{context}: {}",
                stderr(&refused)
            );
        } else {
            assert!(state == "running" || state == "timed_out", "{context}");
            // The first resume is killed too, two boundaries further on (when it gets there);
            // the next one goes to the end.
            let mut pause = Some(n + 2);
            let mut resumes = 0;
            let ended = loop {
                resumes += 1;
                assert!(resumes <= 3, "{context}: too many resumes");
                let (_, state) = scenario.the_run().unwrap();
                if state == "completed" {
                    break None;
                }
                assert!(
                    state == "running" || state == "timed_out",
                    "{context}: resume #{resumes}"
                );
                let (mut command, _) = scenario.resume_command(&run_id, None);
                match pause.take() {
                    Some(at) => match run_and_kill_at(&mut command, at) {
                        Some(ended) => break Some(ended),
                        None => continue,
                    },
                    None => break Some(Running::spawn(&mut command).finish()),
                }
            };
            if let Some(ended) = ended {
                assert_eq!(ended.code, Some(0), "{context}: {}", ended.stderr);
                let report = ended.report();
                assert_eq!(report["state"], "completed", "{context}");
                assert_eq!(report["final_text"], final_text, "{context}");
            }
            let shown = scenario.show(&run_id);
            assert!(
                shown.events.iter().any(|e| e == "agent_run.resumed"),
                "{context}: no agent_run.resumed in\n{}",
                shown.text
            );
        }

        let (_, state) = scenario.the_run().unwrap();
        assert_eq!(state, "completed", "{context}");
        assert_eq!(scenario.log(), log, "{context}: every append exactly once");
        let shown = scenario.show(&run_id);
        assert!(
            shown
                .envelope
                .iter()
                .all(|(_, _, status)| *status == Status::Ok),
            "{context}:\n{}",
            shown.text
        );
        assert_eq!(
            conversation(&scenario.messages(&shown.session)),
            transcript,
            "{context}: the stored transcript"
        );
        // The mock saw exactly one request per step: none lost, none repeated.
        assert_eq!(scenario.mock.requests().len(), 6, "{context}");
    }
}

/// xorshift64*: a fixed seed gives the same sequence of instants on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// When to kill a process.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// This long after it reached its first boundary.
    AfterLive(Duration),
    /// This long after it started (often before it stored anything).
    AfterSpawn(Duration),
    /// The moment it says it starts its Nth `append_file` call: mid side effect.
    AtAppend(u32),
    /// Never: let it end.
    Never,
}

impl Kill {
    fn draw(rng: &mut Rng, attempt: u32) -> Kill {
        if attempt > 8 {
            return Kill::Never;
        }
        match rng.below(10) {
            0 => Kill::AfterSpawn(Duration::from_millis(rng.below(500))),
            1..=3 => Kill::AtAppend(1 + rng.below(2) as u32),
            _ => Kill::AfterLive(Duration::from_millis(rng.below(41))),
        }
    }
}

/// Tallies over the whole test, printed at the end.
#[derive(Debug, Default)]
struct Tally {
    processes: u32,
    kills: u32,
    runs_restarted: u32,
    unsafe_halts: u32,
    skips: u32,
    retries: u32,
}

/// The invariants after any process of an iteration ended, killed or not.
fn check_invariants(
    scenario: &Scenario,
    run_id: &str,
    retried: &HashMap<String, u32>,
    seen: &mut Vec<Message>,
    context: &str,
) -> Shown {
    let shown = scenario.show(run_id);
    let log = scenario.log();
    let lines: Vec<&str> = log.split_inclusive('\n').collect();
    for line in &lines {
        assert!(
            APPENDS.iter().any(|(_, l)| l == line),
            "{context}: a stray or torn line {line:?} in {log:?}"
        );
    }
    for (call, line) in APPENDS {
        let count = lines.iter().filter(|l| **l == line).count() as u32;
        let allowed = 1 + retried.get(call).copied().unwrap_or(0);
        assert!(
            count <= allowed,
            "{context}: {line:?} appended {count} times ({} retry decisions for {call}): \
             {log:?}\n{}",
            allowed - 1,
            shown.text
        );
        if shown.status_of(call) == Some(Status::Ok) {
            assert!(
                count >= 1,
                "{context}: {call} completed but {line:?} is not in {log:?}\n{}",
                shown.text
            );
        }
    }
    // A run whose worker died must be resumable from where it stopped: its latest checkpoint is
    // one the reconciler offers for resume, unless the run is over or waits for a human.
    let state = &shown.state;
    if !state.starts_with("completed") && !state.starts_with("waiting_on_human") {
        let last = shown.checkpoints.last().map(String::as_str);
        assert!(
            matches!(
                last,
                Some("input" | "llm_response" | "tool_result" | "compaction" | "journal_update")
            ),
            "{context}: the run is {state} but its latest checkpoint is {last:?}: it could not \
             be resumed\n{}",
            shown.text
        );
    }
    let messages = scenario.messages(&shown.session);
    assert!(
        messages.len() >= seen.len() && messages[..seen.len()] == seen[..],
        "{context}: stored messages were lost or changed\nbefore: {seen:#?}\nnow: {messages:#?}"
    );
    *seen = messages;
    shown
}

/// One task, killed at random instants until it completes.
fn crash_until_done(rng: &mut Rng, iteration: u32, tally: &mut Tally) {
    let decision = if iteration.is_multiple_of(2) {
        "skip"
    } else {
        "retry"
    };
    let mut scenario = Scenario::new(&task_script(4, true));
    let mut retried: HashMap<String, u32> = HashMap::new();
    let mut seen: Vec<Message> = Vec::new();
    let mut last_decision: Option<&str> = None;
    let mut report = None;
    // The run as `keel runs show` last showed it (none before the first process stored it).
    let mut current: Option<Shown> = None;
    for attempt in 1.. {
        let context = format!("iteration {iteration} ({decision}), process {attempt}");
        assert!(attempt <= 40, "{context}: the run never completed");
        let (mut command, events) = match current.as_ref().map(|s| (&s.id, s.state.as_str())) {
            None => {
                // Killed before its first boundary: nothing was stored, start again.
                if attempt > 1 {
                    tally.runs_restarted += 1;
                }
                scenario.run_command()
            }
            Some((_, "completed")) => break,
            Some((run_id, "waiting_on_human (resume_unsafe)")) => {
                let shown = current.as_ref().unwrap();
                let unfinished: Vec<String> = shown
                    .envelope
                    .iter()
                    .filter(|(_, _, status)| *status == Status::Unfinished)
                    .map(|(id, _, _)| id.clone())
                    .collect();
                if last_decision != Some("skip") {
                    // Until a skip is recorded, the call shows as started and never completed.
                    assert!(
                        !unfinished.is_empty(),
                        "{context}: halted, yet no call shows STARTED, NOT COMPLETED:\n{}",
                        shown.text
                    );
                }
                for call in &unfinished {
                    assert!(
                        APPENDS.iter().any(|(id, _)| id == call),
                        "{context}: only appends are unsafe, not {call}"
                    );
                    if decision == "retry" {
                        *retried.entry(call.clone()).or_default() += 1;
                    }
                }
                match decision {
                    "skip" => tally.skips += 1,
                    _ => tally.retries += 1,
                }
                last_decision = Some(decision);
                let run_id = run_id.clone();
                scenario.resume_command(&run_id, Some(decision))
            }
            Some((run_id, state)) => {
                assert!(
                    ["running", "waiting_for_tool", "timed_out"].contains(&state),
                    "{context}: the run is {state}"
                );
                last_decision = None;
                let run_id = run_id.clone();
                scenario.resume_command(&run_id, None)
            }
        };
        tally.processes += 1;
        let mut process = Running::spawn(&mut command);
        let kill = Kill::draw(rng, attempt);
        let go = match kill {
            Kill::Never => false,
            Kill::AfterSpawn(wait) => process
                .wait_for(|_| false, Some(Instant::now() + wait))
                .is_none(),
            Kill::AfterLive(wait) => {
                process.wait_until_live(&events)
                    && process
                        .wait_for(|_| false, Some(Instant::now() + wait))
                        .is_none()
            }
            Kill::AtAppend(nth) => {
                let mut found = 0;
                process
                    .wait_for(
                        |line| {
                            found += u32::from(line.starts_with("→ append_file"));
                            found == nth
                        },
                        None,
                    )
                    .is_some()
            }
        };
        let ended = if go {
            let ended = process.kill();
            tally.kills += u32::from(ended.is_none());
            ended
        } else {
            Some(process.finish())
        };
        if let Some(ended) = &ended {
            match ended.code {
                Some(0) => {
                    let r = ended.report();
                    assert_eq!(r["state"], "completed", "{context}");
                    report = Some(r);
                }
                Some(3) => {
                    let r = ended.report();
                    assert_eq!(r["state"], "waiting_on_human", "{context}: {r}");
                    assert_eq!(r["reason"], "resume_unsafe", "{context}: {r}");
                    tally.unsafe_halts += 1;
                }
                code => panic!("{context}: exit {code:?}: {}", ended.stderr),
            }
        }
        let run_id = match current.take() {
            Some(shown) => Some(shown.id),
            None => scenario.the_run().map(|(id, _)| id),
        };
        current = run_id.map(|id| check_invariants(&scenario, &id, &retried, &mut seen, &context));
    }
    let shown = current.expect("the run is stored");
    assert!(
        shown.checkpoints.last().is_some_and(|b| b == "final"),
        "iteration {iteration}:\n{}",
        shown.text
    );
    if let Some(report) = report {
        assert!(report["final_text"].is_string(), "{report}");
    }
}

#[test]
fn a_run_killed_at_random_instants_never_repeats_a_finished_side_effect() {
    let started = Instant::now();
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    let mut tally = Tally::default();
    for iteration in 0..20 {
        crash_until_done(&mut rng, iteration, &mut tally);
    }
    eprintln!("{tally:?} in {:?}", started.elapsed());
}
