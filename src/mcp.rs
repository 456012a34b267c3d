//! `rewind mcp`: rewind's history, diffs and rollback offered to AI agents as MCP tools over
//! stdio.
//!
//! The MCP layer knows nothing of rewind's internals: every tool call becomes one rewind
//! command given as CLI words (`["log", "--session", "s1", "-n", "20", "--json"]`), run by a
//! [`Backend`]. The words are exactly what `rewind` would take on its command line, so the
//! backend can hand them to the CLI's own parser.
//!
//! Nothing in this process may print to stdout but the MCP transport: stdout *is* the
//! protocol. A backend must capture the command's output and return it, and logs go to
//! stderr.

use std::sync::Arc;

use rmcp::{
    ServerHandler, ServiceExt,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig},
    tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::Deserialize;

/// What the MCP server calls into.
pub trait Backend: Send + Sync + 'static {
    /// Run one rewind command given as CLI words (e.g. `["log","--session","s1","-n","20"]`);
    /// returns its text output or an error message.
    fn run(&self, words: Vec<String>) -> Result<String, String>;
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
before it lands. Use `history` to see what changed, `diff` to see how, `turns` to list the \
turns of a session, and `checkpoint` to name the current state so you can come back to it.

`rollback` and `undo` put files back. They only PREVIEW unless you pass `apply: true`: without \
it they run as a dry run, change nothing, and their result starts with `DRY RUN`. Look at the \
preview, then call again with `apply: true` to do it. A rollback skips paths that someone \
outside the selection changed later; `force: true` puts those back too, overwriting that work. \
A rollback is itself recorded, so it can be rolled back.";

/// How many changes `history` shows when no `limit` is given.
pub const DEFAULT_HISTORY_LIMIT: usize = 50;

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
    /// At most this many changes, the newest ones (default 50).
    pub limit: Option<usize>,
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
/// file; `to` may also go with `file`.
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
    /// Also put back paths that others changed later, overwriting their work.
    #[serde(default)]
    pub force: bool,
    /// Really do it. Without it (the default) this is a dry run that changes nothing.
    #[serde(default)]
    pub apply: bool,
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

// ---- tool arguments to CLI words ----------------------------------------------------------

/// A value given as an option's argument must be one non-empty word that cannot be taken for a
/// flag.
fn check_value(what: &str, v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Err(format!("`{what}` is empty"));
    }
    if v.starts_with('-') {
        return Err(format!("`{what}` must not start with '-': {v:?}"));
    }
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("`{what}` must be one word without spaces: {v:?}"));
    }
    Ok(())
}

/// Paths go after `--`, so they may start with '-'; they must still be non-empty and one line.
fn check_path(what: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || v.chars().any(|c| c.is_control()) {
        return Err(format!("`{what}` must be a non-empty path: {v:?}"));
    }
    Ok(())
}

struct Words(Vec<String>);

impl Words {
    fn new(cmd: &str) -> Words {
        Words(vec![cmd.to_string()])
    }
    fn opt(&mut self, flag: &str, what: &str, v: &Option<String>) -> Result<(), String> {
        if let Some(v) = v {
            check_value(what, v)?;
            self.0.push(flag.to_string());
            self.0.push(v.clone());
        }
        Ok(())
    }
    fn flag(&mut self, flag: &str, on: bool) {
        if on {
            self.0.push(flag.to_string());
        }
    }
    fn push(&mut self, w: impl Into<String>) {
        self.0.push(w.into());
    }
}

