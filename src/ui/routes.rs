//! The page's addresses. Reads are GETs that answer HTML (the whole page, or a fragment the
//! page's script puts in place); actions are POSTs under `/act/`. Every answer comes from one
//! of the CLI's commands run through [`super::history`].

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Form, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;

use super::history::{self, Answer, Refusal};
use super::{Shared, guard, page};
use crate::command::Command;
use crate::command::cat::CatArgs;
use crate::command::checkpoint::CheckpointArgs;
use crate::command::comment::{CommentAction, CommentAddArgs, CommentArgs, CommentListArgs};
use crate::command::diff::DiffArgs;
use crate::command::log::LogArgs;
use crate::command::rollback::RollbackArgs;
use crate::command::sessions::SessionsArgs;
use crate::command::show::ShowArgs;
use crate::command::turns::TurnsArgs;
use crate::history::{Name, Selection};

/// Timeline rows per page.
const PAGE: usize = 100;
/// How far a search looks back for matches before it offers to look further.
const SEARCH_SCAN: usize = 20_000;
/// The file tree counts this many of the newest changes.
const TREE_SCAN: usize = 5_000;
/// The longest value a parameter may have.
const MAX_PARAM: usize = 1024;

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/{name}", get(asset))
        .route("/frag/changes", get(changes))
        .route("/frag/stats", get(stats))
        .route("/frag/sidebar", get(sidebar))
        .route("/frag/files", get(files))
        .route("/frag/diff", get(diff))
        .route("/frag/tree", get(tree))
        .route("/frag/file", get(file))
        .route("/events", get(events))
        .route("/act/plan", post(plan))
        .route("/act/rollback", post(rollback))
        .route("/act/checkpoint", post(checkpoint))
        .route("/act/comment", post(comment))
        .route("/frag/comments", get(comments))
        .layer(DefaultBodyLimit::max(16 * 1024))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check,
        ))
        .with_state(state)
}

/// An answer that is not the page: a status and a sentence.
struct Bad(StatusCode, String);

impl IntoResponse for Bad {
    fn into_response(self) -> Response {
        let body = html! { div.error { strong { (self.0.as_u16()) } " " (self.1) } };
        (self.0, body).into_response()
    }
}

impl From<Refusal> for Bad {
    fn from(r: Refusal) -> Bad {
        match r {
            Refusal::Usage(m) => Bad(StatusCode::BAD_REQUEST, m),
            Refusal::NeedsMount(m) => Bad(StatusCode::CONFLICT, m),
            Refusal::Failed(m) => Bad(StatusCode::INTERNAL_SERVER_ERROR, m),
        }
    }
}

type Html = Result<Markup, Bad>;

/// Run a command off the async threads.
async fn run(state: &Shared, command: Command) -> Result<Answer, Bad> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || state.backend.run(&command))
        .await
        .map_err(|e| Bad(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(Bad::from)
}

fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A parameter as given, if it is a sensible size and plain text.
fn param(v: &Option<String>, what: &str) -> Result<Option<String>, Bad> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) if v.len() > MAX_PARAM => Err(Bad(
            StatusCode::BAD_REQUEST,
            format!("{what} is too long ({} bytes)", v.len()),
        )),
        Some(v) if v.chars().any(char::is_control) => Err(Bad(
            StatusCode::BAD_REQUEST,
            format!("{what} has control characters"),
        )),
        Some(v) => Ok(Some(v.to_string())),
    }
}

