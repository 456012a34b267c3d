//! `rewind rollback` and `rewind undo`.

use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args};

use super::env::{Env, Outcome};
use super::select::{Rest, SelectArgs, Unsayable, path_arg, unsayable};
use crate::history::format::{count, escape_path};
use crate::history::rollback;
use crate::history::{Error, Result, Selection};

/// Put back what a selection of changes did: every path it touched returns to its state just
/// before the earliest selected change to it. A path someone outside the selection changed
/// meanwhile (and that is not now as the selection left it) is skipped, exit status 1, unless
/// --force. The rollback is itself recorded, in a session of its own whose name it prints.
///
/// With --hunk K, only hunk K of a file in the diff of --change N or --turn T (as `rewind diff`
/// numbers them) is put back, in the file as it is now: only where the hunk's lines are still
/// there unchanged (perhaps moved up or down), else it is skipped (exit status 1).
#[derive(Clone, Debug, Args)]
#[command(group(ArgGroup::new("what").required(true).multiple(true).args(["session", "agent", "turn", "to_turn", "since", "file", "to", "change"])))]
pub struct RollbackArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// What the turn's session did from that prompt on: back to just before it.
    #[arg(long, value_name = "TURN")]
    pub to_turn: Option<String>,
    /// Back to this point (with --file: that file only).
    #[arg(long, value_name = "POINT")]
    pub to: Option<String>,
    /// One file: its last change, or back to --to.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// One change (as `undo ID`); with --hunk, one hunk of its diff.
    #[arg(long, value_name = "ID")]
    pub change: Option<u64>,
    /// Only this hunk (1-based, as `rewind diff` of the same --change or --turn shows the
    /// file's hunks), in the file as it is now.
    #[arg(long, value_name = "K")]
    pub hunk: Option<usize>,
    /// With --hunk: the file (may be left out when the diff shows one file).
    #[arg(long, value_name = "PATH", requires = "hunk")]
    pub path: Option<PathBuf>,
    /// Print exactly what would happen and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also put back paths changed later by others.
    #[arg(long)]
    pub force: bool,
    /// List every path restored (a rollback of more than 100 paths lists the first 10).
    #[arg(short, long)]
    pub verbose: bool,
}

/// A rollback of more paths than this lists only the first [`LISTED`] unless `-v`.
const LIST_ALL_UP_TO: usize = 100;
const LISTED: usize = 10;

/// Undo one change.
#[derive(Clone, Debug, Args)]
pub struct UndoArgs {
    pub id: u64,
    /// Print exactly what would happen and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also if the path was changed later by others.
    #[arg(long)]
    pub force: bool,
}

impl RollbackArgs {
    /// The rollback of `sel` (planned, not a dry run), the way back from
    /// [`RollbackArgs::selection`]; for one hunk of a change's or a turn's diff, set `hunk`
    /// and `path` on the rollback of that change or turn.
    pub fn of(sel: &Selection) -> std::result::Result<RollbackArgs, Unsayable> {
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
        unsayable(
            "rollback",
            "changes up to a point (it goes back to one)",
            &until,
        )?;
        Ok(RollbackArgs {
            select,
            to_turn,
            to: from,
            file: path.as_deref().map(path_arg),
            change,
            hunk: None,
            path: None,
            dry_run: false,
            force: false,
            verbose: false,
        })
    }

    /// What to roll back (`--to` is "everything since"; `history::rollback::select` decides
    /// which combinations make one thing), with paths read by `rel` (as [`Env::rel_path`]
    /// reads them).
    pub fn selection(&self, rel: impl Fn(&Path) -> Result<Vec<u8>>) -> Result<Selection> {
        if self.select.since.is_some() && (self.to.is_some() || self.file.is_some()) {
            return Err(Error::Usage(
                "say one thing to roll back: --session, --agent, --turn, --to-turn, --since, \
                 --to, --change, or --file (with --to)"
                    .into(),
            ));
        }
        Ok(Selection {
            to_turn: self.to_turn.clone(),
            path: self.file.as_deref().map(rel).transpose()?,
            from: self.to.clone(),
            change: self.change,
            ..self.select.selection()
        })
    }
}

/// One rollback at a time, from its plan to its last step. Two at once in the daemon each
/// planned from what the other was changing, and their steps interleaved: one recorded the
/// create of a name before the other's delete of it, one failed on `EEXIST` making a folder
/// the other had just made. A dry run does not wait: it changes nothing.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Hold [`ONE_AT_A_TIME`] unless this is a dry run.
fn one_at_a_time(dry: bool) -> Option<std::sync::MutexGuard<'static, ()>> {
    (!dry).then(|| ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()))
}

