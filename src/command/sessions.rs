//! `rewind sessions`.

use clap::Args;
use serde_json::json;

use super::env::{Env, Outcome};
use crate::history::format::escape_text;
use crate::history::{Name, Result, time};

/// List the sessions with how many changes each made, when, and by which agents.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &SessionsArgs, env: &mut Env<'_>) -> Result<Outcome> {
    let mut sessions = env.history.sessions()?;
    sessions.sort_by_key(|s| s.first_id);
    for s in sessions {
        // A session id that was not a name is recorded mapped; the id as given is shown beside.
        let given = Name::stored(s.name.clone()).given();
        // So is an agent's (one of rewind's own agent names, given from outside, too).
        let agents_given: Vec<(&String, String)> = s
            .agents
            .iter()
            .filter_map(|a| Some((a, Name::stored(a.clone()).given()?)))
            .collect();
        let line = if args.json {
            let mut v = json!({
                "name": s.name, "changes": s.count, "first_id": s.first_id, "last_id": s.last_id,
                "first_time": time::rfc3339(s.first_time_ns), "last_time": time::rfc3339(s.last_time_ns),
                "agents": s.agents,
            });
            if let Some(g) = &given {
                v["given"] = json!(g);
            }
            if !agents_given.is_empty() {
                v["agents_given"] = agents_given
                    .iter()
                    .map(|(a, g)| (a.to_string(), json!(g)))
                    .collect::<serde_json::Map<_, _>>()
                    .into();
            }
            v.to_string()
        } else {
            format!(
                "{:<32} {:>6} {:<8} {} .. {}  {}",
                escape_text(&s.name),
                s.count,
                if s.count == 1 { "change" } else { "changes" },
                time::short(s.first_time_ns),
                time::short(s.last_time_ns),
                s.agents
                    .iter()
                    .map(|a| escape_text(a))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        let mut line = match &given {
            Some(g) if !args.json => format!("{line}  (given as {g:?})"),
            _ => line,
        };
        if !args.json {
            for (a, g) in &agents_given {
                line += &format!("  (agent {} given as {g:?})", escape_text(a));
            }
        }
        env.println(&line)?;
    }
    Ok(Outcome::Done)
}
