//! `rewind diff`.
//!
//! Two kinds of diff. A *range* (`--since`, `--from`/`--to`) compares the whole tree at two
//! points, like `git diff A B`. A *selection* (a change id, `--session`, `--agent`, `--turn`)
//! shows what those changes did and nothing else, as one tree diff from what they found to what
//! they left (each file once, renames paired); where someone outside the selection changed one
//! of its paths between two of its changes, the output says so there and goes on with a new
//! tree diff from what that change left. Either way the output is git's extended format,
//! applied in order by `git apply`.

use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args};

use super::env::{Env, Outcome};
use super::select::{Rest, SelectArgs, Unsayable, path_arg, unsayable};
use crate::history::diff::{self, Side};
use crate::history::netdiff::{self, Piece, Version, as_side};
use crate::history::{Error, Result, Selection};

/// Show what changed, in git's diff format: one change (ID), what a session, agent or agent
/// turn did, everything since a point, or between two points. `git apply` takes it.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("range").args(["since", "from"]).conflicts_with_all(["session", "agent", "turn"])))]
pub struct DiffArgs {
    /// A change id, then paths to limit the diff to (with no selection flag, a first word that
    /// is a number is a change id; write `--` before paths that are numbers).
    #[arg(value_name = "ID | PATH")]
    pub words: Vec<PathBuf>,
    #[command(flatten)]
    pub select: SelectArgs,
    /// From this point...
    #[arg(long, value_name = "POINT")]
    pub from: Option<String>,
    /// ...to this one (default: now).
    #[arg(long, value_name = "POINT", requires = "from")]
    pub to: Option<String>,
    /// Only a summary, as `git diff --stat` prints it.
    #[arg(long)]
    pub stat: bool,
    /// Paths given after `--` are always paths.
    #[arg(last = true, hide = true)]
    pub paths: Vec<PathBuf>,
}

impl DiffArgs {
    /// The diff of `sel` limited to the paths `filter` (none: every path), the way back from
    /// [`DiffArgs::selection`].
    pub fn of(sel: &Selection, filter: &[Vec<u8>]) -> std::result::Result<DiffArgs, Unsayable> {
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
        let paths = filter.iter().map(|p| path_arg(p)).collect();
        if let Some(id) = change {
            // `diff ID` is that change alone: beside a selection flag, the id would be a path.
            let alone = Selection {
                change,
                ..Selection::default()
            };
            if *sel != alone {
                return Err(Unsayable {
                    verb: "diff",
                    what: "a change together with anything else",
                });
            }
            return Ok(DiffArgs {
                words: vec![PathBuf::from(id.to_string())],
                select: SelectArgs::default(),
                from: None,
                to: None,
                stat: false,
                paths,
            });
        }
        unsayable("diff", "a session from a turn on", &to_turn)?;
        unsayable(
            "diff",
            "changes by path (limit the diff to it instead)",
            &path,
        )?;
        if from.is_none() {
            unsayable("diff", "an end point without a start (--from)", &until)?;
        }
        Ok(DiffArgs {
            words: Vec::new(),
            select,
            from,
            to: until,
            stat: false,
            paths,
        })
    }

    /// The selection, and the paths to limit the diff to, with paths read by `rel` (as
    /// [`Env::rel_path`] reads them).
    pub fn selection(
        &self,
        rel: impl Fn(&Path) -> Result<Vec<u8>>,
    ) -> Result<(Selection, Vec<Vec<u8>>)> {
        let mut selection = Selection {
            from: self.from.clone(),
            until: self.to.clone(),
            ..self.select.selection()
        };
        let mut words = self.words.as_slice();
        if selection.is_everything() {
            let first = words.first().and_then(|w| w.to_str());
            match first.and_then(|w| w.parse::<u64>().ok()) {
                Some(id) => {
                    selection.change = Some(id);
                    words = &words[1..];
                }
                None => {
                    return Err(Error::Usage(
                        "say what to compare: a change id, --session, --agent, --turn, --since \
                         or --from"
                            .into(),
                    ));
                }
            }
        }
        let filter = words
            .iter()
            .chain(&self.paths)
            .map(|p| rel(p))
            .collect::<Result<_>>()?;
        Ok((selection, filter))
    }
}

pub fn run(args: &DiffArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let history = env.history;
    let (selection, filter) = args.selection(|p| env.rel_path(p))?;
    let selected = selection.resolve(history)?;
    let pieces = if selected.names_changes() {
        if let Some(note) = selected.cut_note(history)? {
            // Before the patch, where `git apply` reads it as commentary.
            env.println(&note)?;
        }
        netdiff::of_changes(&env.view(), &selected.changes(history)?, &filter)?
    } else {
        let from = selected.after.unwrap_or(0);
        let to = match selected.until {
            Some(to) => to,
            None => history.last_id()?,
        };
        netdiff::range(&env.view(), from, to, &filter)?
    };
    emit(env, &pieces, args.stat)?;
    Ok(Outcome::Done)
}

fn side(v: &Option<Box<Version>>) -> Option<Side<'_>> {
    v.as_deref().map(as_side)
}

fn emit(env: &mut Env<'_>, pieces: &[Piece], stat: bool) -> Result<()> {
    let opts = diff::Options {
        color: env.color,
        binary: true,
        ..diff::Options::default()
    };
    if stat {
        let stats: Vec<diff::Stat> = pieces
            .iter()
            .filter_map(|p| match p {
                // A folder's change: nothing git would list (the patch shows nothing either).
                Piece::Section {
                    old: None,
                    new: None,
                    ..
                } => None,
                Piece::Section { old, new, .. } => {
                    Some(diff::Stat::from_sides(side(old), side(new), &opts))
                }
                Piece::Note(_) => None,
            })
            .collect();
        if stats.is_empty() {
            return Ok(());
        }
        let out = diff::stat(&stats, env.width, env.color);
        return env.write(&out);
    }
    for p in pieces {
        match p {
            Piece::Section {
                old,
                new,
                score: Some(score),
            } if old.is_some() && new.is_some() => {
                let (Some(o), Some(n)) = (side(old), side(new)) else {
                    continue;
                };
                env.write(&diff::rename_diff(o, n, *score, &opts))?;
            }
            Piece::Section { old, new, .. } => {
                let out = diff::file_diff(side(old), side(new), &opts);
                env.write(&out)?;
            }
            Piece::Note(n) => env.print(n)?,
        }
    }
    Ok(())
}
