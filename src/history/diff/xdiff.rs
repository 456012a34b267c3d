//! Line diff with git's post-processing (group sliding + indent heuristic),
//! hunk grouping and unified-diff emission the way git's xdiff + diff.c do it.
//!
//! About 900 lines: it follows git's xdiff/xdiffi.c and diff.c step by
//! step (so that `rewind diff` output is byte for byte git's), and splitting it would separate
//! each step from the git code it mirrors.

use std::collections::HashMap;

use similar::Algorithm;
use similar::algorithms::{DiffHook, diff_slices};

/// git's `isspace` (sane_ctype): only `\t`, `\n`, `\r` and space.
pub(crate) fn git_isspace(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | b'\r' | b' ')
}

/// git's `isalpha`: ASCII letters only.
fn git_isalpha(b: u8) -> bool {
    b.is_ascii_alphabetic()
}

/// Split into records: each line up to and including its `\n`; the last one
/// may lack the `\n`.
pub(crate) fn split_lines(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' {
            out.push(&data[start..=i]);
            start = i + 1;
        }
    }
    if start < data.len() {
        out.push(&data[start..]);
    }
    out
}

/// One change atom: `chg1` lines of the old file starting at `i1` are
/// replaced by `chg2` lines of the new file starting at `i2` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Change {
    pub i1: usize,
    pub i2: usize,
    pub chg1: usize,
    pub chg2: usize,
}

/// Changed-line flags of one file, with a permanently clear slot before the
/// first and after the last line (git's `rchg[-1]` and `rchg[nrec]`).
struct Flags {
    v: Vec<bool>,
}

impl Flags {
    fn new(n: usize) -> Self {
        Flags {
            v: vec![false; n + 2],
        }
    }
    fn get(&self, i: isize) -> bool {
        self.v[(i + 1) as usize]
    }
    fn set(&mut self, i: isize, val: bool) {
        self.v[(i + 1) as usize] = val;
    }
}

struct Marker<'f> {
    old: &'f mut Flags,
    new: &'f mut Flags,
}

impl DiffHook for Marker<'_> {
    type Error = ();
    fn delete(&mut self, old_index: usize, old_len: usize, _new: usize) -> Result<(), ()> {
        for i in old_index..old_index + old_len {
            self.old.set(i as isize, true);
        }
        Ok(())
    }
    fn insert(&mut self, _old: usize, new_index: usize, new_len: usize) -> Result<(), ()> {
        for i in new_index..new_index + new_len {
            self.new.set(i as isize, true);
        }
        Ok(())
    }
}

/// The line-diff result of two files.
pub(crate) struct LineDiff<'d> {
    pub old: Vec<&'d [u8]>,
    pub new: Vec<&'d [u8]>,
    pub changes: Vec<Change>,
}

impl LineDiff<'_> {
    pub fn counts(&self) -> (u64, u64) {
        let mut added = 0;
        let mut deleted = 0;
        for c in &self.changes {
            added += c.chg2 as u64;
            deleted += c.chg1 as u64;
        }
        (added, deleted)
    }
}

