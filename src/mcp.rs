//! `rewind mcp`: rewind's history, diffs and rollback offered to AI agents as MCP tools over
//! stdio.
//!
//! The MCP layer knows nothing of rewind's internals: every tool call becomes one rewind
//! [`Command`], the same value clap fills from a command line (`rewind log --session s1 -n 20
//! --json`), run by a [`Backend`]. A tool's arguments are checked as they become the command;
//! what the command means is the command's business, as on the command line.
//!
//! Nothing in this process may print to stdout but the MCP transport: stdout *is* the
//! protocol. A backend must capture the command's output and return it, and logs go to
//! stderr.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::{
    ServerHandler, ServiceExt,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig},
    tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::command::{self, Command, select::SelectArgs};
use crate::history::Name;

pub mod wire;

/// What the MCP server calls into.
pub trait Backend: Send + Sync + 'static {
    /// Run one rewind command; returns its text output.
    fn run(&self, command: Command) -> Result<String, RunError>;
}

/// Why [`serve_stdio`] stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("the client's initialization failed: {0}")]
    Initialize(#[from] Box<rmcp::service::ServerInitializeError>),
    #[error("the server stopped: {0}")]
    Stopped(#[from] tokio::task::JoinError),
}

/// Told to every client at `initialize`; clients show it to the model.
pub const INSTRUCTIONS: &str = "\
rewind records every change made to this project's files, by which agent, session and turn, \
before it lands. Use `history` to see what changed, `diff` to see how, `show` for one change, `cat` \
for a file at a point, `turns` to list the turns of a session, `whoami` for your own session \
and turn, and `checkpoint` to name the current state so you can come back to it. `comments` \
lists what a reviewer asked of your session's work: read it and act on it.

`rollback` and `undo` put files back. They only PREVIEW unless you pass `apply: true`: without \
it they run as a dry run, change nothing, and their result starts with `DRY RUN`. Look at the \
preview, then call again with `apply: true` to do it. A rollback skips paths that someone \
outside the selection changed later; `force: true` puts those back too, overwriting that work. \
A rollback is itself recorded, so it can be rolled back.";

/// How many changes `history` shows when no `limit` is given, and at most.
pub const DEFAULT_HISTORY_LIMIT: usize = 50;
pub const MAX_HISTORY_LIMIT: usize = 1000;

/// How much of a file `cat` returns in one call.
pub const CAT_PAGE: usize = 64 * 1024;

/// How many hex digits of a content hash the compact history keeps.
pub const SHORT_HASH: usize = 12;

const DRY_RUN_BANNER: &str = "DRY RUN: nothing was changed. This is what would happen; \
call again with \"apply\": true to do it.\n\n";

// ---- tool parameters ----------------------------------------------------------------------

/// Parameters of `history`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    /// Only changes to this path (relative to the project root), or renames from it.
    pub path: Option<String>,
    /// Only changes of this session.
    pub session: Option<String>,
    /// Only changes by this agent.
    pub agent: Option<String>,
    /// Only changes of this turn.
    pub turn: Option<String>,
    /// Only changes after this point: a change id, a checkpoint name, a time, or a duration
    /// ago such as "10m".
    pub since: Option<String>,
    /// Only changes up to this point (an id, checkpoint or time): to page back, pass the
    /// smallest id shown less one.
    pub until: Option<String>,
    /// At most this many changes, the newest ones (default 50, at most 1000).
    pub limit: Option<usize>,
    /// Every field of each change (pids, modes, sizes, whole hashes, other names); by default
    /// only what an agent needs, with 12-character hashes.
    #[serde(default)]
    pub full: bool,
}

/// Parameters of `whoami`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WhoamiArgs {}

/// Parameters of `show`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowArgs {
    /// The change's id.
    pub id: u64,
}

/// Parameters of `cat`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CatArgs {
    /// The file (relative to the project root).
    pub path: String,
    /// The point to read it at: a change id (the state right after it), a checkpoint, a time,
    /// or a duration ago such as "10m". Default: now.
    pub at: Option<String>,
    /// Skip this many bytes of the content first (to read a long file in pages).
    #[serde(default)]
    pub offset: usize,
}

