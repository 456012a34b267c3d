//! `rewind log`.

use std::path::{Path, PathBuf};

use clap::Args;

use super::env::{Env, Outcome};
use super::select::{Rest, SelectArgs, Unsayable, path_arg, unsayable};
use crate::history::format::{change_json, change_line};
use crate::history::{Order, Result, Selection};

/// Show the history, newest last: one change a line, or one JSON object a line with --json.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Only changes to this path (or, for renames, from it; or to another name of its file); for
    /// a folder, also to everything below it.
    pub path: Option<PathBuf>,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Only changes up to this point.
    #[arg(long, value_name = "POINT")]
    pub until: Option<String>,
    /// At most N changes (the newest N).
    #[arg(short = 'n', value_name = "N")]
    pub limit: Option<usize>,
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
}

impl LogArgs {
    /// The selection, with paths read by `rel` (as [`Env::rel_path`] reads them).
    pub fn selection(&self, rel: impl Fn(&Path) -> Result<Vec<u8>>) -> Result<Selection> {
        Ok(Selection {
            path: self.path.as_deref().map(rel).transpose()?,
            until: self.until.clone(),
            ..self.select.selection()
        })
    }

    /// The log of `sel` (every change of it, as lines), the way back from
    /// [`LogArgs::selection`].
    pub fn of(sel: &Selection) -> std::result::Result<LogArgs, Unsayable> {
        let (
            select,
            Rest {
                change,
                to_turn,
                path,
                from,
                until,
            },
        ) = SelectArgs::of(sel);
        unsayable("log", "one change (show it with `diff ID`)", &change)?;
        unsayable("log", "a session from a turn on", &to_turn)?;
        unsayable("log", "changes from an exact point (it has --since)", &from)?;
        Ok(LogArgs {
            path: path.as_deref().map(path_arg),
            select,
            until,
            limit: None,
            json: false,
        })
    }
}

pub fn run(args: &LogArgs, env: &mut Env<'_>) -> Result<Outcome> {
    if args.limit == Some(0) {
        return Ok(Outcome::Done);
    }
    let history = env.history;
    let selected = args.selection(|p| env.rel_path(p))?.resolve(history)?;
    let limit = args.limit.unwrap_or(usize::MAX);
    let mut changes = Vec::new();
    selected.for_each(history, Order::NewestFirst, |c| {
        changes.push(c);
        changes.len() < limit
    })?;
    changes.reverse();
    let mut note = selected.cut_note(history)?;
    // The whole history (or a path's): say where what gc removed ends, unless the log starts
    // after it.
    if selected.in_session().is_none()
        && selected.agent.is_none()
        && let Some(h) = history.horizon()?
        && selected.after.is_none_or(|a| a < h.id)
    {
        note = Some(format!(
            "note: {}",
            crate::history::format::horizon_line(&h)
        ));
    }
    if let Some(note) = note.filter(|_| !args.json) {
        env.println(&note)?;
    }
    for c in &changes {
        let line = if args.json {
            change_json(c).to_string()
        } else {
            change_line(c)
        };
        env.println(&line)?;
    }
    Ok(Outcome::Done)
}
