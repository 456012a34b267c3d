//! `rewind rollback --change N|--turn T [--path P] --hunk K`: put back one hunk of what a
//! change or a turn did, in the file as it is now (VS Code's per-hunk Undo).
//!
//! Hunk K is the K-th `@@` of P in `rewind diff` of the same selection. It is reverted only
//! where its new side (context and added lines) is still in the file unchanged, found at the
//! place the diff put it or shifted ([`hunk::revert`]); otherwise it is a skip, and there is
//! no `--force`. The new content is written by the daemon as a one-step rollback plan, so it is
//! recorded as a `restore` in a `rollback-N` session like any rollback, and undone the same
//! ways. The dry run prints the plan (the file, its lines now, the reverse hunk), and the run
//! prints the same lines.

use std::io::Read;

use super::env::{Env, Outcome};
use super::rollback::RollbackArgs;
use crate::history::change::{FileKind, FileState, Hash, Owner};
use crate::history::diff::{hunk, is_binary};
use crate::history::format::{count, escape_path};
use crate::history::rollback::{self, Plan, Step};
use crate::history::{Error, IoResultExt, Result, show_path};
use crate::history::{Selection, netdiff};

pub fn run(args: &RollbackArgs, k: usize, env: &mut Env<'_>) -> Result<Outcome> {
    let usage = |s: &str| Err(Error::Usage(s.into()));
    if args.force {
        return usage(
            "a hunk is reverted only where its lines are as the diff left them; --force does \
             not apply to --hunk",
        );
    }
    if args.select.session.is_some()
        || args.select.agent.is_some()
        || args.to_turn.is_some()
        || args.select.since.is_some()
        || args.file.is_some()
        || args.to.is_some()
    {
        return usage("--hunk goes with --change N or --turn T only");
    }
    let (what, selector) = match (args.change, &args.select.turn) {
        (Some(id), None) => (
            format!("change {id}"),
            Selection {
                change: Some(id),
                ..Selection::default()
            },
        ),
        (None, Some(t)) => (
            format!("turn {t}"),
            Selection {
                turn: Some(t.clone()),
                ..Selection::default()
            },
        ),
        _ => return usage("--hunk goes with one of --change N or --turn T"),
    };
    if k == 0 {
        return usage("hunks are numbered from 1, as `rewind diff` shows them");
    }
    // Everything done so far is recorded first, so the rollback's restore follows it.
    if !args.dry_run {
        env.actor("rollback")?.settle()?;
    }
    let selected = rollback::select(env.history, &selector)?;
    let path = match &args.path {
        Some(p) => env.rel_path(p)?,
        None => {
            let mut paths = netdiff::paths_of(&env.view(), &selected)?;
            match paths.len() {
                1 => paths.pop_first().expect("one"),
                0 => return Err(Error::Usage(format!("{what} changed no file's lines"))),
                n => {
                    return Err(Error::Usage(format!(
                        "{what} changed {n} files; say which with --path (one of {})",
                        paths
                            .iter()
                            .take(5)
                            .map(|p| escape_path(p))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
        }
    };
    let mut shown = escape_path(&path);
    let sections = netdiff::sections_of(&env.view(), &selected, &path)?;
    if sections.is_empty() {
        return Err(Error::Usage(format!(
            "{shown} is not in the diff of {what} (see `rewind diff`)"
        )));
    }
    if sections.iter().any(|s| s.binary) {
        return Err(Error::Usage(format!(
            "{shown} is binary in the diff of {what}: it has no hunks; roll the whole file back \
             with `rewind rollback --file {shown}` or `rewind undo ID`"
        )));
    }
    if sections.iter().any(|s| s.symlink) {
        return Err(Error::Usage(format!(
            "{shown} is a symlink in the diff of {what}: it has no hunks to revert"
        )));
    }
    let hunks: Vec<hunk::Hunk> = sections.iter().flat_map(|s| hunk::parse(&s.text)).collect();
    let n = hunks.len();
    let Some(h) = hunks.get(k - 1) else {
        return Err(Error::Usage(format!(
            "{shown} has {} in the diff of {what}; there is no hunk {k}",
            count(n, "hunk")
        )));
    };
    // Where the file is now: a folder above it may have been renamed since.
    let last = selected.iter().map(|c| c.id).max().unwrap_or(0);
    let place = env.view().place_now(&path, last)?;
    let mut label = format!("hunk {k} of {n} of {what}");
    if let Some(p) = place.as_ref().filter(|p| **p != path) {
        label += &format!(", at {shown} then");
        shown = escape_path(p);
    }
    let skip = |env: &mut Env<'_>, why: String| {
        env.print(&format!("skip     {shown}: {label}: {why}\n"))?;
        Ok(Outcome::Skipped)
    };
    let gone = |env: &mut Env<'_>| {
        let why = if sections.iter().all(|s| s.deleted) {
            "the change deleted it; restore the file with `rewind undo ID`".into()
        } else {
            "it does not exist now".into()
        };
        skip(env, why)
    };
    // Taken away since (a delete, perhaps made again: `git checkout` deletes and makes
    // files), the hunk is looked for in what is at its path now.
    let path = place.unwrap_or(path);
    // The file as it is now. A folder above it that is a symlink or a file now leaves no file
    // at its path (`ELOOP`, `ENOTDIR`): the workspace's names are not followed through links.
    let st = match env.source.lstat(&path) {
        Ok(st) => st,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR)
            ) =>
        {
            return gone(env);
        }
        Err(e) => return Err(e).with_path(show_path(&path)),
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return skip(env, "it is not a regular file now".into());
    }
    let open = env.actor.map(|a| a.open_files()).unwrap_or_default();
    if let Some(w) = open.writers.iter().find(|w| w.path == path) {
        return skip(env, format!("held open for writing by {w}"));
    }
    let mut current = Vec::new();
    env.source
        .open_read(&path)
        .and_then(|mut f| f.read_to_end(&mut current))
        .with_path(show_path(&path))?;
    if is_binary(&current) {
        return skip(env, "it is binary now".into());
    }
    let Some(reverted) = hunk::revert(&current, h) else {
        return skip(env, "the hunk's lines changed since".into());
    };
    let plan_text = describe(&shown, &label, h, &reverted);
    if args.dry_run {
        env.write(&plan_text)?;
        env.print("dry run: 1 hunk would be reverted\n")?;
        return Ok(Outcome::Done);
    }
    let owner = Some(Owner {
        uid: st.st_uid,
        gid: st.st_gid,
    });
    let state = |content: &[u8], hash: Hash| FileState {
        kind: FileKind::File,
        size: content.len() as u64,
        mode: st.st_mode & 0o7777,
        hash: Some(hash),
        owner,
    };
    let hash = env.history.store().put_blob(&reverted.content)?;
    let plan = Plan {
        steps: vec![Step {
            path: path.clone(),
            target: Some(state(&reverted.content, hash)),
            now: Some(state(&current, Hash::of(&current))),
            moved_to: None,
            open_by: Vec::new(),
            link_to: None,
            separate: false,
        }],
        skipped: Vec::new(),
        in_place: true,
    };
    let applied = env.actor("rollback")?.rollback(&plan)?;
    let session = &applied.session;
    if let Some((_, e)) = applied.failed.first() {
        env.print(&format!("failed   {shown}: {label}: {e}\n"))?;
        return Ok(Outcome::Partial);
    }
    env.write(&plan_text)?;
    env.print(&format!(
        "{session}: reverted 1 hunk (undo it with `rewind rollback --session {session}`)\n"
    ))?;
    Ok(Outcome::Done)
}

/// The plan: which file, which of its lines now, where the hunk was found, and the reverse
/// hunk, byte for byte (the same text in the dry run and the run).
fn describe(shown: &str, label: &str, h: &hunk::Hunk, r: &hunk::Reverted) -> Vec<u8> {
    let len = h.new_side().len();
    let lines = match len {
        0 => "(empty now)".to_string(),
        1 => format!("line {}", r.at + 1),
        _ => format!("lines {}-{}", r.at + 1, r.at + len),
    };
    let moved = match r.offset {
        0 => String::new(),
        d => format!(
            " (found {} {} where the diff puts it)",
            count(d.unsigned_abs(), "line"),
            if d > 0 { "below" } else { "above" }
        ),
    };
    let mut out = format!("revert   {shown} {lines}: {label}{moved}\n").into_bytes();
    out.extend_from_slice(&r.patch);
    out
}
