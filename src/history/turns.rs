//! Agent turns: each prompt a user gives an agent opens a turn of the agent's session, which
//! ends at the agent's stop (or the next prompt). While a turn is open, every change attributed
//! to the session carries its number, and the tool call the agent reported, if any.
//!
//! Turns are told by the agent's hooks (`rewind hook`, through `.rewind/ctl`), kept in the store
//! like checkpoints, and survive remounts: a turn still open when the daemon stopped stays open.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use super::change::{Change, FileKind, FileState, Tool, Turn};
use super::db::unique_prefix;
use super::{Error, History, Result, diff, time};

/// The longest prompt line kept with a turn, in bytes.
pub const PROMPT_MAX: usize = 200;

struct Open {
    turn: Turn,
    /// Tool calls in progress, oldest first: a change goes to the newest.
    tools: Vec<Tool>,
}

pub struct Turns {
    history: History,
    open: Mutex<HashMap<String, Open>>,
}

/// A turn as users name it: `SESSION:N` (SESSION may be a unique beginning of the name), `N`
/// (in the only session with turns, or the given one), or the agent's own prompt id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnRef {
    Number {
        session: Option<String>,
        number: u32,
    },
    PromptId(String),
}

impl TurnRef {
    pub fn parse(s: &str) -> TurnRef {
        if let Ok(n) = s.parse::<u32>() {
            return TurnRef::Number {
                session: None,
                number: n,
            };
        }
        if let Some((session, n)) = s.rsplit_once(':')
            && let Ok(n) = n.parse::<u32>()
        {
            return TurnRef::Number {
                session: Some(session.to_string()),
                number: n,
            };
        }
        TurnRef::PromptId(s.to_string())
    }

