//! Skills (seed 000 "matched skills", DESIGN.md section 11): directories holding a `SKILL.md` —
//! front matter naming the skill, describing it and listing its triggers, then instructions. The
//! ones that match a message go into the system prompt up to a token budget ([`SkillPrompt`]);
//! the model lists and opens the others with `skills_list` and `skill_view` ([`skill_tools`]).
//!
//! Skills are read from `$KEEL_HOME/skills` and the workspace's `.keel/skills`; a later root
//! wins over an earlier one for the same name. A skill that cannot be read is skipped with a
//! reason ([`SkillProblem`]), never half-loaded. A `SKILL.md` or skill directory that is a
//! symbolic link is refused: a link must not carry a file from elsewhere into the prompt.

mod front_matter;
mod matching;
mod tools;

use std::path::{Path, PathBuf};

pub use matching::{SkillMatch, SkillPrompt};
pub use tools::{SKILL_VIEW, SKILLS_LIST, SKILLS_MODULE, skill_tools};

/// The largest `SKILL.md` read, in bytes.
pub const MAX_SKILL_BYTES: u64 = 64 * 1024;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The most triggers one skill may have.
pub const MAX_TRIGGERS: usize = 32;
/// The most skills read from one root.
pub const MAX_SKILLS_PER_ROOT: usize = 1000;

/// One skill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skill {
    /// Its name: letters, digits, `-`, `_` and `.`, at most 64.
    pub name: String,
    /// What it is for: matched against messages.
    pub description: String,
    /// Words or phrases that bring it in when a message contains them.
    pub triggers: Vec<String>,
    /// The instructions.
    pub body: String,
    /// Its directory.
    pub dir: PathBuf,
}

/// A skill directory that was skipped, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillProblem {
    /// The directory or file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: String,
}

/// The skills found under some roots, by name.
#[derive(Clone, Debug, Default)]
pub struct SkillSet {
    skills: Vec<Skill>,
}

impl SkillSet {
    /// Reads every `<root>/<dir>/SKILL.md`; a missing root is no skills. Later roots win.
    pub fn load(roots: &[PathBuf]) -> (SkillSet, Vec<SkillProblem>) {
        let mut skills: Vec<Skill> = Vec::new();
        let mut problems = Vec::new();
        for root in roots {
            let Ok(entries) = std::fs::read_dir(root) else {
                continue;
            };
            let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            dirs.sort();
            if dirs.len() > MAX_SKILLS_PER_ROOT {
                problems.push(SkillProblem {
                    path: root.clone(),
                    reason: format!(
                        "more than {MAX_SKILLS_PER_ROOT} entries; only the first are read"
                    ),
                });
                dirs.truncate(MAX_SKILLS_PER_ROOT);
            }
            for dir in dirs {
                match read_skill(&dir) {
                    Ok(Some(skill)) => {
                        skills.retain(|s| s.name != skill.name);
                        skills.push(skill);
                    }
                    Ok(None) => {}
                    Err(reason) => problems.push(SkillProblem { path: dir, reason }),
                }
            }
        }
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        (SkillSet { skills }, problems)
    }

    /// A set of these skills (for tests and embedders).
    pub fn from_skills(mut skills: Vec<Skill>) -> Self {
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        skills.dedup_by(|a, b| a.name == b.name);
        SkillSet { skills }
    }

    /// Every skill, by name.
    pub fn all(&self) -> &[Skill] {
        &self.skills
    }

    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }
}

/// The roots keel reads skills from: `$KEEL_HOME/skills`, then the workspace's `.keel/skills`.
pub fn skill_roots(home: &Path, workspace: &Path) -> Vec<PathBuf> {
    vec![home.join("skills"), workspace_skills(workspace)]
}

/// The workspace's skill directory, which the file tools must not write: a skill written by
/// the model would reach the system prompt of later runs.
pub fn workspace_skills(workspace: &Path) -> PathBuf {
    workspace.join(".keel").join("skills")
}