/// Parameters of `diff`. Give at most one of id, session, agent, turn, since, from; none
/// means everything.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffArgs {
    /// One change, by id.
    pub id: Option<u64>,
    /// The net effect of this session.
    pub session: Option<String>,
    /// The net effect of this agent.
    pub agent: Option<String>,
    /// The net effect of this turn.
    pub turn: Option<String>,
    /// Everything after this point, up to now.
    pub since: Option<String>,
    /// From this point (a change id, checkpoint, time or duration ago) ...
    pub from: Option<String>,
    /// ... to this one (default: now). Only with `from`.
    pub to: Option<String>,
    /// Only these paths.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Only a summary: one line a path with the number of changed lines.
    #[serde(default)]
    pub stat: bool,
}

/// Parameters of `turns`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnsArgs {
    /// Only the turns of this session.
    pub session: Option<String>,
}

/// Parameters of `checkpoint`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointArgs {
    /// The checkpoint's name: one word.
    pub name: String,
    /// Move the name here if it is already taken.
    #[serde(default)]
    pub force: bool,
}

/// Parameters of `rollback`. Give exactly one of session, agent, turn, to_turn, since, to,
/// file, change; `to` may also go with `file`, and `hunk` (with `path`) with `change` or `turn`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackArgs {
    /// Put back everything this session did.
    pub session: Option<String>,
    /// Put back everything this agent did.
    pub agent: Option<String>,
    /// Put back what this turn did.
    pub turn: Option<String>,
    /// Put back what this turn's session did from that prompt on: back to just before it.
    pub to_turn: Option<String>,
    /// Put back everything after this point.
    pub since: Option<String>,
    /// Back to this point (a change id, checkpoint, time or duration ago); with `file`, that
    /// file only.
    pub to: Option<String>,
    /// One file: undo its last change, or with `to` put it back to that point.
    pub file: Option<String>,
    /// Put back what this change (by id) did.
    pub change: Option<u64>,
    /// With `change` or `turn`: put back only this hunk (1-based, as `diff` of the same id or
    /// turn numbers the file's `@@` hunks) in the file as it is now. Done only where the
    /// hunk's lines are still there unchanged.
    pub hunk: Option<usize>,
    /// With `hunk`: the file (may be left out when the diff shows one file).
    pub path: Option<String>,
    /// Also put back paths that others changed later, overwriting their work.
    #[serde(default)]
    pub force: bool,
    /// Really do it. Without it (the default) this is a dry run that changes nothing.
    #[serde(default)]
    pub apply: bool,
}

/// Parameters of `comments`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommentsArgs {
    /// Every session's open comments, not only your session's.
    #[serde(default)]
    pub all_sessions: bool,
}

/// Parameters of `undo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UndoArgs {
    /// The id of the change to undo.
    pub id: u64,
    /// Also when the path was changed again later, overwriting that work.
    #[serde(default)]
    pub force: bool,
    /// Really do it. Without it (the default) this is a dry run that changes nothing.
    #[serde(default)]
    pub apply: bool,
}

// ---- tool arguments to commands -----------------------------------------------------------

/// The longest argument taken: no path (`PATH_MAX`), name or point is longer. A longer one is
/// refused by name, before it could reach a command line (where the kernel refuses a word over
/// 128 KiB with "Argument list too long").
pub const MAX_ARGUMENT: usize = 4096;

