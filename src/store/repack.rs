//! Repacking: older versions re-encoded as deltas on newer ones, at gc time.
//!
//! At write time a version can only be a delta on what is already stored, an older version:
//! every added line is in the new version's delta, as literals. Afterwards, each path's
//! newest version (its *head*) can stay whole and the older ones become deltas on the version
//! after them (*reverse* deltas, as git's pack makes them), which mostly copy; a head may
//! itself be a delta on a similar file, or on a zstd dictionary trained on all heads.
//! [`Store::repack`] does that, run by gc once it has removed what it removes.
//!
//! No cycle, ever: every blob gets a *rank* ([`Rank`]: heads above everything else, by size;
//! other versions by the newest change referring to them; ties broken by hash), and a blob is
//! only re-encoded on one of higher rank. Blobs are taken highest rank first, each given its
//! final encoding before any of lower rank, so a delta only ever refers to a blob already in
//! its final encoding (and a blob whose current encoding breaks the rule, a forward delta,
//! is re-encoded before anything may use it). An interrupted repack leaves blobs of high
//! rank in their new encoding and the rest in their old one, and neither can reach the
//! other in a loop. Chains stay within [`max_depth`], counted on the new encodings.
//!
//! Each re-encoding is one put of the blob's value under the same key (the hash of the whole
//! content), written after its base is stored and its delta was checked to decode back to the
//! content; a reader racing it reads either encoding, both checked against the hash. The
//! recording path is untouched: a capture storing a delta meanwhile refers to a blob that is
//! in one of its encodings either way.

use std::collections::{HashMap, HashSet};

use rocksdb::IteratorMode;

use super::blobs::{self, CHUNK, Hash, max_depth};
use super::{CF_BLOBS, CF_CHANGES, ChangeRecord, Result, Store};

/// `meta` key: the newest change id a completed repack had seen (`1`, then the id as u64 BE).
/// Blobs no change since then refers to were considered then, and are not tried again unless
/// their encoding has to change.
const REPACKED_KEY: &[u8] = b"repacked";

/// zstd level of a re-encoded file's content up to [`REPACK_LEVEL_UP_TO`]: gc is not in a
/// hurry, and level 19 makes deltas 10-20 % smaller than level 9 on source text.
const REPACK_LEVEL: i32 = 19;
const REPACK_LEVEL_UP_TO: usize = 128 << 10;
/// zstd level at which the best of several bases is chosen (the chosen one is then encoded at
/// [`REPACK_LEVEL`]): the ranking is about the same, at a fiftieth of the time.
const SEARCH_LEVEL: i32 = 3;
/// How many contents of other paths a version tries as bases: those of the same file name,
/// then those of its extension closest in size.
const WINDOW_NAMES: usize = 4;
const WINDOW_SIZES: usize = 8;
/// How far from a version's size the window looks, in entries of its extension.
const WINDOW_SCAN: usize = 64;
/// The dictionary (zstd's format, trained on the heads' contents) that heads may be deltas
/// on: what files have in common that no single other file holds (licence headers, `use`
/// lines, test boilerplate). Made when at least this many heads of at least this many bytes
/// are there to train it on, from at most this many bytes of them; an eighth of their size,
/// within these bounds (on this project's history: 110 KiB saved 166 KiB, 220 KiB 187 KiB,
/// 400 KiB 208 KiB, each counting the dictionary itself).
const DICT_SIZE: (usize, usize) = (64 << 10, 512 << 10);
const DICT_SHARE: usize = 8;
const DICT_MIN_SAMPLES: usize = 32;
const DICT_MIN_BYTES: usize = 256 << 10;
const DICT_SAMPLE_BYTES: usize = 8 << 20;

/// Contents kept in memory to be used as bases, in bytes: a path's versions are taken one
/// after another, so the next one's base was usually just read.
const CACHE_BYTES: usize = 64 << 20;

/// The most stored contents a repack takes on: it keeps about 2 KB for each in memory while
/// it runs (its maps of ranks, names, neighbours and headers, and the allocator's overhead;
/// measured in the daemon, 90 -> 200 MiB for 60,000), so a bigger store is not repacked.
pub const REPACK_MAX_BLOBS: u64 = 100_000;