/// A path inside the workspace, relative to its root: never `..`, never absolute. Taken as
/// given, neither trimmed nor refused for control characters: a file may be named `x ` or
/// hold a tab, and `x ` answered for `x`.
fn path_param(v: &Option<String>) -> Result<Option<String>, Bad> {
    let p = match v.as_deref() {
        None | Some("") => return Ok(None),
        Some(p) if p.len() > MAX_PARAM => {
            return Err(Bad(
                StatusCode::BAD_REQUEST,
                format!("the path is too long ({} bytes)", p.len()),
            ));
        }
        Some(p) if p.contains('\0') => {
            return Err(Bad(
                StatusCode::BAD_REQUEST,
                "a path has no NUL byte".into(),
            ));
        }
        // The page shows a name that is not UTF-8 with U+FFFD for its bytes, and cannot send
        // them back: asked for that text, it answered for no file ("nothing to roll back",
        // "did not exist at that point").
        Some(p) if p.contains('\u{FFFD}') => {
            return Err(Bad(
                StatusCode::BAD_REQUEST,
                format!(
                    "{p}: this name is not UTF-8 (the page shows its bytes as U+FFFD) and the \
                     page cannot name it exactly; use `rewind` in a terminal, which takes it as \
                     it is"
                ),
            ));
        }
        Some(p) => p,
    };
    let p = p.trim_start_matches("./").trim_end_matches('/').to_string();
    if p.starts_with('/') || p.split('/').any(|c| c == "..") {
        return Err(Bad(
            StatusCode::BAD_REQUEST,
            format!("{p:?}: a path inside the workspace, relative to its root, without `..`"),
        ));
    }
    if p.split('/').next() == Some(".rewind") {
        return Err(Bad(
            StatusCode::BAD_REQUEST,
            "the control folder has no history".into(),
        ));
    }
    Ok(Some(p))
}

/// A point for `.rewind/at/POINT`: one name, not a path.
fn point_param(v: &Option<String>) -> Result<Option<String>, Bad> {
    let p = param(v, "the point")?;
    if p.as_deref()
        .is_some_and(|p| p.contains('/') || p == ".." || p == ".")
    {
        return Err(Bad(StatusCode::BAD_REQUEST, "a point has no `/`".into()));
    }
    Ok(p)
}

async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    let (body, kind): (&'static str, &str) = match name.as_str() {
        "app.js" => (include_str!("assets/app.js"), "text/javascript"),
        "app.css" => (include_str!("assets/app.css"), "text/css"),
        "hljs.js" => (include_str!("assets/highlight.min.js"), "text/javascript"),
        "hljs.css" => (include_str!("assets/hljs.css"), "text/css"),
        _ => return Bad(StatusCode::NOT_FOUND, format!("no asset {name}")).into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    q: Option<String>,
    session: Option<String>,
    agent: Option<String>,
    path: Option<String>,
    since: Option<String>,
    until: Option<String>,
    turn: Option<String>,
    /// Older than this change (the next page).
    before: Option<u64>,
    /// Newer than this change (live updates).
    after: Option<u64>,
}

/// A page of the timeline, newest first, and the id to go on from.
async fn timeline_page(state: &Shared, f: &Filter) -> Result<(Vec<Value>, Option<u64>), Bad> {
    let q = param(&f.q, "the search")?.map(|q| q.to_lowercase());
    let mut sel = Selection {
        session: param(&f.session, "the session")?,
        agent: param(&f.agent, "the agent")?,
        turn: param(&f.turn, "the turn")?,
        since: match f.after {
            Some(a) => Some(a.to_string()),
            None => param(&f.since, "since")?,
        },
        until: param(&f.until, "until")?,
        path: path_param(&f.path)?.map(String::into_bytes),
        ..Selection::default()
    };
    let mut before = f.before;
    let mut found: Vec<Value> = Vec::new();
    let mut scanned = 0;
    let batch = if q.is_some() { 1000 } else { PAGE };
    loop {
        if before.is_some_and(|b| b <= 1) {
            return Ok((found, None));
        }
        if let Some(b) = before {
            sel.until = Some((b - 1).to_string());
        }
        let log = LogArgs {
            json: true,
            limit: Some(batch),
            ..LogArgs::of(&sel).map_err(Refusal::from)?
        };
        let mut rows = json_lines(&run(state, Command::Log(log)).await?.output);
        rows.reverse();
        let full = rows.len() == batch;
        scanned += rows.len();
        before = rows.last().and_then(|c| c["id"].as_u64());
        // A match beyond the page's last: the next page starts after the last one shown.
        let mut more = false;
        for c in rows {
            let hit = q.as_ref().is_none_or(|q| {
                ["path", "from", "session", "agent", "process"]
                    .iter()
                    .any(|k| c[*k].as_str().is_some_and(|v| v.to_lowercase().contains(q)))
            });
            if !hit {
                continue;
            }
            if found.len() < PAGE {
                found.push(c);
            } else {
                more = true;
                break;
            }
        }
        let last_shown = found.last().and_then(|c| c["id"].as_u64());
        if more && f.after.is_none() {
            return Ok((found, last_shown));
        }
        if !full || f.after.is_some() {
            return Ok((found, None));
        }
        if found.len() >= PAGE {
            return Ok((found, last_shown));
        }
        if scanned >= SEARCH_SCAN {
            // Searched this far without a page's worth: the next look goes on from here.
            return Ok((found, before));
        }
    }
}

