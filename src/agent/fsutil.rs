//! File helpers: JSON documents that keep the user's indentation, atomic writes that keep
//! permissions, and tidy removal — every one of them confined to the workspace. A config path
//! is resolved beneath the workspace folder one component at a time, symlinks read and followed
//! by hand: one that stays inside is followed (a dotfile-managed link stays a link), one that
//! leads out is refused with [`Error::Outside`], and nothing is read, written or removed there.
//! The resolved path is then opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so a
//! link swapped in meanwhile makes the open fail rather than leave the workspace.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use serde::Serialize;
use serde_json::{Map, Value};

use super::Error;

pub fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Symlinks followed for one path at most (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// The workspace folder, opened once, to resolve and open config paths beneath it.
struct Beneath {
    root: OwnedFd,
    /// The workspace as given, to name paths in messages.
    ws: PathBuf,
    /// Its real path, to take an absolute symlink that points inside as relative.
    real: PathBuf,
}

impl Beneath {
    fn open(ws: &Path) -> Result<Beneath, Error> {
        let root = rustix::fs::open(
            ws,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err(ws, e.into()))?;
        Ok(Beneath {
            root,
            ws: ws.to_path_buf(),
            real: fs::canonicalize(ws).unwrap_or_else(|_| ws.to_path_buf()),
        })
    }

    fn outside(&self, rel: &Path) -> Error {
        Error::Outside {
            path: self.ws.join(rel),
        }
    }

    fn fail(&self, rel: &Path, e: Errno) -> Error {
        match e {
            Errno::XDEV => self.outside(rel),
            e => io_err(&self.ws.join(rel), e.into()),
        }
    }

    /// `path` (the workspace joined with a relative path) resolved to a path below the
    /// workspace without symlinks: each symlink on the way is read and followed while it stays
    /// inside; the last component is followed only if `follow_last`. A missing component ends
    /// the resolution (the rest is taken as it is, to be created).
    fn resolve(&self, path: &Path, follow_last: bool) -> Result<PathBuf, Error> {
        let rel = path
            .strip_prefix(&self.ws)
            .map_err(|_| Error::Outside {
                path: path.to_path_buf(),
            })?
            .to_path_buf();
        let mut todo = parts(&rel);
        let mut done = PathBuf::new();
        let mut links = 0;
        let mut missing = false;
        while let Some(c) = todo.pop_front() {
            if c == ".." {
                if !done.pop() {
                    return Err(self.outside(&rel));
                }
                continue;
            }
            let here = done.join(&c);
            let last = todo.is_empty();
            if missing || (last && !follow_last) {
                done = here;
                continue;
            }
            let st = match rustix::fs::statat(&self.root, dot(&here), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => {
                    missing = true;
                    done = here;
                    continue;
                }
                Err(e) => return Err(self.fail(&here, e)),
            };
            if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                done = here;
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(self.fail(&rel, Errno::LOOP));
            }
            let target = rustix::fs::readlinkat(&self.root, dot(&here), Vec::new())
                .map_err(|e| self.fail(&here, e))?;
            let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
            let target = if target.is_absolute() {
                let inside = target
                    .strip_prefix(&self.real)
                    .or_else(|_| target.strip_prefix(&self.ws))
                    .map_err(|_| self.outside(&rel))?;
                done = PathBuf::new();
                inside.to_path_buf()
            } else {
                target
            };
            for p in parts(&target).into_iter().rev() {
                todo.push_front(p);
            }
        }
        Ok(done)
    }

    /// Open `rel` (resolved, without symlinks) beneath the workspace; any symlink found there
    /// now makes it fail.
    fn open_at(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
        loop {
            match rustix::fs::openat2(
                &self.root,
                dot(rel),
                flags | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            ) {
                // A rename raced the lookup: the kernel asks to try again.
                Err(Errno::AGAIN) => {}
                other => return other,
            }
        }
    }

    /// The folder holding `rel` (resolved) and its last component; `None` when it is missing.
    fn parent(&self, rel: &Path) -> Result<Option<(OwnedFd, PathBuf)>, Error> {
        let (dir, name) = split(rel);
        match self.open_at(&dir, OFlags::PATH | OFlags::DIRECTORY) {
            Ok(fd) => Ok(Some((fd, name))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.fail(&dir, e)),
        }
    }

    /// Create the folders of `rel` (resolved) that are missing, each beneath the workspace.
    fn make_dirs(&self, rel: &Path) -> Result<(), Error> {
        let mut done = PathBuf::new();
        for c in rel.components() {
            let dir = done.clone();
            done.push(c);
            match self.open_at(&done, OFlags::PATH | OFlags::DIRECTORY) {
                Ok(_) => continue,
                Err(Errno::NOENT) => {}
                Err(e) => return Err(self.fail(&done, e)),
            }
            let parent = self
                .open_at(&dir, OFlags::PATH | OFlags::DIRECTORY)
                .map_err(|e| self.fail(&dir, e))?;
            match rustix::fs::mkdirat(&parent, c.as_os_str(), Mode::from_bits_truncate(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(self.fail(&done, e)),
            }
        }
        Ok(())
    }
}

/// The components of a relative path (`.` dropped, `..` kept).
fn parts(rel: &Path) -> VecDeque<OsString> {
    let mut out = VecDeque::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push_back(n.to_os_string()),
            Component::ParentDir => out.push_back("..".into()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// A relative path for the `*at` calls: the folder itself is `.`.
fn dot(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

/// A relative path's folder and last component.
fn split(rel: &Path) -> (PathBuf, PathBuf) {
    (
        rel.parent().map(Path::to_path_buf).unwrap_or_default(),
        rel.file_name().map(PathBuf::from).unwrap_or_default(),
    )
}

/// Read the file at `path` (below workspace `ws`), `Ok(None)` if it does not exist.
pub fn read_opt(ws: &Path, path: &Path) -> Result<Option<String>, Error> {
    let b = Beneath::open(ws)?;
    let rel = b.resolve(path, true)?;
    let fd = match b.open_at(&rel, OFlags::RDONLY) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(b.fail(&rel, e)),
    };
    let mut bytes = Vec::new();
    fs::File::from(fd)
        .read_to_end(&mut bytes)
        .map_err(|e| io_err(path, e))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            reason: format!("not UTF-8: {e}"),
        })
}

/// Does anything (a symlink too) exist at `path`? A folder on the way that leads out of the
/// workspace is an error.
pub fn exists(ws: &Path, path: &Path) -> Result<bool, Error> {
    let b = Beneath::open(ws)?;
    let rel = b.resolve(path, false)?;
    let Some((dir, name)) = b.parent(&rel)? else {
        return Ok(false);
    };
    match rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(b.fail(&rel, e)),
    }
}

