//! Links: `ln`, `link`, `cp -l` and `cp -s`.
//!
//! A symbolic link to a place outside the workspace lets any later command reach there by a
//! name inside it (`ln -s /elsewhere/d l && rm -rf l/*`); a hard link of a file outside puts
//! that very file in the workspace, where the file tools read and append to it (keel's memory
//! notes, `keel.db`). Both need approval, as does a link to a place only known when it runs.
//! A symbolic link's relative target is read from the link's directory (from here with `-r`).

use super::Verdict;
use super::builtin::has_flag;
use super::command_line::{Arg, Invocation};
use super::places::{Places, Reach};

/// The verdict on the links `invocation` makes.
pub(crate) fn judge(invocation: &Invocation, places: &Places) -> Verdict {
    let args = invocation.args();
    let (symbolic, hard) = match invocation.name() {
        "ln" => {
            let symbolic = has_flag(args, &['s'], &["symbolic"]);
            (symbolic, !symbolic)
        }
        "link" => (false, true),
        "cp" => (
            has_flag(args, &['s'], &["symbolic-link"]),
            has_flag(args, &['l'], &["link"]),
        ),
        _ => return Verdict::Allow,
    };
    if !symbolic && !hard {
        return Verdict::Allow;
    }
    let relative_to_here = has_flag(args, &['r'], &["relative"]) && invocation.name() == "ln";
    let (operands, target_dir) = operands(args);
    let (sources, link_dir): (&[&Arg], String) = match (&target_dir, operands.split_last()) {
        (Some(dir), _) => (&operands, dir.text.clone()),
        (None, Some((_, []))) => (&operands, String::new()),
        (None, Some((last, sources))) => (sources, parent(&last.text)),
        (None, None) => return Verdict::Allow,
    };
    let shown = invocation.shown();
    let mut verdict = Verdict::Allow;
    for source in sources {
        let relative = !source.text.starts_with(['/', '~']);
        let reach = if symbolic && relative && !relative_to_here && !link_dir.is_empty() {
            let from_link = Arg {
                text: format!("{link_dir}/{}", source.text),
                ..(*source).clone()
            };
            places.reach(&invocation.cwd, &from_link)
        } else {
            places.reach(&invocation.cwd, source)
        };
        if !reach.leaves() {
            continue;
        }
        let found = match (&reach, symbolic) {
            (Reach::Unknown, _) => Verdict::approval(format!(
                "`{shown}` makes a link to `{}`, a place only known when it runs",
                source.text
            )),
            (_, true) => Verdict::approval(format!(
                "`{shown}` makes a symbolic link to {}, outside the workspace: whatever later \
                 runs on the link reaches there",
                reach.shown()
            )),
            (_, false) => Verdict::approval(format!(
                "`{shown}` makes a hard link of {}, a file outside the workspace: the workspace \
                 would hold that very file, for any tool to read and change",
                reach.shown()
            )),
        };
        verdict = verdict.worst(found);
    }
    verdict
}

/// The operands (not options, nor the values of `-t` and `-S`) and the `-t` directory.
fn operands(args: &[Arg]) -> (Vec<&Arg>, Option<Arg>) {
    let mut operands = Vec::new();
    let mut target = None;
    let mut after_dashes = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let text = arg.text.as_str();
        i += 1;
        if after_dashes || !text.starts_with('-') || text == "-" {
            operands.push(arg);
        } else if text == "--" {
            after_dashes = true;
        } else if matches!(text, "-t" | "--target-directory") {
            target = args.get(i).cloned();
            i += 1;
        } else if let Some(dir) = text.strip_prefix("--target-directory=") {
            target = Some(Arg {
                text: dir.to_string(),
                ..arg.clone()
            });
        } else if matches!(text, "-S" | "--suffix") {
            i += 1;
        }
    }
    (operands, target)
}

/// The directory part of a path (`a/b` is `a`, `a/` is `a`, `b` is ``).
fn parent(path: &str) -> String {
    if let Some(dir) = path.strip_suffix('/') {
        return dir.to_string();
    }
    path.rsplit_once('/')
        .map_or_else(String::new, |(dir, _)| dir.to_string())
}