/// Why a tool's arguments make no command: said to the model as the tool's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadArguments {
    #[error(
        "`{what}` is {len} bytes long; rewind takes at most {MAX_ARGUMENT} (no path, name or \
         point is longer)"
    )]
    TooLong { what: &'static str, len: usize },
    #[error("`{0}` is empty")]
    Empty(&'static str),
    #[error("`{what}` must not start with '-': {value:?}")]
    LooksLikeAFlag { what: &'static str, value: String },
    #[error("`{what}` must be one word without spaces: {value:?}")]
    NotOneWord { what: &'static str, value: String },
    #[error("`{what}` must be a non-empty path: {value:?}")]
    NotAPath { what: &'static str, value: String },
    #[error("`limit` must be from 1 to {MAX_HISTORY_LIMIT}")]
    Limit,
    #[error(
        "give at most one of id, session, agent, turn, since, from; got {}",
        .0.join(", ")
    )]
    DiffSelectors(Vec<&'static str>),
    #[error("`to` needs `from`")]
    ToWithoutFrom,
    #[error("say what to roll back: one of session, agent, turn, to_turn, since, to, file, change")]
    NothingToRollBack,
    #[error(
        "give exactly one of session, agent, turn, to_turn, since, to, file, change (`to` may \
         go with `file`); got {}",
        .0.join(", ")
    )]
    RollbackSelectors(Vec<&'static str>),
    #[error("`path` goes with `hunk`")]
    PathWithoutHunk,
    #[error(transparent)]
    Name(#[from] crate::history::BadName),
    #[error("`offset` {offset} is past the end: the content is {len} bytes")]
    PastTheEnd { offset: usize, len: usize },
}

/// Why a command built from good arguments gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    NoWords(#[from] command::words::NoWords),
    #[error("the arguments are too long to run rewind with")]
    TooLong,
    #[error("cannot run rewind: {0}")]
    Spawn(std::io::Error),
    /// rewind refused or failed: what it said (its output, then its message).
    #[error("{0}")]
    Refused(String),
    #[error("rewind failed unexpectedly: {0}")]
    Panicked(#[from] tokio::task::JoinError),
}

/// A tool's error, as the model reads it.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Arguments(#[from] BadArguments),
    #[error(transparent)]
    Run(#[from] RunError),
}

fn check_length(what: &'static str, v: &str) -> Result<(), BadArguments> {
    if v.len() > MAX_ARGUMENT {
        return Err(BadArguments::TooLong { what, len: v.len() });
    }
    Ok(())
}

/// A value given as an option's argument must be one non-empty word that cannot be taken for a
/// flag.
fn value(what: &'static str, v: &Option<String>) -> Result<Option<String>, BadArguments> {
    let Some(v) = v else { return Ok(None) };
    check_length(what, v)?;
    if v.is_empty() {
        return Err(BadArguments::Empty(what));
    }
    let value = || v.clone();
    if v.starts_with('-') {
        return Err(BadArguments::LooksLikeAFlag {
            what,
            value: value(),
        });
    }
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(BadArguments::NotOneWord {
            what,
            value: value(),
        });
    }
    Ok(Some(value()))
}

/// Paths may start with '-' (they never stand where a flag could); they must still be
/// non-empty and one line.
fn path(what: &'static str, v: &str) -> Result<PathBuf, BadArguments> {
    check_length(what, v)?;
    if v.is_empty() || v.chars().any(|c| c.is_control()) {
        return Err(BadArguments::NotAPath {
            what,
            value: v.to_string(),
        });
    }
    Ok(PathBuf::from(v))
}

fn optional_path(what: &'static str, v: &Option<String>) -> Result<Option<PathBuf>, BadArguments> {
    v.as_deref().map(|v| path(what, v)).transpose()
}

/// The names of the given fields that are set.
fn set(fields: &[(&'static str, bool)]) -> Vec<&'static str> {
    fields
        .iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect()
}

fn select(
    session: &Option<String>,
    agent: &Option<String>,
    turn: &Option<String>,
    since: &Option<String>,
) -> Result<SelectArgs, BadArguments> {
    Ok(SelectArgs {
        session: value("session", session)?,
        agent: value("agent", agent)?,
        turn: value("turn", turn)?,
        since: value("since", since)?,
    })
}

/// `log --json`, at most `limit` changes.
pub fn history_command(a: &HistoryArgs) -> Result<Command, BadArguments> {
    let limit = a.limit.unwrap_or(DEFAULT_HISTORY_LIMIT);
    if limit == 0 || limit > MAX_HISTORY_LIMIT {
        return Err(BadArguments::Limit);
    }
    Ok(Command::Log(command::log::LogArgs {
        path: optional_path("path", &a.path)?,
        select: select(&a.session, &a.agent, &a.turn, &a.since)?,
        until: value("until", &a.until)?,
        limit: Some(limit),
        json: true,
    }))
}

/// `diff`: one change, a session's, agent's or turn's net effect, or a range.
pub fn diff_command(a: &DiffArgs) -> Result<Command, BadArguments> {
    let chosen = set(&[
        ("id", a.id.is_some()),
        ("session", a.session.is_some()),
        ("agent", a.agent.is_some()),
        ("turn", a.turn.is_some()),
        ("since", a.since.is_some()),
        ("from", a.from.is_some()),
    ]);
    if chosen.len() > 1 {
        return Err(BadArguments::DiffSelectors(chosen));
    }
    if a.to.is_some() && a.from.is_none() {
        return Err(BadArguments::ToWithoutFrom);
    }
    Ok(Command::Diff(command::diff::DiffArgs {
        words: a
            .id
            .map(|id| PathBuf::from(id.to_string()))
            .into_iter()
            .collect(),
        select: select(&a.session, &a.agent, &a.turn, &a.since)?,
        from: value("from", &a.from)?,
        to: value("to", &a.to)?,
        stat: a.stat,
        paths: a
            .paths
            .iter()
            .map(|p| path("paths", p))
            .collect::<Result<_, _>>()?,
    }))
}

/// One change of `log --json` as the compact history gives it: id, time, kind, path (and
/// `from`), session, agent, turn and tool where set, and the content hashes before and after
/// cut to [`SHORT_HASH`] digits (`null`: no content, or the path did not exist).
pub fn compact_change(full: &serde_json::Value) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for key in [
        "id",
        "time",
        "kind",
        "path",
        "from",
        "path_bytes",
        "session",
        "agent",
    ] {
        if let Some(v) = full.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(turn) = full.get("turn").filter(|v| !v.is_null()) {
        out.insert("turn".into(), turn.clone());
    }
    if let Some(tool) = full.get("tool").and_then(|t| t.get("name")) {
        out.insert("tool".into(), tool.clone());
    }
    for side in ["before", "after"] {
        let hash = full[side]
            .get("hash")
            .and_then(serde_json::Value::as_str)
            .map(|h| serde_json::Value::String(h.chars().take(SHORT_HASH).collect()));
        out.insert(side.into(), hash.unwrap_or(serde_json::Value::Null));
    }
    serde_json::Value::Object(out)
}

/// `log --json` output made compact, line by line (a line that is not a change is kept).
pub fn compact_history(text: &str) -> String {
    let mut out = String::with_capacity(text.len() / 3);
    for line in text.lines() {
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) if v.get("id").is_some() => out += &compact_change(&v).to_string(),
            _ => out += line,
        }
        out.push('\n');
    }
    out
}

/// `cat`, the whole file: [`page`] cuts it.
pub fn cat_command(a: &CatArgs) -> Result<Command, BadArguments> {
    Ok(Command::Cat(command::cat::CatArgs {
        path: path("path", &a.path)?,
        at: value("at", &a.at)?,
    }))
}

/// One page of `text` from byte `offset`, at most [`CAT_PAGE`] bytes (on character
/// boundaries), with a last line saying where the next page starts when there is more.
pub fn page(text: &str, offset: usize) -> Result<String, BadArguments> {
    if offset > text.len() {
        return Err(BadArguments::PastTheEnd {
            offset,
            len: text.len(),
        });
    }
    let mut start = offset;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let mut end = (start + CAT_PAGE).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = text[start..end].to_string();
    if end < text.len() {
        out += &format!(
            "\n[rewind: {} more bytes; call again with \"offset\": {end}]\n",
            text.len() - end
        );
    }
    Ok(out)
}

/// `turns`, of one session or all.
pub fn turns_command(a: &TurnsArgs) -> Result<Command, BadArguments> {
    Ok(Command::Turns(command::turns::TurnsArgs {
        session: value("session", &a.session)?,
        json: false,
        show: None,
    }))
}

/// `checkpoint NAME`.
pub fn checkpoint_command(a: &CheckpointArgs) -> Result<Command, BadArguments> {
    let name = value("name", &Some(a.name.clone()))?.unwrap_or_default();
    Ok(Command::Checkpoint(command::checkpoint::CheckpointArgs {
        name: Name::parse("checkpoint", &name)?,
        force: a.force,
        dry_run: false,
    }))
}

/// `rollback` of exactly one selection; a dry run unless `apply`.
pub fn rollback_command(a: &RollbackArgs) -> Result<Command, BadArguments> {
    let chosen = set(&[
        ("session", a.session.is_some()),
        ("agent", a.agent.is_some()),
        ("turn", a.turn.is_some()),
        ("to_turn", a.to_turn.is_some()),
        ("since", a.since.is_some()),
        ("file", a.file.is_some()),
        ("change", a.change.is_some()),
        // `to` on its own is a selector; with `file` it qualifies it.
        ("to", a.to.is_some() && a.file.is_none()),
    ]);
    match chosen.len() {
        0 => return Err(BadArguments::NothingToRollBack),
        1 => {}
        _ => return Err(BadArguments::RollbackSelectors(chosen)),
    }
    if a.path.is_some() && a.hunk.is_none() {
        return Err(BadArguments::PathWithoutHunk);
    }
    Ok(Command::Rollback(command::rollback::RollbackArgs {
        select: select(&a.session, &a.agent, &a.turn, &a.since)?,
        to_turn: value("to_turn", &a.to_turn)?,
        to: value("to", &a.to)?,
        file: optional_path("file", &a.file)?,
        change: a.change,
        hunk: a.hunk,
        path: optional_path("path", &a.path)?,
        dry_run: !a.apply,
        force: a.force,
        // A large rollback tells the model its first paths and how many more.
        verbose: false,
    }))
}

/// `comment list`: the asking session's open comments, or every session's.
pub fn comments_command(a: &CommentsArgs) -> Command {
    Command::Comment(command::comment::CommentArgs {
        action: command::comment::CommentAction::List(command::comment::CommentListArgs {
            session: None,
            all: false,
            json: false,
            mine: !a.all_sessions,
        }),
    })
}

/// `undo ID`; a dry run unless `apply`.
pub fn undo_command(a: &UndoArgs) -> Command {
    Command::Undo(command::rollback::UndoArgs {
        id: a.id,
        dry_run: !a.apply,
        force: a.force,
    })
}

// ---- the server ---------------------------------------------------------------------------

/// The MCP server: one per connection, cheap to clone.
#[derive(Clone)]
pub struct RewindMcp {
    backend: Arc<dyn Backend>,
    tool_router: ToolRouter<RewindMcp>,
}

impl RewindMcp {
    pub fn new(backend: impl Backend) -> RewindMcp {
        RewindMcp {
            backend: Arc::new(backend),
            tool_router: Self::tool_router(),
        }
    }

    /// Runs the command on the backend off the async thread (a rewind command may block on
    /// disk for a while) and turns the outcome into a tool result: bad arguments or an error
    /// from the backend are a tool error (`isError: true`) the model can read, not a protocol
    /// error.
    async fn run(&self, command: Result<Command, BadArguments>, dry_run: bool) -> CallToolResult {
        let shape = move |out: String| -> Result<String, ToolError> {
            Ok(if dry_run {
                format!("{DRY_RUN_BANNER}{out}")
            } else {
                out
            })
        };
        self.run_then(command, shape).await
    }

    /// Like [`run`](Self::run), the output passed through `shape` (which may refuse it).
    async fn run_then(
        &self,
        command: Result<Command, BadArguments>,
        shape: impl FnOnce(String) -> Result<String, ToolError> + Send + 'static,
    ) -> CallToolResult {
        let command = match command {
            Ok(c) => c,
            Err(e) => return CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
        };
        let backend = Arc::clone(&self.backend);
        let ran = tokio::task::spawn_blocking(move || {
            backend
                .run(command)
                .map_err(ToolError::from)
                .and_then(shape)
        })
        .await
        .map_err(|e| ToolError::from(RunError::from(e)))
        .and_then(|outcome| outcome);
        match ran {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
        }
    }
}

#[tool_router]
impl RewindMcp {
    /// The history of changes, newest last, one JSON object a line: id, time, kind, path
    /// (`from` for a rename), session, agent, turn, tool, and 12-digit content hashes before
    /// and after (`full: true` for every field). At most `limit` changes, the newest (default
    /// 50, at most 1000); to page back, pass `until` = the smallest id shown less one.
    #[tool(annotations(
        title = "Change history",
        read_only_hint = true,
        open_world_hint = false
    ))]
    async fn history(&self, Parameters(a): Parameters<HistoryArgs>) -> CallToolResult {
        let full = a.full;
        self.run_then(history_command(&a), move |out| {
            Ok(if full { out } else { compact_history(&out) })
        })
        .await
    }

    /// Who you are to rewind: the session, agent and open turn your changes are recorded
    /// under now (found from this server's process tree, as for your own changes), the
    /// turn's prompt and the tool call in progress. Needs the project mounted.
    #[tool(annotations(title = "Who am I", read_only_hint = true, open_world_hint = false))]
    async fn whoami(&self, Parameters(_): Parameters<WhoamiArgs>) -> CallToolResult {
        self.run(Ok(Command::Whoami { json: true }), false).await
    }

    /// One change: who made it, when, and what it did, as a git diff.
    #[tool(annotations(
        title = "Show a change",
        read_only_hint = true,
        open_world_hint = false
    ))]
    async fn show(&self, Parameters(a): Parameters<ShowArgs>) -> CallToolResult {
        let show = command::show::ShowArgs {
            id: a.id,
            json: false,
        };
        self.run(Ok(Command::Show(show)), false).await
    }

    /// A file's content at a point (a change id, checkpoint, time or duration ago; default
    /// now). At most 64 KiB a call: a longer file ends with a line saying the `offset` to
    /// call again with.
    #[tool(annotations(
        title = "File at a point",
        read_only_hint = true,
        open_world_hint = false
    ))]
    async fn cat(&self, Parameters(a): Parameters<CatArgs>) -> CallToolResult {
        let offset = a.offset;
        self.run_then(cat_command(&a), move |out| Ok(page(&out, offset)?))
            .await
    }

    /// Unified diffs of what changed: one change (id), the net effect of a session, agent or
    /// turn, everything since a point, or between two points (from, to). Give at most one of
    /// id, session, agent, turn, since, from; none means everything.
    #[tool(annotations(title = "Diff", read_only_hint = true, open_world_hint = false))]
    async fn diff(&self, Parameters(a): Parameters<DiffArgs>) -> CallToolResult {
        self.run(diff_command(&a), false).await
    }

    /// The turns recorded, with their sessions and agents.
    #[tool(annotations(title = "Turns", read_only_hint = true, open_world_hint = false))]
    async fn turns(&self, Parameters(a): Parameters<TurnsArgs>) -> CallToolResult {
        self.run(turns_command(&a), false).await
    }

    /// Name the current end of the history, to diff against or roll back to later.
    #[tool(annotations(
        title = "Checkpoint",
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn checkpoint(&self, Parameters(a): Parameters<CheckpointArgs>) -> CallToolResult {
        self.run(checkpoint_command(&a), false).await
    }

    /// Put files back as they were before a selection of changes. Select with exactly one of
    /// session, agent, turn, to_turn, since, to, file, change (`to` may go with `file`); with
    /// `hunk` (and `path`), only one hunk of a change's or turn's diff.
    /// PREVIEWS ONLY (a dry run that changes nothing) unless "apply": true.
    #[tool(annotations(
        title = "Roll back",
        read_only_hint = false,
        destructive_hint = true,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn rollback(&self, Parameters(a): Parameters<RollbackArgs>) -> CallToolResult {
        self.run(rollback_command(&a), !a.apply).await
    }

    /// The open review comments a person left on your session's work: on its changes, turns,
    /// files, lines or hunks. Each comes as a block: its id, what it is on (change, turn or
    /// session, file, line or hunk), who wrote it and when, the line of the diff it is about
    /// (`> L: text`, or the hunk's `@@` header), then the comment itself. Your session is
    /// found from this server's process tree, as rewind attributes your changes. Address
    /// them in your work; the reviewer resolves them.
    #[tool(annotations(
        title = "Review comments",
        read_only_hint = true,
        open_world_hint = false
    ))]
    async fn comments(&self, Parameters(a): Parameters<CommentsArgs>) -> CallToolResult {
        self.run(Ok(comments_command(&a)), false).await
    }

    /// Undo one change, by id. PREVIEWS ONLY unless "apply": true.
    #[tool(annotations(
        title = "Undo a change",
        read_only_hint = false,
        destructive_hint = true,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn undo(&self, Parameters(a): Parameters<UndoArgs>) -> CallToolResult {
        self.run(Ok(undo_command(&a)), !a.apply).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for RewindMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("rewind", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// Runs each command as `rewind -C DIR WORDS...` ([`Command::words`]), exactly as in a shell:
/// through the daemon while the workspace is mounted, on the store otherwise.
pub struct ProcessBackend {
    pub exe: PathBuf,
    pub dir: PathBuf,
}

impl Backend for ProcessBackend {
    fn run(&self, command: Command) -> Result<String, RunError> {
        let words = command.words()?;
        let out = std::process::Command::new(&self.exe)
            .arg("-C")
            .arg(&self.dir)
            .args(&words)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| match e.raw_os_error() {
                Some(libc::E2BIG) => RunError::TooLong,
                _ => RunError::Spawn(e),
            })?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => Ok(stdout),
            // Done in part, or nothing done as every path was skipped: the output says which.
            Some(1) if stdout.starts_with("skip") && stdout.contains("\nnothing to roll back") => {
                Ok(format!("{stdout}(nothing done: exit status 1)\n"))
            }
            Some(1) if !stdout.is_empty() => Ok(format!("{stdout}(done in part: exit status 1)\n")),
            _ => Err(RunError::Refused(format!(
                "{}{}",
                stdout,
                stderr.trim().trim_start_matches("rewind: ")
            ))),
        }
    }
}

