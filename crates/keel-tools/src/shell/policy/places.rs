//! Where a command runs and where its paths lead: the working directory a line moves to
//! (`cd`, `pushd`, `popd`, `env -C`, `git -C`), the workspace's `.keel`, and the symlinks on
//! disk that lead out of the workspace.
//!
//! Paths are read lexically, from the workspace root. When the policy knows the root
//! ([`super::ShellPolicy::in_workspace`]) an absolute path inside it counts as inside, and the
//! symlinks already on disk along a path inside are followed (one `lstat` a component), so
//! `data/x` is seen to leave the workspace when `data` links out. What the line itself creates
//! is judged by [`super::links`]. The kernel's sandbox, not this reading, is what finally holds
//! a command inside.

use std::fs;
use std::path::{Component, Path, PathBuf};

use super::Verdict;
use super::command_line::{Arg, Invocation};
use super::paths::{components, has_glob, resolve_absolute, resolve_relative};

/// The working directory of a command, as far as it is known before running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cwd {
    /// Inside the workspace: the components below its root (none for the root itself).
    Inside(Vec<String>),
    /// Elsewhere: the directory as the line names it (`/tmp`, `~`, `..`).
    Outside(String),
    /// Only known when it runs: why (`cd $X`, `cd -`).
    Unknown(String),
}

impl Default for Cwd {
    fn default() -> Self {
        Cwd::Inside(Vec::new())
    }
}

impl Cwd {
    /// Why a command that writes must not run here unseen: `None` inside the workspace, out
    /// of its `.keel`.
    pub fn concern(&self) -> Option<String> {
        match self {
            Cwd::Inside(parts) if parts.iter().any(|p| is_keel(p)) => Some(format!(
                "runs in `{}`, inside a `.keel` directory, which is keel's own",
                parts.join("/")
            )),
            Cwd::Inside(_) => None,
            Cwd::Outside(dir) => Some(format!("runs in `{dir}`, outside the workspace")),
            Cwd::Unknown(why) => Some(format!(
                "runs in a directory only known when it runs ({why})"
            )),
        }
    }
}

/// Where a path leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Inside the workspace: the components below its root, the symlinks on disk followed.
    Inside(Vec<String>),
    /// Outside the workspace, by its name: the path, resolved as far as the line says.
    Outside(String),
    /// Outside the workspace through a symlink on disk inside it.
    Linked {
        /// The symlink, from the root.
        link: String,
        /// Where it leads.
        to: String,
    },
    /// Only known when it runs.
    Unknown,
}

impl Reach {
    /// True unless the path is known to stay inside the workspace.
    pub fn leaves(&self) -> bool {
        !matches!(self, Reach::Inside(_))
    }

    /// The place reached, for reasons.
    pub fn shown(&self) -> String {
        match self {
            Reach::Inside(parts) if parts.is_empty() => "`.`".into(),
            Reach::Inside(parts) => format!("`{}`", parts.join("/")),
            Reach::Outside(path) => format!("`{path}`"),
            Reach::Linked { link, to } => format!("`{to}` (through the symlink `{link}`)"),
            Reach::Unknown => "a place only known when it runs".into(),
        }
    }
}

/// The workspace root, when the policy knows it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Places {
    root: Option<Root>,
}

#[derive(Clone, Debug)]
struct Root {
    /// As given, made absolute.
    given: PathBuf,
    /// With its symlinks resolved (as given when that fails).
    real: PathBuf,
}

impl Places {
    /// The places of a workspace at `root`.
    pub fn new(root: &Path) -> Self {
        let given = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        let real = fs::canonicalize(&given).unwrap_or_else(|_| given.clone());
        Places {
            root: Some(Root { given, real }),
        }
    }

