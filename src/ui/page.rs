//! The page's HTML (maud), made from the commands' output: `log --json` rows, `turns --json`,
//! `sessions --json`, git-format diffs, rollback plans.

use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

/// Past this many lines a file's diff is cut (the rest is one click away, as the whole file).
pub const MAX_FILE_LINES: usize = 2000;
/// Past this many bytes of diff, further files are listed but not shown.
pub const MAX_DIFF_BYTES: usize = 4 << 20;

pub struct Layout<'a> {
    pub workspace: &'a str,
    pub mounted: bool,
    pub csrf: &'a str,
}

pub fn index(l: &Layout<'_>, sidebar: Markup, timeline: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="rewind-csrf" content=(l.csrf);
                title { "rewind · " (l.workspace) }
                link rel="stylesheet" href="/assets/app.css";
                link rel="stylesheet" href="/assets/hljs.css";
                script src="/assets/hljs.js" defer {}
                script src="/assets/app.js" defer {}
            }
            body data-mounted=(l.mounted) {
                header.top {
                    div.brand { span.logo { "⟲" } " rewind" }
                    div.ws title=(l.workspace) { (l.workspace) }
                    @if l.mounted {
                        span.badge.live #live title="Changes in the mount appear here as they happen" { "● live" }
                    } @else {
                        span.badge.ro title="Not mounted: history only; rollbacks need the mount" { "read-only" }
                    }
                    form #filters.filters {
                        input name="q" type="search" placeholder="Search paths, processes, sessions…  (/)" autocomplete="off";
                        input name="session" placeholder="session" autocomplete="off";
                        input name="agent" placeholder="agent" autocomplete="off";
                        input name="path" placeholder="path" autocomplete="off";
                        input name="since" placeholder="since (id, 10m, time)" autocomplete="off";
                        input name="until" placeholder="until" autocomplete="off";
                        input name="turn" type="hidden";
                        button type="submit" { "Filter" }
                        button type="button" #clear.ghost { "Clear" }
                    }
                    div.actions {
                        button #comments.ghost title="Reviewers' open comments, as agents read them" { "Comments" }
                        button #checkpoint.ghost title="Name this moment to roll back to later" { "+ Checkpoint" }
                        button #help.ghost title="Keyboard shortcuts (?)" { "?" }
                    }
                }
                main.grid {
                    aside #sidebar { (sidebar) }
                    section #timeline aria-label="Timeline" { (timeline) }
                    section #detail aria-label="Details" {
                        div.empty {
                            h2 { "Pick a change, a turn or a session" }
                            p { "Its diff shows here, with the buttons to roll it back." }
                            p.keys { kbd{"j"} "/" kbd{"k"} " hunks · " kbd{"n"} "/" kbd{"p"} " files · "
                                kbd{"["} "/" kbd{"]"} " turns · " kbd{"↑"} "/" kbd{"↓"} " changes · " kbd{"?"} " help" }
                        }
                    }
                }
                dialog #dialog { div #dialog-body {} }
                div #toast {}
            }
        }
    }
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `2026-11-25T21:30:01.123456789Z` as `11-25 21:30:01`.
fn short_time(t: &str) -> String {
    if t.len() >= 19 {
        format!("{} {}", &t[5..10], &t[11..19])
    } else {
        t.to_string()
    }
}

fn first_line(s: &str) -> &str {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

pub struct Sidebar<'a> {
    pub sessions: &'a [Value],
    pub turns: &'a [Value],
    pub agents: &'a [String],
    /// The newest change id (the time-travel slider's end).
    pub last: u64,
}

