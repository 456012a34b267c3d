//! The review page's one way to the history: it runs the CLI's own commands, with the same
//! words, where the CLI would run them. Mounted, every command goes to the daemon through
//! `.rewind/ctl` (a rollback there is recorded like any other); unmounted, reading commands run
//! here on the store opened read-only, and commands that would change something are refused
//! with a message saying they need the mount. The page never computes history its own way:
//! everything it shows is the output of one of these commands, and what it selects is a
//! [`Selection`], turned into the commands' words in one place ([`words`]).

use std::path::Path;
use std::sync::Arc;

use crate::cli::{Ctx, Failure};
use crate::command::{self, Env, Outcome};
use crate::history::{History, Selection};

/// What a command answered.
pub struct Answer {
    pub output: Vec<u8>,
    /// Done in part (a rollback, or its dry run, that skips paths).
    pub partial: bool,
}

/// Why a command gave no answer.
#[derive(Debug)]
pub enum Refusal {
    /// Bad input: unknown ids or names, a bad point, a path outside the workspace.
    Usage(String),
    /// It needs the mount (changing anything, or the tree at a point).
    NeedsMount(String),
    /// Anything else.
    Failed(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Usage(m) | Refusal::NeedsMount(m) | Refusal::Failed(m) => f.write_str(m),
        }
    }
}

pub struct Backend {
    ctx: Ctx,
    /// Unmounted: the store, opened read-only once.
    history: Option<Arc<History>>,
}

impl Backend {
    /// Unmounted, the store is opened read-only here: why it cannot be is the CLI's failure,
    /// with its exit status.
    pub fn open(ctx: Ctx) -> Result<Backend, Failure> {
        let history = if ctx.mounted {
            None
        } else {
            Some(Arc::new(ctx.read_history()?))
        };
        Ok(Backend { ctx, history })
    }

    pub fn mounted(&self) -> bool {
        self.ctx.mounted
    }

    pub fn workspace(&self) -> &Path {
        &self.ctx.workspace
    }

    /// Run `rewind WORDS...` as the CLI would, and return what it printed.
    pub fn run(&self, words: &[String]) -> Result<Answer, Refusal> {
        let line = shlex::try_join(words.iter().map(String::as_str))
            .map_err(|e| Refusal::Usage(e.to_string()))?;
        let cli = command::parse_line(&line).map_err(|e| Refusal::Usage(e.to_string()))?;
        if self.ctx.mounted {
            let answer = self.ctx.ctl(&line).map_err(|f| {
                if f.code == 2 {
                    Refusal::Usage(f.message)
                } else {
                    Refusal::Failed(f.message)
                }
            })?;
            return Ok(Answer {
                output: answer.output,
                partial: answer.partial,
            });
        }
        if cli.command.changes_something() {
            return Err(Refusal::NeedsMount(format!(
                "`rewind {}` changes the workspace: it runs in the daemon, and {} is not mounted \
                 (mount it with `rewind mount`, then restart `rewind ui`)",
                cli.command.name(),
                self.ctx.workspace.display()
            )));
        }
        let history = self.history.as_ref().expect("unmounted: opened");
        let source = self.ctx.source().map_err(|f| Refusal::Failed(f.message))?;
        let rules = self.ctx.ignore_rules(&source);
        let ignored = |path: &[u8], dir: bool| rules.ignored(&source, path, dir).is_some();
        let mut output = Vec::new();
        let mut env = Env {
            history,
            source: &source,
            ignored: &ignored,
            workspace: self.ctx.workspace.clone(),
            base: self.ctx.workspace.clone(),
            actor: None,
            caller: std::process::id(),
            color: false,
            width: 200,
            out: &mut output,
        };
        let command::Verb::History(verb) = cli.command.verb() else {
            return Err(Refusal::Usage(format!("`{line}` is not a history command")));
        };
        let outcome = command::run(verb, &mut env).map_err(|e| {
            if e.is_usage() {
                Refusal::Usage(e.to_string())
            } else {
                Refusal::Failed(e.to_string())
            }
        })?;
        Ok(Answer {
            output,
            partial: outcome != Outcome::Done,
        })
    }

