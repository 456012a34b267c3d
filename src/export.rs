//! Writing a selection of changes into the workspace's git repository as commits on a new
//! branch, for review as a pull request, without touching the working tree, the index or HEAD.
//!
//! One commit per agent turn where the changes carry turns (consecutive changes of one turn:
//! the message is the prompt, then the turn, its files and change ids, optionally its
//! conversation; authored by the agent at the turn's end), and one per change otherwise or
//! when asked (authored by the change's agent at its time, its message naming the change,
//! session and process). The first commit starts from HEAD; if a path the selection
//! touches was not as HEAD has it just before the selection's first change to it (someone
//! edited it and did not commit), a first commit "the state before" sets it, so each later
//! commit shows exactly one change. Paths git ignores, and folders (git has none), are left
//! out. The commits are written by `git fast-import`, which updates only the new branch.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::history::change::{Change, FileKind, FileState};
use crate::history::diff::{blob_id_hex, git_mode};
use crate::history::view::View;
use crate::history::{Error, Result, show_path};

/// What was written.
pub struct Exported {
    pub branch: String,
    pub commits: usize,
    /// The changes of the selection that made no commit (ignored by git, folders, no-ops).
    pub skipped: usize,
}

fn git(repo: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(repo).env_remove("GIT_INDEX_FILE");
    cmd
}

fn git_out(repo: &Path, args: &[&str]) -> Result<Option<Vec<u8>>> {
    let out = git(repo)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map_err(|source| Error::Io {
            path: "git".into(),
            source,
        })?;
    Ok(out.status.success().then_some(out.stdout))
}

/// A path as fast-import takes it: quoted C-style when it must be.
fn fi_path(path: &[u8]) -> Vec<u8> {
    if !path.contains(&b'\n') && !path.starts_with(b"\"") && !path.contains(&b' ') {
        return path.to_vec();
    }
    let mut out = vec![b'"'];
    for &b in path {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b => out.push(b),
        }
    }
    out.push(b'"');
    out
}

fn data(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(format!("data {}\n", bytes.len()).as_bytes());
    out.extend_from_slice(bytes);
    out.push(b'\n');
}

/// Who a commit is by: the agent (with the session as the mail's local part).
fn ident(name: &str, session: &str, time_ns: u64) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    format!(
        "{} <{}@rewind> {} +0000",
        clean(name),
        clean(session),
        time_ns / 1_000_000_000
    )
}

/// A file-modify command for `path` in `state` (content from the store), or a delete.
fn set_path(
    view: &View<'_>,
    out: &mut Vec<u8>,
    path: &[u8],
    state: Option<&FileState>,
) -> Result<()> {
    match state {
        Some(s) if matches!(s.kind, FileKind::File | FileKind::Symlink) => {
            let content = match s.hash {
                Some(h) => view.history.store().read_blob(&h)?,
                None if s.size == 0 => Vec::new(),
                None => {
                    return Err(Error::NotRecorded {
                        path: show_path(path),
                        why: "it changed while rewind was not mounted",
                    });
                }
            };
            out.extend_from_slice(format!("M {:o} inline ", git_mode(s)).as_bytes());
            out.extend_from_slice(&fi_path(path));
            out.push(b'\n');
            data(out, &content);
        }
        _ => {
            out.extend_from_slice(b"D ");
            out.extend_from_slice(&fi_path(path));
            out.push(b'\n');
        }
    }
    Ok(())
}

/// The branch `--branch` names: `NAME` or `refs/heads/NAME`. Any other ref (`refs/tags/v1`, or
/// `refs/heads/refs/...`) is refused rather than nested under `refs/heads/`.
fn branch_name(given: &str) -> Result<&str> {
    let name = given.strip_prefix("refs/heads/").unwrap_or(given);
    if name.starts_with("refs/") {
        return Err(Error::Usage(format!(
            "{given:?} is not a branch: --branch takes NAME or refs/heads/NAME"
        )));
    }
    Ok(name)
}

/// How the selection becomes commits.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// One commit per change even where changes carry turns.
    pub per_change: bool,
    /// Add each turn's conversation (what its transcript gained) to its commit message.
    pub with_conversation: bool,
}

/// Consecutive changes that make one commit: one turn's, or a single change.
fn groups(selected: &[Change], options: Options) -> Vec<&[Change]> {
    let mut out: Vec<&[Change]> = Vec::new();
    let mut start = 0;
    for i in 1..=selected.len() {
        let same_turn = |a: &Change, b: &Change| {
            !options.per_change && a.turn.is_some() && a.turn == b.turn && a.session == b.session
        };
        if i == selected.len() || !same_turn(&selected[i - 1], &selected[i]) {
            out.push(&selected[start..i]);
            start = i;
        }
    }
    out
}