    /// Where `cd target` leads from `from`; `None` is `cd` alone (the home directory). With
    /// `cdpath` (the line sets `CDPATH`) a plain relative name may lead anywhere.
    pub fn cd(&self, from: &Cwd, target: Option<&Arg>, cdpath: bool) -> Cwd {
        let Some(target) = target else {
            return Cwd::Outside("~".into());
        };
        let text = target.text.as_str();
        if text == "-" {
            return Cwd::Unknown("`cd -` goes back to the previous directory".into());
        }
        if target.glob {
            return Cwd::Unknown(format!("`cd {text}` goes where a pattern matches"));
        }
        if cdpath && !text.starts_with(['/', '.', '~']) {
            return Cwd::Unknown(format!(
                "the line sets `CDPATH`, which decides where `cd {text}` goes"
            ));
        }
        match self.reach(from, target) {
            Reach::Inside(parts) => Cwd::Inside(parts),
            Reach::Outside(path) => Cwd::Outside(path),
            Reach::Linked { to, .. } => Cwd::Outside(to),
            Reach::Unknown => match from {
                Cwd::Unknown(why) if !target.dynamic => Cwd::Unknown(why.clone()),
                _ => Cwd::Unknown(format!("`cd {text}`")),
            },
        }
    }

    /// Where the path `arg` leads from `cwd`.
    pub fn reach(&self, cwd: &Cwd, arg: &Arg) -> Reach {
        let text = arg.text.as_str();
        if text.starts_with('~') {
            return Reach::Outside(text.to_string());
        }
        if arg.dynamic {
            return Reach::Unknown;
        }
        if text.starts_with('/') {
            return self.absolute(text);
        }
        match cwd {
            Cwd::Inside(base) => self.relative(base, text),
            Cwd::Outside(dir) if dir.starts_with('/') => self.absolute(&format!("{dir}/{text}")),
            Cwd::Outside(dir) if dir.starts_with("..") => {
                self.relative(&[], &format!("{dir}/{text}"))
            }
            Cwd::Outside(dir) => Reach::Outside(format!("{dir}/{text}")),
            Cwd::Unknown(_) => Reach::Unknown,
        }
    }

    /// Where an absolute path leads.
    fn absolute(&self, text: &str) -> Reach {
        let parts = resolve_absolute(&components(text));
        let path = format!("/{}", parts.join("/"));
        match self.inside(&path) {
            Some(parts) => self.land(parts),
            None => Reach::Outside(path),
        }
    }

    /// Where a relative path leads from the directory `base` below the root: above the root it
    /// is outside, unless it comes back in by the root's own name (`../repo/src`).
    fn relative(&self, base: &[String], text: &str) -> Reach {
        let mut all: Vec<&str> = base.iter().map(String::as_str).collect();
        all.extend(components(text));
        let parts = resolve_relative(&all);
        if parts.first() != Some(&"..") {
            return self.land(parts.into_iter().map(String::from).collect());
        }
        match &self.root {
            Some(root) => self.absolute(&format!("{}/{}", root.given.display(), parts.join("/"))),
            None => Reach::Outside(parts.join("/")),
        }
    }

    /// An absolute path (resolved) below the root: its components there.
    fn inside(&self, path: &str) -> Option<Vec<String>> {
        let root = self.root.as_ref()?;
        let path = Path::new(path);
        let rest = path
            .strip_prefix(&root.given)
            .or_else(|_| path.strip_prefix(&root.real))
            .ok()?;
        Some(names(rest))
    }