/// Diff two buffers line by line, then slide change groups like git's
/// `xdl_change_compact` (optionally with the indent heuristic).
pub(crate) fn diff_lines<'d>(a: &'d [u8], b: &'d [u8], indent_heuristic: bool) -> LineDiff<'d> {
    let old = split_lines(a);
    let new = split_lines(b);
    let mut classes: HashMap<&[u8], u32> = HashMap::new();
    let mut id_of = |l: &'d [u8]| {
        let n = classes.len() as u32;
        *classes.entry(l).or_insert(n)
    };
    let ids1: Vec<u32> = old.iter().map(|l| id_of(l)).collect();
    let ids2: Vec<u32> = new.iter().map(|l| id_of(l)).collect();

    let mut f1 = Flags::new(ids1.len());
    let mut f2 = Flags::new(ids2.len());
    {
        let mut m = Marker {
            old: &mut f1,
            new: &mut f2,
        };
        let _ = diff_slices(Algorithm::Myers, &mut m, &ids1, &ids2);
    }
    {
        let mut s1 = CompactSide {
            ids: &ids1,
            lines: &old,
            chg: &mut f1,
        };
        let mut s2 = CompactSide {
            ids: &ids2,
            lines: &new,
            chg: &mut f2,
        };
        change_compact(&mut s1, &mut s2, indent_heuristic);
        change_compact(&mut s2, &mut s1, indent_heuristic);
    }

    let mut changes = Vec::new();
    let (n1, n2) = (ids1.len() as isize, ids2.len() as isize);
    let (mut i1, mut i2) = (0isize, 0isize);
    while i1 < n1 || i2 < n2 {
        if f1.get(i1) || f2.get(i2) {
            let (s1, s2) = (i1, i2);
            while f1.get(i1) {
                i1 += 1;
            }
            while f2.get(i2) {
                i2 += 1;
            }
            changes.push(Change {
                i1: s1 as usize,
                i2: s2 as usize,
                chg1: (i1 - s1) as usize,
                chg2: (i2 - s2) as usize,
            });
        } else {
            i1 += 1;
            i2 += 1;
        }
    }
    LineDiff { old, new, changes }
}

// ---------------------------------------------------------------------------
// Group sliding ("compaction") and the indent heuristic.

struct CompactSide<'s, 'd> {
    ids: &'s [u32],
    lines: &'s [&'d [u8]],
    chg: &'s mut Flags,
}

#[derive(Clone, Copy)]
struct Group {
    start: isize,
    end: isize,
}

impl CompactSide<'_, '_> {
    fn n(&self) -> isize {
        self.ids.len() as isize
    }
    fn first_group(&self) -> Group {
        let mut g = Group { start: 0, end: 0 };
        while self.chg.get(g.end) {
            g.end += 1;
        }
        g
    }
    fn next_group(&self, g: &mut Group) -> bool {
        if g.end == self.n() {
            return false;
        }
        g.start = g.end + 1;
        g.end = g.start;
        while self.chg.get(g.end) {
            g.end += 1;
        }
        true
    }
    fn prev_group(&self, g: &mut Group) -> bool {
        if g.start == 0 {
            return false;
        }
        g.end = g.start - 1;
        g.start = g.end;
        while self.chg.get(g.start - 1) {
            g.start -= 1;
        }
        true
    }
    fn slide_down(&mut self, g: &mut Group) -> bool {
        if g.end < self.n() && self.ids[g.start as usize] == self.ids[g.end as usize] {
            self.chg.set(g.start, false);
            g.start += 1;
            self.chg.set(g.end, true);
            g.end += 1;
            while self.chg.get(g.end) {
                g.end += 1;
            }
            true
        } else {
            false
        }
    }
    fn slide_up(&mut self, g: &mut Group) -> bool {
        if g.start > 0 && self.ids[(g.start - 1) as usize] == self.ids[(g.end - 1) as usize] {
            g.start -= 1;
            self.chg.set(g.start, true);
            g.end -= 1;
            self.chg.set(g.end, false);
            while self.chg.get(g.start - 1) {
                g.start -= 1;
            }
            true
        } else {
            false
        }
    }
}

const MAX_INDENT: i32 = 200;
const MAX_BLANKS: i32 = 20;
const INDENT_HEURISTIC_MAX_SLIDING: isize = 100;

/// Indentation of a line (tab = to next multiple of 8), -1 if blank.
fn get_indent(line: &[u8]) -> i32 {
    let mut ret = 0i32;
    for &c in line {
        if !git_isspace(c) {
            return ret;
        } else if c == b' ' {
            ret += 1;
        } else if c == b'\t' {
            ret += 8 - ret % 8;
        }
        if ret >= MAX_INDENT {
            return MAX_INDENT;
        }
    }
    -1
}

struct SplitMeasure {
    end_of_file: bool,
    indent: i32,
    pre_blank: i32,
    pre_indent: i32,
    post_blank: i32,
    post_indent: i32,
}