/// Write `contents` to `path` (below workspace `ws`) atomically: a temp file and a rename in
/// the same folder. A symlink is followed while it stays in the workspace, so a linked config
/// stays a link; an existing file's permissions are kept; missing folders are created.
pub fn write_atomic(ws: &Path, path: &Path, contents: &[u8]) -> Result<(), Error> {
    let b = Beneath::open(ws)?;
    let rel = b.resolve(path, true)?;
    let (dir_rel, _) = split(&rel);
    b.make_dirs(&dir_rel)?;
    let Some((dir, name)) = b.parent(&rel)? else {
        return Err(b.fail(&dir_rel, Errno::NOENT));
    };
    let mode = match rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
        // Swapped for a link since it was resolved: not followed.
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
            return Err(b.fail(&rel, Errno::LOOP));
        }
        Ok(st) => Some(Mode::from_raw_mode(st.st_mode) & Mode::from_bits_truncate(0o7777)),
        Err(Errno::NOENT) => None,
        Err(e) => return Err(b.fail(&rel, e)),
    };
    let mut tmp = OsString::from(".");
    tmp.push(name.as_os_str());
    tmp.push(format!(".rewind-tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = (|| -> Result<(), Errno> {
        let fd = rustix::fs::openat(
            &dir,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_bits_truncate(0o666),
        )?;
        let mut f = fs::File::from(fd);
        f.write_all(contents)
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
        rustix::fs::fsync(f.as_fd())?;
        if let Some(mode) = mode {
            rustix::fs::fchmod(f.as_fd(), mode)?;
        }
        rustix::fs::renameat(&dir, &tmp, &dir, &name)
    })();
    if let Err(e) = result {
        let _ = rustix::fs::unlinkat(&dir, &tmp, AtFlags::empty());
        return Err(b.fail(&rel, e));
    }
    Ok(())
}

