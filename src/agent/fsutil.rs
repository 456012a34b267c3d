//! File helpers: JSON documents that keep the user's indentation, atomic
//! writes that follow symlinks and keep permissions, and tidy removal.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::Error;

pub fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Read a file, `Ok(None)` if it does not exist.
pub fn read_opt(path: &Path) -> Result<Option<String>, Error> {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|e| Error::Parse {
                path: path.to_path_buf(),
                reason: format!("not UTF-8: {e}"),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path, e)),
    }
}

/// Write `contents` to `path` atomically (temp file + rename in the same
/// directory). A symlink is followed so dotfile-managed links stay links; an
/// existing file's permissions are kept. Missing parent directories are created.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), Error> {
    let target: PathBuf = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            fs::canonicalize(path).map_err(|e| io_err(path, e))?
        }
        _ => path.to_path_buf(),
    };
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.rewind-tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        if let Ok(meta) = fs::metadata(&target) {
            fs::set_permissions(&tmp, meta.permissions())?;
        }
        fs::rename(&tmp, &target)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(&target, e));
    }
    Ok(())
}

/// Remove a file (following a symlink is not done: the link itself is removed).
pub fn remove_file(path: &Path) -> Result<(), Error> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path, e)),
    }
}

/// Remove each directory in order if (and only if) it is empty.
pub fn remove_empty_dirs(dirs: &[PathBuf]) {
    for d in dirs {
        // remove_dir fails on a non-empty directory, which is what we want.
        let _ = fs::remove_dir(d);
    }
}

/// A JSON object file, remembering how it was formatted.
pub struct JsonDoc {
    pub path: PathBuf,
    pub root: Map<String, Value>,
    original: Option<Value>,
    indent: Vec<u8>,
    trailing_newline: bool,
}

impl JsonDoc {
    /// Load `path`; a missing (or whitespace-only) file is an empty object.
    /// A file that is not a JSON object is an error and is never overwritten.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = read_opt(path)?;
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
        write_atomic(&self.path, self.render().as_bytes())
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
