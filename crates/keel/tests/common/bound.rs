//! Every e2e test is bounded in time, whatever it waits on: each wait of the harness on a
//! process has a deadline, the HTTP client has a timeout, and a watchdog stops the whole test
//! binary — killing the mock and daemon processes it started — when one test runs past
//! [`test_deadline`], saying which. A hung keel is then a failed test, not a CI job that never
//! ends.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Longest one test may run (`KEEL_E2E_TEST_TIMEOUT_SECS`, default 300 s: generous, for two
/// busy cores running debug builds in parallel).
pub fn test_deadline() -> Duration {
    let secs = std::env::var("KEEL_E2E_TEST_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    Duration::from_secs(secs)
}

/// Longest one process the harness runs to its end (`keel run …`) may take.
pub const PROCESS_DEADLINE: Duration = Duration::from_secs(180);

/// Longest one HTTP request to the daemon may take, its body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

struct Watched {
    name: String,
    since: Instant,
}

fn tests() -> &'static Mutex<HashMap<ThreadId, Watched>> {
    static TESTS: OnceLock<Mutex<HashMap<ThreadId, Watched>>> = OnceLock::new();
    TESTS.get_or_init(|| {
        std::thread::spawn(watch);
        Mutex::new(HashMap::new())
    })
}

fn children() -> &'static Mutex<Vec<u32>> {
    static CHILDREN: OnceLock<Mutex<Vec<u32>>> = OnceLock::new();
    CHILDREN.get_or_init(|| Mutex::new(Vec::new()))
}

/// Forgets the test of its thread when the thread ends (the test is over).
struct Registration;

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut tests) = tests().lock() {
            tests.remove(&std::thread::current().id());
        }
    }
}

thread_local! {
    static REGISTERED: std::cell::OnceCell<Registration> = const { std::cell::OnceCell::new() };
}

/// Starts the clock of the test running on this thread (once; libtest runs each test on a
/// thread named after it). Threads that are not a test's (the main thread, a runtime's
/// workers) are not watched.
pub fn arm() {
    let thread = std::thread::current();
    let Some(name) = thread.name() else { return };
    if name == "main" || name.starts_with("tokio-") {
        return;
    }
    let name = name.to_string();
    REGISTERED.with(|registered| {
        registered.get_or_init(|| {
            if let Ok(mut tests) = tests().lock() {
                tests.insert(
                    thread.id(),
                    Watched {
                        name,
                        since: Instant::now(),
                    },
                );
            }
            Registration
        });
    });
}

/// Notes a long-lived process the harness started (a mock, a daemon): the watchdog kills it
/// before stopping the test binary.
pub fn started(pid: u32) {
    if let Ok(mut pids) = children().lock() {
        pids.push(pid);
    }
}

/// The process is gone (killed or waited for).
pub fn ended(pid: u32) {
    if let Ok(mut pids) = children().lock() {
        pids.retain(|p| *p != pid);
    }
}

fn watch() {
    let deadline = test_deadline();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let late: Option<String> = tests().lock().ok().and_then(|tests| {
            tests
                .values()
                .find(|test| test.since.elapsed() > deadline)
                .map(|test| test.name.clone())
        });
        let Some(name) = late else { continue };
        // Straight to stderr: `eprintln!` here would be captured with the test's output, which
        // is never shown once the binary stops.
        let _ = writeln!(
            std::io::stderr(),
            "\ne2e test `{name}` ran longer than {} s (KEEL_E2E_TEST_TIMEOUT_SECS): it hangs; \
             stopping this test binary",
            deadline.as_secs()
        );
        let pids = children().lock().map(|p| p.clone()).unwrap_or_default();
        for pid in pids {
            let _ = Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        std::process::exit(101);
    }
}

/// Runs `command` to its end with its output captured, like [`Command::output`], but at most
/// for [`PROCESS_DEADLINE`]: a process still running then is killed and the test fails with
/// what it printed.
pub fn output(command: &mut Command) -> Output {
    arm();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    drop(child.stdin.take());
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let Some(status) = wait_until(&mut child, PROCESS_DEADLINE) else {
        // Not joined: a process it left behind may hold its pipes open.
        panic!(
            "{command:?} ran longer than {} s and was killed",
            PROCESS_DEADLINE.as_secs()
        );
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Waits for `child` to exit, at most `deadline`; kills it then (and returns `None`).
pub fn wait_until(child: &mut Child, deadline: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + deadline;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// The first line `read` gives, waiting at most `deadline` (`None` then, or at its end).
pub fn first_line_within(
    mut read: impl FnMut() -> Option<String> + Send + 'static,
    deadline: Duration,
) -> Option<String> {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(read());
    });
    receive.recv_timeout(deadline).ok().flatten()
}