pub fn sidebar(sb: &Sidebar<'_>) -> Markup {
    html! {
        div.sb-section {
            h3 { "Turns" span.count { (sb.turns.len()) } }
            @if sb.turns.is_empty() {
                p.muted { "No agent turns yet. " code { "rewind agent install claude" } " records each prompt as a turn." }
            }
            ul.turns {
                @for t in sb.turns {
                    @let session = s(t, "session");
                    @let n = t.get("turn").and_then(Value::as_u64).unwrap_or(0);
                    @let r = format!("{session}:{n}");
                    li.turn tabindex="-1" data-turn=(r) data-session=(session) {
                        div.turn-head {
                            span.tref { (r) }
                            span.stat {
                                span.add { "+" (t.get("added").and_then(Value::as_u64).unwrap_or(0)) }
                                " "
                                span.del { "−" (t.get("removed").and_then(Value::as_u64).unwrap_or(0)) }
                            }
                        }
                        div.prompt title=(s(t, "prompt")) { (first_line(s(t, "prompt"))) }
                        div.meta {
                            (s(t, "agent")) " · " (short_time(s(t, "time"))) " · "
                            (t.get("files").and_then(Value::as_u64).unwrap_or(0)) " files"
                            @if t.get("end_id").is_some_and(Value::is_null) { " · " span.open { "open" } }
                            @if let Some(r) = t.get("rolled_back").and_then(Value::as_str) {
                                " · " span.undone { "rolled back" @if r == "part" { " (part)" } }
                            }
                        }
                    }
                }
            }
        }
        div.sb-section {
            h3 { "Sessions" span.count { (sb.sessions.len()) } }
            ul.sessions {
                @for v in sb.sessions {
                    li.session tabindex="-1" data-session=(s(v, "name")) {
                        span.name { (s(v, "name")) }
                        span.count { (v.get("changes").and_then(Value::as_u64).unwrap_or(0)) }
                        div.meta { (short_time(s(v, "last_time"))) }
                    }
                }
            }
        }
        div.sb-section {
            h3 { "Agents" span.count { (sb.agents.len()) } }
            ul.agents {
                @for a in sb.agents {
                    li.agent tabindex="-1" data-agent=(a) { (a) }
                }
            }
        }
        div.sb-section {
            h3 { "Files" }
            div #files data-src="/frag/files" { p.muted { "loading…" } }
        }
        div.sb-section {
            h3 { "Time travel" }
            @if sb.last > 0 {
                div.slider {
                    input #slider type="range" min="1" max=(sb.last) value=(sb.last) aria-label="A point in the history";
                    span #slider-at.muted { "#" (sb.last) }
                }
            }
            form #travel.travel {
                input name="at" placeholder="id, checkpoint, 10m, time…" autocomplete="off";
                button type="submit" title="The whole tree as it was then" { "Tree" }
            }
            div.travel-acts {
                button.ghost.small #t-diff title="Everything that changed since that point" { "Diff since" }
                button.ghost.small.danger #t-back title="Put everything back as it was then (plan first)" { "Roll back to…" }
            }
        }
    }
}

/// One timeline row per change (newest first), and what to ask for next.
pub fn rows(changes: &[Value], more: Option<&str>) -> Markup {
    html! {
        @for c in changes {
            @let id = c.get("id").and_then(Value::as_u64).unwrap_or(0);
            @let kind = s(c, "kind");
            li.change tabindex="-1" data-id=(id) data-path=(s(c, "path")) {
                span.id { "#" (id) }
                span.kind.{"k-" (kind)} { (kind) }
                span.path {
                    @if let Some(from) = c.get("from").and_then(Value::as_str) {
                        span.from { (from) " → " }
                    }
                    (s(c, "path"))
                }
                span.stat data-stat=(id) {}
                span.who {
                    span.session { (s(c, "session")) }
                    @if let Some(t) = c.get("turn").and_then(Value::as_u64) { span.turnref { ":" (t) } }
                    " · " (s(c, "agent"))
                    @if !s(c, "process").is_empty() { " · " span.proc { (s(c, "process")) } }
                }
                span.time title=(s(c, "time")) { (short_time(s(c, "time"))) }
            }
        }
        @if let Some(next) = more {
            li.more data-more=(next) { button.ghost { "Older changes…" } }
        }
    }
}

