//! Rename pairing like `git diff -M` (diffcore-rename.c) and git's
//! similarity estimate (diffcore-delta.c).

use std::collections::HashMap;

use super::{Side, is_binary, is_regular};

/// git's `MAX_SCORE`: a similarity score of 100%.
pub const MAX_SCORE: u32 = 60000;
const HASHBASE: u32 = 107927;

/// Byte counts per span hash (spans end at `\n` or after 64 bytes; a CR of
/// CRLF is skipped in text files).
fn hash_chars(data: &[u8]) -> HashMap<u32, u64> {
    let is_text = !is_binary(data);
    let mut map = HashMap::new();
    let (mut n, mut accum1, mut accum2) = (0u64, 0u32, 0u32);
    let mut i = 0;
    while i < data.len() {
        let c = data[i] as u32;
        i += 1;
        let old_1 = accum1;
        if is_text && c == b'\r' as u32 && i < data.len() && data[i] == b'\n' {
            continue;
        }
        accum1 = (accum1 << 7) ^ (accum2 >> 25);
        accum2 = (accum2 << 7) ^ (old_1 >> 25);
        accum1 = accum1.wrapping_add(c);
        n += 1;
        if n < 64 && c != b'\n' as u32 {
            continue;
        }
        let h = accum1.wrapping_add(accum2.wrapping_mul(0x61)) % HASHBASE;
        *map.entry(h).or_insert(0) += n;
        n = 0;
        accum1 = 0;
        accum2 = 0;
    }
    if n > 0 {
        let h = accum1.wrapping_add(accum2.wrapping_mul(0x61)) % HASHBASE;
        *map.entry(h).or_insert(0) += n;
    }
    map
}

/// Bytes of `dst` that git considers copied from `src`.
fn src_copied(src: &HashMap<u32, u64>, dst: &HashMap<u32, u64>) -> u64 {
    src.iter()
        .map(|(h, &s)| dst.get(h).map_or(0, |&d| s.min(d)))
        .sum()
}

/// git's `estimate_similarity` (score in 0..=MAX_SCORE), without the
/// exact-match shortcut. Returns 0 for non-regular files or when the sizes
/// differ too much for `minimum_score`.
fn estimate<'a>(
    src: &Side<'a>,
    dst: &Side<'a>,
    minimum_score: u32,
    cache: &mut SpanCache<'a>,
) -> u32 {
    if !is_regular(src.mode) || !is_regular(dst.mode) {
        return 0;
    }
    let (ss, ds) = (src.content.len() as u64, dst.content.len() as u64);
    let max_size = ss.max(ds);
    let delta = max_size - ss.min(ds);
    if max_size * u64::from(MAX_SCORE - minimum_score) < delta * u64::from(MAX_SCORE) {
        return 0;
    }
    if ds == 0 {
        return 0;
    }
    let copied = {
        let s = cache.get(Key::Src(src.path), src.content);
        let d = cache.get(Key::Dst(dst.path), dst.content);
        src_copied(&s, &d)
    };
    (copied * u64::from(MAX_SCORE) / max_size) as u32
}

#[derive(Hash, PartialEq, Eq, Clone, Copy)]
enum Key<'a> {
    Src(&'a [u8]),
    Dst(&'a [u8]),
    Anon,
}

#[derive(Default)]
struct SpanCache<'a> {
    map: HashMap<Key<'a>, std::rc::Rc<HashMap<u32, u64>>>,
}

impl<'a> SpanCache<'a> {
    fn get(&mut self, key: Key<'a>, content: &[u8]) -> std::rc::Rc<HashMap<u32, u64>> {
        if key == Key::Anon {
            return std::rc::Rc::new(hash_chars(content));
        }
        self.map
            .entry(key)
            .or_insert_with(|| std::rc::Rc::new(hash_chars(content)))
            .clone()
    }
}

/// The similarity score git prints for a rename of `old` to `new`
/// (`similarity index` = score * 100 / MAX_SCORE): MAX_SCORE for identical
/// content, else git's estimate.
pub fn similarity_score(old: &Side, new: &Side) -> u32 {
    if old.content == new.content {
        return MAX_SCORE;
    }
    if !is_regular(old.mode) || !is_regular(new.mode) {
        return 0;
    }
    let (ss, ds) = (old.content.len() as u64, new.content.len() as u64);
    let max_size = ss.max(ds);
    if ds == 0 {
        return 0;
    }
    let mut cache = SpanCache::default();
    let s = cache.get(Key::Anon, old.content);
    let d = cache.get(Key::Anon, new.content);
    (src_copied(&s, &d) * u64::from(MAX_SCORE) / max_size) as u32
}

