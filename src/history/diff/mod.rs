//! Git's extended unified diff format, byte for byte.
//!
//! * [`file_diff`] prints one file pair the way `git diff` does (headers,
//!   modes, renames, abbreviated blob ids, hunks with function names,
//!   binary detection, quoting of odd paths, optional colour), and with
//!   [`Options::binary`] a binary file the way `git diff --binary` does.
//! * [`pair_renames`] pairs deleted and created files like `git diff -M`.
//! * [`stat`] lays out `git diff --stat`.
//! * [`diff_trees`] / [`tree_stats`] glue the above together for two whole
//!   trees, in git's file order.
//!
//! Everything works on bytes: paths and contents need not be UTF-8. The line diff is
//! `similar`'s Myers, then change blocks are slid the way git does (its indent heuristic).
//! Where several shortest diffs exist, Myers may pick another than git's own algorithm (seen
//! in 7 of 250 random, very repetitive files); `git apply` takes either.

mod binary;
pub mod hunk;
mod quote;
mod rename;
mod stat;
mod xdiff;

pub use quote::{needs_quoting, quote_path, quote_prefixed};
pub use rename::{
    MAX_SCORE, RenameOptions, RenamePair, pair_renames, similarity_percent, similarity_score,
};
pub use stat::{Stat, stat};

/// One side of a file pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Side<'a> {
    /// Path relative to the repository root, `/`-separated, without prefix.
    pub path: &'a [u8],
    /// st_mode-style git mode: 0o100644, 0o100755, 0o120000 (symlink).
    pub mode: u32,
    /// File content; for a symlink its target.
    pub content: &'a [u8],
}

/// Output options. `Default` gives git's defaults.
#[derive(Debug, Clone)]
pub struct Options {
    /// Lines of context (`-U`), git default 3.
    pub context: usize,
    /// Use git's default colours (`--color`).
    pub color: bool,
    /// Detect renames in [`diff_trees`] / [`tree_stats`] (`-M`, git's
    /// `diff.renames` default).
    pub find_renames: bool,
    /// Rename detection knobs (minimum similarity 50% etc.).
    pub renames: RenameOptions,
    /// Hex digits of abbreviated blob ids on the `index` line (git: 7 for
    /// repositories with fewer than ~16k objects, more for bigger ones).
    pub abbrev: usize,
    /// Append the function-context line to `@@` headers (git does).
    pub funcname: bool,
    /// git's `diff.indentHeuristic` (default on).
    pub indent_heuristic: bool,
    /// `--binary`: a binary file's change as a `GIT binary patch` that `git apply` takes, with
    /// full blob ids on its `index` line, instead of `Binary files ... differ` (git default
    /// off).
    pub binary: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            context: 3,
            color: false,
            find_renames: true,
            renames: RenameOptions::default(),
            abbrev: 7,
            funcname: true,
            indent_heuristic: true,
            binary: false,
        }
    }
}

/// The mode a diff shows for a file state: a file's own permission bits (`100600`), which git
/// prints as it is given them and reads as the 100644 or 100755 it keeps (see [`git_mode`]).
pub fn diff_mode(s: &super::change::FileState) -> u32 {
    use super::change::FileKind;
    match s.kind {
        FileKind::File => S_IFREG | (s.mode & 0o7777),
        // A FIFO, socket or device with its own type bits (`010644`), which git has no mode
        // for: shown as a regular file, it was told as one in `show` and `diff`.
        FileKind::Special(node) => match node.type_bits() {
            Some(bits) => bits | (s.mode & 0o7777),
            None => git_mode(s),
        },
        _ => git_mode(s),
    }
}

/// The mode git keeps for a file state (a tree entry's mode).
pub fn git_mode(s: &super::change::FileState) -> u32 {
    use super::change::FileKind;
    match s.kind {
        FileKind::Symlink => 0o120000,
        FileKind::Dir => 0o040000,
        _ if s.mode & 0o111 != 0 => 0o100755,
        _ => 0o100644,
    }
}

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;

pub(crate) fn is_regular(mode: u32) -> bool {
    mode & S_IFMT == S_IFREG
}