pub fn timeline(title: &str, rows: Markup) -> Markup {
    html! {
        div.tl-head { h2 { (title) } span.muted #tl-note {} }
        ul #changes.changes { (rows) }
    }
}

/// `+A −D` from `diff --stat`'s summary line.
pub fn stat(summary: &str) -> Markup {
    let num = |word: &str| -> u64 {
        summary
            .split(',')
            .find(|p| p.contains(word))
            .and_then(|p| p.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let binary = summary.contains("Bin");
    html! {
        span.add { "+" (num("insertion")) } " " span.del { "−" (num("deletion")) }
        @if binary { " " span.bin { "bin" } }
    }
}

/// One file of a git-format diff.
#[derive(Default)]
struct FileDiff {
    old: String,
    new: String,
    headers: Vec<String>,
    binary: bool,
    hunks: Vec<Hunk>,
    lines: usize,
    /// Lines added and removed, all of them (the page keeps only the first
    /// [`MAX_FILE_LINES`]).
    added: usize,
    removed: usize,
}

struct Hunk {
    header: String,
    old_start: u64,
    new_start: u64,
    lines: Vec<(char, String)>,
}

enum Piece {
    File(FileDiff),
    Note(String),
}

fn hunk_starts(header: &str) -> (u64, u64) {
    // @@ -a,b +c,d @@
    let mut it = header.split_whitespace().skip(1);
    let num = |w: Option<&str>| {
        w.and_then(|w| w[1..].split(',').next().and_then(|n| n.parse().ok()))
            .unwrap_or(1)
    };
    (num(it.next()), num(it.next()))
}

fn strip_side(p: &str) -> String {
    let p = p.trim_start_matches("a/").trim_start_matches("b/");
    p.to_string()
}

/// The two paths of a `diff --git a/OLD b/NEW` line (after `diff --git `). Git quotes a
/// name with a quote, a backslash, a control or a non-ASCII character (`"b/caf\303\251 1.txt"`,
/// C escapes, bytes in octal); the page's buttons need it as the CLI takes it.
fn git_paths(rest: &str) -> (String, String) {
    if rest.starts_with('"') {
        let (a, tail) = unquote(rest);
        let tail = tail.strip_prefix(' ').unwrap_or(tail);
        let b = if tail.starts_with('"') {
            unquote(tail).0
        } else {
            tail.to_string()
        };
        return (strip_side(&a), strip_side(&b));
    }
    match rest.split_once(" b/") {
        Some((a, b)) if b.starts_with('"') => (strip_side(a), strip_side(&unquote(b).0)),
        Some((a, b)) => (strip_side(a), b.to_string()),
        // `a/x "b/y"`: only the new name quoted.
        None => match rest.split_once(" \"") {
            Some((a, b)) => (strip_side(a), strip_side(&unquote(&format!("\"{b}")).0)),
            None => (strip_side(rest), strip_side(rest)),
        },
    }
}

/// A C-quoted string at the start of `s` (which begins with `"`), unescaped (a name not valid
/// UTF-8 lossily), and what follows it.
fn unquote(s: &str) -> (String, &str) {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'"' => return (String::from_utf8_lossy(&out).into_owned(), &s[i + 1..]),
            b'\\' if i + 1 < b.len() => {
                let c = b[i + 1];
                let oct = b
                    .get(i + 1..i + 4)
                    .filter(|d| d.iter().all(|d| (b'0'..=b'7').contains(d)));
                if let Some(d) = oct {
                    let v = d.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
                    out.push(v as u8);
                    i += 4;
                    continue;
                }
                out.push(match c {
                    b'n' => b'\n',
                    b't' => b'\t',
                    b'r' => b'\r',
                    b'a' => 7,
                    b'b' => 8,
                    b'f' => 12,
                    b'v' => 11,
                    other => other,
                });
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), "")
}

/// A diff without the encoded lines of its `GIT binary patch` sections (the page shows no
/// binary content, and they would take its room), keeping the `GIT binary patch` line.
pub fn without_binary_patches(diff: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(diff.len());
    // The empty lines still to come in a patch: one ends each of its two sides.
    let mut patch_ends = 0;
    for line in diff.split_inclusive(|b| *b == b'\n') {
        if patch_ends > 0 {
            if line == b"\n" {
                patch_ends -= 1;
            }
            continue;
        }
        out.extend_from_slice(line);
        if line == b"GIT binary patch\n" {
            patch_ends = 2;
        }
    }
    out
}

fn parse(text: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut file: Option<FileDiff> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            if let Some(f) = file.take() {
                pieces.push(Piece::File(f));
            }
            let (old, new) = git_paths(rest);
            file = Some(FileDiff {
                old,
                new,
                ..FileDiff::default()
            });
            continue;
        }
        let Some(f) = file.as_mut() else {
            if !line.trim().is_empty() {
                pieces.push(Piece::Note(line.to_string()));
            }
            continue;
        };
        if line.starts_with("@@") {
            let (old_start, new_start) = hunk_starts(line);
            f.hunks.push(Hunk {
                header: line.to_string(),
                old_start,
                new_start,
                lines: Vec::new(),
            });
        } else if let Some(h) = f.hunks.last_mut() {
            let mut chars = line.chars();
            let tag = chars.next().unwrap_or(' ');
            if matches!(tag, '+' | '-' | ' ' | '\\') {
                f.lines += 1;
                match tag {
                    '+' => f.added += 1,
                    '-' => f.removed += 1,
                    _ => {}
                }
                if f.lines <= MAX_FILE_LINES {
                    h.lines.push((tag, chars.as_str().to_string()));
                }
            } else {
                // Not a diff line: a note between sections.
                let f = file.take().expect("there");
                pieces.push(Piece::File(f));
                pieces.push(Piece::Note(line.to_string()));
            }
        } else if line.starts_with("Binary files") || line == "GIT binary patch" {
            f.binary = true;
        } else if line.starts_with("--- ") || line.starts_with("+++ ") {
        } else {
            f.headers.push(line.to_string());
        }
    }
    if let Some(f) = file.take() {
        pieces.push(Piece::File(f));
    }
    pieces
}