/// The names of the given fields that are set.
fn set(fields: &[(&'static str, bool)]) -> Vec<&'static str> {
    fields
        .iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect()
}

/// `log ... --json`.
pub fn history_words(a: &HistoryArgs) -> Result<Vec<String>, String> {
    let mut w = Words::new("log");
    w.opt("--session", "session", &a.session)?;
    w.opt("--agent", "agent", &a.agent)?;
    w.opt("--turn", "turn", &a.turn)?;
    w.opt("--since", "since", &a.since)?;
    let limit = a.limit.unwrap_or(DEFAULT_HISTORY_LIMIT);
    if limit == 0 {
        return Err("`limit` must be at least 1".into());
    }
    w.push("-n");
    w.push(limit.to_string());
    w.push("--json");
    if let Some(p) = &a.path {
        check_path("path", p)?;
        w.push("--");
        w.push(p.clone());
    }
    Ok(w.0)
}

/// `diff [ID] [--session S|--agent A|--turn T|--since P|--from P [--to P]] [--stat] [-- PATHS]`.
pub fn diff_words(a: &DiffArgs) -> Result<Vec<String>, String> {
    let chosen = set(&[
        ("id", a.id.is_some()),
        ("session", a.session.is_some()),
        ("agent", a.agent.is_some()),
        ("turn", a.turn.is_some()),
        ("since", a.since.is_some()),
        ("from", a.from.is_some()),
    ]);
    if chosen.len() > 1 {
        return Err(format!(
            "give at most one of id, session, agent, turn, since, from; got {}",
            chosen.join(", ")
        ));
    }
    if a.to.is_some() && a.from.is_none() {
        return Err("`to` needs `from`".into());
    }
    let mut w = Words::new("diff");
    if let Some(id) = a.id {
        w.push(id.to_string());
    }
    w.opt("--session", "session", &a.session)?;
    w.opt("--agent", "agent", &a.agent)?;
    w.opt("--turn", "turn", &a.turn)?;
    w.opt("--since", "since", &a.since)?;
    w.opt("--from", "from", &a.from)?;
    w.opt("--to", "to", &a.to)?;
    w.flag("--stat", a.stat);
    if !a.paths.is_empty() {
        w.push("--");
        for p in &a.paths {
            check_path("paths", p)?;
            w.push(p.clone());
        }
    }
    Ok(w.0)
}

/// `turns [--session S]`.
pub fn turns_words(a: &TurnsArgs) -> Result<Vec<String>, String> {
    let mut w = Words::new("turns");
    w.opt("--session", "session", &a.session)?;
    Ok(w.0)
}

/// `checkpoint NAME [--force]`.
pub fn checkpoint_words(a: &CheckpointArgs) -> Result<Vec<String>, String> {
    check_value("name", &a.name)?;
    let mut w = Words::new("checkpoint");
    w.push(a.name.clone());
    w.flag("--force", a.force);
    Ok(w.0)
}

/// `rollback <selector> [--force] [--dry-run]`; `--dry-run` unless `apply`.
pub fn rollback_words(a: &RollbackArgs) -> Result<Vec<String>, String> {
    let chosen = set(&[
        ("session", a.session.is_some()),
        ("agent", a.agent.is_some()),
        ("turn", a.turn.is_some()),
        ("to_turn", a.to_turn.is_some()),
        ("since", a.since.is_some()),
        ("file", a.file.is_some()),
        // `to` on its own is a selector; with `file` it qualifies it.
        ("to", a.to.is_some() && a.file.is_none()),
    ]);
    match chosen.len() {
        0 => {
            return Err(
                "say what to roll back: one of session, agent, turn, to_turn, since, \
                        to, file"
                    .into(),
            );
        }
        1 => {}
        _ => {
            return Err(format!(
                "give exactly one of session, agent, turn, to_turn, since, to, file (`to` may \
                 go with `file`); got {}",
                chosen.join(", ")
            ));
        }
    }
    let mut w = Words::new("rollback");
    w.opt("--session", "session", &a.session)?;
    w.opt("--agent", "agent", &a.agent)?;
    w.opt("--turn", "turn", &a.turn)?;
    w.opt("--to-turn", "to_turn", &a.to_turn)?;
    w.opt("--since", "since", &a.since)?;
    if let Some(f) = &a.file {
        // `--file=PATH` keeps a path that starts with '-' from being read as a flag.
        check_path("file", f)?;
        w.push(format!("--file={f}"));
    }
    w.opt("--to", "to", &a.to)?;
    w.flag("--force", a.force);
    w.flag("--dry-run", !a.apply);
    Ok(w.0)
}

/// `undo ID [--force] [--dry-run]`; `--dry-run` unless `apply`.
pub fn undo_words(a: &UndoArgs) -> Result<Vec<String>, String> {
    let mut w = Words::new("undo");
    w.push(a.id.to_string());
    w.flag("--force", a.force);
    w.flag("--dry-run", !a.apply);
    Ok(w.0)
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

    /// Runs the words on the backend off the async thread (a rewind command may block on disk
    /// for a while) and turns the outcome into a tool result: an error from the backend is a
    /// tool error (`isError: true`) the model can read, not a protocol error.
    async fn run(&self, words: Result<Vec<String>, String>, dry_run: bool) -> CallToolResult {
        let words = match words {
            Ok(w) => w,
            Err(e) => return CallToolResult::error(vec![ContentBlock::text(e)]),
        };
        let backend = Arc::clone(&self.backend);
        match tokio::task::spawn_blocking(move || backend.run(words)).await {
            Ok(Ok(out)) => {
                let text = if dry_run {
                    format!("{DRY_RUN_BANNER}{out}")
                } else {
                    out
                };
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            Ok(Err(e)) => CallToolResult::error(vec![ContentBlock::text(e)]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                "rewind failed unexpectedly: {e}"
            ))]),
        }
    }
}

#[tool_router]
impl RewindMcp {
    /// The history of changes, newest last, one JSON object a line: what changed, when, by
    /// which agent, session and turn.
    #[tool(annotations(
        title = "Change history",
        read_only_hint = true,
        open_world_hint = false
    ))]
    async fn history(&self, Parameters(a): Parameters<HistoryArgs>) -> CallToolResult {
        self.run(history_words(&a), false).await
    }

    /// Unified diffs of what changed: one change (id), the net effect of a session, agent or
    /// turn, everything since a point, or between two points (from, to). Give at most one of
    /// id, session, agent, turn, since, from; none means everything.
    #[tool(annotations(title = "Diff", read_only_hint = true, open_world_hint = false))]
    async fn diff(&self, Parameters(a): Parameters<DiffArgs>) -> CallToolResult {
        self.run(diff_words(&a), false).await
    }

    /// The turns recorded, with their sessions and agents.
    #[tool(annotations(title = "Turns", read_only_hint = true, open_world_hint = false))]
    async fn turns(&self, Parameters(a): Parameters<TurnsArgs>) -> CallToolResult {
        self.run(turns_words(&a), false).await
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
        self.run(checkpoint_words(&a), false).await
    }

    /// Put files back as they were before a selection of changes. Select with exactly one of
    /// session, agent, turn, to_turn, since, to, file (`to` may go with `file`).
    /// PREVIEWS ONLY (a dry run that changes nothing) unless "apply": true.
    #[tool(annotations(
        title = "Roll back",
        read_only_hint = false,
        destructive_hint = true,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn rollback(&self, Parameters(a): Parameters<RollbackArgs>) -> CallToolResult {
        self.run(rollback_words(&a), !a.apply).await
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
        self.run(undo_words(&a), !a.apply).await
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

/// Runs each command as `rewind -C DIR WORDS...`, exactly as in a shell: through the daemon
/// while the workspace is mounted, on the store otherwise.
pub struct ProcessBackend {
    pub exe: std::path::PathBuf,
    pub dir: std::path::PathBuf,
}

impl Backend for ProcessBackend {
    fn run(&self, words: Vec<String>) -> Result<String, String> {
        let out = std::process::Command::new(&self.exe)
            .arg("-C")
            .arg(&self.dir)
            .args(&words)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run rewind: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => Ok(stdout),
            // Done in part, or nothing done as every path was skipped: the output says which.
            Some(1) if stdout.starts_with("skip") && stdout.contains("\nnothing to roll back") => {
                Ok(format!("{stdout}(nothing done: exit status 1)\n"))
            }
            Some(1) if !stdout.is_empty() => Ok(format!("{stdout}(done in part: exit status 1)\n")),
            _ => Err(format!(
                "{}{}",
                stdout,
                stderr.trim().trim_start_matches("rewind: ")
            )),
        }
    }
}

/// Serves MCP on stdin/stdout until stdin closes (or the client goes away). Builds its own
/// single-threaded tokio runtime, so the caller needs none.
pub fn serve_stdio(backend: impl Backend) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let running = match RewindMcp::new(backend)
            .serve(rmcp::transport::stdio())
            .await
        {
            Ok(r) => r,
            // stdin closed before the client said anything: nothing to serve.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
            Err(e) => return Err(Error::from(Box::new(e))),
        };
        running.waiting().await?;
        Ok(())
    })
}