fn measure_split(lines: &[&[u8]], split: isize) -> SplitMeasure {
    let n = lines.len() as isize;
    let (end_of_file, indent) = if split >= n {
        (true, -1)
    } else {
        (false, get_indent(lines[split as usize]))
    };
    let mut pre_blank = 0;
    let mut pre_indent = -1;
    let mut i = split - 1;
    while i >= 0 {
        pre_indent = get_indent(lines[i as usize]);
        if pre_indent != -1 {
            break;
        }
        pre_blank += 1;
        if pre_blank == MAX_BLANKS {
            pre_indent = 0;
            break;
        }
        i -= 1;
    }
    let mut post_blank = 0;
    let mut post_indent = -1;
    let mut i = split + 1;
    while i < n {
        post_indent = get_indent(lines[i as usize]);
        if post_indent != -1 {
            break;
        }
        post_blank += 1;
        if post_blank == MAX_BLANKS {
            post_indent = 0;
            break;
        }
        i += 1;
    }
    SplitMeasure {
        end_of_file,
        indent,
        pre_blank,
        pre_indent,
        post_blank,
        post_indent,
    }
}

#[derive(Clone, Copy, Default)]
struct SplitScore {
    effective_indent: i32,
    penalty: i32,
}

fn score_add_split(m: &SplitMeasure, s: &mut SplitScore) {
    if m.pre_indent == -1 && m.pre_blank == 0 {
        s.penalty += 1; // start of file
    }
    if m.end_of_file {
        s.penalty += 21;
    }
    let post_blank = if m.indent == -1 { 1 + m.post_blank } else { 0 };
    let total_blank = m.pre_blank + post_blank;
    s.penalty += -30 * total_blank;
    s.penalty += 6 * post_blank;
    let indent = if m.indent != -1 {
        m.indent
    } else {
        m.post_indent
    };
    let any_blanks = total_blank != 0;
    s.effective_indent += indent;
    if indent == -1 || m.pre_indent == -1 {
    } else if indent > m.pre_indent {
        s.penalty += if any_blanks { 10 } else { -4 };
    } else if indent == m.pre_indent {
    } else if m.post_indent != -1 && m.post_indent > indent {
        s.penalty += if any_blanks { 17 } else { 24 };
    } else {
        s.penalty += if any_blanks { 17 } else { 23 };
    }
}

fn score_cmp(a: &SplitScore, b: &SplitScore) -> i32 {
    let c = (a.effective_indent > b.effective_indent) as i32
        - (a.effective_indent < b.effective_indent) as i32;
    60 * c + (a.penalty - b.penalty)
}

fn change_compact(x: &mut CompactSide, o: &mut CompactSide, indent_heuristic: bool) {
    let mut g = x.first_group();
    let mut go = o.first_group();
    loop {
        if g.end != g.start {
            let mut groupsize;
            let mut earliest_end;
            let mut end_matching_other;
            loop {
                groupsize = g.end - g.start;
                end_matching_other = -1;
                while x.slide_up(&mut g) {
                    let moved = o.prev_group(&mut go);
                    debug_assert!(moved, "group sync broken sliding up");
                }
                earliest_end = g.end;
                if go.end > go.start {
                    end_matching_other = g.end;
                }
                while x.slide_down(&mut g) {
                    let moved = o.next_group(&mut go);
                    debug_assert!(moved, "group sync broken sliding down");
                    if go.end > go.start {
                        end_matching_other = g.end;
                    }
                }
                if groupsize == g.end - g.start {
                    break;
                }
            }
            if g.end == earliest_end {
                // no shifting possible
            } else if end_matching_other != -1 {
                while go.end == go.start {
                    x.slide_up(&mut g);
                    o.prev_group(&mut go);
                }
            } else if indent_heuristic {
                let mut shift = earliest_end;
                if g.end - groupsize - 1 > shift {
                    shift = g.end - groupsize - 1;
                }
                if g.end - INDENT_HEURISTIC_MAX_SLIDING > shift {
                    shift = g.end - INDENT_HEURISTIC_MAX_SLIDING;
                }
                let mut best_shift = -1;
                let mut best = SplitScore::default();
                while shift <= g.end {
                    let mut score = SplitScore::default();
                    score_add_split(&measure_split(x.lines, shift), &mut score);
                    score_add_split(&measure_split(x.lines, shift - groupsize), &mut score);
                    if best_shift == -1 || score_cmp(&score, &best) <= 0 {
                        best = score;
                        best_shift = shift;
                    }
                    shift += 1;
                }
                while g.end > best_shift {
                    x.slide_up(&mut g);
                    o.prev_group(&mut go);
                }
            }
        }
        if !x.next_group(&mut g) {
            break;
        }
        let moved = o.next_group(&mut go);
        debug_assert!(moved, "group sync broken moving to next group");
    }
}