fn lang(path: &str) -> &str {
    path.rsplit_once('.').map(|(_, e)| e).unwrap_or("")
}

fn file_counts(f: &FileDiff) -> (usize, usize) {
    (f.added, f.removed)
}

/// A diff, rendered: one section per file, unified or side by side. `at`: the point whose
/// tree shows each file whole; `rollback`: whether per-file rollback buttons make sense.
pub fn diff(
    text: &str,
    split: bool,
    at: Option<&str>,
    hunks_of: Option<(&str, &str)>,
    truncated: bool,
) -> Markup {
    let pieces = parse(text);
    // Hunks are numbered per path, as `rewind rollback --hunk K` counts them: on from one
    // section of a path to the next (a turn's diff has one per stretch of its changes, between
    // `#` lines).
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let firsts: Vec<usize> = pieces
        .iter()
        .map(|p| match p {
            Piece::File(f) => {
                let n = seen.entry(f.new.as_str()).or_default();
                let first = *n;
                *n += f.hunks.len();
                first
            }
            Piece::Note(_) => 0,
        })
        .collect();
    let files = pieces
        .iter()
        .filter(|p| matches!(p, Piece::File(_)))
        .count();
    html! {
        @if pieces.is_empty() {
            p.muted.nodiff { "No changes to show (folders, or content that was not recorded)." }
        }
        @if files > 1 {
            nav.filelist {
                @for p in &pieces {
                    @if let Piece::File(f) = p {
                        @let (a, d) = file_counts(f);
                        a href={"#f-" (f.new)} { span.add{"+" (a)} " " span.del{"−" (d)} " " (f.new) }
                    }
                }
            }
        }
        @for (p, first) in pieces.iter().zip(firsts) {
            @match p {
                Piece::Note(n) => div.note { (n) },
                Piece::File(f) => (file(f, split, at, hunks_of, first)),
            }
        }
        @if truncated {
            div.note { "The diff is larger than the page shows at once; narrow it to a file, or use `rewind diff` in a terminal." }
        }
    }
}

