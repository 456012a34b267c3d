//! The selection flags `log`, `diff`, `rollback` and `export` share (flattened into each), read
//! into a [`Selection`]; what they mean is decided in `history::selection`, for every caller.

use clap::Args;

use crate::history::Selection;

/// Which changes.
#[derive(Clone, Debug, Default, Args)]
pub struct SelectArgs {
    /// The changes of this session (its name, or a unique beginning of it).
    #[arg(long)]
    pub session: Option<String>,
    /// The changes by this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// The changes of one agent turn (prompt), shell commands included: SESSION:N, N, or the
    /// agent's prompt id.
    #[arg(long, value_name = "TURN")]
    pub turn: Option<String>,
    /// The changes after this point (a change id, checkpoint, time, or duration ago).
    #[arg(long, value_name = "POINT")]
    pub since: Option<String>,
}

impl SelectArgs {
    pub fn selection(&self) -> Selection {
        Selection {
            session: self.session.clone(),
            agent: self.agent.clone(),
            turn: self.turn.clone(),
            since: self.since.clone(),
            ..Selection::default()
        }
    }
}