// ---------------------------------------------------------------------------
// Emission.

pub(crate) const RESET: &[u8] = b"\x1b[m";
pub(crate) const BOLD: &[u8] = b"\x1b[1m";
pub(crate) const CYAN: &[u8] = b"\x1b[36m";
pub(crate) const RED: &[u8] = b"\x1b[31m";
pub(crate) const GREEN: &[u8] = b"\x1b[32m";
const BG_RED: &[u8] = b"\x1b[41m";

/// Settings for one file's hunks.
pub(crate) struct EmitConfig {
    pub context: usize,
    pub color: bool,
    pub funcname: bool,
}

/// git's `def_ff`: a line starting with a letter, `_` or `$` is a function
/// line; at most 80 bytes of it are kept, minus trailing whitespace.
fn def_ff(rec: &[u8]) -> Option<&[u8]> {
    let &first = rec.first()?;
    if !(git_isalpha(first) || first == b'_' || first == b'$') {
        return None;
    }
    let mut len = rec.len().min(80);
    while len > 0 && git_isspace(rec[len - 1]) {
        len -= 1;
    }
    Some(&rec[..len])
}

/// Length of the longest prefix that is valid UTF-8 by git's rules
/// (`sane_truncate_line`).
fn utf8_valid_prefix(s: &[u8]) -> usize {
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let rem = s.len() - i;
        let cont = |k: usize| s[i + k] & 0xc0 == 0x80;
        let incr = if c < 0x80 {
            1
        } else if c & 0xe0 == 0xc0 {
            if rem < 2 || !cont(1) || c & 0xfe == 0xc0 {
                break;
            }
            2
        } else if c & 0xf0 == 0xe0 {
            if rem < 3
                || !cont(1)
                || !cont(2)
                || (c == 0xe0 && s[i + 1] & 0xe0 == 0x80)
                || (c == 0xed && s[i + 1] & 0xe0 == 0xa0)
                || (c == 0xef && s[i + 1] == 0xbf && s[i + 2] & 0xfe == 0xbe)
            {
                break;
            }
            3
        } else if c & 0xf8 == 0xf0 {
            if rem < 4
                || !cont(1)
                || !cont(2)
                || !cont(3)
                || (c == 0xf0 && s[i + 1] & 0xf0 == 0x80)
                || (c == 0xf4 && s[i + 1] > 0x8f)
                || c > 0xf4
            {
                break;
            }
            4
        } else {
            break;
        };
        i += incr;
    }
    i
}

/// git's `count_lines`.
fn count_lines(data: &[u8]) -> i64 {
    if data.is_empty() {
        return 0;
    }
    let nl = data.iter().filter(|&&b| b == b'\n').count() as i64;
    if *data.last().unwrap() == b'\n' {
        nl
    } else {
        nl + 1
    }
}

fn ws_blank_line(line: &[u8]) -> bool {
    line.iter().all(|&b| git_isspace(b))
}