/// [`REPACK_MAX_BLOBS`], or for tests `REWIND_TEST_REPACK_MAX`.
pub(super) fn most_blobs() -> u64 {
    std::env::var("REWIND_TEST_REPACK_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(REPACK_MAX_BLOBS)
}

/// What a repack did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepackReport {
    /// Blobs whose stored value was rewritten.
    pub rewritten: u64,
    /// Of them, how many are now deltas on a newer version.
    pub deltas: u64,
    /// Stored bytes of the rewritten blobs, before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Some blob that was a base before may be needed by nothing now (a sweep frees it).
    pub freed_bases: bool,
}

/// A blob's place in the order: only a blob of higher rank may be its base. Compared field
/// by field: a path's newest version (a head) ranks above every older one, heads by size
/// (so a smaller file is a delta on a larger one, as in git's pack), older versions by the
/// newest change that refers to them, so each is a delta on a newer one.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Rank {
    /// 1 for a head.
    head: u8,
    /// A head's size; another version's newest change.
    key: u64,
    /// 1 when the newest change has the blob as its content after, 0 as before.
    after: u8,
    hash: Hash,
    /// The newest change that refers to it (unique `hash` before it: never compared).
    id: u64,
}

/// A blob's value header, as scanned.
#[derive(Clone, Copy)]
struct Header {
    base: Option<(Hash, u8)>,
    stored: u64,
    /// The content's length (from the zstd frame's header); `None` for a manifest or a value
    /// whose frame does not say.
    len: Option<u64>,
}

/// The frame of a value stored whole or as a delta.
fn frame_of(value: &[u8]) -> Option<&[u8]> {
    match value {
        [blobs::BLOB_VERSION, 0, frame @ ..] => Some(frame),
        [blobs::BLOB_VERSION, 2, _, rest @ ..] if rest.len() > 32 => Some(&rest[32..]),
        _ => None,
    }
}

fn level_for(len: usize) -> i32 {
    if len <= REPACK_LEVEL_UP_TO {
        REPACK_LEVEL
    } else {
        blobs::file_level(len)
    }
}

/// Tests only: `REWIND_TEST_REPACK_KILL=N` makes the process SIGKILL itself right after the
/// Nth re-encoded blob is written, to check that a repack cut short loses nothing.
fn kill_after() -> Option<u64> {
    std::env::var("REWIND_TEST_REPACK_KILL").ok()?.parse().ok()
}

impl Store {
    /// The newest change id a completed repack saw.
    fn repacked(&self) -> Result<Repacked> {
        let value = self.meta(REPACKED_KEY)?.unwrap_or_default();
        let id = |v: &[u8]| u64::from_be_bytes(v.try_into().expect("8 bytes"));
        Ok(match value.as_slice() {
            [1, rest @ ..] if rest.len() == 8 => Repacked {
                up_to: id(rest),
                dictionary: Dictionary::NotYet,
            },
            [1, rest @ ..] if rest.len() == 9 && rest[8] == 1 => Repacked {
                up_to: id(&rest[..8]),
                dictionary: Dictionary::NotWorth,
            },
            [1, rest @ ..] if rest.len() == 9 + 32 && rest[8] == 2 => Repacked {
                up_to: id(&rest[..8]),
                dictionary: Dictionary::Made(Hash(rest[9..].try_into().expect("32 bytes"))),
            },
            _ => Repacked {
                up_to: 0,
                dictionary: Dictionary::NotYet,
            },
        })
    }

    /// A dictionary trained on the heads' contents, stored as a blob (whole), if it pays: it
    /// saves at least twice what it takes.
    fn make_dictionary(&self, heads: &[(Hash, usize)]) -> Result<Option<Hash>> {
        let mut samples: Vec<Vec<u8>> = Vec::new();
        let mut total = 0;
        for (hash, len) in heads {
            if !(blobs::DELTA_MIN..=REPACK_LEVEL_UP_TO).contains(len) {
                continue;
            }
            if total + len > DICT_SAMPLE_BYTES {
                break;
            }
            if let Ok(content) = self.read_blob(hash) {
                total += content.len();
                samples.push(content);
            }
        }
        if samples.len() < DICT_MIN_SAMPLES || total < DICT_MIN_BYTES {
            return Ok(None);
        }
        let size = (total / DICT_SHARE).clamp(DICT_SIZE.0, DICT_SIZE.1);
        let Ok(dict) = zstd::dict::from_samples(&samples, size) else {
            return Ok(None);
        };
        let value = blobs::encode_whole_at(&dict, REPACK_LEVEL);
        let saved: i64 = samples
            .iter()
            .map(|s| {
                let whole = blobs::whole_size(s, SEARCH_LEVEL) as i64;
                let delta = blobs::delta_size(s, &dict, SEARCH_LEVEL);
                (whole - delta.min(whole as usize) as i64).max(0)
            })
            .sum();
        if saved < 2 * value.len() as i64 {
            return Ok(None);
        }
        let hash = Hash::of(&dict);
        self.put_value("repack dictionary", &hash, &value, false)?;
        Ok(Some(hash))
    }