/// git's binary test: a NUL byte within the first 8000 bytes.
pub fn is_binary(content: &[u8]) -> bool {
    content[..content.len().min(8000)].contains(&0)
}

/// git's blob id: SHA-1 of `"blob <len>\0" + content`.
pub fn blob_id(content: &[u8]) -> [u8; 20] {
    let mut h = sha1_smol::Sha1::new();
    h.update(format!("blob {}\0", content.len()).as_bytes());
    h.update(content);
    h.digest().bytes()
}

/// Lower-case hex of [`blob_id`].
pub fn blob_id_hex(content: &[u8]) -> String {
    blob_id(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The mode git keeps for a diff's mode (100644 or 100755 for a file; `git apply` reads any
/// other file mode as one of these).
fn kept_mode(mode: u32) -> u32 {
    match mode {
        _ if !is_regular(mode) => mode,
        _ if mode & 0o111 != 0 => 0o100755,
        _ => 0o100644,
    }
}

fn abbrev_hex(side: Option<&Side>, abbrev: usize) -> String {
    let n = abbrev.clamp(4, 40);
    match side {
        Some(s) => blob_id_hex(s.content)[..n].to_string(),
        None => "0".repeat(n),
    }
}

/// The diff of one file pair, exactly as `git diff` prints it (with `a/` and
/// `b/` prefixes). `old == None`: created; `new == None`: deleted; different
/// paths: a rename (shown with `similarity index`, `rename from/to`).
/// A change between a regular file and a symlink is shown, like git, as a
/// deletion followed by a creation. Returns an empty vector when there is no
/// difference at all.
pub fn file_diff(old: Option<Side>, new: Option<Side>, opts: &Options) -> Vec<u8> {
    let mut out = Vec::new();
    match (old, new) {
        (None, None) => {}
        (Some(o), Some(n)) if (o.mode ^ n.mode) & S_IFMT != 0 => {
            emit_pair(&mut out, Some(&o), None, None, opts);
            emit_pair(&mut out, None, Some(&n), None, opts);
        }
        (Some(o), Some(n)) if o.path != n.path => {
            let score = similarity_score(&o, &n);
            emit_pair(&mut out, Some(&o), Some(&n), Some(score), opts);
        }
        (o, n) => emit_pair(&mut out, o.as_ref(), n.as_ref(), None, opts),
    }
    out
}

/// Like [`file_diff`] for a rename whose score is already known (from
/// [`pair_renames`]).
pub fn rename_diff(old: Side, new: Side, score: u32, opts: &Options) -> Vec<u8> {
    let mut out = Vec::new();
    if (old.mode ^ new.mode) & S_IFMT != 0 {
        return file_diff(Some(old), Some(new), opts);
    }
    emit_pair(&mut out, Some(&old), Some(&new), Some(score), opts);
    out
}

fn meta_line(out: &mut Vec<u8>, color: bool, text: &[u8]) {
    if color {
        out.extend_from_slice(xdiff::BOLD);
    }
    out.extend_from_slice(text);
    if color {
        out.extend_from_slice(xdiff::RESET);
    }
    out.push(b'\n');
}

fn emit_pair(
    out: &mut Vec<u8>,
    one: Option<&Side>,
    two: Option<&Side>,
    rename_score: Option<u32>,
    opts: &Options,
) {
    let color = opts.color;
    let name_a = one.or(two).map(|s| s.path).unwrap_or_default();
    let name_b = two.or(one).map(|s| s.path).unwrap_or_default();
    let a_one = quote_prefixed(b"a/", name_a);
    let b_two = quote_prefixed(b"b/", name_b);
    let lbl0: &[u8] = if one.is_some() { &a_one } else { b"/dev/null" };
    let lbl1: &[u8] = if two.is_some() { &b_two } else { b"/dev/null" };
    let mode_of = |s: Option<&Side>| s.map_or(0, |s| s.mode);

    // the "xfrm" part: rename lines and the index line
    let mut must_show_header = false;
    let mut xfrm = Vec::new();
    if let (Some(score), Some(o), Some(n)) = (rename_score, one, two) {
        must_show_header = true;
        meta_line(
            &mut xfrm,
            color,
            format!("similarity index {}%", similarity_percent(score)).as_bytes(),
        );
        let mut l = b"rename from ".to_vec();
        l.extend_from_slice(&quote_path(o.path));
        meta_line(&mut xfrm, color, &l);
        let mut l = b"rename to ".to_vec();
        l.extend_from_slice(&quote_path(n.path));
        meta_line(&mut xfrm, color, &l);
    }
    let same_content = match (one, two) {
        (Some(o), Some(n)) => o.content == n.content,
        _ => false,
    };
    let a = one.map_or(&b""[..], |s| s.content);
    let b = two.map_or(&b""[..], |s| s.content);
    let binary = is_binary(a) || is_binary(b);
    if let (Some(o), Some(n), None) = (one, two, rename_score)
        && same_content
        && o.mode != n.mode
        && kept_mode(o.mode) == kept_mode(n.mode)
    {
        // Only permission bits git does not keep (644 -> 600): as a git header this section
        // would be empty to `git apply`, which then refuses the whole patch; said where it
        // reads it as commentary instead.
        let mut l = b"# mode of ".to_vec();
        l.extend_from_slice(&quote_path(n.path));
        l.extend_from_slice(
            format!(
                ": {:06o} -> {:06o} (git keeps only 100644 and 100755: git apply skips this line)",
                o.mode, n.mode
            )
            .as_bytes(),
        );
        meta_line(out, color, &l);
        return;
    }
    if !same_content {
        // `--binary` writes a binary file's blob ids whole: git applies its patch only then.
        let abbrev = if opts.binary && binary {
            40
        } else {
            opts.abbrev
        };
        let mut l = format!(
            "index {}..{}",
            abbrev_hex(one, abbrev),
            abbrev_hex(two, abbrev)
        );
        if mode_of(one) == mode_of(two) {
            l.push_str(&format!(" {:06o}", mode_of(one)));
        }
        meta_line(&mut xfrm, color, l.as_bytes());
    }

    let mut header = Vec::new();
    let mut l = b"diff --git ".to_vec();
    l.extend_from_slice(&a_one);
    l.push(b' ');
    l.extend_from_slice(&b_two);
    meta_line(&mut header, color, &l);
    match (one, two) {
        (None, Some(n)) => {
            meta_line(
                &mut header,
                color,
                format!("new file mode {:06o}", n.mode).as_bytes(),
            );
            must_show_header = true;
        }
        (Some(o), None) => {
            meta_line(
                &mut header,
                color,
                format!("deleted file mode {:06o}", o.mode).as_bytes(),
            );
            must_show_header = true;
        }
        (Some(o), Some(n)) => {
            if o.mode != n.mode {
                meta_line(
                    &mut header,
                    color,
                    format!("old mode {:06o}", o.mode).as_bytes(),
                );
                meta_line(
                    &mut header,
                    color,
                    format!("new mode {:06o}", n.mode).as_bytes(),
                );
                must_show_header = true;
            }
        }
        (None, None) => return,
    }
    header.extend_from_slice(&xfrm);

    if binary {
        if a == b {
            if must_show_header {
                out.extend_from_slice(&header);
            }
            return;
        }
        out.extend_from_slice(&header);
        if opts.binary {
            binary::patch(out, a, b);
            return;
        }
        out.extend_from_slice(b"Binary files ");
        out.extend_from_slice(lbl0);
        out.extend_from_slice(b" and ");
        out.extend_from_slice(lbl1);
        out.extend_from_slice(b" differ\n");
        return;
    }

    if must_show_header {
        out.extend_from_slice(&header);
    }
    let d = xdiff::diff_lines(a, b, opts.indent_heuristic);
    if d.changes.is_empty() {
        return;
    }
    if !must_show_header {
        out.extend_from_slice(&header);
    }
    for (sign, lbl) in [(&b"--- "[..], lbl0), (&b"+++ "[..], lbl1)] {
        if color {
            out.extend_from_slice(xdiff::BOLD);
        }
        out.extend_from_slice(sign);
        out.extend_from_slice(lbl);
        if color {
            out.extend_from_slice(xdiff::RESET);
        }
        if lbl.contains(&b' ') {
            out.push(b'\t');
        }
        out.push(b'\n');
    }
    let cfg = xdiff::EmitConfig {
        context: opts.context,
        color,
        funcname: opts.funcname,
    };
    xdiff::emit_hunks(out, a, b, &d, &cfg);
}

/// One entry of a whole-tree diff, in git's output order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedPair {
    /// Index into the old tree, `None` for a created file.
    pub old: Option<usize>,
    /// Index into the new tree, `None` for a deleted file.
    pub new: Option<usize>,
    /// Rename score when `old` and `new` have different paths.
    pub rename_score: Option<u32>,
}

/// Match two trees (lists of files, each path at most once per list) into
/// the file pairs `git diff` would show, with renames when
/// `opts.find_renames`, ordered like git (by the new path for renames,
/// otherwise by path, byte order). Unchanged files are left out.
pub fn plan_tree_diff(old: &[Side], new: &[Side], opts: &Options) -> Vec<PlannedPair> {
    use std::collections::BTreeMap;
    let mut by_path: BTreeMap<&[u8], (Option<usize>, Option<usize>)> = BTreeMap::new();
    for (i, s) in old.iter().enumerate() {
        by_path.entry(s.path).or_default().0 = Some(i);
    }
    for (i, s) in new.iter().enumerate() {
        by_path.entry(s.path).or_default().1 = Some(i);
    }
    let mut pairs: Vec<(&[u8], PlannedPair)> = Vec::new();
    let mut deleted = Vec::new();
    let mut created = Vec::new();
    for (path, (o, n)) in by_path {
        match (o, n) {
            (Some(o), Some(n)) => {
                if old[o].mode != new[n].mode || old[o].content != new[n].content {
                    pairs.push((
                        path,
                        PlannedPair {
                            old: Some(o),
                            new: Some(n),
                            rename_score: None,
                        },
                    ));
                }
            }
            (Some(o), None) => deleted.push(o),
            (None, Some(n)) => created.push(n),
            (None, None) => {}
        }
    }
    let renames = if opts.find_renames {
        let d: Vec<Side> = deleted.iter().map(|&i| old[i]).collect();
        let c: Vec<Side> = created.iter().map(|&i| new[i]).collect();
        pair_renames(&d, &c, &opts.renames)
    } else {
        Vec::new()
    };
    let mut del_used = vec![false; deleted.len()];
    let mut cre_used = vec![false; created.len()];
    for r in &renames {
        del_used[r.deleted] = true;
        cre_used[r.created] = true;
        let (o, n) = (deleted[r.deleted], created[r.created]);
        pairs.push((
            new[n].path,
            PlannedPair {
                old: Some(o),
                new: Some(n),
                rename_score: Some(r.score),
            },
        ));
    }
    for (k, &o) in deleted.iter().enumerate() {
        if !del_used[k] {
            pairs.push((
                old[o].path,
                PlannedPair {
                    old: Some(o),
                    new: None,
                    rename_score: None,
                },
            ));
        }
    }
    for (k, &n) in created.iter().enumerate() {
        if !cre_used[k] {
            pairs.push((
                new[n].path,
                PlannedPair {
                    old: None,
                    new: Some(n),
                    rename_score: None,
                },
            ));
        }
    }
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    pairs.into_iter().map(|(_, p)| p).collect()
}

/// `git diff` output for two whole trees (see [`plan_tree_diff`]).
pub fn diff_trees(old: &[Side], new: &[Side], opts: &Options) -> Vec<u8> {
    let mut out = Vec::new();
    for p in plan_tree_diff(old, new, opts) {
        let o = p.old.map(|i| old[i]);
        let n = p.new.map(|i| new[i]);
        match (p.rename_score, o, n) {
            (Some(score), Some(o), Some(n)) => out.extend(rename_diff(o, n, score, opts)),
            _ => out.extend(file_diff(o, n, opts)),
        }
    }
    out
}

/// The [`Stat`] entries `git diff --stat` would list for two trees.
pub fn tree_stats(old: &[Side], new: &[Side], opts: &Options) -> Vec<Stat> {
    plan_tree_diff(old, new, opts)
        .into_iter()
        .map(|p| Stat::from_sides(p.old.map(|i| old[i]), p.new.map(|i| new[i]), opts))
        .collect()
}