    /// The components `parts` below the root with the symlinks on disk followed: a link
    /// leading out makes the whole path lead out. Without a root, `parts` as they are.
    fn land(&self, parts: Vec<String>) -> Reach {
        let Some(root) = &self.root else {
            return Reach::Inside(parts);
        };
        let mut resolved: Vec<String> = Vec::new();
        let mut looking = true;
        for part in parts {
            if !looking || has_glob(&part) {
                looking = false;
                resolved.push(part);
                continue;
            }
            let here = root.real.join(resolved.join("/")).join(&part);
            match fs::symlink_metadata(&here) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let to = real_target(&here);
                    match to.strip_prefix(&root.real) {
                        Ok(rest) => resolved = names(rest),
                        Err(_) => {
                            resolved.push(part);
                            return Reach::Linked {
                                link: resolved.join("/"),
                                to: to.display().to_string(),
                            };
                        }
                    }
                }
                Ok(_) => resolved.push(part),
                Err(_) => {
                    looking = false;
                    resolved.push(part);
                }
            }
        }
        Reach::Inside(resolved)
    }

    /// The verdict on a command that is not known to only read: where it runs, and what its
    /// paths (arguments and redirections) reach: a `.keel` directory, or out of the workspace
    /// through a symlink on disk.
    pub fn judge(&self, invocation: &Invocation) -> Verdict {
        let shown = invocation.shown();
        if let Some(concern) = invocation.cwd.concern() {
            return Verdict::approval(format!(
                "`{shown}` {concern}; there only commands known to only read run without approval"
            ));
        }
        let paths = invocation.args().iter().chain(&invocation.writes);
        for arg in paths {
            if may_name_keel(arg) {
                return keel_verdict(&shown, &arg.text);
            }
            if arg.text.starts_with('-') || self.root.is_none() {
                continue;
            }
            match self.reach(&invocation.cwd, arg) {
                Reach::Inside(parts) if parts.iter().any(|p| is_keel(p)) => {
                    return keel_verdict(&shown, &arg.text);
                }
                linked @ Reach::Linked { .. } => {
                    return Verdict::approval(format!(
                        "`{shown}` reaches {}, outside the workspace",
                        linked.shown()
                    ));
                }
                _ => {}
            }
        }
        Verdict::Allow
    }
}

fn keel_verdict(shown: &str, path: &str) -> Verdict {
    Verdict::approval(format!(
        "`{shown}` touches `{path}`, in a `.keel` directory, which is keel's own (a skill \
         written in the workspace's `.keel` reaches later prompts)"
    ))
}

/// Where the symlink `link` leads: its real path, or for a dangling one its target resolved
/// by name.
fn real_target(link: &Path) -> PathBuf {
    if let Ok(real) = fs::canonicalize(link) {
        return real;
    }
    let target = fs::read_link(link).unwrap_or_default();
    let joined = link.parent().unwrap_or(Path::new("/")).join(target);
    let mut resolved = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                resolved.pop();
            }
            Component::Normal(name) => resolved.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    resolved
}

/// The names in a relative path.
fn names(path: &Path) -> Vec<String> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

/// A component naming keel's directory (any case: some filesystems ignore it).
pub(crate) fn is_keel(component: &str) -> bool {
    component.eq_ignore_ascii_case(".keel")
}

/// True when `arg` may name a path through a `.keel` directory: a component `.keel`, or a
/// pattern that may match it (`.k*`), also after an option's `=` (`--target-directory=.keel`).
pub(crate) fn may_name_keel(arg: &Arg) -> bool {
    let text = arg.text.as_str();
    let value = text
        .split_once('=')
        .filter(|(name, _)| !name.contains('/'))
        .map(|(_, value)| value);
    [Some(text), value].into_iter().flatten().any(|path| {
        components(path)
            .into_iter()
            .any(|c| is_keel(c) || (arg.glob && may_match(c, ".keel")))
    })
}

/// Whether the shell pattern `pattern` (`*`, `?`, `[…]`, `{a,b}`) may match `name`: brackets
/// are taken as any one character, and a leading `.` must be matched by a `.`, as the shell
/// does.
fn may_match(pattern: &str, name: &str) -> bool {
    if let Some(open) = pattern.find('{')
        && let Some(close) = pattern[open..].find('}').map(|c| open + c)
    {
        let (head, tail) = (&pattern[..open], &pattern[close + 1..]);
        return pattern[open + 1..close]
            .split(',')
            .any(|choice| may_match(&format!("{head}{choice}{tail}"), name));
    }
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    matches_from(&pattern, &name)
}

