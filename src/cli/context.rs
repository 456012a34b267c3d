//! What every history command needs: the workspace, its store, and whether it is mounted.

use std::path::{Component, Path, PathBuf};

use super::{Failure, Registration};
use crate::store::Store;

pub struct Ctx {
    pub workspace: PathBuf,
    pub store_dir: PathBuf,
    pub mounted: bool,
    /// The directory the command was started in, for relative paths.
    pub cwd: PathBuf,
}

impl Ctx {
    pub fn locate(cwd: &Path) -> Result<Ctx, Failure> {
        let workspace = super::find_workspace(cwd)?;
        let store_dir = Registration::read(&workspace)
            .map(|r| r.store)
            .unwrap_or_else(|| super::default_store(&workspace));
        Ok(Ctx {
            mounted: crate::fs::is_rewind_mount(&workspace),
            cwd: cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf()),
            workspace,
            store_dir,
        })
    }

    /// The store for reading: alongside the daemon while mounted, directly otherwise.
    pub fn read_store(&self) -> Result<Store, Failure> {
        if self.mounted {
            // New files are held back for half a second, deletes written in the background:
            // have the daemon record what it holds, so what was just done shows.
            let _ = self.ctl("sync");
        }
        let open = Store::open_read_only(&self.store_dir);
        open.map_err(|e| match e {
            crate::Error::NotFound(_) => Failure::usage(format!(
                "no history for {} yet (store {})",
                self.workspace.display(),
                self.store_dir.display()
            )),
            e => Failure::from(e),
        })
    }

    /// Run a command through the daemon's `.rewind/ctl`; `Err` carries the reason it gave.
    pub fn ctl(&self, line: &str) -> Result<String, Failure> {
        use std::io::{Read, Write};
        let path = self.workspace.join(".rewind/ctl");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Failure::failed(format!("{}: {e}", path.display())))?;
        let written = f.write_all(line.as_bytes());
        let mut out = String::new();
        let _ = f.read_to_string(&mut out);
        match written {
            Ok(()) => Ok(out),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(Failure::usage(
                out.trim().trim_start_matches("error: ").to_string(),
            )),
            Err(e) => Err(Failure::failed(format!("{}: {e}", path.display()))),
        }
    }

    /// Run `f` with the workspace mounted: as it is, or mounted for the occasion and unmounted
    /// after (so that what `f` does is recorded like any other change).
    pub fn mounted<T>(&self, f: impl FnOnce(&Ctx) -> Result<T, Failure>) -> Result<T, Failure> {
        if self.mounted {
            return f(self);
        }
        let exe = std::env::current_exe().map_err(|e| Failure::failed(e.to_string()))?;
        let out = std::process::Command::new(&exe)
            .arg("mount")
            .arg(&self.workspace)
            .arg("--store")
            .arg(&self.store_dir)
            .output()
            .map_err(|e| Failure::failed(e.to_string()))?;
        if !out.status.success() {
            return Err(Failure::failed(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        let result = f(self);
        let _ = std::process::Command::new(&exe)
            .arg("unmount")
            .arg(&self.workspace)
            .output();
        result
    }

    /// The workspace as it is now, for reading current content (through the mount if mounted).
    pub fn source(&self) -> Result<crate::fs::backing::Backing, Failure> {
        crate::fs::backing::Backing::open(&self.workspace)
            .map_err(|e| Failure::failed(format!("{}: {e}", self.workspace.display())))
    }

    /// A path the user gave, as a workspace-relative path. Refuses anything outside.
    pub fn rel_path(&self, given: &Path) -> Result<Vec<u8>, Failure> {
        use std::os::unix::ffi::OsStrExt;
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.cwd.join(given)
        };
        let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
        for c in joined.components() {
            match c {
                Component::RootDir | Component::Prefix(_) => parts.clear(),
                Component::CurDir => {}
                Component::ParentDir => {
                    parts.pop();
                }
                Component::Normal(n) => parts.push(n),
            }
        }
        let normal: PathBuf = std::iter::once(std::ffi::OsStr::new("/"))
            .chain(parts)
            .collect();
        let rel = normal.strip_prefix(&self.workspace).map_err(|_| {
            Failure::usage(format!(
                "{} is outside the workspace {}",
                given.display(),
                self.workspace.display()
            ))
        })?;
        let bytes = rel.as_os_str().as_bytes().to_vec();
        if bytes.starts_with(b".rewind") && (bytes.len() == 7 || bytes[7] == b'/') {
            return Err(Failure::usage(
                ".rewind/ is rewind's control directory, not part of the history",
            ));
        }
        Ok(bytes)
    }
}