/// The skill in `dir`; `None` when `dir` is not a skill directory.
fn read_skill(dir: &Path) -> Result<Option<Skill>, String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if meta.file_type().is_symlink() {
        return Err("a symbolic link; skills must be real directories".into());
    }
    if !meta.is_dir() {
        return Ok(None);
    }
    let file = dir.join("SKILL.md");
    let meta = match std::fs::symlink_metadata(&file) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read SKILL.md: {e}")),
    };
    if !meta.is_file() {
        return Err("SKILL.md is not a regular file".into());
    }
    if meta.len() > MAX_SKILL_BYTES {
        return Err(format!(
            "SKILL.md is {} bytes, over the limit of {MAX_SKILL_BYTES}",
            meta.len()
        ));
    }
    let bytes = std::fs::read(&file).map_err(|e| format!("cannot read SKILL.md: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| "SKILL.md is not UTF-8".to_string())?;
    let (matter, body) = front_matter::parse(&text).map_err(|e| format!("SKILL.md: {e}"))?;
    let name = matter.name.ok_or("SKILL.md has no `name`")?;
    check_name(&name)?;
    let description = matter.description.unwrap_or_default();
    if description.trim().is_empty() {
        return Err(format!("skill `{name}` has no `description`"));
    }
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "skill `{name}`: the description is over {MAX_DESCRIPTION_CHARS} characters"
        ));
    }
    if matter.triggers.len() > MAX_TRIGGERS {
        return Err(format!(
            "skill `{name}` has {} triggers, over the limit of {MAX_TRIGGERS}",
            matter.triggers.len()
        ));
    }
    Ok(Some(Skill {
        name,
        description: description.trim().to_string(),
        triggers: matter
            .triggers
            .into_iter()
            .map(|t| t.to_lowercase())
            .collect(),
        body: body.trim().to_string(),
        dir: dir.to_path_buf(),
    }))
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "skill name `{name}` must be 1-64 letters, digits, `-`, `_` or `.`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, dir: &str, text: &str) {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join("SKILL.md"), text).unwrap();
    }

    #[test]
    fn loads_skills_and_a_later_root_wins() {
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        write(
            home.path(),
            "deploy",
            "---\nname: deploy\ndescription: old\n---\nOld.",
        );
        write(
            home.path(),
            "review",
            "---\nname: review\ndescription: Review code\ntriggers: [review]\n---\nLook.",
        );
        write(
            work.path(),
            "deploy",
            "---\nname: deploy\ndescription: Deploy the service\n---\nNew.",
        );
        std::fs::create_dir_all(home.path().join("not-a-skill")).unwrap();
        let roots = [home.path().to_path_buf(), work.path().to_path_buf()];
        let (set, problems) = SkillSet::load(&roots);
        assert!(problems.is_empty(), "{problems:?}");
        let names: Vec<_> = set.all().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["deploy", "review"]);
        assert_eq!(set.get("deploy").unwrap().body, "New.");
        assert_eq!(set.get("review").unwrap().triggers, ["review"]);
        let (none, problems) = SkillSet::load(&[home.path().join("missing")]);
        assert!(none.all().is_empty() && problems.is_empty());
    }

    #[test]
    fn bad_skills_are_skipped_with_a_reason() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "noname", "---\ndescription: d\n---\nx");
        write(
            root.path(),
            "badname",
            "---\nname: ../evil\ndescription: d\n---\nx",
        );
        write(root.path(), "nodesc", "---\nname: nodesc\n---\nx");
        write(root.path(), "nofront", "just text");
        write(
            root.path(),
            "huge",
            &format!(
                "---\nname: huge\ndescription: d\n---\n{}",
                "x".repeat(70_000)
            ),
        );
        let (set, problems) = SkillSet::load(&[root.path().to_path_buf()]);
        assert!(set.all().is_empty());
        let reasons: Vec<_> = problems.iter().map(|p| p.reason.as_str()).collect();
        assert_eq!(problems.len(), 5, "{reasons:?}");
        assert!(reasons.iter().any(|r| r.contains("no `name`")));
        assert!(reasons.iter().any(|r| r.contains("must be 1-64")));
        assert!(reasons.iter().any(|r| r.contains("no `description`")));
        assert!(reasons.iter().any(|r| r.contains("over the limit")));
    }

    #[test]
    fn symbolic_links_never_bring_a_file_in() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(
            outside.path().join("secret.md"),
            "---\nname: leak\ndescription: d\n---\nSECRET",
        )
        .unwrap();
        std::fs::create_dir_all(root.path().join("linked-file")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.md"),
            root.path().join("linked-file").join("SKILL.md"),
        )
        .unwrap();
        write(
            outside.path(),
            "dir",
            "---\nname: leak2\ndescription: d\n---\nSECRET",
        );
        std::os::unix::fs::symlink(outside.path().join("dir"), root.path().join("linked-dir"))
            .unwrap();
        let (set, problems) = SkillSet::load(&[root.path().to_path_buf()]);
        assert!(set.all().is_empty(), "{:?}", set.all());
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
