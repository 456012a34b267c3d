//! `rewind turns`.

use std::collections::BTreeSet;

use clap::Args;
use serde_json::json;

use super::env::{Env, Outcome};
use crate::history::change::{Change, Turn};
use crate::history::format::escape_text;
use crate::history::{Resolved, Result, Selection, time, turns};

/// List agent turns (one per prompt): number, when, the prompt, how many files it changed and
/// how many lines it added and removed, and whether a rollback has put it back. Roll one back
/// with `rewind rollback --turn SESSION:N`.
#[derive(Debug, Args)]
pub struct TurnsArgs {
    /// Only this session's turns.
    #[arg(long)]
    pub session: Option<String>,
    /// One JSON object a line.
    #[arg(long)]
    pub json: bool,
    /// One turn (SESSION:N or the agent's prompt id): its prompt, what it changed, and the
    /// conversation kept with it (what the agent's transcript gained in that turn).
    #[arg(long, value_name = "TURN")]
    pub show: Option<String>,
}

/// A turn's changes, oldest first.
fn changes_of(env: &Env<'_>, turn: &Turn) -> Result<Vec<Change>> {
    Resolved::of_turn(turn).changes(env.history)
}

/// `turns --show T`.
fn show(args: &TurnsArgs, t: &str, env: &mut Env<'_>) -> Result<Outcome> {
    let selection = Selection {
        session: args.session.clone(),
        turn: Some(t.to_string()),
        ..Selection::default()
    };
    let Some(turn) = selection.resolve(env.history)?.turn else {
        return Err(crate::history::Error::NoTurn(t.to_string()));
    };
    let changes = changes_of(env, &turn)?;
    let (files, added, removed) = turns::line_counts(env.history, &changes)?;
    let conversation = turns::conversation(env.history, &turn)?;
    let text = conversation
        .as_deref()
        .map(|c| String::from_utf8_lossy(c).into_owned());
    if args.json {
        env.println(
            &json!({
                "session": turn.session, "turn": turn.number, "prompt": turn.prompt,
                "prompt_id": turn.prompt_id, "agent": turn.agent,
                "time": time::rfc3339(turn.start_time_ns),
                "end_time": turn.end_time_ns.map(time::rfc3339),
                "start_id": turn.start_id, "end_id": turn.end_id,
                "files": files, "added": added, "removed": removed,
                "changes": changes.iter().map(|c| c.id).collect::<Vec<_>>(),
                "conversation": text,
            })
            .to_string(),
        )?;
        return Ok(Outcome::Done);
    }
    env.println(&format!(
        "turn {}:{}  {} by {}{}",
        escape_text(&turn.session),
        turn.number,
        time::short(turn.start_time_ns),
        escape_text(&turn.agent),
        if turn.end_id.is_none() {
            "  (open)"
        } else {
            ""
        }
    ))?;
    env.println(&format!("prompt: {}", escape_text(&turn.prompt)))?;
    env.println(&format!(
        "changes: {} ({} {}, +{added} -{removed})",
        changes.len(),
        files,
        if files == 1 { "file" } else { "files" }
    ))?;
    match text {
        Some(text) => {
            env.println("conversation:")?;
            for line in text.lines() {
                env.println(&escape_text(line))?;
            }
        }
        None => env.println(
            "conversation: none kept (the agent names no transcript, or it could not be read)",
        )?,
    }
    Ok(Outcome::Done)
}

pub fn run(args: &TurnsArgs, env: &mut Env<'_>) -> Result<Outcome> {
    if let Some(t) = &args.show {
        return show(args, t, env);
    }
    let selection = Selection {
        session: args.session.clone(),
        ..Selection::default()
    };
    let session = selection.resolve(env.history)?.session;
    let turns = env.history.turns(session.as_deref())?;
    if turns.is_empty() && !args.json {
        env.println(&match &session {
            Some(s) => format!("no turns in session {}", escape_text(s)),
            None => "no turns: they come from an agent's hooks; set them up with `rewind agent \
                     install AGENT` (claude, codex, gemini, cursor or opencode)"
                .to_string(),
        })?;
        return Ok(Outcome::Done);
    }
    // Every change a rollback made since the first turn began, by path.
    let rollback_changes = match turns.iter().map(|t| t.start_id).min() {
        Some(first) => Resolved {
            agent: Some(crate::history::name::ROLLBACK_AGENT.into()),
            after: Some(first),
            ..Resolved::default()
        }
        .changes(env.history)?,
        None => Vec::new(),
    };
    let restores = turns::restores(&rollback_changes);
    // A session gc cut says so first, as `log` and `diff` of it do; its turns that lost
    // changes say so on their line.
    if !args.json {
        let mut noted = BTreeSet::new();
        for t in &turns {
            if noted.insert(t.session.as_str())
                && let Some(note) = env.history.cut_note(Some(&t.session), None, None)?
            {
                env.println(&note)?;
            }
        }
    }
    for t in &turns {
        let changes = changes_of(env, t)?;
        let cut = matches!(
            env.history.check_whole_turn(&t.session, t.number),
            Err(crate::history::Error::Cut { .. })
        );
        let (files, added, removed) = turns::line_counts(env.history, &changes)?;
        let undone = turns::rolled_back(&changes, &restores);
        let line = if args.json {
            json!({
                "session": t.session, "turn": t.number, "prompt": t.prompt, "prompt_id": t.prompt_id,
                "agent": t.agent, "time": time::rfc3339(t.start_time_ns),
                "end_time": t.end_time_ns.map(time::rfc3339),
                "start_id": t.start_id, "end_id": t.end_id,
                "files": files, "added": added, "removed": removed,
                "rolled_back_by": undone.as_ref().map_or(Vec::new(), |u| u.by.clone()),
                "rolled_back": undone.as_ref().map(|u| if u.whole { "whole" } else { "part" }),
                "cut": cut,
            })
            .to_string()
        } else {
            format!(
                "{}:{:<3} {}  {:>3} {:<6}  +{:<5} -{:<5} {}{}{}{}",
                escape_text(&t.session),
                t.number,
                time::short(t.start_time_ns),
                files,
                if files == 1 { "file" } else { "files" },
                added,
                removed,
                escape_text(&t.prompt),
                if t.end_id.is_none() { "  (open)" } else { "" },
                if cut { "  (gc removed part of it)" } else { "" },
                match &undone {
                    Some(u) => format!(
                        "  ({}rolled back by {})",
                        if u.whole { "" } else { "partly " },
                        u.by.join(", ")
                    ),
                    None => String::new(),
                }
            )
        };
        env.println(&line)?;
    }
    Ok(Outcome::Done)
}