/// One file's section of a diff; its hunks are numbered from `first + 1`.
fn file(
    f: &FileDiff,
    split: bool,
    at: Option<&str>,
    hunks_of: Option<(&str, &str)>,
    first: usize,
) -> Markup {
    let (a, d) = file_counts(f);
    let renamed = f.old != f.new;
    html! {
        div.file id={"f-" (f.new)} data-lang=(lang(&f.new)) data-path=(f.new) {
            div.file-head {
                span.stat { span.add{"+" (a)} " " span.del{"−" (d)} }
                span.fname {
                    @if renamed { span.from { (f.old) " → " } }
                    (f.new)
                }
                @for h in &f.headers {
                    @if !h.starts_with("index ") { span.hdr { (h) } }
                }
                span.spacer {}
                @if let Some(at) = at {
                    // A turn's, session's or agent's diff (`at` empty) shows the file as it is now.
                    button.ghost.small data-whole=(f.new) data-at=(at)
                        title=(if at.is_empty() { "Show the whole file as it is now" } else { "Show the whole file as it was then" }) { "Whole file" }
                }
                button.ghost.small.danger data-plan="file" data-value=(f.new) title="Roll this file back (its last change)" { "Roll back file…" }
            }
            @if f.binary {
                div.note { "Binary file: not shown." }
            } @else if f.hunks.is_empty() {
                div.note { "No content change." }
            } @else if split {
                table.diff.split {
                    colgroup { col.lnc; col; col.lnc; col; }
                    @for (k, h) in f.hunks.iter().enumerate() { (hunk_bar(&f.new, first + k + 1, hunks_of, 4)) (split_hunk(h)) }
                }
            } @else {
                table.diff.unified {
                    colgroup { col.lnc; col.lnc; col; }
                    @for (k, h) in f.hunks.iter().enumerate() { (hunk_bar(&f.new, first + k + 1, hunks_of, 3)) (unified_hunk(h)) }
                }
            }
            @if f.lines > MAX_FILE_LINES {
                div.note { (f.lines - MAX_FILE_LINES) " more lines not shown: use “Whole file”." }
            }
        }
    }
}

/// The button that reverts one hunk (of a change's or a turn's diff), plan first.
fn hunk_bar(path: &str, k: usize, of: Option<(&str, &str)>, cols: u8) -> Markup {
    html! {
        @if let Some((kind, value)) = of {
            tbody.hunkbar {
                tr { td.code colspan=(cols) {
                    button.ghost.small.danger data-plan="hunk" data-value=(k) data-of=(kind) data-ofv=(value) data-path=(path)
                        title="Put back only this hunk (plan first)" { "Revert hunk " (k) "…" }
                    " "
                    button.ghost.small data-comment=(k) data-of=(kind) data-ofv=(value) data-path=(path)
                        title="A note for the agent, on this hunk (it reads open comments over MCP and in .rewind/comments)" { "Comment…" }
                } }
            }
        }
    }
}

fn unified_hunk(h: &Hunk) -> Markup {
    // Each line with its numbers on the old and the new side.
    let (mut o, mut n) = (h.old_start, h.new_start);
    let mut lines = Vec::with_capacity(h.lines.len());
    for (t, text) in &h.lines {
        let (old, new) = match t {
            '+' => (None, Some(n)),
            '-' => (Some(o), None),
            '\\' => (None, None),
            _ => (Some(o), Some(n)),
        };
        o += u64::from(old.is_some());
        n += u64::from(new.is_some());
        lines.push((*t, old, new, text));
    }
    html! {
        tbody.hunk {
            tr.hh { td.ln {} td.ln {} td.code { (h.header) } }
            @for (t, old, new, text) in &lines {
                @let class = match t { '+' => "add", '-' => "del", '\\' => "meta", _ => "ctx" };
                tr.(class) {
                    td.ln { @if let Some(o) = old { (o) } }
                    td.ln { @if let Some(n) = new { (n) } }
                    td.code {
                        @if *t == '\\' { (text) } @else { span.src { (text) } }
                    }
                }
            }
        }
    }
}

type Side<'a> = Option<(u64, &'a str)>;

