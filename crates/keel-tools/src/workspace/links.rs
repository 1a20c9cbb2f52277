//! Hard links: a file with more than one name may be the same file as one of keel's own under
//! another name (`ln ~/.local/share/keel/memory/me/notes.md notes.md`, made by a shell command),
//! which no walk by name can see. Only a file with several names is looked for, and only in the
//! protected directories on its own filesystem (a hard link never crosses one).

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use keel_core::ToolError;
use rustix::fs::FileType;

use super::{NodeId, Workspace};

/// The most entries looked at in keel's protected directories for one file; past it the file
/// is refused, since it cannot be told apart from keel's own.
const MAX_ENTRIES: usize = 20_000;

/// What a search of a protected directory found.
enum Search {
    /// The file is there, at this path.
    Found(PathBuf),
    /// It is not there.
    Absent,
    /// The directory holds too much to tell.
    TooMany,
}

impl Workspace {
    /// Refuses `file` (open, reached by `requested`) when it is another name of a file inside
    /// one of the protected directories: its home, the workspace's `.keel`.
    pub fn check_other_names(
        &self,
        file: &File,
        requested: &str,
        verb: &str,
    ) -> Result<(), ToolError> {
        let stat = rustix::fs::fstat(file).map_err(|e| {
            ToolError::failed(format!(
                "cannot {verb} `{requested}`: {}",
                std::io::Error::from(e)
            ))
        })?;
        if stat.st_nlink <= 1 {
            return Ok(());
        }
        let id = NodeId::of(&stat);
        let mut budget = MAX_ENTRIES;
        for protected in &self.protected {
            let Ok(dir) = rustix::fs::stat(&protected.absolute) else {
                continue;
            };
            let is_dir = FileType::from_raw_mode(dir.st_mode) == FileType::Directory;
            if !is_dir || NodeId::of(&dir).dev != id.dev {
                continue;
            }
            let found = match search(&protected.absolute, id, &mut budget) {
                Search::Absent => continue,
                Search::Found(path) => format!(
                    "it is another name (a hard link) of {}, inside {}",
                    path.display(),
                    protected.path.display()
                ),
                Search::TooMany => format!(
                    "it has {} names (hard links), and keel could not check that none is inside \
                     {}",
                    stat.st_nlink,
                    protected.path.display()
                ),
            };
            return Err(ToolError::denied(format!(
                "cannot {verb} `{requested}`: {found}, one of keel's own files (its home, \
                 database, memory or skills), which the file tools never read or write"
            )));
        }
        Ok(())
    }
}

/// Looks for the file `id` under `dir`, symlinks not followed, within `budget` entries.
fn search(dir: &Path, id: NodeId, budget: &mut usize) -> Search {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if *budget == 0 {
                return Search::TooMany;
            }
            *budget -= 1;
            // `DirEntry::metadata` does not follow a symlink.
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.dev() == id.dev && meta.ino() == id.ino {
                return Search::Found(entry.path());
            }
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    Search::Absent
}