/// Percentage as git prints it in `similarity index N%`.
pub fn similarity_percent(score: u32) -> u32 {
    score * 100 / MAX_SCORE
}

/// One detected rename: `deleted[deleted_index]` became `created[created_index]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenamePair {
    pub deleted: usize,
    pub created: usize,
    /// 0..=MAX_SCORE; MAX_SCORE for exact renames.
    pub score: u32,
}

/// Knobs of rename detection; defaults are git's.
#[derive(Debug, Clone, Copy)]
pub struct RenameOptions {
    /// Minimum similarity in percent (`-M50%`).
    pub min_percent: u32,
    /// `diff.renameLimit`: skip inexact detection when
    /// sources * destinations > limit²; 0 = unlimited.
    pub limit: usize,
    /// `--rename-empty` (git's default: empty files may pair exactly).
    pub rename_empty: bool,
}

impl Default for RenameOptions {
    fn default() -> Self {
        RenameOptions {
            min_percent: 50,
            limit: 1000,
            rename_empty: true,
        }
    }
}

fn basename(p: &[u8]) -> &[u8] {
    match p.iter().rposition(|&b| b == b'/') {
        Some(i) => &p[i + 1..],
        None => p,
    }
}

/// git's `basename_same`.
fn basename_same(a: &[u8], b: &[u8]) -> bool {
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 && j > 0 {
        i -= 1;
        j -= 1;
        if a[i] != b[j] {
            return false;
        }
        if a[i] == b'/' {
            return true;
        }
    }
    (i == 0 || a[i - 1] == b'/') && (j == 0 || b[j - 1] == b'/')
}

#[derive(Clone, Copy)]
struct Score {
    src: usize,
    dst: isize,
    score: u32,
    name_score: i32,
}

/// git's `score_compare` (<0: a sorts first).
fn score_compare(a: &Score, b: &Score) -> i64 {
    if a.dst < 0 {
        return i64::from(0 <= b.dst);
    } else if b.dst < 0 {
        return -1;
    }
    if a.score == b.score {
        return i64::from(b.name_score - a.name_score);
    }
    i64::from(b.score) - i64::from(a.score)
}