    /// Re-encode older versions of each path as deltas on newer ones where that is smaller
    /// (see the module's comment). Only gc calls it, under its lock, so no blob it uses as a
    /// base is removed meanwhile; changes and content recorded meanwhile are left as they are.
    pub(super) fn repack(&self) -> Result<RepackReport> {
        self.check_writable()?;
        let mut report = RepackReport::default();
        let repacked = self.repacked()?;
        let since = repacked.up_to;

        // Every change's file contents: their ranks, and each path's versions in order.
        let mut ranks: HashMap<Hash, Rank> = HashMap::new();
        let mut versions: HashMap<Vec<u8>, Vec<Hash>> = HashMap::new();
        // The path each file content was recorded under last.
        let mut names: HashMap<Hash, Vec<u8>> = HashMap::new();
        let mut newest_id = 0;
        {
            let db = self.db()?;
            for item in db.iterator_cf(db.cf(CF_CHANGES), IteratorMode::Start) {
                let (key, value) = item.map_err(Store::db_error("scan changes"))?;
                let Ok(c) = ChangeRecord::decode(CF_CHANGES, &key, &value) else {
                    continue;
                };
                newest_id = newest_id.max(c.id);
                for (state, after) in [(&c.before, 0), (&c.after, 1)] {
                    let Some(hash) = state.as_ref().and_then(|s| s.hash).map(Hash) else {
                        continue;
                    };
                    let rank = Rank {
                        head: 0,
                        key: c.id,
                        after,
                        hash,
                        id: c.id,
                    };
                    let r = ranks.entry(hash).or_insert(rank);
                    *r = (*r).max(rank);
                    if state
                        .as_ref()
                        .is_some_and(|s| s.kind == super::format::kind::FILE)
                    {
                        names.insert(hash, c.path.clone());
                        let seq = versions.entry(c.path.clone()).or_default();
                        if seq.last() != Some(&hash) {
                            seq.push(hash);
                        }
                    }
                }
            }
        }
        // Neighbours (the version before and after, in any path) are the bases tried first.
        // A path's newest version (a head), and a version no neighbour is a base for, also
        // tries the contents of other paths most like it (`Window`), as git's pack does.
        let mut neighbours: HashMap<Hash, Vec<Hash>> = HashMap::new();
        let mut heads: HashSet<Hash> = HashSet::new();
        for seq in versions.values() {
            for pair in seq.windows(2) {
                neighbours.entry(pair[0]).or_default().push(pair[1]);
                neighbours.entry(pair[1]).or_default().push(pair[0]);
            }
            heads.extend(seq.last());
        }
        drop(versions);

        // Every blob's header; chunks of large content are left as they are.
        let mut headers: HashMap<Hash, Header> = HashMap::new();
        let mut chunks: HashSet<Hash> = HashSet::new();
        {
            let db = self.db()?;
            for item in db.iterator_cf(db.cf(CF_BLOBS), IteratorMode::Start) {
                let (key, value) = item.map_err(Store::db_error("scan blobs"))?;
                let Ok(hash) = <[u8; 32]>::try_from(&key[..]).map(Hash) else {
                    continue;
                };
                if let Ok(Some(m)) = blobs::manifest_of(&hash, &value) {
                    chunks.extend(m.chunks.into_iter().map(|(h, _)| Hash(h)));
                    continue;
                }
                let len = frame_of(&value)
                    .and_then(|f| zstd::zstd_safe::get_frame_content_size(f).ok().flatten());
                headers.insert(
                    hash,
                    Header {
                        base: blobs::delta_base(&value),
                        stored: value.len() as u64,
                        len,
                    },
                );
            }
        }

        for (hash, rank) in &mut ranks {
            if let Some(len) = headers.get(hash).and_then(|h| h.len)
                && heads.contains(hash)
            {
                rank.head = 1;
                rank.key = len;
                rank.after = 0;
            }
        }
        // Highest rank first.
        let mut order: Vec<Rank> = ranks
            .values()
            .filter(|r| !chunks.contains(&r.hash))
            .filter(|r| {
                headers
                    .get(&r.hash)
                    .and_then(|h| h.len)
                    .is_some_and(|len| len as usize <= CHUNK)
            })
            .copied()
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        let window = Window::new(&order, &names, &headers);
        drop(names);

        // Blobs in their final encoding, with the depth of their chain: the only bases a
        // blob taken later may have.
        let mut done: HashMap<Hash, u8> = HashMap::new();
        // The dictionary: made once, when there are enough heads to train it on, and kept
        // while anything is stored on it. It ranks above everything and is stored whole.
        let mut dictionary = repacked.dictionary;
        if dictionary == Dictionary::NotYet {
            let heads: Vec<(Hash, usize)> = order
                .iter()
                .filter(|r| r.head == 1)
                .map(|r| (r.hash, r.key as usize))
                .collect();
            if heads.len() >= DICT_MIN_SAMPLES {
                dictionary = match self.make_dictionary(&heads)? {
                    Some(hash) => Dictionary::Made(hash),
                    None => Dictionary::NotWorth,
                };
            }
        }
        let dict = match dictionary {
            Dictionary::Made(hash) if self.has_blob(&hash)? => {
                let top = Rank {
                    head: 2,
                    key: 0,
                    after: 0,
                    hash,
                    id: u64::MAX,
                };
                ranks.insert(hash, top);
                done.insert(hash, 0);
                Some(hash)
            }
            _ => None,
        };
        let mut cache = Cache::default();
        let kill = kill_after();
        for rank in order {
            let hash = rank.hash;
            let header = headers[&hash];
            let len = header.len.expect("filtered above") as usize;
            let bound = max_depth(len);
            // The current encoding stands if its base is final and ranks higher, and its chain
            // is within bounds counted on the final encodings.
            let current = match header.base {
                None => Some(0),
                Some((base, _)) => done
                    .get(&base)
                    .filter(|_| ranks.get(&base).is_some_and(|r| *r > rank))
                    .map(|d| d + 1)
                    .filter(|d| *d <= bound),
            };
            let considered = rank.id <= since;
            let plan = match current {
                // Unchanged since a repack considered it: as it is, with its depth written
                // right.
                Some(depth) if considered => Plan::Keep(depth),
                _ => {
                    // A base must rank higher, be final, and keep the chain within bounds.
                    let eligible = |n: &Hash| -> Option<(Hash, u8)> {
                        ranks.get(n).filter(|r| **r > rank)?;
                        let depth = done.get(n)? + 1;
                        (depth <= bound).then_some((*n, depth))
                    };
                    let mut candidates: Vec<(Hash, u8)> = neighbours
                        .get(&hash)
                        .into_iter()
                        .flatten()
                        .filter_map(eligible)
                        .collect();
                    if candidates.is_empty() || heads.contains(&hash) {
                        for c in window
                            .near(&hash, len as u64, eligible)
                            .into_iter()
                            .chain(dict.and_then(|d| eligible(&d)))
                        {
                            if !candidates.iter().any(|(h, _)| *h == c.0) {
                                candidates.push(c);
                            }
                        }
                    }
                    Plan::Try(candidates, current)
                }
            };
            let value = match self.encode_for_repack(&hash, &header, plan, len, &mut cache) {
                Ok(value) => value,
                Err(e) => {
                    // Left as it is, and never a base: it may not be in a final encoding.
                    tracing::warn!("repack: leaving blob {hash} as it is: {e}");
                    continue;
                }
            };
            let (depth, value) = match value {
                Encoded::Same(depth) => {
                    done.insert(hash, depth);
                    continue;
                }
                Encoded::New(depth, value) => (depth, value),
            };
            // A capture using this blob as a base right now read the old encoding: leave it
            // (it stays valid for what is done so far only if its own base is final).
            if self.pins.lock().contains_key(&hash) {
                if let Some(depth) = current {
                    done.insert(hash, depth);
                }
                continue;
            }
            let old_base = header.base.map(|(b, _)| b);
            let new_base = blobs::delta_base(&value).map(|(b, _)| b);
            self.put_value("repack", &hash, &value, true)?;
            report.rewritten += 1;
            report.deltas += u64::from(new_base.is_some());
            report.bytes_before += header.stored;
            report.bytes_after += value.len() as u64;
            if old_base.is_some() && new_base != old_base {
                // The old base may now be needed by nothing but its own changes, or by
                // nothing at all: a sweep finds out.
                report.freed_bases = true;
            }
            done.insert(hash, depth);
            if kill == Some(report.rewritten) {
                // SAFETY: kill(2) of this very process, for a test.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
        }
        let mut value = vec![1u8];
        value.extend_from_slice(&newest_id.to_be_bytes());
        match dictionary {
            Dictionary::NotYet => {}
            Dictionary::NotWorth => value.push(1),
            Dictionary::Made(hash) => {
                value.push(2);
                value.extend_from_slice(&hash.0);
            }
        }
        self.put_meta(REPACKED_KEY, &value)?;
        Ok(report)
    }

    /// The value `hash` should have under `plan`, or that it stays as it is.
    fn encode_for_repack(
        &self,
        hash: &Hash,
        header: &Header,
        plan: Plan,
        len: usize,
        cache: &mut Cache,
    ) -> Result<Encoded> {
        let level = level_for(len);
        match plan {
            Plan::Keep(depth) => self.keep_as(hash, header, depth),
            Plan::Try(candidates, current) => {
                let data = cache.content(self, hash)?;
                // With several bases, the best is chosen at a fast level, then encoded at
                // the repack's.
                let mut candidates = candidates;
                if candidates.len() > 1 && level > SEARCH_LEVEL {
                    let mut sized: Vec<(usize, (Hash, u8))> = Vec::new();
                    for (base, depth) in candidates {
                        if let Ok(content) = cache.content(self, &base) {
                            let size = blobs::delta_size(&data, &content, SEARCH_LEVEL);
                            sized.push((size, (base, depth)));
                        }
                    }
                    candidates = sized
                        .into_iter()
                        .min_by_key(|(s, _)| *s)
                        .map(|(_, c)| c)
                        .into_iter()
                        .collect();
                }
                let mut best: Option<(u8, Vec<u8>)> = None;
                for (base, depth) in candidates {
                    let base_content = match cache.content(self, &base) {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::warn!("repack: not using {base} as a base: {e}");
                            continue;
                        }
                    };
                    let Some(value) = blobs::encode_delta_checked(
                        &data,
                        hash,
                        &base,
                        &base_content,
                        depth,
                        level,
                    ) else {
                        continue;
                    };
                    if best.as_ref().is_none_or(|(_, b)| value.len() < b.len()) {
                        best = Some((depth, value));
                    }
                }
                // The content whole at the repack's level: where there is no current
                // encoding, or it is whole (at the level it was captured at).
                let whole = match current {
                    None => Some(blobs::encode_whole_at(&data, level)),
                    Some(0) if len <= REPACK_LEVEL_UP_TO => {
                        Some(blobs::encode_whole_at(&data, level))
                    }
                    Some(_) => None,
                };
                // What the delta must beat (the same rule as at write time): the smaller of
                // the current value, if it may stay, and the whole.
                let beat = [
                    current.map(|_| header.stored as usize),
                    whole.as_ref().map(Vec::len),
                ]
                .into_iter()
                .flatten()
                .min()
                .expect("one or the other");
                if let Some((depth, delta)) = best
                    && (delta.len() * 16 <= len || delta.len() * 10 < beat * blobs::DELTA_PAYS)
                {
                    return Ok(Encoded::New(depth, delta));
                }
                match (current, whole) {
                    // Whole either way: rewritten only for a clear gain.
                    (Some(0), Some(whole)) if whole.len() * 50 < header.stored as usize * 49 => {
                        Ok(Encoded::New(0, whole))
                    }
                    (Some(depth), _) => self.keep_as(hash, header, depth),
                    (None, Some(whole)) => Ok(Encoded::New(0, whole)),
                    (None, None) => unreachable!("made when there is no current encoding"),
                }
            }
        }
    }