/// Serves MCP on stdin/stdout until stdin closes (or the client goes away). Builds its own
/// single-threaded tokio runtime, so the caller needs none. Every line the client sends is
/// checked first ([`wire`]): a malformed one is answered with its JSON-RPC error there.
pub fn serve_stdio(backend: impl Backend) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = rt.block_on(async {
        // rmcp speaks through one end of an in-memory pipe; the wire tasks own stdin and
        // stdout at the other.
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (from_server, to_server) = tokio::io::split(ours);
        let (replies, lines) = tokio::sync::mpsc::unbounded_channel();
        let reader = tokio::spawn(wire::read_client(
            tokio::io::stdin(),
            to_server,
            replies.clone(),
        ));
        let writer = tokio::spawn(wire::write_out(
            from_server,
            replies,
            lines,
            tokio::io::stdout(),
        ));
        let result = match RewindMcp::new(backend).serve(theirs).await {
            Ok(running) => running.waiting().await.map(drop).map_err(Error::from),
            // stdin closed before the client said anything: nothing to serve.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
            Err(e) => Err(Error::from(Box::new(e))),
        };
        // rmcp's end is closed by now (at the end of stdin, or rmcp ended first: then the
        // reader is stopped); what rmcp wrote is flushed before the process ends.
        reader.abort();
        let _ = writer.await;
        result
    });
    // A read of stdin still waiting (rmcp ended first) must not hold the exit.
    rt.shutdown_background();
    served
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// What rewind's own parser makes of the command's words.
    fn parsed(command: &Command) -> Command {
        let words = command.words().unwrap();
        command::Cli::try_parse_from(std::iter::once("rewind".into()).chain(words))
            .unwrap_or_else(|e| panic!("{command:?}: {e}"))
            .command
    }

    #[test]
    fn a_hunk_goes_with_its_change_or_turn_and_previews_unless_applied() {
        let command = rollback_command(&RollbackArgs {
            change: Some(7),
            hunk: Some(2),
            path: Some("-odd name".into()),
            ..RollbackArgs::default()
        })
        .unwrap();
        let Command::Rollback(a) = parsed(&command) else {
            panic!("a rollback")
        };
        assert_eq!((a.change, a.hunk, a.dry_run), (Some(7), Some(2), true));
        assert_eq!(a.path.as_deref(), Some(std::path::Path::new("-odd name")));
        assert_eq!(
            rollback_command(&RollbackArgs {
                path: Some("a".into()),
                turn: Some("s:1".into()),
                ..RollbackArgs::default()
            })
            .unwrap_err(),
            BadArguments::PathWithoutHunk,
        );
        let Command::Comment(c) = parsed(&comments_command(&CommentsArgs::default())) else {
            panic!("a comment list")
        };
        assert!(matches!(
            c.action,
            command::comment::CommentAction::List(ref l) if l.mine && !l.all
        ));
    }

    #[test]
    fn every_tool_makes_a_command_rewind_parses_back_unchanged() {
        let commands = [
            history_command(&HistoryArgs {
                path: Some("-x/y z".into()),
                session: Some("s1".into()),
                until: Some("40".into()),
                ..HistoryArgs::default()
            }),
            diff_command(&DiffArgs {
                id: Some(3),
                paths: vec!["--".into(), "a b".into()],
                stat: true,
                ..DiffArgs::default()
            }),
            diff_command(&DiffArgs {
                from: Some("before".into()),
                to: Some("10m".into()),
                ..DiffArgs::default()
            }),
            cat_command(&CatArgs {
                path: "--help".into(),
                at: Some("2".into()),
                offset: 0,
            }),
            turns_command(&TurnsArgs {
                session: Some("s".into()),
            }),
            checkpoint_command(&CheckpointArgs {
                name: "lunch".into(),
                force: true,
            }),
            rollback_command(&RollbackArgs {
                file: Some("-f".into()),
                to: Some("12".into()),
                apply: true,
                ..RollbackArgs::default()
            }),
            Ok(undo_command(&UndoArgs {
                id: 4,
                force: false,
                apply: false,
            })),
        ];
        for command in commands {
            let command = command.unwrap();
            assert_eq!(format!("{:?}", parsed(&command)), format!("{command:?}"));
        }
    }

    #[test]
    fn arguments_that_make_no_command_say_why() {
        let history = |a: HistoryArgs| history_command(&a).unwrap_err();
        assert_eq!(
            history(HistoryArgs {
                session: Some("--force".into()),
                ..HistoryArgs::default()
            })
            .to_string(),
            "`session` must not start with '-': \"--force\""
        );
        assert_eq!(
            history(HistoryArgs {
                limit: Some(0),
                ..HistoryArgs::default()
            }),
            BadArguments::Limit
        );
        assert_eq!(
            history(HistoryArgs {
                path: Some("x".repeat(MAX_ARGUMENT + 1)),
                ..HistoryArgs::default()
            }),
            BadArguments::TooLong {
                what: "path",
                len: MAX_ARGUMENT + 1
            }
        );
        assert!(matches!(
            checkpoint_command(&CheckpointArgs {
                name: "12".into(),
                force: false
            }),
            Err(BadArguments::Name(_))
        ));
        assert_eq!(
            diff_command(&DiffArgs {
                id: Some(1),
                session: Some("s".into()),
                ..DiffArgs::default()
            })
            .unwrap_err()
            .to_string(),
            "give at most one of id, session, agent, turn, since, from; got id, session"
        );
    }
}