/// Pair deleted and created files the way `git diff -M` does: exact content
/// matches first (preferring an unused source with the same basename), then
/// unique-basename pairs at >= (min + (100% - min) / 2) similarity, then the
/// best remaining pairs at >= `min_percent`. Inputs may be in any order;
/// git's path order is used internally.
pub fn pair_renames(deleted: &[Side], created: &[Side], opts: &RenameOptions) -> Vec<RenamePair> {
    let minimum_score = (opts.min_percent.min(100) * MAX_SCORE) / 100;
    let keep = |s: &Side| opts.rename_empty || !s.content.is_empty();
    let mut srcs: Vec<usize> = (0..deleted.len()).filter(|&i| keep(&deleted[i])).collect();
    let mut dsts: Vec<usize> = (0..created.len()).filter(|&i| keep(&created[i])).collect();
    srcs.sort_by(|&a, &b| deleted[a].path.cmp(deleted[b].path));
    dsts.sort_by(|&a, &b| created[a].path.cmp(created[b].path));
    let mut result = Vec::new();
    if srcs.is_empty() || dsts.is_empty() {
        return result;
    }
    let mut src_used = vec![false; deleted.len()];
    let mut dst_done = vec![false; created.len()];

    // 1. exact renames
    let mut by_content: HashMap<&[u8], Vec<usize>> = HashMap::new();
    for &s in &srcs {
        by_content.entry(deleted[s].content).or_default().push(s);
    }
    for &d in &dsts {
        let target = &created[d];
        let Some(cands) = by_content.get(target.content) else {
            continue;
        };
        let mut best: Option<usize> = None;
        let mut best_score = -1;
        let mut budget = 100;
        for &s in cands {
            let source = &deleted[s];
            if (!is_regular(source.mode) || !is_regular(target.mode)) && source.mode != target.mode
            {
                continue;
            }
            if src_used[s] {
                continue;
            }
            let score = 1 + i32::from(basename_same(source.path, target.path));
            if score > best_score {
                best = Some(s);
                best_score = score;
                if score == 2 {
                    break;
                }
            }
            budget -= 1;
            if budget == 0 {
                break;
            }
        }
        if let Some(s) = best {
            src_used[s] = true;
            dst_done[d] = true;
            result.push(RenamePair {
                deleted: s,
                created: d,
                score: MAX_SCORE,
            });
        }
    }
    if minimum_score == MAX_SCORE {
        return result;
    }
    srcs.retain(|&s| !src_used[s]);

    let mut cache = SpanCache::default();

    // 2. unique basenames
    let min_basename_score = minimum_score + (0.5 * f64::from(MAX_SCORE - minimum_score)) as u32;
    let mut src_base: HashMap<&[u8], Option<usize>> = HashMap::new();
    for &s in &srcs {
        src_base
            .entry(basename(deleted[s].path))
            .and_modify(|v| *v = None)
            .or_insert(Some(s));
    }
    let mut dst_base: HashMap<&[u8], Option<usize>> = HashMap::new();
    for &d in &dsts {
        if dst_done[d] {
            continue;
        }
        dst_base
            .entry(basename(created[d].path))
            .and_modify(|v| *v = None)
            .or_insert(Some(d));
    }
    for &s in &srcs {
        let base = basename(deleted[s].path);
        let Some(&dst) = dst_base.get(base) else {
            continue;
        };
        let (Some(Some(_)), Some(d)) = (src_base.get(base), dst) else {
            continue;
        };
        if dst_done[d] {
            continue;
        }
        let score = estimate(&deleted[s], &created[d], min_basename_score, &mut cache);
        if score < min_basename_score {
            continue;
        }
        src_used[s] = true;
        dst_done[d] = true;
        result.push(RenamePair {
            deleted: s,
            created: d,
            score,
        });
    }
    srcs.retain(|&s| !src_used[s]);

    // 3. similarity matrix
    let remaining: Vec<usize> = dsts.iter().copied().filter(|&d| !dst_done[d]).collect();
    if remaining.is_empty() || srcs.is_empty() {
        return result;
    }
    if opts.limit > 0 && remaining.len() * srcs.len() > opts.limit * opts.limit {
        return result;
    }
    const CANDIDATES: usize = 4;
    let mut mx: Vec<Score> = Vec::with_capacity(remaining.len() * CANDIDATES);
    for &d in &remaining {
        let mut m = [Score {
            src: 0,
            dst: -1,
            score: 0,
            name_score: 0,
        }; CANDIDATES];
        for &s in &srcs {
            let this = Score {
                src: s,
                dst: d as isize,
                score: estimate(&deleted[s], &created[d], minimum_score, &mut cache),
                name_score: i32::from(basename_same(deleted[s].path, created[d].path)),
            };
            let mut worst = 0;
            for i in 1..CANDIDATES {
                if score_compare(&m[i], &m[worst]) > 0 {
                    worst = i;
                }
            }
            if score_compare(&m[worst], &this) > 0 {
                m[worst] = this;
            }
        }
        mx.extend_from_slice(&m);
    }
    mx.sort_by(|a, b| score_compare(a, b).cmp(&0));
    for m in &mx {
        if m.dst < 0 || m.score < minimum_score {
            break;
        }
        let d = m.dst as usize;
        if dst_done[d] || src_used[m.src] {
            continue;
        }
        src_used[m.src] = true;
        dst_done[d] = true;
        result.push(RenamePair {
            deleted: m.src,
            created: d,
            score: m.score,
        });
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basename_same_matches_git() {
        assert!(basename_same(b"a/x.c", b"b/x.c"));
        assert!(basename_same(b"x.c", b"dir/x.c"));
        assert!(!basename_same(b"a/yx.c", b"b/x.c"));
        assert!(!basename_same(b"x.c", b"y.c"));
    }

    #[test]
    fn crlf_is_ignored_in_text_spans() {
        let a = hash_chars(b"hello\r\nworld\r\n");
        let b = hash_chars(b"hello\nworld\n");
        assert_eq!(a, b);
    }
}