/// Pair a run of removals with the run of additions after it, row by row.
fn flush<'a>(
    rows: &mut Vec<(Side<'a>, Side<'a>)>,
    dels: &mut Vec<(u64, &'a str)>,
    adds: &mut Vec<(u64, &'a str)>,
) {
    let len = dels.len().max(adds.len());
    for i in 0..len {
        rows.push((dels.get(i).copied(), adds.get(i).copied()));
    }
    dels.clear();
    adds.clear();
}

fn split_hunk(h: &Hunk) -> Markup {
    // Pair each run of removals with the run of additions after it.
    let mut rows: Vec<(Side<'_>, Side<'_>)> = Vec::new();
    let (mut o, mut n) = (h.old_start, h.new_start);
    let mut dels: Vec<(u64, &str)> = Vec::new();
    let mut adds: Vec<(u64, &str)> = Vec::new();
    let mut context: Vec<bool> = Vec::new();
    for (t, text) in &h.lines {
        match t {
            '-' => {
                if !adds.is_empty() {
                    flush(&mut rows, &mut dels, &mut adds);
                    context.resize(rows.len(), false);
                }
                dels.push((o, text));
                o += 1;
            }
            '+' => {
                adds.push((n, text));
                n += 1;
            }
            '\\' => {}
            _ => {
                flush(&mut rows, &mut dels, &mut adds);
                context.resize(rows.len(), false);
                rows.push((Some((o, text)), Some((n, text))));
                context.push(true);
                o += 1;
                n += 1;
            }
        }
    }
    flush(&mut rows, &mut dels, &mut adds);
    context.resize(rows.len(), false);
    html! {
        tbody.hunk {
            tr.hh { td.code colspan="4" { (h.header) } }
            @for (i, (l, r)) in rows.iter().enumerate() {
                @let ctx = context[i];
                tr {
                    @match l {
                        Some((num, text)) => { td.ln.{(if ctx {"c"} else {"d"})} { (num) } td.code.{(if ctx {"ctx"} else {"del"})} { span.src { (text) } } }
                        None => { td.ln.blank {} td.code.blank {} }
                    }
                    @match r {
                        Some((num, text)) => { td.ln.{(if ctx {"c"} else {"a"})} { (num) } td.code.{(if ctx {"ctx"} else {"add"})} { span.src { (text) } } }
                        None => { td.ln.blank {} td.code.blank {} }
                    }
                }
            }
        }
    }
}

/// The head of a diff pane: what it is, the view switch, the rollback button.
pub fn diff_head(title: &str, sub: &str, plan: Option<(&str, &str)>, split: bool) -> Markup {
    html! {
        div.detail-head {
            div {
                h2 { (title) }
                @if !sub.is_empty() { div.sub { (sub) } }
            }
            div.spacer {}
            div.seg {
                button.small.ghost.on[!split] data-view="unified" { "Unified" }
                button.small.ghost.on[split] data-view="split" { "Side by side" }
            }
            @if let Some((what, value)) = plan {
                button.danger data-plan=(what) data-value=(value) { "Roll back…" }
            }
        }
    }
}

/// A rollback plan, line by line as the CLI prints it, classified for the eye.
pub fn plan_lines(text: &str) -> Markup {
    html! {
        ul.plan {
            @for line in text.lines() {
                @let word = line.split_whitespace().next().unwrap_or("");
                @let class = match word {
                    "restore" => "restore", "revert" => "revert", "remove" => "remove",
                    "chmod" => "revert", "separate" => "revert", "link" => "restore",
                    "skip" => "skip", "failed" => "skip", _ => "summary",
                };
                li.{(class)} { (line) }
            }
        }
    }
}

pub fn message(title: &str, text: &str) -> Markup {
    html! { div.msg { h3 { (title) } pre { (text) } } }
}

/// A folder of the tree at a point.
pub fn tree(at: &str, dir: &str, names: &[(String, bool)]) -> Markup {
    let join = |n: &str| {
        if dir.is_empty() {
            n.to_string()
        } else {
            format!("{dir}/{n}")
        }
    };
    let parent = dir.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
    html! {
        div.detail-head {
            div { h2 { "Tree at " code { (at) } } div.sub { "/" (dir) } }
            div.spacer {}
            button.ghost.small data-diff-from=(at) { "Diff since" }
            button.danger.small data-plan="to" data-value=(at) { "Roll back to here…" }
        }
        ul.tree {
            @if !dir.is_empty() { li.dir data-tree-at=(at) data-dir=(parent) { "‹ up" } }
            @for (n, is_dir) in names {
                @if *is_dir {
                    li.dir data-tree-at=(at) data-dir=(join(n)) { "▸ " (n) "/" }
                } @else {
                    li.fileent data-whole=(join(n)) data-at=(at) { (n) }
                }
            }
            @if names.is_empty() { li.muted { "(empty)" } }
        }
    }
}

/// A whole file as it was at a point.
pub fn whole_file(path: &str, at: &str, content: &[u8]) -> Markup {
    let binary = content.iter().take(8000).any(|b| *b == 0);
    let text = String::from_utf8_lossy(content);
    let lines: Vec<&str> = text.lines().collect();
    html! {
        div.detail-head { div { h2 { (path) } div.sub { "as it was at " code { (at) } } } }
        div.file data-lang=(lang(path)) {
            @if binary {
                div.note { "Binary file (" (content.len()) " bytes): not shown." }
            } @else {
                table.diff.unified {
                    colgroup { col.lnc; col; }
                    tbody {
                        @for (i, l) in lines.iter().take(20_000).enumerate() {
                            tr.ctx { td.ln { (i + 1) } td.code { span.src { (l) } } }
                        }
                    }
                }
                @if lines.len() > 20_000 { div.note { (lines.len() - 20_000) " more lines not shown." } }
            }
        }
    }
}

/// The file tree with change counts, from the newest changes' paths.
pub fn files(counts: &std::collections::BTreeMap<String, usize>, scanned: usize) -> Markup {
    // Folder totals, then a nested list.
    let mut dirs: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for (p, n) in counts {
        let mut acc = String::new();
        for part in p.split('/').collect::<Vec<_>>().iter().rev().skip(1).rev() {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            *dirs.entry(acc.clone()).or_default() += n;
        }
    }
    let mut all: Vec<(String, usize, bool)> = dirs
        .into_iter()
        .map(|(d, n)| (d, n, true))
        .chain(counts.iter().map(|(p, n)| (p.clone(), *n, false)))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    html! {
        ul.ftree {
            @for (p, n, is_dir) in &all {
                @let depth = p.matches('/').count();
                @let name = p.rsplit('/').next().unwrap_or(p);
                li.fpath.dir[*is_dir].{"d" (depth.min(9))} data-path=(p) title=(p) {
                    span.name { @if *is_dir { "▾ " } (name) } span.count { (n) }
                }
            }
        }
        p.muted.small { "in the newest " (scanned) " changes" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_a_diff_line_as_the_cli_takes_them() {
        let p = |l: &str| git_paths(l);
        assert_eq!(p("a/x.txt b/x.txt"), ("x.txt".into(), "x.txt".into()));
        assert_eq!(
            p("a/with space.txt b/with space.txt"),
            ("with space.txt".into(), "with space.txt".into())
        );
        assert_eq!(
            p(r#""a/caf\303\251 \"q\".txt" "b/caf\303\251 \"q\".txt""#),
            ("café \"q\".txt".into(), "café \"q\".txt".into())
        );
        assert_eq!(
            p(r#"a/old.txt "b/new\tname""#),
            ("old.txt".into(), "new\tname".into())
        );
        // A name cut short, or an escape at its end, does not panic.
        assert_eq!(p(r#""a/\30"#).0, "30");
        assert_eq!(p("\"a/\\").0, "\\");
    }

    /// A path's hunks are numbered on across its sections, as the CLI counts them.
    #[test]
    fn hunks_of_one_path_are_numbered_across_its_sections() {
        let text = "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n@@ -2 +2 @@\n-a\n+b\n\
                    # by another session between\n\
                    diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n@@ -38 +38 @@\n-c\n+d\n";
        let html = diff(text, false, None, Some(("turn", "s:1")), false).into_string();
        assert!(html.contains("Revert hunk 1…"), "{html}");
        assert!(html.contains("Revert hunk 2…"), "{html}");
        assert!(html.contains(r#"data-value="2""#), "{html}");
    }
}