async fn sidebar_markup(state: &Shared) -> Html {
    let sessions = Command::Sessions(SessionsArgs { json: true });
    let sessions = json_lines(&run(state, sessions).await?.output);
    let turns = Command::Turns(TurnsArgs {
        session: None,
        json: true,
        show: None,
    });
    let mut turns = json_lines(&run(state, turns).await?.output);
    turns.reverse();
    turns.truncate(300);
    let mut agents: Vec<String> = sessions
        .iter()
        .flat_map(|s| s["agents"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(String::from))
        .collect();
    agents.sort();
    agents.dedup();
    let mut sessions = sessions;
    sessions.reverse();
    let last = sessions
        .iter()
        .filter_map(|s| s["last_id"].as_u64())
        .max()
        .unwrap_or(0);
    Ok(page::sidebar(&page::Sidebar {
        last,
        sessions: &sessions,
        turns: &turns,
        agents: &agents,
    }))
}

async fn index(State(state): State<Shared>, Query(f): Query<Filter>) -> Html {
    let sidebar = sidebar_markup(&state).await?;
    let (rows, more) = timeline_page(&state, &f).await?;
    let ws = state.backend.workspace().display().to_string();
    Ok(page::index(
        &page::Layout {
            workspace: &ws,
            mounted: state.backend.mounted(),
            csrf: &state.csrf,
        },
        sidebar,
        page::timeline(
            "Timeline",
            page::rows(&rows, more.map(|m| m.to_string()).as_deref()),
        ),
    ))
}

async fn changes(State(state): State<Shared>, Query(f): Query<Filter>) -> Html {
    let (rows, more) = timeline_page(&state, &f).await?;
    Ok(page::rows(&rows, more.map(|m| m.to_string()).as_deref()))
}

async fn sidebar(State(state): State<Shared>) -> Html {
    sidebar_markup(&state).await
}

#[derive(Deserialize)]
struct Ids {
    ids: String,
}

/// `+A −D` of each listed change, from `rewind diff ID --stat`.
async fn stats(
    State(state): State<Shared>,
    Query(q): Query<Ids>,
) -> Result<axum::Json<BTreeMap<u64, String>>, Bad> {
    let ids: Vec<u64> = q
        .ids
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            Bad(
                StatusCode::BAD_REQUEST,
                "ids: numbers, comma-separated".into(),
            )
        })?;
    if ids.len() > PAGE * 2 {
        return Err(Bad(StatusCode::BAD_REQUEST, "too many ids at once".into()));
    }
    let mut out = BTreeMap::new();
    for id in ids {
        let change = Selection {
            change: Some(id),
            ..Selection::default()
        };
        let diff = DiffArgs {
            stat: true,
            ..DiffArgs::of(&change, &[]).map_err(Refusal::from)?
        };
        let stat = match run(&state, Command::Diff(diff)).await {
            Ok(a) => {
                let text = String::from_utf8_lossy(&a.output).into_owned();
                let last = text.lines().last().unwrap_or("").to_string();
                let binary = text.contains("Bin ");
                page::stat(&(last + if binary { " Bin" } else { "" })).into_string()
            }
            Err(_) => String::new(),
        };
        out.insert(id, stat);
    }
    Ok(axum::Json(out))
}

async fn files(State(state): State<Shared>) -> Html {
    let log = LogArgs {
        json: true,
        limit: Some(TREE_SCAN),
        ..LogArgs::of(&Selection::default()).map_err(Refusal::from)?
    };
    let out = run(&state, Command::Log(log)).await?;
    let rows = json_lines(&out.output);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for c in &rows {
        if c["before"]["type"] == "dir" || c["after"]["type"] == "dir" {
            continue;
        }
        if let Some(p) = c["path"].as_str() {
            *counts.entry(p.to_string()).or_default() += 1;
        }
    }
    // A folder shows with the total below it, not as a file of its own.
    let folders: Vec<String> = counts
        .keys()
        .filter(|p| {
            let below = format!("{p}/");
            counts
                .range(below.clone()..)
                .next()
                .is_some_and(|(q, _)| q.starts_with(&below))
        })
        .cloned()
        .collect();
    for f in folders {
        counts.remove(&f);
    }
    Ok(page::files(&counts, rows.len()))
}

