//! `rewind log`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::context::Ctx;
use super::output::{change_json, change_line};
use super::{CliResult, Failure};
use crate::history::point;
use crate::store::{Order, Query};

/// Show the history, newest last: one change a line, or one JSON object a line with --json.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Only changes to this path (or, for renames, from it).
    pub path: Option<PathBuf>,
    /// Only changes of this session.
    #[arg(long)]
    pub session: Option<String>,
    /// Only changes by this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only changes after this point (a change id, checkpoint, time, or duration ago).
    #[arg(long, value_name = "POINT")]
    pub since: Option<String>,
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

pub fn run(cwd: &Path, args: LogArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    let store = ctx.read_store()?;
    let mut q = Query {
        session: args.session,
        agent: args.agent,
        order: Order::NewestFirst,
        limit: args.limit,
        ..Query::default()
    };
    if let Some(p) = &args.path {
        q.path = Some(ctx.rel_path(p)?);
    }
    if let Some(p) = &args.since {
        q.after_id = Some(point::resolve(p, &store).map_err(Failure::from)?);
    }
    if let Some(p) = &args.until {
        q.until_id = Some(point::resolve(p, &store).map_err(Failure::from)?);
    }
    let mut changes = store.query(&q)?;
    changes.reverse();
    let mut out = std::io::stdout().lock();
    for c in &changes {
        let line = if args.json {
            change_json(c).to_string()
        } else {
            change_line(c)
        };
        if super::write_line(&mut out, &line).is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}