    /// The turn this names. `session` narrows a bare number.
    pub fn resolve(&self, history: &History, session: Option<&str>) -> Result<Turn> {
        let all = history.turns(None)?;
        let given = match self {
            TurnRef::Number { session: s, number } => s.as_deref().or(session).map_or_else(
                || {
                    let matching: Vec<&Turn> = all.iter().filter(|t| t.number == *number).collect();
                    match matching.as_slice() {
                        [one] => Ok(Some((*one).clone())),
                        [] => Ok(None),
                        _ => Err(Error::Usage(format!(
                            "turn {number} exists in several sessions; say which: {}",
                            matching
                                .iter()
                                .map(|t| format!("{}:{number}", t.session))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))),
                    }
                },
                |s| {
                    // The session as written, or the one with turns whose name begins with it.
                    let sessions: BTreeSet<&str> = all.iter().map(|t| t.session.as_str()).collect();
                    let s = unique_prefix(s, sessions.into_iter())?;
                    Ok(all
                        .iter()
                        .find(|t| t.session == s && t.number == *number)
                        .cloned())
                },
            )?,
            TurnRef::PromptId(id) => {
                // An agent's prompt id, in `session` if given; one several turns carry (two
                // sessions' agents use the same ids) is refused, naming them.
                let matching: Vec<&Turn> = all
                    .iter()
                    .filter(|t| t.prompt_id.as_deref() == Some(id.as_str()))
                    .filter(|t| session.is_none_or(|s| t.session == s))
                    .collect();
                match matching.as_slice() {
                    [] => None,
                    [one] => Some((*one).clone()),
                    _ => {
                        return Err(Error::Usage(format!(
                            "prompt {id} is in several turns; say which: {}",
                            matching
                                .iter()
                                .map(|t| format!("{}:{}", t.session, t.number))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                }
            }
        };
        given.ok_or_else(|| {
            Error::NoTurn(match self {
                TurnRef::Number { session, number } => match session {
                    Some(s) => format!("{s}:{number}"),
                    None => number.to_string(),
                },
                TurnRef::PromptId(id) => id.clone(),
            })
        })
    }
}

/// What `turn` added to its session's conversation: its transcript less the one kept with the
/// session's previous turn when the transcript begins with it (agents append to their
/// transcripts), else the whole transcript as of the turn's end. `None`: none was kept (the
/// agent names no transcript, or it could not be read).
pub fn conversation(history: &History, turn: &Turn) -> Result<Option<Vec<u8>>> {
    let Some(hash) = turn.conversation else {
        return Ok(None);
    };
    let text = history.store().read_blob(&hash)?;
    let previous = history
        .turns(Some(&turn.session))?
        .into_iter()
        .filter(|t| t.number < turn.number)
        .filter_map(|t| t.conversation)
        .next_back();
    if let Some(prev) = previous.filter(|p| *p != hash) {
        let before = history.store().read_blob(&prev)?;
        if let Some(added) = text.strip_prefix(before.as_slice()) {
            return Ok(Some(added.to_vec()));
        }
    }
    Ok(Some(text))
}

/// The first line of a prompt, cut to [`PROMPT_MAX`] bytes on a character boundary.
pub fn first_line(prompt: &str) -> String {
    let line = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let line = line.trim();
    if line.len() <= PROMPT_MAX {
        return line.to_string();
    }
    let mut end = PROMPT_MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

impl Turns {
    /// The turns still open in `history` (the daemon stopped during them) go on.
    pub fn load(history: History) -> Result<Turns> {
        let mut open = HashMap::new();
        for turn in history.turns(None)? {
            if turn.end_id.is_none() {
                open.insert(
                    turn.session.clone(),
                    Open {
                        turn,
                        tools: Vec::new(),
                    },
                );
            }
        }
        Ok(Turns {
            history,
            open: Mutex::new(open),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Open>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A prompt was given in `session`: end its open turn and open the next. `last_id` is the
    /// newest change id now (everything before the prompt is recorded by then).
    pub fn begin(
        &self,
        session: &str,
        agent: &str,
        prompt: &str,
        prompt_id: Option<String>,
        last_id: u64,
    ) -> Result<Turn> {
        let mut open = self.lock();
        // The table follows the store: a turn whose end could not be written stays open.
        if let Some(prev) = open.remove(session)
            && let Err(e) = self.finish(prev.turn.clone(), last_id)
        {
            open.insert(session.to_string(), prev);
            return Err(e);
        }
        let number = self
            .history
            .turns(Some(session))?
            .iter()
            .map(|t| t.number)
            .max()
            .unwrap_or(0)
            + 1;
        let turn = Turn {
            session: session.to_string(),
            number,
            prompt: first_line(prompt),
            prompt_id,
            agent: agent.to_string(),
            start_time_ns: time::now_ns(),
            start_id: last_id,
            end_time_ns: None,
            end_id: None,
            conversation: None,
        };
        self.history.put_turn(&turn)?;
        open.insert(
            session.to_string(),
            Open {
                turn: turn.clone(),
                tools: Vec::new(),
            },
        );
        Ok(turn)
    }

    /// The agent stopped: its open turn ends at `last_id`.
    pub fn end(&self, session: &str, last_id: u64) -> Result<Option<Turn>> {
        let mut open = self.lock();
        let Some(o) = open.remove(session) else {
            return Ok(None);
        };
        match self.finish(o.turn.clone(), last_id) {
            Ok(turn) => Ok(Some(turn)),
            // Still open, as the store has it.
            Err(e) => {
                open.insert(session.to_string(), o);
                Err(e)
            }
        }
    }

    /// Keep `conversation` (the agent's transcript as of the end of turn `number` of
    /// `session`) with that turn, content-addressed like file content.
    pub fn keep_conversation(&self, session: &str, number: u32, conversation: &[u8]) -> Result<()> {
        // Pinned until the turn names it.
        let _pins = self.history.store().pin_scope();
        let hash = self.history.store().put_blob(conversation)?;
        // Under the table's lock, so a turn being ended or begun meanwhile is not overwritten
        // with an older copy.
        let _open = self.lock();
        if let Some(mut turn) = self
            .history
            .turns(Some(session))?
            .into_iter()
            .find(|t| t.number == number)
        {
            turn.conversation = Some(hash);
            self.history.put_turn(&turn)?;
        }
        Ok(())
    }

    fn finish(&self, mut turn: Turn, last_id: u64) -> Result<Turn> {
        turn.end_id = Some(last_id.max(turn.start_id));
        turn.end_time_ns = Some(time::now_ns());
        self.history.put_turn(&turn)?;
        Ok(turn)
    }

    pub fn tool_begin(&self, session: &str, tool: Tool) {
        if let Some(o) = self.lock().get_mut(session) {
            o.tools.retain(|t| tool.id.is_none() || t.id != tool.id);
            o.tools.push(tool);
        }
    }

    pub fn tool_end(&self, session: &str, name: &str, id: Option<&str>) {
        if let Some(o) = self.lock().get_mut(session) {
            match id {
                Some(id) => o.tools.retain(|t| t.id.as_deref() != Some(id)),
                None => {
                    if let Some(i) = o.tools.iter().rposition(|t| t.name == name) {
                        o.tools.remove(i);
                    }
                }
            }
        }
    }

    /// The open turn of `session` and the newest tool call in it.
    pub fn current(&self, session: &str) -> (Option<u32>, Option<Tool>) {
        match self.lock().get(session) {
            Some(o) => (Some(o.turn.number), o.tools.last().cloned()),
            None => (None, None),
        }
    }

    /// [`current`](Self::current), if `session`'s open turn is not `turn`: what a change
    /// labelled `turn` when it was made is labelled with when its id is handed out now (its id
    /// says which turn's bounds it is in).
    pub fn current_unless(
        &self,
        session: &str,
        turn: Option<u32>,
    ) -> Option<(Option<u32>, Option<Tool>)> {
        let open = self.lock();
        let now = open.get(session);
        (now.map(|o| o.turn.number) != turn).then(|| {
            now.map_or((None, None), |o| {
                (Some(o.turn.number), o.tools.last().cloned())
            })
        })
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

// ---- what a turn did ------------------------------------------------------------------

/// Files changed, lines added and removed by changes (a turn's), as `diff --stat` counts
/// them for each change.
pub fn line_counts(history: &History, changes: &[Change]) -> Result<(usize, usize, usize)> {
    let mut files = BTreeSet::new();
    let (mut added, mut removed) = (0, 0);
    let content = |s: Option<&FileState>| -> Vec<u8> {
        s.filter(|s| s.kind == FileKind::File)
            .and_then(|s| s.hash)
            .and_then(|h| history.store().read_blob(&h).ok())
            .unwrap_or_default()
    };
    for c in changes {
        // Files, as `diff --stat` counts them: a folder made or removed is not one.
        let is_dir = |s: Option<&FileState>| s.is_none_or(|s| s.kind == FileKind::Dir);
        if is_dir(c.before.as_ref()) && is_dir(c.after.as_ref()) {
            continue;
        }
        files.insert(c.path.clone());
        if c.from.is_some() {
            continue;
        }
        let (old, new) = (content(c.before.as_ref()), content(c.after.as_ref()));
        let side = |content| diff::Side {
            path: &c.path,
            mode: 0o100644,
            content,
        };
        let s = diff::Stat::from_sides(
            Some(side(&old)),
            Some(side(&new)),
            &diff::Options::default(),
        );
        if !s.binary {
            added += s.added as usize;
            removed += s.deleted as usize;
        }
    }
    Ok((files.len(), added, removed))
}

/// Whether two states are the same file as far as a rollback restores one: type, mode and
/// content (content never recorded matches any).
fn same(a: Option<&FileState>, b: Option<&FileState>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.kind == b.kind
                && a.mode == b.mode
                && (a.hash.is_none() || b.hash.is_none() || a.hash == b.hash)
        }
        _ => false,
    }
}

/// How far rollbacks put back what a turn did.
pub struct RolledBack {
    /// The rollback sessions that did, in order.
    pub by: Vec<String>,
    /// Whether every path the turn changed was put back.
    pub whole: bool,
}

/// Which rollbacks undid a turn, read from the history: a path the turn changed counts as put
/// back when the last change of a `rollback-N` session to it after the turn's last change left
/// it as it was before the turn's first (so a rollback that was itself rolled back no longer
/// counts). A path the turn left as it found it (a file made and removed again) has nothing to
/// put back and does not count either way. `restores`: every rollback change, by path
/// ([`restores`]), oldest first.
pub fn rolled_back(
    turn: &[Change],
    restores: &BTreeMap<&[u8], Vec<&Change>>,
) -> Option<RolledBack> {
    // Each path the turn changed: its state before the turn, the turn's last change to it, and
    // the state that change left.
    type Span<'a> = (Option<&'a FileState>, u64, Option<&'a FileState>);
    let mut paths: BTreeMap<&[u8], Span<'_>> = BTreeMap::new();
    for c in turn {
        for p in std::iter::once(&c.path).chain(&c.from) {
            let (before, after) = c.states_of(p);
            let entry = paths.entry(p.as_slice()).or_insert((before, c.id, after));
            (entry.1, entry.2) = (c.id, after);
        }
    }
    paths.retain(|_, (before, _, after)| !same(*before, *after));
    let mut by: Vec<String> = Vec::new();
    let mut put_back = 0;
    for (path, (before, last, _)) in &paths {
        let undo = restores.get(path).and_then(|rs| {
            rs.iter()
                .rfind(|r| r.id > *last)
                .filter(|r| same(r.states_of(path).1, *before))
        });
        if let Some(r) = undo {
            put_back += 1;
            if !by.contains(&r.session) {
                by.push(r.session.clone());
            }
        }
    }
    (put_back > 0).then_some(RolledBack {
        by,
        whole: put_back == paths.len(),
    })
}

/// Every change of a `rollback-N` session among `changes`, by each path it names.
pub fn restores(changes: &[Change]) -> BTreeMap<&[u8], Vec<&Change>> {
    let mut restores: BTreeMap<&[u8], Vec<&Change>> = BTreeMap::new();
    for r in changes
        .iter()
        .filter(|r| r.session.starts_with("rollback-"))
    {
        for p in std::iter::once(&r.path).chain(&r.from) {
            restores.entry(p.as_slice()).or_default().push(r);
        }
    }
    restores
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_refs() {
        assert_eq!(
            TurnRef::parse("3"),
            TurnRef::Number {
                session: None,
                number: 3
            }
        );
        assert_eq!(
            TurnRef::parse("claude-ab12:7"),
            TurnRef::Number {
                session: Some("claude-ab12".into()),
                number: 7
            }
        );
        assert_eq!(TurnRef::parse("gen-7f"), TurnRef::PromptId("gen-7f".into()));
    }

    #[test]
    fn prompts_are_cut_to_their_first_line() {
        assert_eq!(first_line("\n  fix the tests\nplease"), "fix the tests");
        let long = "é".repeat(300);
        let cut = first_line(&long);
        assert!(cut.len() <= PROMPT_MAX + "…".len());
        assert!(cut.ends_with('…'));
    }
}