#[derive(Debug, Default, Deserialize)]
struct DiffQuery {
    id: Option<u64>,
    turn: Option<String>,
    session: Option<String>,
    agent: Option<String>,
    from: Option<String>,
    to: Option<String>,
    path: Option<String>,
    view: Option<String>,
}

async fn diff(State(state): State<Shared>, Query(q): Query<DiffQuery>) -> Html {
    let filter: Vec<Vec<u8>> = path_param(&q.path)?
        .map(String::into_bytes)
        .into_iter()
        .collect();
    let mut sel = Selection::default();
    let (title, sub, plan, at): (String, String, Option<(&str, String)>, Option<String>);
    if let Some(id) = q.id {
        let show = run(&state, Command::Show(ShowArgs { id, json: true })).await?;
        let c: Value = serde_json::from_slice(&show.output).unwrap_or(Value::Null);
        title = format!("Change #{id}");
        sub = format!(
            "{} {} · {} · {} · {}{}",
            c["kind"].as_str().unwrap_or(""),
            c["path"].as_str().unwrap_or(""),
            c["session"].as_str().unwrap_or(""),
            c["agent"].as_str().unwrap_or(""),
            c["process"].as_str().unwrap_or(""),
            c["time"]
                .as_str()
                .map(|t| format!(" · {t}"))
                .unwrap_or_default()
        );
        sel.change = Some(id);
        plan = Some(("change", id.to_string()));
        at = Some(id.to_string());
    } else if let Some(t) = param(&q.turn, "the turn")? {
        title = format!("Turn {t}");
        sub = "what the agent did for this prompt, shell commands included".into();
        sel.turn = Some(t.clone());
        plan = Some(("turn", t));
        at = Some(String::new());
    } else if let Some(s) = param(&q.session, "the session")? {
        title = format!("Session {s}");
        sub = "everything the session did".into();
        sel.session = Some(s.clone());
        plan = Some(("session", s));
        at = Some(String::new());
    } else if let Some(a) = param(&q.agent, "the agent")? {
        title = format!("Agent {a}");
        sub = "everything the agent did".into();
        sel.agent = Some(a.clone());
        plan = Some(("agent", a));
        at = Some(String::new());
    } else if let Some(from) = param(&q.from, "from")? {
        let to = param(&q.to, "to")?;
        title = format!("From {from} to {}", to.as_deref().unwrap_or("now"));
        sub = "the whole tree compared at two points".into();
        // From a point on is `--since`; between two, `--from` and `--to`.
        match &to {
            Some(_) => sel.from = Some(from.clone()),
            None => sel.since = Some(from.clone()),
        }
        sel.until = to.clone();
        plan = to.is_none().then_some(("to", from));
        at = Some(to.unwrap_or_default());
    } else {
        return Err(Bad(
            StatusCode::BAD_REQUEST,
            "say what to diff: id, turn, session, agent or from".into(),
        ));
    }
    let hunks_of = match (sel.change, &sel.turn) {
        (Some(id), _) => Some(("change", id.to_string())),
        (None, Some(t)) => Some(("turn", t.clone())),
        _ => None,
    };
    let diff = DiffArgs::of(&sel, &filter).map_err(Refusal::from)?;
    let out = run(&state, Command::Diff(diff)).await?;
    let split = q.view.as_deref() == Some("split");
    let output = page::without_binary_patches(&out.output);
    let truncated = output.len() > page::MAX_DIFF_BYTES;
    let text = String::from_utf8_lossy(&output[..output.len().min(page::MAX_DIFF_BYTES)]);
    Ok(html! {
        (page::diff_head(&title, &sub, plan.as_ref().map(|(w, v)| (*w, v.as_str())), split))
        (page::diff(&text, split, at.as_deref(), hunks_of.as_ref().map(|(k, v)| (*k, v.as_str())), truncated))
    })
}