/// The message and author of a turn's commit.
fn turn_commit(view: &View<'_>, changes: &[Change], options: Options) -> Result<(String, String)> {
    let first = &changes[0];
    let last = &changes[changes.len() - 1];
    let number = first.turn.expect("a turn's group");
    let turn = view
        .history
        .turns(Some(&first.session))?
        .into_iter()
        .find(|t| t.number == number);
    let prompt = turn
        .as_ref()
        .map(|t| t.prompt.clone())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| format!("turn {}:{number}", first.session));
    let mut msg = format!(
        "{prompt}\n\nrewind turn {}:{number}, agent {}, {} change{}\n\nFiles:\n",
        first.session,
        first.agent,
        changes.len(),
        if changes.len() == 1 { "" } else { "s" }
    );
    let mut files = BTreeSet::new();
    for c in changes {
        files.insert(&c.path);
        if let Some(f) = &c.from {
            files.insert(f);
        }
    }
    for f in files {
        msg += &format!("  {}\n", crate::history::format::escape_path(f));
    }
    msg += &format!(
        "\nChanges: {}\n",
        changes
            .iter()
            .map(|c| c.id.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    if options.with_conversation
        && let Some(t) = &turn
        && let Some(text) = crate::history::turns::conversation(view.history, t)?
    {
        msg += "\nConversation:\n\n";
        msg += &String::from_utf8_lossy(&text);
        if !msg.ends_with('\n') {
            msg.push('\n');
        }
    }
    // At the turn's end; an open turn at its last change.
    let when = turn
        .and_then(|t| t.end_time_ns)
        .unwrap_or(last.time_ns)
        .max(last.time_ns);
    Ok((msg, ident(&first.agent, &first.session, when)))
}

/// Export `selected` (oldest first) to a new branch `branch` of the repository at `repo`.
pub fn export(
    view: &View<'_>,
    repo: &Path,
    selected: &[Change],
    branch: &str,
    options: Options,
) -> Result<Exported> {
    if git_out(repo, &["rev-parse", "--git-dir"])?.is_none() {
        return Err(Error::Usage(format!(
            "{} is not in a git repository",
            repo.display()
        )));
    }
    let branch = branch_name(branch)?;
    if git_out(repo, &["check-ref-format", "--branch", branch])?.is_none() {
        return Err(Error::Usage(format!(
            "{branch:?} is not a valid branch name"
        )));
    }
    let refname = format!("refs/heads/{branch}");
    if git_out(repo, &["rev-parse", "--verify", "--quiet", &refname])?.is_some() {
        return Err(Error::Usage(format!(
            "the branch {branch} exists; choose a new name"
        )));
    }
    let head = git_out(repo, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])?
        .map(|h| String::from_utf8_lossy(&h).trim().to_string());

    // Paths the selection touches, and which of them git ignores.
    let mut touched: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for c in selected {
        for p in std::iter::once(&c.path).chain(&c.from).chain(&c.links) {
            touched.entry(p.clone()).or_insert(c.id);
        }
    }
    let ignored = git_ignored(repo, touched.keys())?;
    let exported = |p: &[u8]| !ignored.contains(p) && !p.starts_with(b".git/") && p != b".git";

    // HEAD's blobs of the touched paths, to see whether a "state before" commit is needed.
    let mut head_blobs: BTreeMap<Vec<u8>, (u32, String)> = BTreeMap::new();
    if let Some(head) = &head
        && let Some(listing) = git_out(repo, &["ls-tree", "-r", "-z", "--full-tree", head])?
    {
        for entry in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
            // "<mode> <type> <sha>\t<path>"
            let Some(tab) = entry.iter().position(|b| *b == b'\t') else {
                continue;
            };
            let meta = String::from_utf8_lossy(&entry[..tab]);
            let mut parts = meta.split(' ');
            let (Some(mode), Some(_), Some(sha)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let path = entry[tab + 1..].to_vec();
            if touched.contains_key(&path) {
                head_blobs.insert(
                    path,
                    (u32::from_str_radix(mode, 8).unwrap_or(0), sha.to_string()),
                );
            }
        }
    }

    let mut stream = Vec::new();
    let mut commits = 0;
    let mut skipped = 0;
    let mut parent = head.clone().map(|h| format!("from {h}\n"));
    let mut header = |stream: &mut Vec<u8>, who: &str, msg: &str, parent: &mut Option<String>| {
        stream.extend_from_slice(format!("commit {refname}\n").as_bytes());
        stream.extend_from_slice(format!("author {who}\ncommitter {who}\n").as_bytes());
        data(stream, msg.as_bytes());
        if let Some(from) = parent.take() {
            stream.extend_from_slice(from.as_bytes());
        }
        commits += 1;
    };

    // The state just before the selection, where it differs from HEAD.
    let mut before = Vec::new();
    for (path, first) in &touched {
        if !exported(path) {
            continue;
        }
        let state = view.state_at(path, first - 1)?.state().cloned();
        let wanted = match &state {
            Some(s) if matches!(s.kind, FileKind::File | FileKind::Symlink) => {
                let content = match s.hash {
                    Some(h) => view.history.store().read_blob(&h)?,
                    None => Vec::new(),
                };
                Some((git_mode(s), blob_id_hex(&content)))
            }
            _ => None,
        };
        if wanted != head_blobs.get(path).cloned() {
            set_path(view, &mut before, path, state.as_ref())?;
        }
    }
    if !before.is_empty() {
        let first = &selected[0];
        header(
            &mut stream,
            &ident("rewind", "export", first.time_ns.saturating_sub(1)),
            "rewind: the state before the exported changes\n\nUncommitted content of the paths below, as it was just before the first exported change.\n",
            &mut parent,
        );
        stream.extend_from_slice(&before);
    }

    for group in groups(selected, options) {
        let mut ops = Vec::new();
        for c in group {
            let before = ops.len();
            change_ops(view, c, &exported, &mut ops)?;
            if ops.len() == before {
                skipped += 1;
            }
        }
        if ops.is_empty() {
            continue;
        }
        let (msg, who) = match group {
            [c] if c.turn.is_none() || options.per_change => {
                (change_message(c), ident(&c.agent, &c.session, c.time_ns))
            }
            _ => turn_commit(view, group, options)?,
        };
        header(&mut stream, &who, &msg, &mut parent);
        stream.extend_from_slice(&ops);
    }
    if commits == 0 {
        return Err(Error::Usage(
            "nothing to export: the selected changes touch only folders or paths git ignores"
                .into(),
        ));
    }
    stream.extend_from_slice(b"done\n");
    let mut child = git(repo)
        .args(["fast-import", "--quiet", "--done"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Io {
            path: "git fast-import".into(),
            source,
        })?;
    let mut stdin = child.stdin.take().expect("piped");
    let fed = stdin.write_all(&stream);
    drop(stdin);
    let out = child.wait_with_output().map_err(|source| Error::Io {
        path: "git fast-import".into(),
        source,
    })?;
    if let Err(source) = fed {
        return Err(Error::Io {
            path: "git fast-import".into(),
            source,
        });
    }
    if !out.status.success() {
        return Err(Error::Git {
            what: "fast-import",
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(Exported {
        branch: branch.to_string(),
        commits,
        skipped,
    })
}

/// The fast-import commands that make change `c` (none for a folder, or paths git ignores).
fn change_ops(
    view: &View<'_>,
    c: &Change,
    exported: &impl Fn(&[u8]) -> bool,
    ops: &mut Vec<u8>,
) -> Result<()> {
    let is_dir = |s: &Option<FileState>| s.as_ref().is_some_and(|s| s.kind == FileKind::Dir);
    match (&c.from, is_dir(&c.after)) {
        (Some(from), true) => {
            // A folder renamed: its whole subtree moves.
            if exported(from) || exported(&c.path) {
                ops.extend_from_slice(b"R ");
                ops.extend_from_slice(&fi_path(from));
                ops.push(b' ');
                ops.extend_from_slice(&fi_path(&c.path));
                ops.push(b'\n');
            }
        }
        (Some(from), false) => {
            if exported(from) {
                set_path(view, ops, from, None)?;
            }
            if exported(&c.path) {
                set_path(view, ops, &c.path, c.after.as_ref())?;
            }
        }
        (None, _) if is_dir(&c.after) || is_dir(&c.before) => {}
        (None, _) => {
            for p in std::iter::once(&c.path).chain(&c.links) {
                if exported(p) {
                    set_path(view, ops, p, c.after.as_ref())?;
                }
            }
        }
    }
    Ok(())
}

/// The message of a one-change commit.
fn change_message(c: &Change) -> String {
    let mut msg = format!(
        "{} {}\n\nrewind change {}: session {}, agent {}, {}[{}]",
        c.kind,
        crate::history::format::escape_path(&c.path),
        c.id,
        c.session,
        c.agent,
        c.process,
        c.pid
    );
    if let Some(n) = c.turn {
        msg += &format!(", turn {}:{n}", c.session);
    }
    if let Some(t) = &c.tool {
        msg += &format!(", tool {}", t.name);
    }
    msg.push('\n');
    msg
}

/// The paths among `paths` that git ignores (untracked and matching an ignore rule).
fn git_ignored<'p>(
    repo: &Path,
    paths: impl Iterator<Item = &'p Vec<u8>>,
) -> Result<BTreeSet<Vec<u8>>> {
    let mut input = Vec::new();
    for p in paths {
        input.extend_from_slice(p);
        input.push(0);
    }
    let mut child = git(repo)
        .args(["check-ignore", "-z", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| Error::Io {
            path: "git check-ignore".into(),
            source,
        })?;
    let mut stdin = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().map_err(|source| Error::Io {
        path: "git check-ignore".into(),
        source,
    })?;
    let _ = writer.join();
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}
