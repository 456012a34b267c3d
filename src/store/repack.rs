//! Repacking: older versions re-encoded as deltas on newer ones, at gc time.
//!
//! At write time a version can only be a delta on what is already stored, an older version:
//! every added line is in the new version's delta, as literals. Afterwards, each path's
//! newest version (its *head*) can stay whole and the older ones become deltas on the version
//! after them (*reverse* deltas, as git's pack makes them), which mostly copy; a head may
//! itself be a delta on a similar file, or on a zstd dictionary trained on all heads.
//! [`Store::repack`] does that, run by gc once it has removed what it removes.
//!
//! Each path is weighed as a whole, git's way: its chain as it is stored (each version on
//! the one before, as recorded), or rewritten (the newest whole or on a similar file or the
//! dictionary, each older one on the next newer); the plan that stores fewer bytes is
//! written, so a repack never makes the stored content larger. Paths are taken by their
//! newest version's size, largest first (a smaller file may then be stored on a larger one).
//!
//! No cycle, ever: a blob is only given a base that is already *final* (in the encoding it
//! keeps for the rest of the run), and a final blob's chain only goes through final blobs.
//! Keeping a version as it is makes its whole current chain final with it, bottom first; a
//! rewritten path's newest version is written first, each older one after the version it is
//! stored on. So a new encoding can never lead back to the blob it is for, and an
//! interrupted repack leaves final blobs (which only reach final blobs) and blobs in their
//! old encodings (whose graph had no loop). Chains stay within [`max_depth`], counted on the
//! final encodings; a kept value whose chain changed depth gets its depth byte rewritten.
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
const CACHE_BYTES: usize = 8 << 20;

/// The most stored contents a repack takes on. Its own tables take about 100 bytes a content
/// (a 56-byte `Node` each, 16 bytes per file content a change names while the paths are
/// grouped, 20 in the `Window`), plus an 8 MiB cache of contents; measured in a debug
/// daemon with RocksDB's bounded buffers filling as it writes, its peak rose 21.7 MiB for
/// 6,000 contents and 64.3 MiB for 60,000 (0.83 KB a content between the two; the first
/// repack took 163 MiB for 60,000). At that slope 200,000 contents cost about what 100,000
/// did before (2 KB each).
pub const REPACK_MAX_BLOBS: u64 = 200_000;