/// git's `count_trailing_blank` (quirks included).
fn count_trailing_blank(data: &[u8]) -> i64 {
    if data.is_empty() {
        return 0;
    }
    let mut cnt = 0;
    let mut ptr = data.len() as isize - 1;
    if data[ptr as usize] == b'\n' {
        ptr -= 1;
    }
    while 0 < ptr {
        let mut prev_eol = ptr;
        while prev_eol >= 0 && data[prev_eol as usize] != b'\n' {
            prev_eol -= 1;
        }
        let line = &data[(prev_eol + 1) as usize..=(ptr as usize)];
        if !ws_blank_line(line) {
            break;
        }
        cnt += 1;
        ptr = prev_eol - 1;
    }
    cnt
}

struct LineEmitter<'o> {
    out: &'o mut Vec<u8>,
    color: bool,
    blank_at_eof_pre: i64,
    blank_at_eof_post: i64,
    lno_pre: i64,
    lno_post: i64,
}

impl LineEmitter<'_> {
    fn reset(&self) -> &'static [u8] {
        if self.color { RESET } else { b"" }
    }

    /// git's `emit_line_0` with `set == NULL`, no reverse.
    fn line0(&mut self, set_sign: &[u8], first: Option<u8>, line: &[u8]) {
        let mut len = line.len();
        let nl = len > 0 && line[len - 1] == b'\n';
        if nl {
            len -= 1;
        }
        let cr = len > 0 && line[len - 1] == b'\r';
        if cr {
            len -= 1;
        }
        let mut needs_reset = false;
        if len != 0 || first.is_some() {
            self.out.extend_from_slice(set_sign);
            needs_reset = true;
            if let Some(f) = first {
                self.out.push(f);
            }
            if len != 0 {
                self.out.extend_from_slice(&line[..len]);
            }
        }
        if needs_reset {
            let r = self.reset();
            self.out.extend_from_slice(r);
        }
        if cr {
            self.out.push(b'\r');
        }
        if nl {
            self.out.push(b'\n');
        }
    }

    /// git's `ws_check_emit` with the default rule
    /// (blank-at-eol, space-before-tab, no cr-at-eol).
    fn ws_check_emit(&mut self, line: &[u8], set: &[u8], ws: &[u8]) {
        let reset = self.reset();
        let mut len = line.len();
        let nl = len > 0 && line[len - 1] == b'\n';
        if nl {
            len -= 1;
        }
        let mut trailing = len;
        while trailing > 0 && git_isspace(line[trailing - 1]) {
            trailing -= 1;
        }
        let mut written = 0;
        for i in 0..trailing {
            if line[i] == b' ' {
                continue;
            }
            if line[i] != b'\t' {
                break;
            }
            if written < i {
                self.out.extend_from_slice(ws);
                self.out.extend_from_slice(&line[written..i]);
                self.out.extend_from_slice(reset);
                self.out.push(line[i]);
            } else {
                self.out.extend_from_slice(&line[written..=i]);
            }
            written = i + 1;
        }
        if trailing > written {
            self.out.extend_from_slice(set);
            self.out.extend_from_slice(&line[written..trailing]);
            self.out.extend_from_slice(reset);
        }
        if trailing != len {
            self.out.extend_from_slice(ws);
            self.out.extend_from_slice(&line[trailing..len]);
            self.out.extend_from_slice(reset);
        }
        if nl {
            self.out.push(b'\n');
        }
    }

    fn new_blank_line_at_eof(&self, line: &[u8]) -> bool {
        self.blank_at_eof_pre != 0
            && self.blank_at_eof_post != 0
            && self.blank_at_eof_pre <= self.lno_pre
            && self.blank_at_eof_post <= self.lno_post
            && ws_blank_line(line)
    }

    /// One line as git's `fn_out_consume` receives it (prefix char included).
    fn consume(&mut self, line: &[u8]) {
        match line[0] {
            b'+' => {
                self.lno_post += 1;
                let body = &line[1..];
                if !self.color {
                    self.line0(b"", Some(b'+'), body);
                } else if self.new_blank_line_at_eof(body) {
                    self.line0(BG_RED, Some(b'+'), body);
                } else {
                    self.line0(GREEN, Some(b'+'), b"");
                    self.ws_check_emit(body, GREEN, BG_RED);
                }
            }
            b'-' => {
                self.lno_pre += 1;
                let set: &[u8] = if self.color { RED } else { b"" };
                self.line0(set, Some(b'-'), &line[1..]);
            }
            b' ' => {
                self.lno_pre += 1;
                self.lno_post += 1;
                self.line0(b"", Some(b' '), &line[1..]);
            }
            _ => {
                self.lno_pre += 1;
                self.line0(b"", None, line);
            }
        }
    }

    fn record(&mut self, prefix: u8, rec: &[u8]) {
        if rec.last() == Some(&b'\n') {
            let mut l = Vec::with_capacity(rec.len() + 1);
            l.push(prefix);
            l.extend_from_slice(rec);
            self.consume(&l);
        } else {
            let mut l = Vec::with_capacity(rec.len() + 2);
            l.push(prefix);
            l.extend_from_slice(rec);
            l.push(b'\n');
            self.consume(&l);
            self.consume(b"\\ No newline at end of file\n");
        }
    }

    /// git's `emit_hunk_header` after `sane_truncate_line`.
    fn hunk_header(&mut self, raw: &[u8]) {
        let org_len = utf8_valid_prefix(raw);
        let line = &raw[..org_len];
        let (frag, reset): (&[u8], &[u8]) = if self.color {
            (CYAN, RESET)
        } else {
            (b"", b"")
        };
        let mut msg: Vec<u8> = Vec::new();
        // raw starts with "@@ -" and has a closing " @@".
        let ep0 = match line.len() >= 10 && line.starts_with(b"@@") {
            true => line[2..]
                .windows(2)
                .position(|w| w == b"@@")
                .map(|p| p + 2 + 2),
            false => None,
        };
        let Some(mut ep) = ep0 else {
            self.line0(b"", None, line);
            return;
        };
        msg.extend_from_slice(frag);
        msg.extend_from_slice(&line[..ep]);
        msg.extend_from_slice(reset);
        let mut len = org_len;
        for i in 1..3 {
            if line[len - i] == b'\r' || line[len - i] == b'\n' {
                len -= 1;
            }
        }
        let cp = ep;
        while ep < len && (line[ep] == b' ' || line[ep] == b'\t') {
            ep += 1;
        }
        if ep != cp {
            msg.extend_from_slice(&line[cp..ep]);
            msg.extend_from_slice(reset);
        }
        if ep < len {
            msg.extend_from_slice(&line[ep..len]);
            msg.extend_from_slice(reset);
        }
        msg.extend_from_slice(&line[len..org_len]);
        if msg.last() != Some(&b'\n') {
            msg.push(b'\n');
        }
        // emitted through emit_line(o, "", "", ...): byte-identical
        self.out.extend_from_slice(&msg);
    }
}

