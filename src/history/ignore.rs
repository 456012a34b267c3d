//! Which paths pass through unrecorded: `.rewindignore` at the workspace root (gitignore
//! syntax), on top of a default set of regenerable folders that it may negate (`!target/`).

use std::os::unix::ffi::OsStrExt;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// Ignored unless `.rewindignore` says otherwise.
pub const DEFAULTS: [&str; 3] = [".git/", "node_modules/", "target/"];

pub struct IgnoreRules {
    matcher: Gitignore,
}

impl IgnoreRules {
    /// The defaults, then the lines of `.rewindignore` (which may be empty), later lines winning.
    pub fn new(rewindignore: &str) -> IgnoreRules {
        let mut b = GitignoreBuilder::new("/");
        for line in DEFAULTS {
            let _ = b.add_line(None, line);
        }
        for line in rewindignore.lines() {
            // A bad pattern is skipped, not fatal: recording more is the safe side.
            if let Err(e) = b.add_line(None, line) {
                tracing::warn!(".rewindignore: skipping {line:?}: {e}");
            }
        }
        let matcher = b.build().unwrap_or_else(|e| {
            tracing::warn!(".rewindignore: {e}; using the defaults");
            Gitignore::empty()
        });
        IgnoreRules { matcher }
    }

    /// Whether a workspace-relative path (or any folder above it) is ignored.
    pub fn ignored(&self, path: &[u8], is_dir: bool) -> bool {
        if path.is_empty() {
            return false;
        }
        let p = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
        self.matcher
            .matched_path_or_any_parents(p, is_dir)
            .is_ignore()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_negation() {
        let r = IgnoreRules::new("");
        assert!(r.ignored(b".git", true));
        assert!(r.ignored(b".git/objects/ab/cdef", false));
        assert!(r.ignored(b"web/node_modules/left-pad/index.js", false));
        assert!(r.ignored(b"target/debug/rewind", false));
        assert!(!r.ignored(b"src/main.rs", false));
        assert!(!r.ignored(b".gitignore", false));

        let r = IgnoreRules::new("*.log\n!node_modules/\nbuild/\n");
        assert!(r.ignored(b"debug.log", false));
        assert!(r.ignored(b"sub/dir/x.log", false));
        assert!(!r.ignored(b"node_modules/x.js", false));
        assert!(r.ignored(b"build/out.o", false));
        assert!(r.ignored(b".git/HEAD", false));
    }
}