/// Remove the file at `path` (below workspace `ws`); a symlink is removed, not followed.
pub fn remove_file(ws: &Path, path: &Path) -> Result<(), Error> {
    let b = Beneath::open(ws)?;
    let rel = b.resolve(path, false)?;
    let Some((dir, name)) = b.parent(&rel)? else {
        return Ok(());
    };
    match rustix::fs::unlinkat(&dir, &name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(b.fail(&rel, e)),
    }
}

/// Remove each folder (below workspace `ws`) in order if (and only if) it is empty.
pub fn remove_empty_dirs(ws: &Path, dirs: &[PathBuf]) {
    let Ok(b) = Beneath::open(ws) else {
        return;
    };
    for d in dirs {
        if let Ok(rel) = b.resolve(d, false)
            && let Ok(Some((dir, name))) = b.parent(&rel)
        {
            // Fails on a folder that is not empty (and on a symlink), which is what we want.
            let _ = rustix::fs::unlinkat(&dir, &name, AtFlags::REMOVEDIR);
        }
    }
}

/// A JSON object file, remembering how it was formatted.
pub struct JsonDoc {
    ws: PathBuf,
    pub path: PathBuf,
    pub root: Map<String, Value>,
    original: Option<Value>,
    indent: Vec<u8>,
    trailing_newline: bool,
}

impl JsonDoc {
    /// Load `path`; a missing (or whitespace-only) file is an empty object.
    /// A file that is not a JSON object is an error and is never overwritten.
    pub fn load(ws: &Path, path: &Path) -> Result<Self, Error> {
        let text = read_opt(ws, path)?;
        let (root, original, indent, trailing_newline) = match text {
            Some(t) if !t.trim().is_empty() => {
                let v: Value = serde_json::from_str(&t).map_err(|e| Error::Parse {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })?;
                let Value::Object(map) = v.clone() else {
                    return Err(Error::Shape {
                        path: path.to_path_buf(),
                        reason: "top level is not a JSON object".into(),
                    });
                };
                (map, Some(v), detect_indent(&t), t.ends_with('\n'))
            }
            _ => (Map::new(), None, b"  ".to_vec(), true),
        };
        Ok(JsonDoc {
            ws: ws.to_path_buf(),
            path: path.to_path_buf(),
            root,
            original,
            indent,
            trailing_newline,
        })
    }

    pub fn existed(&self) -> bool {
        self.original.is_some()
    }

    /// Has the document changed since it was loaded?
    pub fn changed(&self) -> bool {
        match &self.original {
            Some(v) => v.as_object() != Some(&self.root),
            None => !self.root.is_empty(),
        }
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(&self.indent);
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        Value::Object(self.root.clone())
            .serialize(&mut ser)
            .expect("serialising a Value cannot fail");
        let mut s = String::from_utf8(buf).expect("serde_json writes UTF-8");
        if self.trailing_newline {
            s.push('\n');
        }
        s
    }

    pub fn save(&self) -> Result<(), Error> {
        write_atomic(&self.ws, &self.path, self.render().as_bytes())
    }
}

/// Indentation unit of a pretty-printed JSON text (first indented line).
fn detect_indent(text: &str) -> Vec<u8> {
    for line in text.lines().skip(1) {
        let ws: String = line
            .chars()
            .take_while(|c| *c == ' ' || *c == '\t')
            .collect();
        if !ws.is_empty() && ws.len() < line.len() {
            return ws.into_bytes();
        }
    }
    b"  ".to_vec()
}

/// The `hooks` object of a document, created if missing.
pub fn hooks_mut(doc: &mut JsonDoc) -> Result<&mut Map<String, Value>, Error> {
    let path = doc.path.clone();
    let v = doc
        .root
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    v.as_object_mut().ok_or_else(|| Error::Shape {
        path,
        reason: "\"hooks\" is not an object".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indent_detection() {
        assert_eq!(detect_indent("{\n    \"a\": 1\n}\n"), b"    ");
        assert_eq!(detect_indent("{\n\t\"a\": 1\n}"), b"\t");
        assert_eq!(detect_indent("{}"), b"  ");
        assert_eq!(detect_indent("{\"a\":1}"), b"  ");
    }
}