/// Emit all hunks of `d` into `out` (nothing if there are no changes).
pub(crate) fn emit_hunks(out: &mut Vec<u8>, a: &[u8], b: &[u8], d: &LineDiff, cfg: &EmitConfig) {
    if d.changes.is_empty() {
        return;
    }
    let (l1, l2) = (count_trailing_blank(a), count_trailing_blank(b));
    let (pre, post) = if l2 <= l1 {
        (0, 0)
    } else {
        (count_lines(a) - l1 + 1, count_lines(b) - l2 + 1)
    };
    let mut em = LineEmitter {
        out,
        color: cfg.color,
        blank_at_eof_pre: pre,
        blank_at_eof_post: post,
        lno_pre: 0,
        lno_post: 0,
    };
    let ctx = cfg.context;
    let (n1, n2) = (d.old.len(), d.new.len());
    let mut func: Vec<u8> = Vec::new();
    let mut funclineprev: isize = -1;
    let ch = &d.changes;
    let mut k = 0;
    while k < ch.len() {
        // group changes into one hunk
        let mut last = k;
        while last + 1 < ch.len() {
            let prev = ch[last];
            let dist = ch[last + 1].i1 - (prev.i1 + prev.chg1);
            if dist > 2 * ctx {
                break;
            }
            last += 1;
        }
        let first = ch[k];
        let lc = ch[last];
        let s1 = first.i1.saturating_sub(ctx);
        let s2 = first.i2.saturating_sub(ctx);
        let lctx = ctx.min(n1 - (lc.i1 + lc.chg1)).min(n2 - (lc.i2 + lc.chg2));
        let e1 = lc.i1 + lc.chg1 + lctx;
        let e2 = lc.i2 + lc.chg2 + lctx;

        if cfg.funcname {
            let start = s1 as isize - 1;
            let mut l = start;
            while l != funclineprev && l >= 0 && (l as usize) < n1 {
                if let Some(f) = def_ff(d.old[l as usize]) {
                    func = f.to_vec();
                    break;
                }
                l -= 1;
            }
            funclineprev = start;
        }

        let (c1, c2) = (e1 - s1, e2 - s2);
        let mut hdr: Vec<u8> = b"@@ -".to_vec();
        hdr.extend_from_slice((if c1 != 0 { s1 + 1 } else { s1 }).to_string().as_bytes());
        if c1 != 1 {
            hdr.extend_from_slice(format!(",{c1}").as_bytes());
        }
        hdr.extend_from_slice(b" +");
        hdr.extend_from_slice((if c2 != 0 { s2 + 1 } else { s2 }).to_string().as_bytes());
        if c2 != 1 {
            hdr.extend_from_slice(format!(",{c2}").as_bytes());
        }
        hdr.extend_from_slice(b" @@");
        if !func.is_empty() {
            hdr.push(b' ');
            let room = 128 - hdr.len() - 1;
            hdr.extend_from_slice(&func[..func.len().min(room)]);
        }
        hdr.push(b'\n');
        em.lno_pre = if c1 != 0 { s1 as i64 + 1 } else { s1 as i64 };
        em.lno_post = if c2 != 0 { s2 as i64 + 1 } else { s2 as i64 };
        em.hunk_header(&hdr);

        for rec in &d.new[s2..first.i2] {
            em.record(b' ', rec);
        }
        let (mut p1, mut p2) = (first.i1, first.i2);
        for c in &ch[k..=last] {
            while p1 < c.i1 && p2 < c.i2 {
                em.record(b' ', d.new[p2]);
                p1 += 1;
                p2 += 1;
            }
            for rec in &d.old[c.i1..c.i1 + c.chg1] {
                em.record(b'-', rec);
            }
            for rec in &d.new[c.i2..c.i2 + c.chg2] {
                em.record(b'+', rec);
            }
            p1 = c.i1 + c.chg1;
            p2 = c.i2 + c.chg2;
        }
        for rec in &d.new[lc.i2 + lc.chg2..e2] {
            em.record(b' ', rec);
        }
        k = last + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_terminators() {
        assert_eq!(split_lines(b"a\nb\r\nc"), vec![&b"a\n"[..], b"b\r\n", b"c"]);
        assert!(split_lines(b"").is_empty());
    }

    #[test]
    fn trailing_blank_quirks() {
        assert_eq!(count_trailing_blank(b"a\n\n"), 1);
        assert_eq!(count_trailing_blank(b"a\n\n \n"), 2);
        assert_eq!(count_trailing_blank(b"\n\n"), 0);
        assert_eq!(count_trailing_blank(b"a\nb\n"), 0);
    }

    #[test]
    fn utf8_prefix() {
        assert_eq!(utf8_valid_prefix("héllo".as_bytes()), 6);
        assert_eq!(utf8_valid_prefix(b"ab\xe9cd"), 2);
        assert_eq!(utf8_valid_prefix(b"ab\xc3"), 2);
    }

    #[test]
    fn slides_to_match_git() {
        // Inserting a duplicate line: git shows the lower copy as added.
        let d = diff_lines(b"a\nb\n", b"a\nb\nb\n", true);
        assert_eq!(
            d.changes,
            vec![Change {
                i1: 2,
                i2: 2,
                chg1: 0,
                chg2: 1
            }]
        );
    }
}