    /// `hash`'s value as it is, its chain now `depth` long: unchanged, or the same frame under
    /// a header that says so.
    fn keep_as(&self, hash: &Hash, header: &Header, depth: u8) -> Result<Encoded> {
        match header.base {
            Some((_, stored)) if stored != depth => {
                let mut value = self.value_of(hash)?;
                value[2] = depth;
                Ok(Encoded::New(depth, value))
            }
            _ => Ok(Encoded::Same(depth)),
        }
    }
}

/// What the last completed repack left in `meta` `repacked`.
struct Repacked {
    /// The newest change id it saw.
    up_to: u64,
    dictionary: Dictionary,
}

/// The repack's dictionary.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dictionary {
    /// Not tried yet: too few heads so far.
    NotYet,
    /// Tried, and it did not pay.
    NotWorth,
    /// This blob.
    Made(Hash),
}

/// What a blob's encoding will be.
enum Plan {
    /// As it is, with a chain of this depth.
    Keep(u8),
    /// The smallest delta on one of these bases (with the depth it would have), if it pays
    /// against the current encoding (valid, with its depth) or else against the whole.
    Try(Vec<(Hash, u8)>, Option<u8>),
}

enum Encoded {
    Same(u8),
    New(u8, Vec<u8>),
}

/// The contents of other paths a version tries as bases: by file name and by extension,
/// sorted by size.
struct Window {
    by_name: HashMap<Vec<u8>, Vec<Hash>>,
    by_extension: HashMap<Vec<u8>, Vec<(u64, Hash)>>,
    /// Each content's name and extension.
    keys: HashMap<Hash, (Vec<u8>, Vec<u8>)>,
}

