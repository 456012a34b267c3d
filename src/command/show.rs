//! `rewind show`.

use clap::Args;

use super::env::{Env, Outcome};
use crate::history::change::FileState;
use crate::history::diff::{self, Side};
use crate::history::format::{change_json, escape_path, escape_text};
use crate::history::{Result, time};

/// Show one change: who made it, when, and what it did, as a git diff.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The change id.
    pub id: u64,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &ShowArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let c = env.history.get(args.id)?;
    if args.json {
        env.println(&change_json(&c).to_string())?;
        return Ok(Outcome::Done);
    }
    let mut head = format!(
        "change {}  {}\npath:    {}\n",
        c.id,
        c.kind,
        escape_path(&c.path)
    );
    if let Some(from) = &c.from {
        head += &format!("from:    {}\n", escape_path(from));
    }
    for l in &c.links {
        head += &format!("also:    {} (the same file)\n", escape_path(l));
    }
    head += &format!("time:    {}\n", time::rfc3339(c.time_ns));
    head += &format!(
        "by:      agent {}, session {}, {}[{}]\n",
        escape_text(&c.agent),
        escape_text(&c.session),
        escape_text(&c.process),
        c.pid
    );
    if let Some(n) = c.turn {
        head += &format!("turn:    {}:{n}\n", escape_text(&c.session));
    }
    if let Some(t) = &c.tool {
        head += &format!(
            "tool:    {}{}\n",
            escape_text(&t.name),
            t.id.as_deref()
                .map(|i| format!(" ({})", escape_text(i)))
                .unwrap_or_default()
        );
    }
    env.print(&head)?;
    let store = env.history.store();
    let content = |s: &Option<FileState>| -> Result<Option<Vec<u8>>> {
        match s.as_ref().and_then(|s| s.hash) {
            Some(h) => Ok(Some(store.read_blob(&h)?)),
            None => Ok(s.as_ref().map(|_| Vec::new())),
        }
    };
    let (old, new) = (content(&c.before)?, content(&c.after)?);
    // A rename moves content: shown from the old name to the new. Anything else changes the
    // path in place.
    let (old_side, new_side) = match (&c.from, &c.after) {
        (Some(from), Some(after)) => (
            Some((
                from.clone(),
                diff::diff_mode(after),
                new.clone().unwrap_or_default(),
            )),
            Some((
                c.path.clone(),
                diff::diff_mode(after),
                new.clone().unwrap_or_default(),
            )),
        ),
        _ => (
            c.before.as_ref().map(|b| {
                (
                    c.path.clone(),
                    diff::diff_mode(b),
                    old.clone().unwrap_or_default(),
                )
            }),
            c.after.as_ref().map(|a| {
                (
                    c.path.clone(),
                    diff::diff_mode(a),
                    new.clone().unwrap_or_default(),
                )
            }),
        ),
    };
    if c.from.is_some() && c.before.is_some() {
        env.print("replaced: what was at the new name is kept as this change's before\n")?;
    }
    let out = diff::file_diff(
        old_side.as_ref().map(|(p, m, d)| Side {
            path: p,
            mode: *m,
            content: d,
        }),
        new_side.as_ref().map(|(p, m, d)| Side {
            path: p,
            mode: *m,
            content: d,
        }),
        &diff::Options {
            color: env.color,
            binary: true,
            ..diff::Options::default()
        },
    );
    if !out.is_empty() {
        env.print("\n")?;
        env.write(&out)?;
    }
    Ok(Outcome::Done)
}
