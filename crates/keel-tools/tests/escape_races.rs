//! The file tools against a process that swaps a directory of the workspace for a symlink to
//! the outside and back (`renameat2(RENAME_EXCHANGE)` in a loop) while they run: whatever the
//! timing, nothing may land outside and nothing from outside may come back.

#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{Fixture, call};
use rustix::fs::{CWD, RenameFlags, renameat_with};
use serde_json::json;

/// Calls per tool while the swapper runs.
const CALLS: usize = 300;

/// What the outside file says: no tool result may ever contain it.
const SECRET: &str = "OUTSIDE-SECRET";

/// Exchanges `a` and `b` until told to stop; returns how many exchanges it made.
fn swapper(a: PathBuf, b: PathBuf, stop: Arc<AtomicBool>, swaps: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        renameat_with(CWD, &a, CWD, &b, RenameFlags::EXCHANGE).unwrap();
        swaps.fetch_add(1, Ordering::Relaxed);
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn swapping_a_directory_for_a_symlink_never_leads_outside() {
    let fx = Fixture::new();
    fs::create_dir(fx.at("d")).unwrap();
    fs::write(fx.at("d/f.txt"), "inside").unwrap();
    fs::write(fx.outside.join("f.txt"), SECRET).unwrap();
    fs::write(fx.outside.join(SECRET), "").unwrap();
    symlink(&fx.outside, fx.at("link")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let thread = {
        let (a, b) = (fx.at("d"), fx.at("link"));
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || swapper(a, b, stop, swaps))
    };
    while swaps.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
    let mut results = Vec::new();
    for i in 0..CALLS {
        let path = format!("d/new-{i}.txt");
        results.push(call(&fx.write, json!({"path": path, "content": "w"})).await);
        let path = format!("d/sub-{i}/log.txt");
        results.push(call(&fx.append, json!({"path": path, "content": "a"})).await);
        results.push(call(&fx.read, json!({"path": "d/f.txt"})).await);
        results.push(call(&fx.list, json!({"path": "d"})).await);
    }
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();

    assert_eq!(entries(&fx.outside), vec![SECRET, "f.txt"]);
    assert_eq!(
        fs::read_to_string(fx.outside.join("f.txt")).unwrap(),
        SECRET
    );
    let leaked: Vec<&String> = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter(|text| text.contains(SECRET))
        .collect();
    assert!(leaked.is_empty(), "outside content returned: {leaked:?}");
}