impl Window {
    fn new(
        order: &[Rank],
        names: &HashMap<Hash, Vec<u8>>,
        headers: &HashMap<Hash, Header>,
    ) -> Self {
        let mut w = Window {
            by_name: HashMap::new(),
            by_extension: HashMap::new(),
            keys: HashMap::new(),
        };
        for r in order {
            let (Some(path), Some(len)) = (names.get(&r.hash), headers[&r.hash].len) else {
                continue;
            };
            let (name, extension) = super::similar::name_and_extension(path);
            w.by_name.entry(name.to_vec()).or_default().push(r.hash);
            w.by_extension
                .entry(extension.to_vec())
                .or_default()
                .push((len, r.hash));
            w.keys.insert(r.hash, (name.to_vec(), extension.to_vec()));
        }
        for list in w.by_extension.values_mut() {
            list.sort_unstable();
        }
        w
    }

    /// The bases `hash` (of `len` bytes) tries, of those `eligible` allows (with their
    /// depth): the same file name first, then the same extension, closest in size.
    fn near(
        &self,
        hash: &Hash,
        len: u64,
        eligible: impl Fn(&Hash) -> Option<(Hash, u8)>,
    ) -> Vec<(Hash, u8)> {
        let Some((name, extension)) = self.keys.get(hash) else {
            return Vec::new();
        };
        let mut out: Vec<(Hash, u8)> = self.by_name[name]
            .iter()
            .filter(|h| *h != hash)
            .filter_map(&eligible)
            .take(WINDOW_NAMES)
            .collect();
        let list = &self.by_extension[extension];
        let at = list.partition_point(|(l, _)| *l < len);
        // Outwards from `len`, the closer side first.
        let (mut below, mut above) = (at, at);
        let mut found = 0;
        for _ in 0..WINDOW_SCAN {
            let next = match (below.checked_sub(1), list.get(above)) {
                (Some(b), Some((la, _))) if len - list[b].0 <= la - len => {
                    below = b;
                    b
                }
                (_, Some(_)) => {
                    above += 1;
                    above - 1
                }
                (Some(b), None) => {
                    below = b;
                    b
                }
                (None, None) => break,
            };
            let (_, h) = &list[next];
            if h == hash || out.iter().any(|(o, _)| o == h) {
                continue;
            }
            if let Some(c) = eligible(h) {
                out.push(c);
                found += 1;
                if found == WINDOW_SIZES {
                    break;
                }
            }
        }
        out
    }
}

/// Recently read contents, bounded by [`CACHE_BYTES`].
#[derive(Default)]
struct Cache {
    contents: HashMap<Hash, std::sync::Arc<Vec<u8>>>,
    bytes: usize,
}

impl Cache {
    fn content(&mut self, store: &Store, hash: &Hash) -> Result<std::sync::Arc<Vec<u8>>> {
        if let Some(c) = self.contents.get(hash) {
            return Ok(c.clone());
        }
        let data = std::sync::Arc::new(store.read_blob(hash)?);
        self.insert(*hash, data.clone());
        Ok(data)
    }

    fn insert(&mut self, hash: Hash, data: std::sync::Arc<Vec<u8>>) {
        if self.bytes + data.len() > CACHE_BYTES {
            self.contents.clear();
            self.bytes = 0;
        }
        self.bytes += data.len();
        self.contents.insert(hash, data);
    }
}
