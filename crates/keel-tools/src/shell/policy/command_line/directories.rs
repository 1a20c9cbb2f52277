//! The working directory as the line moves it: `cd`, `pushd` and `popd` for what follows;
//! `env -C`, `git -C`, `make -C` and `tar -C` for one command and what it runs.

use super::super::places::Cwd;
use super::super::wrappers::first_operand;
use super::{Arg, Reader};

impl Reader<'_> {
    /// Moves the working directory as the builtin `name` (`cd`, `pushd`, `popd`) would.
    pub(super) fn change_directory(&mut self, name: &str, words: &[Arg]) {
        let args = words.get(1..).unwrap_or(&[]);
        // Options (`-P`, `-L`, `-e`) come first; `-` alone is a directory.
        let operand = args.get(first_operand(args, &[]));
        match name {
            "cd" | "chdir" => self.cwd = self.places.cd(&self.cwd, operand, self.cdpath),
            "pushd" => match operand {
                Some(dir) if !is_rotation(&dir.text) => {
                    let next = self.places.cd(&self.cwd, Some(dir), self.cdpath);
                    self.pushed.push(std::mem::replace(&mut self.cwd, next));
                }
                _ => self.cwd = Cwd::Unknown("`pushd` rotates the directory stack".into()),
            },
            "popd" => match (operand, self.pushed.pop()) {
                (None, Some(previous)) => self.cwd = previous,
                // With nothing pushed `popd` fails and stays.
                (None, None) => {}
                (Some(_), _) => {
                    self.cwd = Cwd::Unknown("`popd` with an argument edits the stack".into())
                }
            },
            _ => {}
        }
    }

    /// Where the command `words` runs when its options move it there (`env -C DIR`,
    /// `git -C DIR`, `make -C DIR`, `tar -C DIR`), from the current directory.
    pub(super) fn runs_in(&self, words: &[Arg]) -> Option<Cwd> {
        let (name, args) = words.split_first()?;
        let name = name.text.rsplit('/').next().unwrap_or(&name.text);
        // The options that name a directory, and whether the options end at the first operand
        // (after it come the command's own words).
        let (options, options_first): (&[&str], bool) = match name {
            "env" => (&["-C", "--chdir"], true),
            "git" => (&["-C"], true),
            "make" | "gmake" => (&["-C", "--directory"], false),
            "tar" => (&["-C", "--directory"], false),
            _ => return None,
        };
        // Options of `git` and `env` that take a value, which is not an operand.
        const VALUED: [&str; 7] = [
            "-c",
            "--git-dir",
            "--work-tree",
            "--namespace",
            "-u",
            "--unset",
            "--config-env",
        ];
        let mut moved: Option<Cwd> = None;
        let mut i = 0;
        while let Some(arg) = args.get(i) {
            let text = arg.text.as_str();
            i += 1;
            if options_first && (text == "--" || !text.starts_with('-')) {
                break;
            }
            let dir = if options.contains(&text) {
                i += 1;
                args.get(i - 1).cloned()
            } else if let Some((option, value)) = text.split_once('=')
                && options.contains(&option)
            {
                Some(Arg {
                    text: value.to_string(),
                    ..arg.clone()
                })
            } else {
                if options_first && VALUED.contains(&text) {
                    i += 1;
                }
                None
            };
            if let Some(dir) = dir {
                let from = moved.as_ref().unwrap_or(&self.cwd);
                moved = Some(self.places.cd(from, Some(&dir), false));
            }
        }
        moved
    }
}

/// `pushd +N` / `-N`: a rotation of the stack, not a directory.
fn is_rotation(text: &str) -> bool {
    text.len() > 1 && text.starts_with(['+', '-']) && text[1..].chars().all(|c| c.is_ascii_digit())
}