#[derive(Deserialize)]
struct TreeQuery {
    at: Option<String>,
    dir: Option<String>,
}

async fn tree(State(state): State<Shared>, Query(q): Query<TreeQuery>) -> Html {
    let at = point_param(&q.at)?
        .ok_or_else(|| Bad(StatusCode::BAD_REQUEST, "say which point: at=".into()))?;
    let dir = path_param(&q.dir)?.unwrap_or_default();
    let st = state.clone();
    let (a, d) = (at.clone(), dir.clone());
    let names = tokio::task::spawn_blocking(move || st.backend.tree_at(&a, &d))
        .await
        .map_err(|e| Bad(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(page::tree(&at, &dir, &names))
}

#[derive(Deserialize)]
struct FileQuery {
    path: Option<String>,
    at: Option<String>,
}

async fn file(State(state): State<Shared>, Query(q): Query<FileQuery>) -> Html {
    let path = path_param(&q.path)?
        .ok_or_else(|| Bad(StatusCode::BAD_REQUEST, "say which file: path=".into()))?;
    let at = param(&q.at, "the point")?;
    let cat = CatArgs {
        path: path.clone().into(),
        at: at.clone(),
    };
    let out = run(&state, Command::Cat(cat)).await?;
    Ok(page::whole_file(
        &path,
        at.as_deref().unwrap_or("now"),
        &out.output,
    ))
}

async fn events(
    State(state): State<Shared>,
) -> Sse<impl tokio_stream::Stream<Item = Result<Event, Infallible>>> {
    let stream = BroadcastStream::new(state.events.subscribe()).map(|line| {
        Ok(match line {
            Ok(l) => Event::default().event("change").data(l),
            Err(_) => Event::default().event("missed").data("{}"),
        })
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[derive(Debug, Deserialize)]
struct Act {
    what: String,
    value: String,
    #[serde(default)]
    force: Option<String>,
    /// A hunk's: the change or turn whose diff it is in, and the file.
    #[serde(default)]
    of: Option<String>,
    #[serde(default)]
    ofv: Option<String>,
    #[serde(default)]
    path: Option<String>,
    /// The plan the person confirmed ([`plan_digest`] of its dry run's text): the rollback is
    /// run only if its dry run still says the same.
    #[serde(default)]
    planned: Option<String>,
}

/// What a plan said, in short: a rollback confirmed on the page runs only if its dry run
/// still prints this (no change landed meanwhile that it would take back too).
fn plan_digest(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex()[..32].to_string()
}

/// The newest change id (0: none yet).
async fn newest_id(state: &Shared) -> Result<u64, Bad> {
    let log = LogArgs {
        json: true,
        limit: Some(1),
        ..LogArgs::of(&Selection::default()).map_err(Refusal::from)?
    };
    let rows = json_lines(&run(state, Command::Log(log)).await?.output);
    Ok(rows.last().and_then(|c| c["id"].as_u64()).unwrap_or(0))
}

/// Whether a change after `since` touched a path the plan `text` names: the plan may read the
/// same (`revert a.txt`) and yet take back a change it never showed.
async fn touched_since(state: &Shared, since: u64, text: &str) -> Result<bool, Bad> {
    let log = LogArgs {
        json: true,
        limit: Some(10_000),
        ..LogArgs::of(&Selection {
            since: Some(since.to_string()),
            ..Selection::default()
        })
        .map_err(Refusal::from)?
    };
    let rows = json_lines(&run(state, Command::Log(log)).await?.output);
    Ok(rows.len() >= 10_000
        || rows
            .iter()
            .flat_map(names_of)
            .any(|p| plan_names(text, &crate::history::format::escape_path(&p))))
}

/// Every name a change in `log --json` touched, as exact bytes.
fn names_of(c: &Value) -> Vec<Vec<u8>> {
    use base64::Engine;
    let exact = |text: &Value, bytes: &Value| match bytes.as_str() {
        Some(b64) => base64::engine::general_purpose::STANDARD.decode(b64).ok(),
        None => text.as_str().map(|t| t.as_bytes().to_vec()),
    };
    let mut names: Vec<Vec<u8>> = [("path", "path_bytes"), ("from", "from_bytes")]
        .iter()
        .filter_map(|(t, b)| exact(&c[*t], &c[*b]))
        .collect();
    if let Some(links) = c["links"].as_array() {
        let bytes = c["links_bytes"].as_array();
        for (i, l) in links.iter().enumerate() {
            let b = bytes.and_then(|b| b.get(i)).unwrap_or(&Value::Null);
            names.extend(exact(l, b));
        }
    }
    names
}

/// Whether the plan `text` (a rollback's dry run: a kind in a column of nine, then the path
/// as `escape_path` shows it) has a line for the path shown as `shown`, or links a name to it.
/// A name is matched whole: `a` is not named by `data.txt`, nor by the words of the summary.
fn plan_names(text: &str, shown: &str) -> bool {
    text.lines().any(|line| {
        const KINDS: [&str; 8] = [
            "skip", "restore", "remove", "revert", "chmod", "link", "separate", "failed",
        ];
        let (Some(kind), Some(rest)) = (line.get(..9), line.get(9..)) else {
            return false;
        };
        if !KINDS.contains(&kind.trim_end_matches(' ')) || !kind.ends_with(' ') {
            return false;
        }
        // What follows a path: ` (file)`, `: why`, ` [who holds it]`, a hunk's ` lines 2-4`.
        // A longer name that begins with this one and a space (`a b` for `a`) matches too,
        // which only asks for a confirmation again.
        let whole = rest
            .strip_prefix(shown)
            .is_some_and(|after| after.is_empty() || after.starts_with([' ', ':']));
        whole || rest.contains(&format!(" (to {shown})"))
    })
}

/// A relative point (`15m`) planned now names the instant it meant when the plan was made, so
/// that confirming later rolls back to the same point.
fn pinned(mut a: Act) -> Act {
    if a.what == "to"
        && let Some(ago) = crate::history::time::parse_duration(a.value.trim())
    {
        a.value = crate::history::time::rfc3339(crate::history::time::now_ns().saturating_sub(ago));
    }
    a
}

/// The command of a rollback button: `rollback --WHAT VALUE`, or one hunk's.
fn rollback_command(a: &Act, dry: bool) -> Result<Command, Bad> {
    let value = match a.what.as_str() {
        "file" => path_param(&Some(a.value.clone()))?,
        _ => param(&Some(a.value.clone()), "the value")?,
    }
    .ok_or_else(|| Bad(StatusCode::BAD_REQUEST, "say what to roll back".into()))?;
    let mut sel = Selection::default();
    if a.what == "hunk" {
        let k: usize = value
            .parse()
            .map_err(|_| Bad(StatusCode::BAD_REQUEST, "a hunk is a number".into()))?;
        let ofv = param(&a.ofv, "the change or turn")?
            .ok_or_else(|| Bad(StatusCode::BAD_REQUEST, "which change or turn?".into()))?;
        match a.of.as_deref() {
            Some("change") => {
                sel.change =
                    Some(ofv.parse().map_err(|_| {
                        Bad(StatusCode::BAD_REQUEST, "a change id is a number".into())
                    })?);
            }
            Some("turn") => sel.turn = Some(ofv),
            _ => return Err(Bad(StatusCode::BAD_REQUEST, "of: change or turn".into())),
        }
        let path = path_param(&a.path)?
            .ok_or_else(|| Bad(StatusCode::BAD_REQUEST, "which file?".into()))?;
        return Ok(Command::Rollback(RollbackArgs {
            hunk: Some(k),
            path: Some(path.into()),
            dry_run: dry,
            ..RollbackArgs::of(&sel).map_err(Refusal::from)?
        }));
    }
    match a.what.as_str() {
        "change" => {
            sel.change = Some(
                value
                    .parse()
                    .map_err(|_| Bad(StatusCode::BAD_REQUEST, "a change id is a number".into()))?,
            );
        }
        "file" => sel.path = Some(value.into_bytes()),
        "turn" => sel.turn = Some(value),
        "session" => sel.session = Some(value),
        "agent" => sel.agent = Some(value),
        "to" => sel.since = Some(value),
        other => {
            return Err(Bad(
                StatusCode::BAD_REQUEST,
                format!("cannot roll back a {other:?}"),
            ));
        }
    }
    Ok(Command::Rollback(RollbackArgs {
        dry_run: dry,
        force: a.force.as_deref() == Some("1"),
        ..RollbackArgs::of(&sel).map_err(Refusal::from)?
    }))
}

/// The command as the page shows it: the line it runs.
fn shown(command: &Command) -> Result<String, Bad> {
    Ok(format!("rewind {}", history::line(command)?))
}

async fn plan(State(state): State<Shared>, Form(a): Form<Act>) -> Html {
    let a = pinned(a);
    let newest = newest_id(&state).await?;
    let out = run(&state, rollback_command(&a, true)?).await?;
    plan_box(&state, &a, &out, newest, false)
}

/// The dry run's plan of `a` (`out`, made when `newest` was the newest change), with the button
/// that runs it as planned; `changed`: this plan is not the one a confirmation was for.
fn plan_box(state: &Shared, a: &Act, out: &Answer, newest: u64, changed: bool) -> Html {
    let shown = shown(&rollback_command(a, true)?)?;
    let text = String::from_utf8_lossy(&out.output).into_owned();
    let nothing =
        text.starts_with("nothing to roll back") || text.contains("\nnothing to roll back");
    let mounted = state.backend.mounted();
    let force = a.force.as_deref() == Some("1");
    let digest = format!("{}.{newest}", plan_digest(&text));
    Ok(html! {
        div.plan-box {
            @if changed {
                p.warn { "Nothing was rolled back: the plan changed since you saw it (changes landed meanwhile). This is the plan now." }
            }
            @if a.what == "hunk" {
                h2 { "Revert hunk " (a.value) " of " code { (a.path.as_deref().unwrap_or("")) } " in " (a.of.as_deref().unwrap_or("")) " " code { (a.ofv.as_deref().unwrap_or("")) } }
            } @else {
                h2 { "Roll back: " (a.what) " " code { (a.value) } }
            }
            p.muted { "This is the dry run: the exact plan " code { (shown) } " prints. Nothing has changed yet." }
            (page::plan_lines(&text))
            @if out.partial && !force && a.what != "hunk" {
                p.warn { "Some paths are skipped: someone else changed them since. "
                    button.ghost.small data-plan=(a.what) data-value=(a.value) data-force="1" { "Plan with --force" } }
            }
            div.buttons {
                button.ghost #cancel { "Cancel" }
                @if !nothing {
                    @if mounted {
                        button.danger #confirm data-what=(a.what) data-value=(a.value) data-force=(if force {"1"} else {""})
                            data-of=[a.of.as_deref()] data-ofv=[a.ofv.as_deref()] data-path=[a.path.as_deref()]
                            data-planned=(digest) { "Roll back now" }
                    } @else {
                        span.muted { "Rolling back needs the mount: mount the workspace, then restart " code{"rewind ui"} "." }
                    }
                }
            }
        }
    })
}

async fn rollback(State(state): State<Shared>, Form(a): Form<Act>) -> Html {
    if let Some(planned) = &a.planned {
        let (digest, since) = planned.split_once('.').unwrap_or((planned, "0"));
        let since: u64 = since.parse().map_err(|_| {
            Bad(
                StatusCode::BAD_REQUEST,
                "a plan's digest is DIGEST.ID".into(),
            )
        })?;
        let newest = newest_id(&state).await?;
        let again = run(&state, rollback_command(&a, true)?).await?;
        let text = String::from_utf8_lossy(&again.output).into_owned();
        if plan_digest(&text) != digest || touched_since(&state, since, &text).await? {
            return plan_box(&state, &a, &again, newest, true);
        }
    }
    let command = rollback_command(&a, false)?;
    let shown = shown(&command)?;
    let out = run(&state, command).await?;
    let text = String::from_utf8_lossy(&out.output).into_owned();
    let nothing =
        text.starts_with("nothing to roll back") || text.contains("\nnothing to roll back");
    // `rollback-N: restored …` (or `rollback-N: reverted 1 hunk …`) names the session that
    // undoes it.
    let session = text.lines().rev().find_map(|l| {
        l.split_once(": restored")
            .or_else(|| l.split_once(": reverted "))
            .map(|(s, _)| s.to_string())
    });
    Ok(html! {
        div.plan-box.done {
            h2 { @if nothing { "Nothing rolled back" } @else if out.partial { "Rolled back, in part" } @else { "Rolled back" } }
            p.muted { code { (shown) } }
            (page::plan_lines(&text))
            div.buttons {
                button.ghost #cancel { "Close" }
                @if let Some(s) = &session {
                    button.ghost data-plan="session" data-value=(s) data-rollback-session=(s) { "Undo this rollback…" }
                }
            }
        }
    })
}

#[derive(Deserialize)]
struct NewCheckpoint {
    name: String,
}

async fn checkpoint(State(state): State<Shared>, Form(c): Form<NewCheckpoint>) -> Html {
    let name = param(&Some(c.name), "the name")?
        .ok_or_else(|| Bad(StatusCode::BAD_REQUEST, "a checkpoint needs a name".into()))?;
    let checkpoint = CheckpointArgs {
        name: Name::parse("checkpoint", &name).map_err(Refusal::from)?,
        force: false,
        dry_run: false,
    };
    let out = run(&state, Command::Checkpoint(checkpoint)).await?;
    Ok(page::message(
        "Checkpoint",
        &String::from_utf8_lossy(&out.output),
    ))
}

#[derive(Deserialize)]
struct NewComment {
    of: String,
    ofv: String,
    path: String,
    hunk: usize,
    text: String,
}

/// A reviewer's comment on a hunk: `rewind comment add`.
async fn comment(State(state): State<Shared>, Form(c): Form<NewComment>) -> Html {
    let ofv = param(&Some(c.ofv), "the change or turn")?
        .ok_or_else(|| Bad(StatusCode::BAD_REQUEST, "which change or turn?".into()))?;
    let mut sel = Selection::default();
    match c.of.as_str() {
        "change" => {
            sel.change = Some(
                ofv.parse()
                    .map_err(|_| Bad(StatusCode::BAD_REQUEST, "a change id is a number".into()))?,
            );
        }
        "turn" => sel.turn = Some(ofv),
        _ => return Err(Bad(StatusCode::BAD_REQUEST, "of: change or turn".into())),
    }
    let path = path_param(&Some(c.path))?
        .ok_or_else(|| Bad(StatusCode::BAD_REQUEST, "which file?".into()))?;
    let text = c.text.trim();
    if text.is_empty() || text.len() > 16 * 1024 {
        return Err(Bad(
            StatusCode::BAD_REQUEST,
            "a comment is 1 byte to 16 KiB of text".into(),
        ));
    }
    let hunk =
        u32::try_from(c.hunk).map_err(|_| Bad(StatusCode::BAD_REQUEST, "no such hunk".into()))?;
    let add = CommentAddArgs {
        change: sel.change,
        turn: sel.turn,
        session: None,
        path: Some(path.into()),
        line: None,
        hunk: Some(hunk),
        text: vec![text.to_string()],
    };
    let comment = Command::Comment(CommentArgs {
        action: CommentAction::Add(add),
    });
    let out = run(&state, comment).await?;
    Ok(page::message(
        "Comment",
        &String::from_utf8_lossy(&out.output),
    ))
}

/// The open comments: `rewind comment list`.
async fn comments(State(state): State<Shared>) -> Html {
    let list = CommentListArgs {
        session: None,
        all: false,
        json: false,
        mine: false,
    };
    let list = Command::Comment(CommentArgs {
        action: CommentAction::List(list),
    });
    let out = run(&state, list).await?;
    Ok(page::message(
        "Open comments",
        &String::from_utf8_lossy(&out.output),
    ))
}

#[cfg(test)]
mod tests {
    use super::plan_names;

    #[test]
    fn a_plan_names_a_path_whole_and_as_it_shows_it() {
        let plan = "skip     \"q\\\"uote.txt\": changed since by s\nrevert   data.txt (file)\n\
                    link     b.txt (to a b.txt)\nrevert   h.rs lines 2-4: hunk 1 of 2 of change 7\n\
                    dry run: 3 paths would be restored, 1 skipped\n";
        for named in ["\"q\\\"uote.txt\"", "data.txt", "b.txt", "a b.txt", "h.rs"] {
            assert!(plan_names(plan, named), "{named}");
        }
        for not in ["a", "t", "q\"uote.txt", "data", "run", "3"] {
            assert!(!plan_names(plan, not), "{not}");
        }
    }
}
