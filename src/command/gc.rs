//! `rewind gc`.

use clap::Args;

use super::env::{Env, Outcome};
use crate::history::GcReport;
use crate::history::format::count;
use crate::history::retention::Retention;
use crate::history::time;
use crate::history::{Error, Result};

/// Remove old history: changes older than --keep, then the oldest until the store fits
/// --max-size. The newest change of every path is always kept. With --repack, then store
/// older versions as deltas on newer ones.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Keep this much history (e.g. 30d, 12h).
    #[arg(long, value_name = "DURATION")]
    pub keep: Option<String>,
    /// Keep the stored content under this size (e.g. 2G, 500M).
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// Say what would be done and do nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Then re-encode stored content as git's pack does where that stores less: older
    /// versions as deltas on newer ones (takes minutes and under 1 KB of memory per stored
    /// content; refused above 200,000 stored contents).
    #[arg(long)]
    pub repack: bool,
}

pub fn run(args: &GcArgs, env: &mut Env<'_>) -> Result<Outcome> {
    if args.keep.is_none() && args.max_size.is_none() && !args.repack {
        return Err(Error::Usage(
            "say what to keep: --keep DURATION and/or --max-size SIZE (or --repack)".into(),
        ));
    }
    let mut policy =
        Retention::parse(args.keep.as_deref(), args.max_size.as_deref(), None)?.policy();
    // The dry run is the same plan as the run, computed by the store's one writer.
    policy.dry_run = args.dry_run;
    policy.repack = args.repack;
    let r = env.actor("gc")?.gc(&policy)?;
    for line in report(&r, args.max_size.as_deref()) {
        env.println(&line)?;
    }
    if args.dry_run && args.repack {
        // Not previewed: what a repack saves is known only by encoding every version.
        env.println(
            "the run then repacks (older versions as deltas on newer ones); the stored content \
             above is before that",
        )?;
    }
    Ok(Outcome::Done)
}

/// What a gc did (or, dry, would do), as `rewind gc` prints it.
pub fn report(r: &GcReport, max_size: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    let removed = format!(
        "{} and {}",
        count(r.changes_removed as usize, "change"),
        count(r.blobs_removed as usize, "blob"),
    );
    if r.dry_run {
        out.push(format!(
            "dry run: would remove {removed}; stored content would go from {} to {} bytes \
             (nothing was removed)",
            r.bytes_before, r.bytes_after
        ));
    } else {
        out.push(format!(
            "removed {removed}; stored content {} -> {} bytes; store on disk {} -> {} bytes",
            r.bytes_before, r.bytes_after, r.disk_before, r.disk_after
        ));
    }
    if let Some(why) = &r.not_compacted {
        out.push(format!(
            "not compacted: {why}; what was removed stays removed, and its space comes back \
             at a later `rewind gc` once the disk has that room"
        ));
    }
    if let Some((contents, most)) = r.repack_refused {
        out.push(format!(
            "not repacked: the store holds {contents} contents, more than the {most} a repack \
             keeps in memory at once"
        ));
    }
    if r.repacked > 0 {
        out.push(format!(
            "repacked {}: {} now stored as deltas{}",
            count(r.repacked as usize, "blob"),
            r.repacked_deltas,
            if r.repack_freed > 0 {
                format!(
                    "; {} no longer needed removed",
                    count(r.repack_freed as usize, "base")
                )
            } else {
                String::new()
            }
        ));
    }
    if let Some(why) = &r.repack_stopped {
        out.push(if r.repacked > 0 {
            format!(
                "the repack stopped after {}: {why}; what it rewrote stays, the next `rewind gc \
                 --repack` goes on",
                count(r.repacked as usize, "blob")
            )
        } else {
            format!("not repacked: {why}")
        });
    }
    if let Some(u) = &r.repack_unreadable {
        let mut paths = u
            .paths
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if u.paths.len() > 10 {
            paths += &format!(" and {} more", u.paths.len() - 10);
        }
        if u.paths.is_empty() {
            paths = "no recorded path".into();
        }
        out.push(format!(
            "left as {}: {} that cannot be read, for: {paths} (the first: {})",
            if u.contents == 1 {
                "it was"
            } else {
                "they were"
            },
            count(u.contents as usize, "content"),
            u.first
        ));
    }
    for (session, n) in &r.sessions_cut {
        out.push(format!(
            "  session {session}: {} {}",
            count(*n as usize, "change"),
            if r.dry_run { "would go" } else { "removed" }
        ));
    }
    if r.over_target {
        out.push(format!(
            "cannot reach --max-size {}: {} bytes stay (the newest change of every path is always kept, and so is content that a change being recorded uses; a later gc removes what is then unused)",
            max_size.unwrap_or("?"),
            r.bytes_after
        ));
    }
    if let Some(h) = &r.horizon {
        out.push(format!(
            "oldest point still kept: {} ({}){}",
            h.id,
            time::rfc3339(h.time_ns),
            if r.dry_run { " after this gc" } else { "" }
        ));
    }
    out
}