pub fn run(args: &RollbackArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let _alone = one_at_a_time(args.dry_run);
    if let Some(k) = args.hunk {
        return super::hunk::run(args, k, env);
    }
    let selection = args.selection(|p| env.rel_path(p))?;
    roll_back(env, &selection, args.dry_run, args.force, args.verbose)
}

pub fn undo(args: &UndoArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let _alone = one_at_a_time(args.dry_run);
    let selection = Selection {
        change: Some(args.id),
        ..Selection::default()
    };
    roll_back(env, &selection, args.dry_run, args.force, true)
}

fn roll_back(
    env: &mut Env<'_>,
    selection: &Selection,
    dry: bool,
    force: bool,
    verbose: bool,
) -> Result<Outcome> {
    // Everything done so far belongs in the rollback's view. A dry run is a reading command:
    // where it runs in the daemon, what has happened was waited for (not recorded early).
    if !dry {
        env.actor("rollback")?.settle()?;
    }
    let selected = rollback::select(env.history, selection)?;
    let open = env.actor.map(|a| a.open_files()).unwrap_or_default();
    let writing = rollback::open_writes_selected(env.history, selection, &open)?;
    let mut plan = rollback::plan(&env.view(), &selected, &writing, force, &open)?;
    // Said as it will be done: a file linked since is made a file of its own.
    if let Some(actor) = env.actor {
        let detached = actor.detached(&plan);
        for s in plan.steps.iter_mut().filter(|s| detached.contains(&s.path)) {
            s.separate = true;
        }
    }
    let mut out = String::new();
    for (p, why) in &plan.skipped {
        out += &format!("skip     {}: {why}\n", escape_path(p));
    }
    if plan.steps.is_empty() {
        out += &if selected.is_empty() && plan.skipped.is_empty() {
            "nothing to roll back: no change matches\n".to_string()
        } else if selected.is_empty() {
            "nothing to roll back: only edits in progress, skipped\n".to_string()
        } else {
            format!(
                "nothing to roll back: {} selected, undone already{}\n",
                count(selected.len(), "change"),
                if plan.skipped.is_empty() {
                    ""
                } else {
                    ", or skipped"
                }
            )
        };
        env.print(&out)?;
        return Ok(if plan.skipped.is_empty() {
            Outcome::Done
        } else {
            Outcome::Skipped
        });
    }
    if dry {
        for s in &plan.steps {
            out += &format!("{}\n", rollback::describe(s));
        }
        out += &format!(
            "dry run: {} would be restored, {} skipped\n",
            count(plan.steps.len(), "path"),
            plan.skipped.len()
        );
        env.print(&out)?;
        return Ok(if plan.skipped.is_empty() {
            Outcome::Done
        } else {
            Outcome::Partial
        });
    }
    rollback::keep_moved_content(&env.view(), &plan)?;
    let applied = env.actor("rollback")?.rollback(&plan)?;
    let failed: std::collections::HashSet<&[u8]> =
        applied.failed.iter().map(|(p, _)| p.as_slice()).collect();
    let restored = plan.steps.iter().filter(|s| !failed.contains(&s.path[..]));
    let listed = if verbose || plan.steps.len() <= LIST_ALL_UP_TO {
        usize::MAX
    } else {
        LISTED
    };
    let mut unlisted = 0;
    for (i, s) in restored.enumerate() {
        if i < listed {
            out += &format!("{}\n", rollback::describe(s));
        } else {
            unlisted += 1;
        }
    }
    if unlisted > 0 {
        // Always many: only a rollback of more than `LIST_ALL_UP_TO` paths leaves any out.
        out += &format!("... and {unlisted} more paths (-v lists them)\n");
    }
    for (p, e) in &applied.failed {
        out += &format!("failed   {}: {e}\n", escape_path(p));
    }
    let session = &applied.session;
    // A rollback whose every step failed may have recorded nothing: its session does not
    // exist then, and is not offered as an undo.
    let undo = if env.history.existing_session(session).is_ok() {
        format!("undo it with `rewind rollback --session {session}`")
    } else {
        "nothing was changed".to_string()
    };
    out += &format!(
        "{session}: restored {}, skipped {}, failed {} ({undo})\n",
        count(
            plan.steps.len() - applied.failed.len().min(plan.steps.len()),
            "path"
        ),
        plan.skipped.len(),
        applied.failed.len()
    );
    env.print(&out)?;
    Ok(if plan.skipped.is_empty() && applied.failed.is_empty() {
        Outcome::Done
    } else {
        Outcome::Partial
    })
}