fn matches_from(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| matches_from(rest, &name[skip..])),
        Some(('?', rest)) => !name.is_empty() && matches_from(rest, &name[1..]),
        Some(('[', rest)) => match rest.iter().position(|c| *c == ']') {
            Some(close) => !name.is_empty() && matches_from(&rest[close + 1..], &name[1..]),
            None => name.first() == Some(&'[') && matches_from(rest, &name[1..]),
        },
        Some((c, rest)) => {
            name.first().is_some_and(|n| n.eq_ignore_ascii_case(c))
                && matches_from(rest, &name[1..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(text: &str) -> Arg {
        Arg {
            text: text.into(),
            dynamic: false,
            glob: true,
        }
    }

    #[test]
    fn cd_moves_lexically_from_the_root() {
        let places = Places::default();
        let cd = |from: &Cwd, to: &str| places.cd(from, Some(&Arg::literal(to)), false);
        let root = Cwd::default();
        assert_eq!(cd(&root, "src"), Cwd::Inside(vec!["src".into()]));
        assert_eq!(cd(&cd(&root, "src"), ".."), Cwd::Inside(vec![]));
        assert_eq!(cd(&cd(&root, "src"), "../.."), Cwd::Outside("..".into()));
        assert_eq!(cd(&root, "/tmp/../etc"), Cwd::Outside("/etc".into()));
        assert_eq!(cd(&root, "~/x"), Cwd::Outside("~/x".into()));
        assert!(matches!(cd(&root, "-"), Cwd::Unknown(_)));
        assert_eq!(places.cd(&root, None, false), Cwd::Outside("~".into()));
        assert!(matches!(
            places.cd(&root, Some(&Arg::literal("lib")), true),
            Cwd::Unknown(_)
        ));
        assert_eq!(
            cd(&Cwd::Outside("/tmp".into()), "x"),
            Cwd::Outside("/tmp/x".into())
        );
    }

    #[test]
    fn keel_is_seen_however_named() {
        for keel in [
            ".keel",
            "./.keel/x",
            "a/../.keel",
            "--target-directory=.keel/s",
            ".KEEL",
        ] {
            assert!(may_name_keel(&Arg::literal(keel)), "{keel}");
        }
        for pattern in [".k*", ".[kK]eel/x", ".??el", "{a,.keel}", ".*"] {
            assert!(may_name_keel(&glob(pattern)), "{pattern}");
        }
        for other in ["keel", ".keeling", "src/keel.rs", "x=y/keel"] {
            assert!(!may_name_keel(&Arg::literal(other)), "{other}");
        }
        for pattern in ["*", "?keel", "*/x", ".k?"] {
            assert!(!may_name_keel(&glob(pattern)), "{pattern}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_on_disk_are_followed_from_a_known_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("w");
        fs::create_dir_all(root.join("src")).unwrap();
        fs::create_dir_all(dir.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), root.join("out")).unwrap();
        std::os::unix::fs::symlink("src", root.join("inner")).unwrap();
        std::os::unix::fs::symlink(".keel", root.join("skills")).unwrap();
        let places = Places::new(&root);
        let at = |path: &str| places.reach(&Cwd::default(), &Arg::literal(path));
        assert_eq!(at("src/x"), Reach::Inside(vec!["src".into(), "x".into()]));
        assert_eq!(at("inner/x"), Reach::Inside(vec!["src".into(), "x".into()]));
        assert!(
            matches!(at("out/x"), Reach::Linked { .. }),
            "{:?}",
            at("out/x")
        );
        assert!(matches!(at("out"), Reach::Linked { .. }));
        assert_eq!(
            at(&root.join("src").display().to_string()),
            Reach::Inside(vec!["src".into()])
        );
        assert_eq!(
            at("skills/x"),
            Reach::Inside(vec![".keel".into(), "x".into()])
        );
        assert!(matches!(
            places.cd(&Cwd::default(), Some(&Arg::literal("out")), false),
            Cwd::Outside(_)
        ));
    }
}