/// [`REPACK_MAX_BLOBS`], or for tests `REWIND_TEST_REPACK_MAX`.
pub(super) fn most_blobs() -> u64 {
    std::env::var("REWIND_TEST_REPACK_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(REPACK_MAX_BLOBS)
}

/// What a repack did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    /// Contents it could not read, left as they are (damaged, or on a damaged base), with
    /// why, by hash.
    pub unreadable: Vec<(Hash, String)>,
    /// Why it stopped before the end (what it rewrote stays; the next repack goes on), or
    /// was not started.
    pub stopped: Option<String>,
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

/// No index: a whole blob's base, an unknown length.
const NONE: u32 = u32::MAX;

/// [`Node::flags`]: the content of a file some path had (the repack may re-encode it).
const IN_PATH: u8 = 1;
/// ... the newest content of some path.
const HEAD: u8 = 2;
/// ... a chunk of large content: left as it is (chunks are read without their deltas' bases).
const CHUNK_OF: u8 = 4;
/// ... in its final encoding: [`Node::fin`] is its chain's depth.
const FINAL: u8 = 8;
/// ... a delta whose base is not stored: left as it is, and never a base.
const NO_BASE: u8 = 16;
/// ... named by some change.
const NAMED: u8 = 32;
/// ... named by a change newer than the last repack.
const NEW: u8 = 64;

/// What the repack knows of one stored blob, compact (56 bytes): a store of a million
/// contents keeps a million of these while it runs, sorted by hash (the index is a binary
/// search).
struct Node {
    hash: Hash,
    /// The blob its stored value is a delta on (an index), or [`NONE`].
    base: u32,
    /// Its stored value's size.
    stored: u32,
    /// The content's length (from the zstd frame's header), or [`NONE`] (a manifest, a frame
    /// that does not say).
    len: u32,
    /// The file name and extension it was last recorded under (hashed), for [`Window`].
    name: u32,
    extension: u32,
    /// The depth its value says.
    depth: u8,
    /// Its final chain's depth, once [`FINAL`].
    fin: u8,
    flags: u8,
    /// How many blobs are stored on it (saturating: 255 is many).
    users: u8,
}

/// Every stored blob but manifests, by index: sorted by hash up to `sorted`, then the
/// dictionary if this run made it.
struct Graph {
    nodes: Vec<Node>,
    sorted: usize,
}

/// Each path's versions, oldest first (`versions[starts[p]..starts[p + 1]]`), the paths in
/// the order the repack takes them (`order`): by their newest version's size, largest first.
struct Paths {
    versions: Vec<u32>,
    starts: Vec<u32>,
    order: Vec<u32>,
}

impl Paths {
    fn len(&self) -> usize {
        self.order.len()
    }

    /// The paths' versions, in the repack's order.
    fn iter(&self) -> impl Iterator<Item = &[u32]> {
        self.order.iter().map(|&p| {
            let p = p as usize;
            &self.versions[self.starts[p] as usize..self.starts[p + 1] as usize]
        })
    }
}

/// A name's 64-bit hash (SipHash with fixed keys: the same in every call).
fn hash64(bytes: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

/// Nodes given their final encoding by a plan not yet written: their depth, and in the order
/// they must be written (a base before what is stored on it), with the new value if any.
#[derive(Default)]
struct Overlay {
    order: Vec<(u32, u8, Option<Vec<u8>>)>,
    at: HashMap<u32, u8>,
}

impl Overlay {
    fn insert(&mut self, i: u32, depth: u8, value: Option<Vec<u8>>) {
        self.at.insert(i, depth);
        self.order.push((i, depth, value));
    }
}

impl Graph {
    /// The index of the blob `hash`.
    fn index(&self, hash: &Hash) -> Option<u32> {
        match self.nodes[..self.sorted].binary_search_by(|n| n.hash.cmp(hash)) {
            Ok(i) => Some(i as u32),
            Err(_) => (self.sorted..self.nodes.len())
                .find(|&i| self.nodes[i].hash == *hash)
                .map(|i| i as u32),
        }
    }

    /// The depth of `i`'s final chain, if it is final (or will be, in `overlay`).
    fn final_depth(&self, i: u32, overlay: &Overlay) -> Option<u8> {
        let n = &self.nodes[i as usize];
        if n.flags & FINAL != 0 {
            return Some(n.fin);
        }
        overlay.at.get(&i).copied()
    }

    /// The longest chain `i` may be read through.
    fn bound(&self, i: u32) -> u8 {
        match self.nodes[i as usize].len {
            NONE => blobs::MAX_DEPTH,
            len => max_depth(len as usize),
        }
    }

    /// Plan `i` to stay as it is stored, and with it every blob its chain goes through that
    /// is not final yet (bottom first in `overlay`): false, with nothing planned, if a chain
    /// would pass its bound or a base is missing.
    fn keep_chain(&self, i: u32, overlay: &mut Overlay) -> bool {
        if self.final_depth(i, overlay).is_some() {
            return true;
        }
        let mut chain = Vec::new();
        let mut at = i;
        let mut below: Option<u8> = loop {
            let n = &self.nodes[at as usize];
            if n.flags & NO_BASE != 0 || chain.len() > usize::from(u8::MAX) {
                return false;
            }
            chain.push(at);
            if n.base == NONE {
                break None;
            }
            at = n.base;
            if let Some(d) = self.final_depth(at, overlay) {
                break Some(d);
            }
        };
        let mut depths = Vec::with_capacity(chain.len());
        for &c in chain.iter().rev() {
            let depth = match below {
                None => 0,
                Some(d) if d < u8::MAX => d + 1,
                Some(_) => return false,
            };
            if depth > self.bound(c) && self.nodes[c as usize].flags & IN_PATH != 0 {
                return false;
            }
            depths.push((c, depth));
            below = Some(depth);
        }
        for (c, depth) in depths {
            overlay.insert(c, depth, None);
        }
        true
    }
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

    /// Every stored blob (but manifests), and each path's versions.
    fn scan_for_repack(&self, since: u64) -> Result<(Graph, Paths, u64)> {
        let mut g = Graph {
            nodes: Vec::with_capacity(self.counts().blobs as usize + 1),
            sorted: 0,
        };
        let mut chunks: Vec<Hash> = Vec::new();
        // Two passes over the blobs (in hash order): the blobs, then their bases' indexes
        // (rather than every base's hash kept meanwhile).
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
                    .and_then(|f| zstd::zstd_safe::get_frame_content_size(f).ok().flatten())
                    .filter(|len| *len <= CHUNK as u64)
                    .map_or(NONE, |len| len as u32);
                let (flags, depth) = match blobs::delta_base(&value) {
                    Some((_, depth)) => (NO_BASE, depth),
                    None => (0, 0),
                };
                g.nodes.push(Node {
                    hash,
                    base: NONE,
                    stored: value.len().min(u32::MAX as usize) as u32,
                    len,
                    name: 0,
                    extension: 0,
                    depth,
                    fin: 0,
                    flags,
                    users: 0,
                });
            }
            g.sorted = g.nodes.len();
            for item in db.iterator_cf(db.cf(CF_BLOBS), IteratorMode::Start) {
                let (key, value) = item.map_err(Store::db_error("scan blobs"))?;
                let (Some((base, _)), Ok(hash)) = (
                    blobs::delta_base(&value),
                    <[u8; 32]>::try_from(&key[..]).map(Hash),
                ) else {
                    continue;
                };
                let (Some(i), Some(b)) = (g.index(&hash), g.index(&base)) else {
                    continue;
                };
                let n = &mut g.nodes[i as usize];
                if n.flags & NO_BASE != 0 {
                    n.flags &= !NO_BASE;
                    n.base = b;
                    let users = &mut g.nodes[b as usize].users;
                    *users = users.saturating_add(1);
                }
            }
        }
        for hash in chunks {
            if let Some(i) = g.index(&hash) {
                g.nodes[i as usize].flags |= CHUNK_OF;
            }
        }
        // Each file content a change names, under a hash of its path (two paths sharing one
        // would only share a plan), in the changes' order; then grouped by path.
        let mut named: Vec<(u64, u32)> = Vec::new();
        let mut newest_id = 0;
        {
            let db = self.db()?;
            for item in db.iterator_cf(db.cf(CF_CHANGES), IteratorMode::Start) {
                let (key, value) = item.map_err(Store::db_error("scan changes"))?;
                let Ok(c) = ChangeRecord::decode(CF_CHANGES, &key, &value) else {
                    continue;
                };
                newest_id = newest_id.max(c.id);
                for state in [&c.before, &c.after].into_iter().flatten() {
                    let Some(i) = state.hash.and_then(|h| g.index(&Hash(h))) else {
                        continue;
                    };
                    let n = &mut g.nodes[i as usize];
                    n.flags |= NAMED;
                    if c.id > since {
                        n.flags |= NEW;
                    }
                    if state.kind != super::format::kind::FILE {
                        continue;
                    }
                    let (name, extension) = super::similar::name_and_extension(&c.path);
                    n.name = hash64(name) as u32;
                    n.extension = hash64(extension) as u32;
                    n.flags |= IN_PATH;
                    named.push((hash64(&c.path), i));
                }
            }
        }
        named.sort_by_key(|(path, _)| *path);
        let mut paths = Paths {
            versions: Vec::with_capacity(named.len()),
            starts: Vec::new(),
            order: Vec::new(),
        };
        let mut last_path = None;
        for (path, i) in named {
            if last_path != Some(path) {
                last_path = Some(path);
                paths.starts.push(paths.versions.len() as u32);
            } else if paths.versions.last() == Some(&i) {
                continue;
            }
            paths.versions.push(i);
        }
        paths.starts.push(paths.versions.len() as u32);
        paths.versions.shrink_to_fit();
        let head = |p: usize| paths.versions[paths.starts[p + 1] as usize - 1];
        for p in 0..paths.starts.len() - 1 {
            g.nodes[head(p) as usize].flags |= HEAD;
        }
        let mut order: Vec<u32> = (0..paths.starts.len() as u32 - 1).collect();
        order.sort_unstable_by_key(|&p| {
            let n = &g.nodes[head(p as usize) as usize];
            std::cmp::Reverse((n.len.wrapping_add(1), n.hash))
        });
        paths.order = order;
        Ok((g, paths, newest_id))
    }

    /// A dictionary trained on the heads' contents, stored as a blob (whole), if it pays
    /// against what the heads' paths store now: each head on it is weighed against what its
    /// path pays for a version stored on no version of its own (the root of its chain within
    /// the path: whole, or a delta on another path's content), and in all they must save
    /// more than the dictionary's stored size.
    fn make_dictionary(&self, g: &Graph, paths: &Paths) -> Result<Option<Hash>> {
        let mut samples: Vec<Vec<u8>> = Vec::new();
        let mut paid: Vec<usize> = Vec::new();
        let mut total = 0;
        for seq in paths.iter() {
            let head = *seq.last().expect("a version");
            let n = &g.nodes[head as usize];
            if n.len == NONE || !(blobs::DELTA_MIN..=REPACK_LEVEL_UP_TO).contains(&(n.len as usize))
            {
                continue;
            }
            if total + n.len as usize > DICT_SAMPLE_BYTES {
                break;
            }
            // The root of the head's chain within its path.
            let mut root = head;
            for _ in 0..u8::MAX {
                let base = g.nodes[root as usize].base;
                if base == NONE || !seq.contains(&base) {
                    break;
                }
                root = base;
            }
            if let Ok(content) = self.read_blob(&n.hash) {
                total += content.len();
                samples.push(content);
                paid.push(g.nodes[root as usize].stored as usize);
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
        let hash = Hash::of(&dict);
        let mut prepared = blobs::Prepared::new(hash);
        let saved: usize = samples
            .iter()
            .zip(&paid)
            .map(|(s, paid)| {
                // At the capture's level (what `paid` was stored at): level 3 underrates
                // what a dictionary saves (on this project's history, 108 KB against 176 KB).
                let level = blobs::file_level(s.len());
                let delta = blobs::delta_size(s, &hash, &dict, level, Some(&mut prepared));
                let delta = delta.saturating_add(35);
                paid.saturating_sub(delta)
            })
            .sum();
        tracing::info!(
            size = value.len(),
            saved,
            samples = samples.len(),
            "repack: dictionary trained"
        );
        if saved <= value.len() {
            return Ok(None);
        }
        self.put_value("repack dictionary", &hash, &value, false)?;
        Ok(Some(hash))
    }

    /// Re-encode each path's versions where that makes them smaller in all (see the module's
    /// comment). Only gc calls it, under its lock, so no blob it uses as a base is removed
    /// meanwhile; changes and content recorded meanwhile are left as they are.
    pub(super) fn repack(&self) -> Result<RepackReport> {
        self.check_writable()?;
        let repacked = self.repacked()?;
        let since = repacked.up_to;
        let (mut g, paths, newest_id) = self.scan_for_repack(since)?;
        let window = Window::new(&g);

        // The dictionary: made once, when there are enough heads to train it on, and kept
        // while anything is stored on it. Stored whole, final from the start.
        let mut dictionary = repacked.dictionary;
        if dictionary == Dictionary::NotYet && paths.len() >= DICT_MIN_SAMPLES {
            dictionary = match self.make_dictionary(&g, &paths)? {
                Some(hash) => Dictionary::Made(hash),
                None => Dictionary::NotWorth,
            };
        }
        let dict = match dictionary {
            Dictionary::Made(hash) => match g.index(&hash) {
                Some(i) => Some(i),
                None if self.has_blob(&hash)? => {
                    // Made by this run, after the scan.
                    let i = g.nodes.len() as u32;
                    g.nodes.push(Node {
                        hash,
                        base: NONE,
                        stored: 0,
                        len: NONE,
                        name: 0,
                        extension: 0,
                        depth: 0,
                        fin: 0,
                        flags: 0,
                        users: 0,
                    });
                    Some(i)
                }
                None => None,
            },
            _ => None,
        };
        if let Some(d) = dict {
            let n = &mut g.nodes[d as usize];
            if n.base == NONE {
                n.flags |= FINAL;
                n.fin = 0;
            }
        }

        let mut run = Run {
            report: RepackReport::default(),
            cache: Cache {
                // Many heads are compressed against it, at two levels (`blobs::Prepared`).
                prepared: dict.map(|d| blobs::Prepared::new(g.nodes[d as usize].hash)),
                ..Cache::default()
            },
            kill: kill_after(),
            unasked: 0,
        };
        // Room for what it writes (new values, and the compaction that drops the old ones)
        // beside the reserve that recording needs: not started without it.
        let rewritable: u64 = g
            .nodes
            .iter()
            .filter(|n| n.flags & IN_PATH != 0 && n.flags & CHUNK_OF == 0)
            .map(|n| u64::from(n.stored))
            .sum();
        if let Err(short) = self.repack_room(rewritable) {
            run.report.stopped = Some(format!(
                "{short}; it writes up to the {} of content it may rewrite, and \
                 compacting the store afterwards rewrites its stored content",
                super::write::mib(rewritable)
            ));
            return Ok(run.report);
        }
        for seq in paths.iter() {
            // Both plans for the path: as it is stored (each version on the one before, as
            // recorded), and re-encoded (the newest whole or on a similar file or the
            // dictionary, each older one on the next newer). The smaller is written.
            let mut keep = Overlay::default();
            let keepable = seq.iter().all(|&i| g.keep_chain(i, &mut keep));
            let considered = seq.iter().all(|&i| g.nodes[i as usize].flags & NEW == 0);
            let plan = if keepable && considered {
                keep
            } else {
                let rewrite = self.rewrite_plan(&g, seq, &window, dict, &mut run.cache);
                // A plan's cost: its path's versions, and the blobs no change names that it
                // keeps only for them (each stored on by one blob, itself counted: gc frees
                // them once nothing is). An overlay lists a base before what is on it.
                let cost = |o: &Overlay| -> u64 {
                    let mut counted: HashSet<u32> = seq.iter().copied().collect();
                    let mut sum = 0;
                    for (i, _, value) in o.order.iter().rev() {
                        if !counted.contains(i) {
                            continue;
                        }
                        let n = &g.nodes[*i as usize];
                        let Some(value) = value else {
                            sum += u64::from(n.stored);
                            let b = n.base;
                            if b != NONE
                                && o.at.contains_key(&b)
                                && g.nodes[b as usize].flags & (NAMED | CHUNK_OF) == 0
                                && g.nodes[b as usize].users == 1
                            {
                                counted.insert(b);
                            }
                            continue;
                        };
                        sum += value.len() as u64;
                    }
                    sum
                };
                // What the rewrite leaves as it is counts as it is stored.
                let left: u64 = seq
                    .iter()
                    .filter(|i| g.final_depth(**i, &rewrite).is_none())
                    .map(|i| u64::from(g.nodes[*i as usize].stored))
                    .sum();
                if keepable && cost(&keep) <= cost(&rewrite) + left {
                    keep
                } else {
                    rewrite
                }
            };
            // A write that fails (a full disk) stops the repack, as does a disk coming within
            // the room it needs: what was rewritten stays, and gc still frees what it freed.
            if let Err(e) = self.write_plan(&mut g, plan, &mut run) {
                run.report.stopped = Some(e.to_string());
            }
            if run.report.stopped.is_some() {
                break;
            }
        }
        drop(window);
        let mut report = run.report;
        report.unreadable = std::mem::take(&mut run.cache.unreadable);
        report.unreadable.sort();
        report.unreadable.dedup_by_key(|(h, _)| *h);
        // Cut short: the contents it did not get to are new to the next one too.
        let up_to = if report.stopped.is_some() {
            since
        } else {
            newest_id
        };
        let mut value = vec![1u8];
        value.extend_from_slice(&up_to.to_be_bytes());
        match dictionary {
            Dictionary::NotYet => {}
            Dictionary::NotWorth => value.push(1),
            Dictionary::Made(hash) => {
                value.push(2);
                value.extend_from_slice(&hash.0);
            }
        }
        if let Err(e) = self.put_meta(REPACKED_KEY, &value) {
            report.stopped.get_or_insert(e.to_string());
        }
        drop((g, paths, run.cache));
        // What the repack held goes back to the system now, not at the daemon's next trim.
        #[cfg(target_env = "gnu")]
        // SAFETY: malloc_trim only returns free pages; it is safe at any time.
        unsafe {
            libc::malloc_trim(0)
        };
        Ok(report)
    }

    /// Whether the store's disk lacks room for `bytes` more written by the repack and for
    /// the compaction after it (which rewrites the stored content before the old files go),
    /// beside the reserve recording needs and what RocksDB is about to write: the room
    /// left over, or what it lacks, said.
    fn repack_room(&self, bytes: u64) -> std::result::Result<u64, String> {
        let Some(room) = self.room() else {
            return Ok(0);
        };
        let need = room
            .reserve
            .saturating_add(self.unflushed_bytes())
            .saturating_add(self.counts().blob_bytes)
            .saturating_add(bytes);
        room.free.checked_sub(need).ok_or_else(|| {
            format!(
                "the disk of {} has {} free, the repack needs {} there ({} of them the \
                 reserve rewind keeps for recording)",
                self.dir.display(),
                super::write::mib(room.free),
                super::write::mib(need),
                super::write::mib(room.reserve)
            )
        })
    }

    /// A path's versions re-encoded: the newest first, each on the best of the bases it may
    /// have (final ones only, so no blob can reach itself) or whole, or as it is where that
    /// is smaller; a version that cannot be read is left out (it stays as it is).
    fn rewrite_plan(
        &self,
        g: &Graph,
        seq: &[u32],
        window: &Window,
        dict: Option<u32>,
        cache: &mut Cache,
    ) -> Overlay {
        let mut plan = Overlay::default();
        for pos in (0..seq.len()).rev() {
            let i = seq[pos];
            if g.final_depth(i, &plan).is_some() {
                continue;
            }
            let n = &g.nodes[i as usize];
            if n.flags & (CHUNK_OF | NO_BASE) != 0 || n.len == NONE {
                // Not re-encoded: as it is, if its chain allows.
                g.keep_chain(i, &mut plan);
                continue;
            }
            let bound = g.bound(i);
            let current = match n.base {
                NONE => Some(0),
                base => g
                    .final_depth(base, &plan)
                    .map(|d| d.saturating_add(1))
                    .filter(|d| *d <= bound),
            };
            if let Some(depth) = current
                && n.flags & NEW == 0
            {
                // Unchanged since a repack considered it, on a final base.
                plan.insert(i, depth, None);
                continue;
            }
            let eligible = |c: u32| -> Option<(u32, u8)> {
                if c == i {
                    return None;
                }
                let depth = g.final_depth(c, &plan)?.checked_add(1)?;
                (depth <= bound).then_some((c, depth))
            };
            let mut candidates: Vec<(u32, u8)> = [pos + 1, pos.wrapping_sub(1)]
                .into_iter()
                .filter_map(|p| seq.get(p))
                .filter_map(|&c| eligible(c))
                .collect();
            if candidates.is_empty() || pos + 1 == seq.len() {
                for c in window
                    .near(g, i, eligible)
                    .into_iter()
                    .chain(dict.and_then(eligible))
                {
                    if !candidates.iter().any(|(h, _)| *h == c.0) {
                        candidates.push(c);
                    }
                }
            }
            match self.encode_for_repack(g, i, candidates, current, cache) {
                Ok(Encoded::Same(depth)) => plan.insert(i, depth, None),
                Ok(Encoded::New(depth, value)) => plan.insert(i, depth, Some(value)),
                // Left as it is, and never a base here: it may not be in a final encoding.
                Err(e) => tracing::warn!("repack: leaving blob {} as it is: {e}", n.hash),
            }
        }
        plan
    }

    /// Write a plan, bases first: new values, and depth bytes that changed. A blob a capture
    /// is using right now is left as it is, and with it what the plan stores on it.
    fn write_plan(&self, g: &mut Graph, plan: Overlay, run: &mut Run) -> Result<()> {
        let mut skipped: HashSet<u32> = HashSet::new();
        for (i, depth, value) in plan.order {
            let n = &g.nodes[i as usize];
            if n.base != NONE && skipped.contains(&n.base) && value.is_none() {
                skipped.insert(i);
                continue;
            }
            let value = match value {
                Some(value) => {
                    let new_base = blobs::delta_base(&value).map(|(b, _)| b);
                    if new_base.is_some_and(|b| g.index(&b).is_some_and(|b| skipped.contains(&b))) {
                        skipped.insert(i);
                        continue;
                    }
                    Some(value)
                }
                None if n.base != NONE && n.depth != depth => {
                    let mut value = self.value_of(&n.hash)?;
                    value[2] = depth;
                    Some(value)
                }
                None => None,
            };
            if let Some(value) = value {
                let hash = n.hash;
                if self.pins.lock().contains_key(&hash) {
                    skipped.insert(i);
                    continue;
                }
                // Room for this value and for the compaction after, never the reserve: asked
                // again once half the room the last answer left over (at most 64 KiB) may
                // have been written.
                let len = value.len() as u64;
                match run.unasked.checked_sub(len) {
                    Some(left) => run.unasked = left,
                    None => match self.repack_room(len) {
                        // At least every 64 KiB: something else may be filling the disk too.
                        Ok(spare) => run.unasked = (spare / 2).min(64 << 10),
                        Err(short) => {
                            run.report.stopped = Some(short);
                            return Ok(());
                        }
                    },
                }
                let old_base = (n.base != NONE).then(|| g.nodes[n.base as usize].hash);
                let new_base = blobs::delta_base(&value).map(|(b, _)| b);
                self.put_value("repack", &hash, &value, true)?;
                let r = &mut run.report;
                r.rewritten += 1;
                r.deltas += u64::from(new_base.is_some());
                r.bytes_before += u64::from(n.stored);
                r.bytes_after += value.len() as u64;
                if old_base.is_some() && new_base != old_base {
                    // The old base may now be needed by nothing but its own changes, or by
                    // nothing at all: a sweep finds out.
                    r.freed_bases = true;
                }
                let new_base = new_base.and_then(|b| g.index(&b)).unwrap_or(NONE);
                let n = &mut g.nodes[i as usize];
                n.stored = value.len() as u32;
                n.depth = depth;
                let old_base = std::mem::replace(&mut n.base, new_base);
                if old_base != new_base {
                    if old_base != NONE {
                        let users = &mut g.nodes[old_base as usize].users;
                        if *users < u8::MAX {
                            *users = users.saturating_sub(1);
                        }
                    }
                    if new_base != NONE {
                        let users = &mut g.nodes[new_base as usize].users;
                        *users = users.saturating_add(1);
                    }
                }
                if run.kill == Some(r.rewritten) {
                    // SAFETY: kill(2) of this very process, for a test.
                    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                }
            }
            let n = &mut g.nodes[i as usize];
            n.flags |= FINAL;
            n.fin = depth;
        }
        Ok(())
    }

    /// The value blob `i` should have, given its candidate bases (with the depth each
    /// would give it) and its current encoding's depth if it may stay: the smallest delta if
    /// it pays (the capture's rule), else as it is, else whole.
    fn encode_for_repack(
        &self,
        g: &Graph,
        i: u32,
        candidates: Vec<(u32, u8)>,
        current: Option<u8>,
        cache: &mut Cache,
    ) -> Result<Encoded> {
        let n = &g.nodes[i as usize];
        let (hash, len) = (n.hash, n.len as usize);
        let level = level_for(len);
        let data = cache.content(self, &hash)?;
        // With several bases, the best is chosen at a fast level, then encoded at the
        // repack's.
        let mut candidates = candidates;
        if candidates.len() > 1 && level > SEARCH_LEVEL {
            let mut sized: Vec<(usize, (u32, u8))> = Vec::new();
            for (base, depth) in candidates {
                let hash = g.nodes[base as usize].hash;
                if let Ok(content) = cache.content(self, &hash) {
                    let prepared = cache.prepared.as_mut();
                    let size = blobs::delta_size(&data, &hash, &content, SEARCH_LEVEL, prepared);
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
            let base = g.nodes[base as usize].hash;
            let base_content = match cache.content(self, &base) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("repack: not using {base} as a base: {e}");
                    continue;
                }
            };
            let Some(value) = blobs::encode_delta_checked(
                &data,
                &hash,
                &base,
                &base_content,
                depth,
                level,
                cache.prepared.as_mut(),
            ) else {
                continue;
            };
            if best.as_ref().is_none_or(|(_, b)| value.len() < b.len()) {
                best = Some((depth, value));
            }
        }
        // The content whole at the repack's level (or the capture's, where zstd's level 19
        // comes out larger, as on some repetitive text): where there is no current
        // encoding, or it is whole (at the level it was captured at).
        let whole = || {
            let high = blobs::encode_whole_at(&data, level);
            let low = blobs::encode_whole_at(&data, blobs::file_level(len));
            if low.len() < high.len() { low } else { high }
        };
        let whole = match current {
            None => Some(whole()),
            Some(0) if len <= REPACK_LEVEL_UP_TO => Some(whole()),
            Some(_) => None,
        };
        // What the delta must beat (the same rule as at write time): the smaller of the
        // current value, if it may stay, and the whole.
        let beat = [
            current.map(|_| n.stored as usize),
            whole.as_ref().map(Vec::len),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("one or the other");
        if let Some((depth, delta)) = best
            && (delta.len() * 16 <= len || delta.len() * 10 < beat * blobs::DELTA_PAYS)
            && delta.len() < beat
        {
            return Ok(Encoded::New(depth, delta));
        }
        Ok(match (current, whole) {
            // Whole either way: rewritten only for a clear gain.
            (Some(0), Some(whole)) if whole.len() * 50 < n.stored as usize * 49 => {
                Encoded::New(0, whole)
            }
            (Some(depth), _) => Encoded::Same(depth),
            (None, Some(whole)) => Encoded::New(0, whole),
            (None, None) => unreachable!("made when there is no current encoding"),
        })
    }
}

/// What a repack carries from path to path.
struct Run {
    report: RepackReport,
    cache: Cache,
    kill: Option<u64>,
    /// Bytes it may write before asking the disk for room again.
    unasked: u64,
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

/// A blob's encoding in a plan: as it is (its chain this deep), or this new value.
enum Encoded {
    Same(u8),
    New(u8, Vec<u8>),
}

/// The contents of paths a version tries as bases: by file name, and by extension sorted
/// by size (indexes into the [`Graph`], in two sorted lists).
struct Window {
    by_name: Vec<(u32, u32)>,
    by_extension: Vec<(u32, u32, u32)>,
}

impl Window {
    fn new(g: &Graph) -> Self {
        let mut w = Window {
            by_name: Vec::new(),
            by_extension: Vec::new(),
        };
        for (i, n) in g.nodes.iter().enumerate() {
            if n.flags & IN_PATH == 0 || n.flags & (CHUNK_OF | NO_BASE) != 0 || n.len == NONE {
                continue;
            }
            w.by_name.push((n.name, i as u32));
            w.by_extension.push((n.extension, n.len, i as u32));
        }
        w.by_name.sort_unstable();
        w.by_extension.sort_unstable();
        w
    }

    /// The bases `i` tries, of those `eligible` allows (with their depth): the same file
    /// name first, then the same extension, closest in size.
    fn near(
        &self,
        g: &Graph,
        i: u32,
        eligible: impl Fn(u32) -> Option<(u32, u8)>,
    ) -> Vec<(u32, u8)> {
        let n = &g.nodes[i as usize];
        let from = self.by_name.partition_point(|(name, _)| *name < n.name);
        let mut out: Vec<(u32, u8)> = self.by_name[from..]
            .iter()
            .take_while(|(name, _)| *name == n.name)
            .filter_map(|&(_, c)| eligible(c))
            .take(WINDOW_NAMES)
            .collect();
        let from = self
            .by_extension
            .partition_point(|(e, ..)| *e < n.extension);
        let to = self
            .by_extension
            .partition_point(|(e, ..)| *e <= n.extension);
        let list = &self.by_extension[from..to];
        let len = n.len;
        let at = list.partition_point(|(_, l, _)| *l < len);
        // Outwards from `len`, the closer side first.
        let (mut below, mut above) = (at, at);
        let mut found = 0;
        for _ in 0..WINDOW_SCAN {
            let next = match (below.checked_sub(1), list.get(above)) {
                (Some(b), Some((_, la, _))) if len - list[b].1 <= la - len => {
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
            let (_, _, c) = list[next];
            if out.iter().any(|(o, _)| *o == c) {
                continue;
            }
            if let Some(e) = eligible(c) {
                out.push(e);
                found += 1;
                if found == WINDOW_SIZES {
                    break;
                }
            }
        }
        out
    }
}

/// Recently read contents, bounded by [`CACHE_BYTES`], and those that could not be read; the
/// dictionary prepared as a base.
#[derive(Default)]
struct Cache {
    contents: HashMap<Hash, std::sync::Arc<Vec<u8>>>,
    bytes: usize,
    unreadable: Vec<(Hash, String)>,
    prepared: Option<blobs::Prepared>,
}

impl Cache {
    fn content(&mut self, store: &Store, hash: &Hash) -> Result<std::sync::Arc<Vec<u8>>> {
        if let Some(c) = self.contents.get(hash) {
            return Ok(c.clone());
        }
        let data = match store.read_blob(hash) {
            Ok(data) => std::sync::Arc::new(data),
            Err(e) => {
                self.unreadable.push((*hash, e.to_string()));
                return Err(e);
            }
        };
        if self.bytes + data.len() > CACHE_BYTES {
            self.contents.clear();
            self.bytes = 0;
        }
        self.bytes += data.len();
        self.contents.insert(*hash, data.clone());
        Ok(data)
    }
}
