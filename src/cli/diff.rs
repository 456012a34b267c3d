//! `rewind diff`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::context::Ctx;
use super::output::{color, stat_line, unified};
use super::{CliResult, Failure};
use crate::history::point;
use crate::history::view::View;
use crate::store::{Change, Order, Query};

fn touches(c: &Change, path: &[u8]) -> bool {
    c.path == path || c.from.as_deref() == Some(path)
}

/// Show what changed, as unified diffs: one change (ID), the net effect of a session or an
/// agent, everything since a point, or between two points.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// A change id.
    pub id: Option<u64>,
    /// Only these paths.
    #[arg(last = true)]
    pub paths: Vec<PathBuf>,
    #[arg(long, conflicts_with_all = ["agent", "since", "from", "id"])]
    pub session: Option<String>,
    #[arg(long, conflicts_with_all = ["since", "from", "id"])]
    pub agent: Option<String>,
    /// Everything after this point, up to now.
    #[arg(long, value_name = "POINT", conflicts_with_all = ["from", "id"])]
    pub since: Option<String>,
    /// From this point...
    #[arg(long, value_name = "POINT", conflicts_with = "id")]
    pub from: Option<String>,
    /// ...to this one (default: now).
    #[arg(long, value_name = "POINT", requires = "from")]
    pub to: Option<String>,
    /// Only a summary: one line a path with the number of changed lines.
    #[arg(long)]
    pub stat: bool,
}

pub fn run(cwd: &Path, args: DiffArgs) -> CliResult {
    let ctx = Ctx::locate(cwd)?;
    let store = ctx.read_store()?;
    let source = ctx.source()?;
    let view = View {
        store: &store,
        source: &source,
    };
    let filter: Vec<Vec<u8>> = args
        .paths
        .iter()
        .map(|p| ctx.rel_path(p))
        .collect::<Result<_, _>>()?;
    let last = store.last_id()?;

    // Which changes, and which points to compare each path between.
    let selection: Vec<Change> = if let Some(id) = args.id {
        vec![
            store
                .change(id)?
                .ok_or_else(|| Failure::usage(format!("there is no change {id}")))?,
        ]
    } else {
        let mut q = Query {
            order: Order::OldestFirst,
            ..Query::default()
        };
        if args.session.is_some() || args.agent.is_some() {
            q.session = args.session.clone();
            q.agent = args.agent.clone();
        } else if let Some(p) = &args.since {
            q.after_id = Some(point::resolve(p, &store)?);
        } else if let Some(p) = &args.from {
            q.after_id = Some(point::resolve(p, &store)?);
            q.until_id = Some(match &args.to {
                Some(t) => point::resolve(t, &store)?,
                None => last,
            });
        } else {
            return Err(Failure::usage(
                "say what to compare: a change id, --session, --agent, --since or --from",
            ));
        }
        store.query(&q)?
    };
    let range = match (&args.since, &args.from, &args.to) {
        (Some(p), _, _) => Some((point::resolve(p, &store)?, last)),
        (_, Some(p), None) => Some((point::resolve(p, &store)?, last)),
        (_, Some(p), Some(t)) => Some((point::resolve(p, &store)?, point::resolve(t, &store)?)),
        _ => None,
    };
    let mut paths: BTreeSet<Vec<u8>> = BTreeSet::new();
    for c in &selection {
        paths.insert(c.path.clone());
        paths.extend(c.from.clone());
    }
    if !filter.is_empty() {
        paths.retain(|p| {
            filter
                .iter()
                .any(|f| p == f || (p.starts_with(f) && p.get(f.len()) == Some(&b'/')))
        });
    }
    let color = color();
    let (mut files, mut ins, mut del) = (0, 0, 0);
    for path in paths {
        // A range compares the same two points for every path; a change, session or agent
        // compares each path from just before its first selected change to just after its last.
        let (from_id, to_id) = match (&range, selection.iter().filter(|c| touches(c, &path))) {
            (Some(r), _) => *r,
            (None, mut touching) => {
                let Some(first) = touching.next() else {
                    continue;
                };
                let last_c = touching.next_back().unwrap_or(first);
                (first.id - 1, last_c.id)
            }
        };
        let is_dir = |t: &crate::history::view::Then| {
            t.state()
                .is_some_and(|s| s.kind == crate::store::FileKind::Dir)
        };
        let (old_t, new_t) = (view.state_at(&path, from_id)?, view.state_at(&path, to_id)?);
        if is_dir(&old_t) || is_dir(&new_t) {
            continue;
        }
        let old = view.content_at(&path, from_id)?;
        let new = view.content_at(&path, to_id)?;
        if old == new {
            continue;
        }
        let name = String::from_utf8_lossy(&path);
        if args.stat {
            let (line, i, d) = stat_line(&name, old.as_deref(), new.as_deref());
            println!("{line}");
            files += 1;
            ins += i;
            del += d;
        } else {
            print!("{}", unified(&name, old.as_deref(), new.as_deref(), color));
        }
    }
    if args.stat {
        println!(" {files} files changed, {ins} insertions(+), {del} deletions(-)");
    }
    Ok(ExitCode::SUCCESS)
}