    /// The names in a folder of the tree at a point, from the daemon's `.rewind/at/POINT/`
    /// (folders first, each with whether it is a folder). Only mounted.
    pub fn tree_at(&self, point: &str, dir: &str) -> Result<Vec<(String, bool)>, Refusal> {
        if !self.ctx.mounted {
            return Err(Refusal::NeedsMount(
                "the tree at a point is served by the mount (.rewind/at/); mount the workspace \
                 to browse it"
                    .into(),
            ));
        }
        let at = self.ctx.workspace.join(".rewind/at").join(point);
        let shown = at.join(dir);
        let io = |e: rustix::io::Errno| {
            if e == rustix::io::Errno::NOENT {
                Refusal::Usage(format!("no such point or folder: {point} {dir}"))
            } else if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::XDEV {
                Refusal::Usage(format!(
                    "{dir}: a symlink at {point}; the tree shows only what is in the workspace"
                ))
            } else {
                Refusal::Failed(format!("{}: {e}", shown.display()))
            }
        };
        use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let at_fd = rustix::fs::open(&at, flags, Mode::empty()).map_err(io)?;
        // Never through a symlink of the tree at that point: `lib -> /etc` would list the
        // machine's /etc.
        let fd = rustix::fs::openat2(
            &at_fd,
            if dir.is_empty() { "." } else { dir },
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(io)?;
        let entries = rustix::fs::Dir::read_from(&fd).map_err(io)?;
        let mut names: Vec<(String, bool)> = Vec::new();
        for e in entries {
            let e = e.map_err(io)?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let kind = match e.file_type() {
                FileType::Unknown => {
                    rustix::fs::statat(&fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                        .map(|st| FileType::from_raw_mode(st.st_mode))
                        .unwrap_or(FileType::Unknown)
                }
                k => k,
            };
            names.push((
                String::from_utf8_lossy(name).into_owned(),
                kind == FileType::Directory,
            ));
        }
        names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(names)
    }

    /// `.rewind/events`, while mounted.
    pub fn events_path(&self) -> Option<std::path::PathBuf> {
        self.ctx
            .mounted
            .then(|| self.ctx.workspace.join(".rewind/events"))
    }
}

/// The verbs the page runs on a selection.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Log,
    Diff,
    Rollback,
}

/// The command line that runs `verb` on `sel`: the one place where what the page selects (a
/// [`Selection`], the type `log`, `diff` and `rollback` resolve) becomes the CLI's words.
/// For a diff, `since` with `until` is the range between two points; for a rollback, `since`
/// is "back to this point" and a path is one file.
pub fn words(verb: Verb, sel: &Selection) -> Result<Vec<String>, Refusal> {
    let mut w: Vec<String> = vec![
        match verb {
            Verb::Log => "log",
            Verb::Diff => "diff",
            Verb::Rollback if sel.change.is_some() => "undo",
            Verb::Rollback => "rollback",
        }
        .into(),
    ];
    let flag = |w: &mut Vec<String>, name: &str, v: &Option<String>| {
        if let Some(v) = v {
            w.push(format!("--{name}"));
            w.push(v.clone());
        }
    };
    if let Some(id) = sel.change {
        if verb == Verb::Log {
            return Err(Refusal::Usage(
                "a log lists changes; show one with diff".into(),
            ));
        }
        w.push(id.to_string());
    }
    flag(&mut w, "session", &sel.session);
    flag(&mut w, "agent", &sel.agent);
    flag(&mut w, "turn", &sel.turn);
    flag(&mut w, "to-turn", &sel.to_turn);
    let path = sel
        .path
        .as_ref()
        .map(|p| String::from_utf8(p.clone()))
        .transpose()
        .map_err(|_| Refusal::Usage("the page takes paths that are UTF-8".into()))?;
    match verb {
        Verb::Log => {
            flag(&mut w, "since", &sel.since);
            flag(&mut w, "until", &sel.until);
        }
        Verb::Diff if sel.until.is_some() => {
            flag(
                &mut w,
                "from",
                &Some(sel.since.clone().unwrap_or_else(|| "0".into())),
            );
            flag(&mut w, "to", &sel.until);
        }
        Verb::Diff => flag(&mut w, "since", &sel.since),
        Verb::Rollback => {
            if path.is_some() {
                flag(&mut w, "file", &path);
                flag(&mut w, "to", &sel.since);
            } else {
                flag(&mut w, "since", &sel.since);
            }
            return Ok(w);
        }
    }
    if let Some(p) = path {
        w.push("--".into());
        w.push(p);
    }
    Ok(w)
}

/// The command line that reverts hunk `hunk` (1-based, as `rewind diff` numbers them) of `path`
/// in the diff of a change or a turn: `rollback --change N|--turn T --path P --hunk K`.
pub fn hunk_words(of: &Selection, path: &str, hunk: usize) -> Result<Vec<String>, Refusal> {
    let mut w: Vec<String> = vec!["rollback".into()];
    match (&of.change, &of.turn) {
        (Some(id), None) => w.extend(["--change".into(), id.to_string()]),
        (None, Some(t)) => w.extend(["--turn".into(), t.clone()]),
        _ => {
            return Err(Refusal::Usage(
                "a hunk is reverted in the diff of one change or one turn".into(),
            ));
        }
    }
    w.extend([
        "--path".into(),
        path.to_string(),
        "--hunk".into(),
        hunk.to_string(),
    ]);
    Ok(w)
}

/// The command line that leaves a reviewer's comment on hunk `hunk` of `path` in the diff of a
/// change or a turn: `comment add --change N|--turn T --path P --hunk K -- TEXT`.
pub fn comment_words(
    of: &Selection,
    path: &str,
    hunk: usize,
    text: &str,
) -> Result<Vec<String>, Refusal> {
    let mut w = hunk_words(of, path, hunk)?;
    w[0] = "add".into();
    w.insert(0, "comment".into());
    w.extend(["--".into(), text.to_string()]);
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(verb: Verb, sel: Selection) -> String {
        words(verb, &sel).unwrap().join(" ")
    }

    #[test]
    fn a_selection_is_the_clis_words() {
        let turn = || Selection {
            turn: Some("s1:2".into()),
            ..Selection::default()
        };
        assert_eq!(line(Verb::Diff, turn()), "diff --turn s1:2");
        assert_eq!(line(Verb::Rollback, turn()), "rollback --turn s1:2");
        let change = Selection {
            change: Some(7),
            ..Selection::default()
        };
        assert_eq!(line(Verb::Rollback, change.clone()), "undo 7");
        assert_eq!(line(Verb::Diff, change.clone()), "diff 7");
        assert!(words(Verb::Log, &change).is_err());
        let file = Selection {
            path: Some(b"src/a b.rs".to_vec()),
            since: Some("before-refactor".into()),
            ..Selection::default()
        };
        assert_eq!(
            line(Verb::Rollback, file.clone()),
            "rollback --file src/a b.rs --to before-refactor"
        );
        assert_eq!(
            line(Verb::Log, file),
            "log --since before-refactor -- src/a b.rs"
        );
        let range = Selection {
            since: Some("3".into()),
            until: Some("9".into()),
            ..Selection::default()
        };
        assert_eq!(line(Verb::Diff, range), "diff --from 3 --to 9");
        // Every line parses as the CLI's grammar.
        for verb in [Verb::Log, Verb::Diff, Verb::Rollback] {
            let w = words(verb, &turn()).unwrap();
            let l = shlex::try_join(w.iter().map(String::as_str)).unwrap();
            assert!(command::parse_line(&l).is_ok(), "{l}");
        }
    }
}
