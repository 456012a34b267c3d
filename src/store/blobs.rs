//! Content blobs: zstd-compressed, addressed by the BLAKE3 hash of the uncompressed bytes.
//!
//! Content up to [`CHUNK`] bytes is one value. Larger content is split into chunks, each stored
//! as a blob of its own (so identical chunks are stored once too), plus a manifest under the hash
//! of the whole. Chunk boundaries are content-defined (FastCDC, 64 KiB to 1 MiB, 256 KiB on
//! average): they depend only on the bytes around them, so an insert or delete anywhere in a
//! large file changes the one or two chunks around it and every other chunk is stored once,
//! for every version. Stores written before cut fixed 1 MiB chunks; a manifest lists each
//! chunk's length either way, so both read alike. Neither writing nor reading ever holds more
//! than a chunk or two in memory, and reading checks every byte against its hash.
//!
//! Small content that is a new version of a path is stored as a *delta* when that pays: a zstd
//! frame compressed with the path's previous content (its *base*) as the dictionary, so an
//! edit of a few lines costs about those lines. A new path's first version may be a delta on
//! another path's content (a file of the same name, one a checkout moved: `similar.rs`). The key is still the BLAKE3 hash of the whole
//! content; only the stored encoding differs, and reading checks the whole against its hash as
//! always. A base may itself be a delta: chains are bounded ([`max_depth`]) so that reading
//! any version decompresses at most [`CHAIN_BYTES`] or so. A base is never deleted while a
//! delta on it is kept (`gc` counts it as referred to).
//!
//! Value layout: `BLOB_VERSION`, then a tag: `INLINE` followed by a zstd frame, `MANIFEST`
//! followed by a postcard [`ManifestRecord`], or `DELTA` followed by the chain's depth (one
//! byte: 1 when the base is stored whole), the base's hash (32 bytes) and a zstd frame whose
//! dictionary is the base's content.

use std::collections::HashMap;
use std::fmt;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use rocksdb::WriteBatch;

use super::format::ManifestRecord;
use super::{CF_BLOBS, Error, Result, Store, keys};

/// The largest content stored as one value, and the largest chunk.
pub const CHUNK: usize = 1 << 20;
/// What content is first read into when stored, before it grows.
const FIRST_READ: usize = 8 << 10;

/// Content of one value, prepared to be written with the change that records it
/// ([`Store::prepare_file_reader`]).
pub struct NewContent {
    hash: Hash,
    /// Its value: the content compressed, whole or as a delta on a base kept from gc by the
    /// thread's pin scope.
    value: Vec<u8>,
    data: Vec<u8>,
    path: Vec<u8>,
}

impl NewContent {
    pub(super) fn hash(&self) -> &Hash {
        &self.hash
    }

    pub(super) fn value(&self) -> &[u8] {
        &self.value
    }
}

/// The first [`CHUNK`] + 1 bytes `reader` yields (all of it, if that is less). Most content
/// is small: it is read into a buffer about its own size, not a chunk's; one of a few KiB to
/// begin with, which most files fill with one read (an empty one grows by small probes, a
/// read each: five for a 360-byte file).
fn read_first(reader: &mut impl Read) -> Result<Vec<u8>> {
    let mut first = Vec::with_capacity(FIRST_READ);
    reader
        .take(CHUNK as u64 + 1)
        .read_to_end(&mut first)
        .map_err(content_io)?;
    Ok(first)
}
/// Content-defined chunk sizes (FastCDC 2020, normalization level 1): the smallest, the
/// average a boundary is aimed at, the largest. Small enough that an edit costs little and
/// appends rewrite a small tail; large enough that a 256 MiB file is a thousand chunks.
const CDC_MIN: u32 = 64 << 10;
const CDC_AVG: u32 = 256 << 10;
const CDC_MAX: u32 = CHUNK as u32;
pub const BLOB_VERSION: u8 = 1;
const INLINE: u8 = 0;
const MANIFEST: u8 = 1;
const DELTA: u8 = 2;
/// The longest delta chain, whatever the size.
pub const MAX_DEPTH: u8 = 50;
/// About how many bytes reading the deepest version of a content may decompress: a chain is
/// cut (the version stored whole) before `depth × size` passes it.
pub const CHAIN_BYTES: usize = 16 << 20;
/// A delta is kept only if it is smaller than this share of the whole frame (in tenths): one
/// that saves less is not worth a longer chain.
pub(super) const DELTA_PAYS: usize = 9;
/// Content this short is stored whole without trying: a delta's header alone (35 bytes, and a
/// frame's 9 or more) is about what its whole frame takes.
pub(super) const DELTA_MIN: usize = 64;
/// The least a delta's value takes: its header (35 bytes) and the smallest zstd frame (9).
const DELTA_FLOOR: usize = 35 + 9;
/// A version whose whole value is this small is stored whole without trying a delta: the
/// best delta would be at least [`DELTA_FLOOR`], so it could save at most 20 bytes, for the
/// cost of finding the base and compressing against it (about half of what storing a small
/// file's version costs the daemon: 11 of 22 µs on W2's edit).
const WHOLE_SMALL: usize = 64;
/// The first bytes of a zstd dictionary: zstd would take content starting so as a dictionary
/// of its own format, so it is never a base.
const DICT_MAGIC: [u8; 4] = 0xEC30_A437u32.to_le_bytes();
/// zstd level of chunks of large content and of other blobs: fast (~180 MB/s here), still
/// ~3x on source code.
const LEVEL: i32 = 3;
/// zstd level of a file's content up to [`FILE_LEVEL_UP_TO`], whole or as a delta: small
/// files are where history's bytes go, and level 9 (~37 MB/s here, a fraction of a
/// millisecond for most source files) stores them 8 % smaller whole and 10-40 % smaller as
/// deltas than level 3 (measured on this project's history; higher levels save a few % more
/// at 2-10 times the time). Larger files are stored at [`LEVEL`], so that capturing one
/// (while a process waits on its `open`, for a truncation) stays a few milliseconds.
const FILE_LEVEL: i32 = 9;
const FILE_LEVEL_UP_TO: usize = 128 << 10;
/// Where content and dictionary together are this small, zstd's level 9 builds a binary tree
/// (`btlazy2`) over both, and level 8 (`lazy2`) is used instead: on this project's history it
/// stores versions of files this small the same size (within 0.1 %) in a quarter of the time
/// (44 against 197 µs a delta), and on lines that share long prefixes (generated code) loading
/// the base alone cost level 9 nine times what level 8 takes (88 against 10 µs).
const SMALL_INPUT: usize = 16 << 10;
const SMALL_INPUT_LEVEL: i32 = 8;

/// The zstd level of a file's content of `len` bytes.
pub(super) fn file_level(len: usize) -> i32 {
    if len <= FILE_LEVEL_UP_TO {
        FILE_LEVEL
    } else {
        LEVEL
    }
}

/// A BLAKE3 content hash: the key of a blob.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    pub fn of(data: &[u8]) -> Hash {
        Hash(*blake3::hash(data).as_bytes())
    }

    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    pub fn from_hex(s: &str) -> Option<Hash> {
        blake3::Hash::from_hex(s).ok().map(|h| Hash(*h.as_bytes()))
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", &self.to_hex()[..12])
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

pub enum Blob {
    Inline(Vec<u8>),
    Chunked(ManifestRecord),
}

/// A blob value as stored, before anything is decompressed.
enum Stored<'a> {
    Frame(&'a [u8]),
    Manifest(ManifestRecord),
    Delta {
        depth: u8,
        base: Hash,
        frame: &'a [u8],
    },
}

/// The longest chain a version of `len` bytes may be read through: reading it decompresses
/// about `depth × len` bytes, kept near [`CHAIN_BYTES`].
pub fn max_depth(len: usize) -> u8 {
    (CHAIN_BYTES / len.max(1)).clamp(1, usize::from(MAX_DEPTH)) as u8
}

thread_local! {
    // A compression context is costly to set up (more than compressing a small file): each
    // thread keeps one of each.
    static CCTX: std::cell::RefCell<zstd::zstd_safe::CCtx<'static>> =
        std::cell::RefCell::new(zstd::zstd_safe::CCtx::create());
    static DCTX: std::cell::RefCell<zstd::zstd_safe::DCtx<'static>> =
        std::cell::RefCell::new(zstd::zstd_safe::DCtx::create());
}

/// The level to compress `len` bytes with a dictionary of `dict_len` at, for `level`: see
/// [`SMALL_INPUT`]. zstd picks its tables by the two sizes together.
fn level_for(level: i32, len: usize, dict_len: usize) -> i32 {
    if level == FILE_LEVEL && len + dict_len <= SMALL_INPUT {
        SMALL_INPUT_LEVEL
    } else {
        level
    }
}

/// `data` compressed at `level`, with `dict`'s content as the dictionary if given: a frame
/// that only `dict` decodes.
fn compress(data: &[u8], dict: Option<&[u8]>, level: i32) -> Vec<u8> {
    let level = level_for(level, data.len(), dict.map_or(0, <[u8]>::len));
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
    CCTX.with_borrow_mut(|c| match dict {
        Some(dict) => c.compress_using_dict(&mut out, data, dict, level),
        None => c.compress(&mut out, data, level),
    })
    .expect("zstd compresses into a buffer of its bound");
    out
}

/// [`compress`], `None` where zstd refuses: a dictionary starting with zstd's magic is read
/// as one in zstd's format, and may be a damaged one.
fn try_compress(data: &[u8], dict: &[u8], level: i32) -> Option<Vec<u8>> {
    let level = level_for(level, data.len(), dict.len());
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
    CCTX.with_borrow_mut(|c| c.compress_using_dict(&mut out, data, dict, level))
        .ok()?;
    Some(out)
}

/// The delta value of `data` on `base` (stored at `depth - 1`).
pub fn encode_delta(data: &[u8], base: &Hash, base_content: &[u8], depth: u8) -> Vec<u8> {
    encode_delta_at(data, base, base_content, depth, file_level(data.len()))
}

/// [`encode_delta`] at `level`.
fn encode_delta_at(
    data: &[u8],
    base: &Hash,
    base_content: &[u8],
    depth: u8,
    level: i32,
) -> Vec<u8> {
    let frame = compress(data, Some(base_content), level);
    let mut out = Vec::with_capacity(35 + frame.len());
    out.extend_from_slice(&[BLOB_VERSION, DELTA, depth]);
    out.extend_from_slice(&base.0);
    out.extend_from_slice(&frame);
    out
}

/// A base that many contents are compressed against (the repack's dictionary), prepared once
/// per zstd level: zstd loads a dictionary for each compression otherwise, which for one of
/// 400 KiB costs 15 times what compressing a 10 KB file on it does at level 3 and 25 times at
/// level 19 (measured with zstd built without optimisation; the ratio is what counts).
pub(super) struct Prepared {
    pub base: Hash,
    levels: Vec<(i32, zstd::zstd_safe::CDict<'static>)>,
}

impl Prepared {
    pub fn new(base: Hash) -> Prepared {
        Prepared {
            base,
            levels: Vec::new(),
        }
    }

    /// `data` compressed at `level` against `content` (the base's), `None` where zstd refuses.
    fn compress(&mut self, data: &[u8], content: &[u8], level: i32) -> Option<Vec<u8>> {
        let at = match self.levels.iter().position(|(l, _)| *l == level) {
            Some(at) => at,
            None => {
                let cdict = zstd::zstd_safe::CDict::try_create(content, level)?;
                self.levels.push((level, cdict));
                self.levels.len() - 1
            }
        };
        let cdict = &self.levels[at].1;
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
        CCTX.with_borrow_mut(|c| c.compress_using_cdict(&mut out, data, cdict))
            .ok()?;
        Some(out)
    }
}

/// [`try_compress`], through `prepared` if it is `base`'s.
fn compress_on(
    data: &[u8],
    base: &Hash,
    content: &[u8],
    level: i32,
    prepared: Option<&mut Prepared>,
) -> Option<Vec<u8>> {
    match prepared {
        Some(p) if p.base == *base => p.compress(data, content, level),
        _ => try_compress(data, content, level),
    }
}

/// The delta value of `data` (whose hash is `hash`) on `base` at `level`, once it was checked
/// to decode back to `data`; `None` if zstd refuses the base or the delta does not decode.
/// Unlike a capture's, the base may be a dictionary in zstd's format (the repack's, see
/// `repack.rs`): reading decodes it the same way.
pub(super) fn encode_delta_checked(
    data: &[u8],
    hash: &Hash,
    base: &Hash,
    base_content: &[u8],
    depth: u8,
    level: i32,
    prepared: Option<&mut Prepared>,
) -> Option<Vec<u8>> {
    if data.len() < DELTA_MIN {
        return None;
    }
    let frame = compress_on(data, base, base_content, level, prepared)?;
    let back = decompress(&frame, Some(base_content)).ok()?;
    if Hash::of(&back) != *hash {
        return None;
    }
    let mut out = Vec::with_capacity(35 + frame.len());
    out.extend_from_slice(&[BLOB_VERSION, DELTA, depth]);
    out.extend_from_slice(&base.0);
    out.extend_from_slice(&frame);
    Some(out)
}

/// The size of `data`'s frame compressed at `level` with the content of `base`, `dict`, as its
/// dictionary (`usize::MAX` if zstd refuses it).
pub(super) fn delta_size(
    data: &[u8],
    base: &Hash,
    dict: &[u8],
    level: i32,
    prepared: Option<&mut Prepared>,
) -> usize {
    compress_on(data, base, dict, level, prepared).map_or(usize::MAX, |f| f.len())
}

/// Decompress a frame, with `dict` if it was compressed against one. At most [`CHUNK`] bytes:
/// no stored content is larger, so a frame that says so is damaged.
fn decompress(frame: &[u8], dict: Option<&[u8]>) -> std::result::Result<Vec<u8>, String> {
    let size = match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(size)) if size <= CHUNK as u64 => size as usize,
        Ok(Some(size)) => return Err(format!("the frame says {size} bytes, more than a chunk")),
        // Frames written without their size (none rewind writes): decoded as a stream.
        Ok(None) if dict.is_none() => {
            return zstd::stream::decode_all(frame).map_err(|e| format!("bad zstd frame: {e}"));
        }
        Ok(None) | Err(_) => return Err("bad zstd frame header".into()),
    };
    let mut out = Vec::with_capacity(size);
    let done = DCTX.with_borrow_mut(|d| match dict {
        Some(dict) => d.decompress_using_dict(&mut out, frame, dict),
        None => d.decompress(&mut out, frame),
    });
    match done {
        Ok(n) if n == size => Ok(out),
        Ok(n) => Err(format!("the frame holds {n} bytes, its header says {size}")),
        Err(code) => Err(format!(
            "bad zstd frame: {}",
            zstd::zstd_safe::get_error_name(code)
        )),
    }
}

/// Content stored whole, at [`LEVEL`]: a chunk of a large file, a link's target.
pub fn encode_inline(data: &[u8]) -> Vec<u8> {
    encode_whole_at(data, LEVEL)
}

/// Content stored whole, at `level`.
pub(super) fn encode_whole_at(data: &[u8], level: i32) -> Vec<u8> {
    let compressed = compress(data, None, level);
    let mut out = Vec::with_capacity(2 + compressed.len());
    out.extend_from_slice(&[BLOB_VERSION, INLINE]);
    out.extend_from_slice(&compressed);
    out
}

pub fn encode_manifest(manifest: &ManifestRecord) -> Vec<u8> {
    let mut out = vec![BLOB_VERSION, MANIFEST];
    postcard::to_io(manifest, &mut out).expect("postcard encodes into a Vec");
    out
}

/// Split a blob value into what it holds, decompressing nothing; `hash` names it in errors.
fn parse<'a>(hash: &Hash, value: &'a [u8]) -> Result<Stored<'a>> {
    match value {
        [BLOB_VERSION, INLINE, frame @ ..] => Ok(Stored::Frame(frame)),
        [BLOB_VERSION, MANIFEST, body @ ..] => postcard::from_bytes(body)
            .map(Stored::Manifest)
            .map_err(|e| corrupt_blob(hash, &format!("bad manifest: {e}"))),
        [BLOB_VERSION, DELTA, depth, rest @ ..] if rest.len() > 32 && *depth > 0 => {
            let (base, frame) = rest.split_at(32);
            Ok(Stored::Delta {
                depth: *depth,
                base: Hash(base.try_into().expect("32 bytes")),
                frame,
            })
        }
        [BLOB_VERSION, DELTA, ..] => Err(corrupt_blob(hash, "truncated delta")),
        [] | [_] => Err(corrupt_blob(hash, "truncated value")),
        [version, tag, ..] => Err(corrupt_blob(
            hash,
            &format!("unknown blob version {version} tag {tag}"),
        )),
    }
}

/// Decode a blob value that needs no other blob (content stored whole, or a manifest); `hash`
/// is its key, used to check inline content and to name it in errors. A delta is read through
/// the store ([`Store::read_blob`]).
pub fn decode(hash: &Hash, value: &[u8]) -> Result<Blob> {
    match parse(hash, value)? {
        Stored::Frame(frame) => {
            let data = decompress(frame, None).map_err(|e| corrupt_blob(hash, &e))?;
            if Hash::of(&data) != *hash {
                return Err(corrupt_blob(hash, "content does not match its hash"));
            }
            Ok(Blob::Inline(data))
        }
        Stored::Manifest(m) => Ok(Blob::Chunked(m)),
        Stored::Delta { base, .. } => Err(corrupt_blob(
            hash,
            &format!("a delta on {base} cannot be read without it"),
        )),
    }
}

/// The chunk list of a chunked blob's value; `None` for other content, which is not read.
pub fn manifest_of(hash: &Hash, value: &[u8]) -> Result<Option<ManifestRecord>> {
    match value {
        [BLOB_VERSION, MANIFEST, ..] => match parse(hash, value)? {
            Stored::Manifest(m) => Ok(Some(m)),
            _ => unreachable!("tagged as a manifest"),
        },
        _ => Ok(None),
    }
}

/// The size of `hash`'s stored value, if it is stored. A damaged table where its key would be
/// (a block whose checksum fails) counts as not stored: what is being recorded is then written
/// again, into a newer table that shadows the damaged one, where the read's error used to fail
/// the recording (and an edit went unrecorded while the mount said it recorded).
pub(super) fn stored_len(db: &super::Db<'_>, hash: &Hash) -> Result<Option<u64>> {
    let cf = db.cf(CF_BLOBS);
    if !db.key_may_exist_cf(cf, hash.0) {
        return Ok(None);
    }
    match db.get_pinned_cf(cf, hash.0) {
        Ok(value) => Ok(value.map(|v| v.len() as u64)),
        Err(e) if e.kind() == rocksdb::ErrorKind::Corruption => {
            tracing::warn!(
                "the store's table that would hold {hash} is damaged ({e}): stored anew"
            );
            Ok(None)
        }
        Err(e) => Err(Store::db_error("read blob")(e)),
    }
}

/// The base of a delta's value and its depth; `None` for other content.
pub fn delta_base(value: &[u8]) -> Option<(Hash, u8)> {
    match value {
        [BLOB_VERSION, DELTA, depth, rest @ ..] if rest.len() > 32 => {
            Some((Hash(rest[..32].try_into().ok()?), *depth))
        }
        _ => None,
    }
}

fn content_io(source: std::io::Error) -> Error {
    Error::Io {
        path: PathBuf::from("<content being stored>"),
        source,
    }
}

impl Store {
    /// Store `data` as a blob (once: identical content is not stored again) and return its hash.
    pub fn put_blob(&self, data: &[u8]) -> Result<Hash> {
        if data.len() > CHUNK {
            return self.put_blob_reader(data).map(|(hash, _)| hash);
        }
        let hash = Hash::of(data);
        self.put_inline(&hash, data, None)?;
        Ok(hash)
    }

    /// Store `data` (at most a chunk) under `hash`, as a delta if that pays when it is a
    /// version of the file at `path`. Returns the size of the value written (0 if it was
    /// stored already).
    fn put_inline(&self, hash: &Hash, data: &[u8], path: Option<&[u8]>) -> Result<u64> {
        if let Some(path) = path {
            // Noted once the content is stored (below) or known to be.
            if self.keep_blob(hash)? {
                self.note_version(path, hash, data);
                return self.check_writable().map(|()| 0);
            }
            let value = self.version_value(path, data);
            let written = self.put_value("put blob", hash, &value, false)?;
            self.note_version(path, hash, data);
            return Ok(written);
        }
        if self.keep_blob(hash)? {
            return self.check_writable().map(|()| 0);
        }
        self.put_value("put blob", hash, &encode_inline(data), false)
    }

    fn recent_contents(&self) -> std::sync::MutexGuard<'_, super::recent::Recent> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `hash` (of `size` bytes) is the newest content recorded for `path` (`similar.rs`).
    pub(crate) fn note_similar(&self, path: &[u8], hash: Hash, size: u64) {
        if size as usize <= CHUNK {
            let mut similar = self.similar.lock().unwrap_or_else(|e| e.into_inner());
            similar.note(path, hash, size);
        }
    }

    /// Write a blob's value, and the counts with it (`counts.rs`). Unless `replace`, nothing
    /// is written if the blob is stored: the same content captured at once by two threads is
    /// stored (and counted) once. Returns the size of the value written (0 if none was).
    pub(super) fn put_value(
        &self,
        context: &'static str,
        hash: &Hash,
        value: &[u8],
        replace: bool,
    ) -> Result<u64> {
        let mut counts = self.counts();
        let mut new_counts = *counts;
        let db = self.db()?;
        let cf = db.cf(CF_BLOBS);
        match stored_len(&db, hash)? {
            Some(_) if !replace => return Ok(0),
            Some(len) => {
                new_counts.blob_bytes =
                    new_counts.blob_bytes.saturating_sub(len) + value.len() as u64;
            }
            None => {
                new_counts.blobs += 1;
                new_counts.blob_bytes += value.len() as u64;
            }
        }
        let mut batch = WriteBatch::default();
        batch.put_cf(cf, hash.0, value);
        drop(db);
        self.write_counted(context, batch, &mut counts, new_counts)?;
        Ok(value.len() as u64)
    }

    /// The value of `data`, a version of the file at `path`: a delta if one pays (is clearly
    /// smaller than the whole frame), else the whole frame. The base is the newest content recorded for `path`; for a path with none (a new file),
    /// the best of a few contents recorded for other paths with the same file name or
    /// extension (`similar.rs`). Anything in the way (no base, a damaged one, a chain at its
    /// bound) is a reason to store it whole.
    fn version_value(&self, path: &[u8], data: &[u8]) -> Vec<u8> {
        let whole = || encode_whole_at(data, file_level(data.len()));
        if data.len() < DELTA_MIN {
            return whole();
        }
        // Below this size no delta is small enough to be kept at once (below), so the whole
        // value is needed anyway: made first, it may say that no delta can pay.
        let whole_first = match (data.len() < 16 * DELTA_FLOOR).then(whole) {
            Some(w) if w.len() <= WHOLE_SMALL => return w,
            w => w,
        };
        let latest = self.recent_contents().latest_of(path);
        let latest = match latest {
            Some(hash) => Ok(Some(hash)),
            None => self.latest_content(path),
        };
        let bases = match latest {
            Ok(Some(base)) => vec![base],
            Ok(None) => {
                let similar = self.similar.lock().unwrap_or_else(|e| e.into_inner());
                similar.candidates(path, data.len() as u64)
            }
            Err(_) => Vec::new(),
        };
        let Some(delta) = bases
            .iter()
            .filter_map(|base| self.delta_on(base, path, data))
            .min_by_key(Vec::len)
        else {
            return whole_first.unwrap_or_else(whole);
        };
        // A delta a sixteenth of the content or less pays whatever the whole frame would be
        // (an eighth, at level 3: level 9 compresses repetitive text that well on its own).
        if delta.len() * 16 <= data.len() {
            return delta;
        }
        let whole = whole_first.unwrap_or_else(whole);
        if delta.len() * 10 < whole.len() * DELTA_PAYS {
            delta
        } else {
            whole
        }
    }

    /// The value of `data` (a version of `path`) as a delta on the content `base`, if `base`
    /// is stored, may be a base and its chain may grow.
    fn delta_on(&self, base: &Hash, path: &[u8], data: &[u8]) -> Option<Vec<u8>> {
        // Noted before it is read, so a gc running meanwhile keeps it (see `keep_blob`): the
        // delta written next refers to it before any change does.
        if !self.keep_blob(base).ok()? {
            return None;
        }
        let value = {
            let db = self.db().ok()?;
            db.get_pinned_cf(db.cf(CF_BLOBS), base.0).ok()??.to_vec()
        };
        let depth = match parse(base, &value).ok()? {
            Stored::Frame(_) => 1,
            Stored::Delta { depth, .. } => depth.checked_add(1)?,
            Stored::Manifest(_) => return None,
        };
        if depth > max_depth(data.len()) {
            return None;
        }
        let kept = self.recent_contents().get(base);
        let base_content: std::borrow::Cow<'_, [u8]> = match kept {
            Some(ref content) => std::borrow::Cow::Borrowed(content),
            None => match self.content(base, value) {
                Ok(content) => std::borrow::Cow::Owned(content),
                Err(e) => {
                    tracing::warn!("storing a version of {path:?} whole: its base {base}: {e}");
                    return None;
                }
            },
        };
        if base_content.starts_with(&DICT_MAGIC) {
            return None;
        }
        Some(encode_delta(data, base, &base_content, depth))
    }

    /// The newest content recorded for `path` (a file's, after the change or else before it),
    /// looking at its few newest changes.
    fn latest_content(&self, path: &[u8]) -> Result<Option<Hash>> {
        let db = self.db()?;
        let prefix = keys::named_prefix(path);
        let end = keys::named(path, u64::MAX);
        let iter = db.iterator_cf(
            db.cf(super::CF_BY_PATH),
            rocksdb::IteratorMode::From(&end, rocksdb::Direction::Reverse),
        );
        for item in iter.take(4) {
            let (key, _) = item.map_err(Store::db_error("scan by path"))?;
            if !key.starts_with(&prefix) {
                break;
            }
            let Some(id) = keys::trailing_id(&key) else {
                continue;
            };
            let Some(value) = db
                .get_pinned_cf(db.cf(super::CF_CHANGES), keys::change(id))
                .map_err(Store::db_error("read change"))?
            else {
                continue;
            };
            let change = super::ChangeRecord::decode(super::CF_CHANGES, &key, &value)?;
            let file = |s: &Option<super::StateRecord>| {
                s.as_ref()
                    .filter(|s| s.kind == super::format::kind::FILE)
                    .and_then(|s| s.hash)
            };
            if let Some(hash) = file(&change.after).or_else(|| file(&change.before)) {
                return Ok(Some(Hash(hash)));
            }
        }
        Ok(None)
    }

    /// Store what `reader` yields as a new version of the file at `path`: as
    /// [`put_blob_reader`](Store::put_blob_reader), but small content is stored as a delta on
    /// the path's newest recorded content when that pays.
    pub fn put_file_reader(&self, path: &[u8], reader: impl Read) -> Result<(Hash, u64)> {
        self.put_reader(reader, Some(path))
    }

    /// Store everything `reader` yields, a chunk or two in memory at a time. Returns hash and
    /// size.
    pub fn put_blob_reader(&self, reader: impl Read) -> Result<(Hash, u64)> {
        self.put_reader(reader, None)
    }

    /// [`put_file_reader`](Store::put_file_reader), except that content of one value (at
    /// most [`CHUNK`]) that is not stored yet is not written: it is returned, to be written in
    /// the batch of the change that records it ([`Extra::content`](super::Extra::content)),
    /// one write instead of two. Until then it is a base for nothing, and a gc knows nothing
    /// of it (nothing refers to it). Larger content is stored at once, as
    /// `put_file_reader` stores it.
    pub fn prepare_file_reader(
        &self,
        path: &[u8],
        reader: impl Read,
    ) -> Result<(Hash, u64, Option<NewContent>)> {
        let mut reader = reader;
        let first = read_first(&mut reader)?;
        if first.len() > CHUNK {
            let (hash, size) = self.put_chunked(first, reader, Some(path))?;
            return Ok((hash, size, None));
        }
        let hash = Hash::of(&first);
        let size = first.len() as u64;
        if self.keep_blob(&hash)? {
            self.note_version(path, &hash, &first);
            self.check_writable()?;
            return Ok((hash, size, None));
        }
        let value = self.version_value(path, &first);
        let content = NewContent {
            hash,
            value,
            data: first,
            path: path.to_vec(),
        };
        Ok((hash, size, Some(content)))
    }

    /// `content`, prepared by [`prepare_file_reader`](Store::prepare_file_reader), was
    /// written: it is now the newest version of its path, and a base for the next.
    pub(super) fn content_written(&self, content: &NewContent) {
        self.note_version(&content.path, &content.hash, &content.data);
    }

    /// `hash` (`data`) is stored as a version of `path`: the next new path with its name or
    /// extension may use it as a base, and it is kept in memory as the base of this path's
    /// next version (`recent.rs`).
    fn note_version(&self, path: &[u8], hash: &Hash, data: &[u8]) {
        self.note_similar(path, *hash, data.len() as u64);
        let mut recent = self.recent_contents();
        recent.keep(*hash, data);
        recent.stored_as(path, *hash);
    }

    fn put_reader(&self, reader: impl Read, path: Option<&[u8]>) -> Result<(Hash, u64)> {
        let mut reader = reader;
        let first = read_first(&mut reader)?;
        if first.len() <= CHUNK {
            let hash = Hash::of(&first);
            self.put_inline(&hash, &first, path)?;
            return Ok((hash, first.len() as u64));
        }
        self.put_chunked(first, reader, path)
    }

    /// Store content of more than a chunk, whose first [`CHUNK`] + 1 bytes are `first` and
    /// the rest what `reader` yields.
    fn put_chunked(
        &self,
        first: Vec<u8>,
        reader: impl Read,
        path: Option<&[u8]>,
    ) -> Result<(Hash, u64)> {
        let mut whole = blake3::Hasher::new();
        let mut manifest = ManifestRecord {
            size: 0,
            chunks: Vec::new(),
        };
        let source = std::io::Cursor::new(first).chain(reader);
        // Bytes this store wrote, and the raw bytes they hold: how much the rest may need.
        let (mut written, mut written_raw) = (0u64, 0u64);
        let mut chunks = fastcdc::v2020::StreamCDC::new(source, CDC_MIN, CDC_AVG, CDC_MAX);
        while let Some(chunk) = chunks.next() {
            let chunk = chunk.map_err(|e| content_io(e.into()))?;
            whole.update(&chunk.data);
            let hash = Hash::of(&chunk.data);
            if !self.keep_blob(&hash)? {
                // Never into the reserve (see `check_room_for`). What the rest needs, from
                // how well this content compressed so far.
                let len = chunk.length as u64;
                self.check_room_for(len, path, manifest.size, || {
                    let rest: u64 = chunks
                        .by_ref()
                        .map_while(|c| c.ok())
                        .filter(|c| !self.has_blob(&Hash::of(&c.data)).unwrap_or(false))
                        .map(|c| c.length as u64)
                        .sum::<u64>()
                        + len;
                    let ratio = if written_raw == 0 {
                        1.0
                    } else {
                        written as f64 / written_raw as f64
                    };
                    (rest as f64 * ratio.min(1.0)) as u64
                })?;
                written += self.put_inline(&hash, &chunk.data, None)?;
                written_raw += len;
            } else {
                self.check_writable()?;
            }
            manifest.chunks.push((hash.0, chunk.length as u32));
            manifest.size += chunk.length as u64;
        }
        let hash = Hash(*whole.finalize().as_bytes());
        if !self.keep_blob(&hash)? {
            self.put_value("put manifest", &hash, &encode_manifest(&manifest), false)?;
        }
        Ok((hash, manifest.size))
    }

    /// Whether the blob `hash` is stored, and if so keep it from gc until the thread's pin
    /// scope ends (`pins.rs`): for a change about to refer to content stored earlier (gc
    /// removes blobs no recorded change refers to). A chunked blob's chunks are kept through it.
    pub fn keep_blob(&self, hash: &Hash) -> Result<bool> {
        // Pinned before looking, so a gc either sees the pin or has already deleted the blob
        // (and we store it again). The pin lasts as long as the thread's pin scope.
        self.pin_for_scope(*hash);
        self.has_blob(hash)
    }

    /// [`keep_blob`](Store::keep_blob) for content known to be stored when
    /// [`sweeps`](Store::sweeps) was `sweeps`: unless a gc has deleted blobs since, it still is,
    /// and there is nothing to look up.
    pub fn keep_blob_since(&self, hash: &Hash, sweeps: u64) -> Result<bool> {
        self.pin_for_scope(*hash);
        if self.sweeps() == sweeps {
            return Ok(true);
        }
        self.has_blob(hash)
    }

    /// Write a blob's value as it is (for tests of stored bytes).
    #[cfg(test)]
    pub(crate) fn put_raw_blob(&self, hash: &Hash, value: &[u8]) -> Result<()> {
        self.put_value("put blob", hash, value, true).map(|_| ())
    }

    /// Every blob's hash with the length of the delta chain it is read through (0: stored
    /// whole) and the size of its value, for benchmarks and checks.
    pub fn blob_depths(&self) -> Result<Vec<(Hash, u32, u64)>> {
        let db = self.db()?;
        let mut out = Vec::new();
        for item in db.iterator_cf(db.cf(CF_BLOBS), rocksdb::IteratorMode::Start) {
            let (key, value) = item.map_err(Store::db_error("scan blobs"))?;
            if let Ok(hash) = <[u8; 32]>::try_from(&key[..]) {
                let depth = delta_base(&value).map_or(0, |(_, d)| u32::from(d));
                out.push((Hash(hash), depth, value.len() as u64));
            }
        }
        Ok(out)
    }

    /// The blob a blob stored as a delta is stored on (`None` for one stored otherwise), for
    /// checks.
    pub fn delta_base_of(&self, hash: &Hash) -> Result<Option<Hash>> {
        Ok(delta_base(&self.value_of(hash)?).map(|(base, _)| base))
    }

    /// How many gcs so far have deleted blobs.
    pub fn sweeps(&self) -> u64 {
        self.sweeps.load(Ordering::SeqCst)
    }

    /// Write the meta `key` naming contents known stored when [`sweeps`](Store::sweeps) was
    /// `sweeps`, unless a gc has deleted blobs since (then nothing is written: false). Under
    /// the pin table's lock, which a gc holds from its last look at what is pinned until its
    /// count of sweeps is raised, after its batch: the record is written either before that
    /// batch (which deletes it, with the blobs) or after the count is raised (and it is not
    /// written).
    pub fn put_meta_unless_swept(&self, key: &[u8], value: &[u8], sweeps: u64) -> Result<bool> {
        let _pinned = self.pins.lock();
        if self.sweeps() != sweeps {
            return Ok(false);
        }
        self.put_meta(key, value)?;
        Ok(true)
    }

    pub fn has_blob(&self, hash: &Hash) -> Result<bool> {
        Ok(stored_len(&self.db()?, hash)?.is_some())
    }

    /// A blob's stored value.
    pub(super) fn value_of(&self, hash: &Hash) -> Result<Vec<u8>> {
        let db = self.db()?;
        let value = db
            .get_pinned_cf(db.cf(CF_BLOBS), hash.0)
            .map_err(Store::db_error("read blob"))?
            .ok_or_else(|| corrupt_blob(hash, "blob is missing"))?;
        Ok(value.to_vec())
    }

    fn blob(&self, hash: &Hash) -> Result<Blob> {
        let value = self.value_of(hash)?;
        match parse(hash, &value)? {
            Stored::Manifest(m) => Ok(Blob::Chunked(m)),
            _ => self.content(hash, value).map(Blob::Inline),
        }
    }

    /// The content of a blob stored whole or as a delta, whose value is `value`: the chain of
    /// bases is followed down to content stored whole, then decompressed back up, each
    /// version checked against its hash. A damaged base is named, with the paths whose
    /// recorded content needs it.
    fn content(&self, hash: &Hash, value: Vec<u8>) -> Result<Vec<u8>> {
        let mut chain = vec![(*hash, value)];
        // Times the chain was read again because a repack rewrote part of it meanwhile.
        let mut again = 0;
        // The chain's last base, if it is the dictionary read last (already checked).
        let mut cached: Option<std::sync::Arc<Vec<u8>>> = None;
        loop {
            let (h, value) = chain.last().expect("not empty");
            let base = match parse(h, value) {
                Ok(Stored::Frame(_)) => break,
                Ok(Stored::Delta { base, .. }) => base,
                Ok(Stored::Manifest(_)) => {
                    return Err(self.damaged_base(hash, &chain, "it is a chunk manifest"));
                }
                Err(e) => return Err(self.damaged_base(hash, &chain, &reason(e))),
            };
            // Chains are written within MAX_DEPTH, but a capture that took a blob as its base
            // while a repack made that blob deeper counted the old depth (`repack.rs`): such
            // a chain may be longer, never longer than a depth byte counts. Longer is a loop.
            if chain.len() > usize::from(u8::MAX) {
                return Err(corrupt_blob(
                    hash,
                    "its delta chain is longer than any written",
                ));
            }
            if let Some(dictionary) = self.dictionary_read(&base) {
                cached = Some(dictionary);
                break;
            }
            match self.value_of(&base) {
                Ok(value) => chain.push((base, value)),
                // A repack re-encoded a blob of the chain after it was read here, and the gc
                // after it removed the base its old encoding had: read the chain again.
                Err(_) if again < 3 && self.chain_changed(&chain) => {
                    again += 1;
                    chain.truncate(1);
                    chain[0].1 = self.value_of(hash)?;
                }
                Err(e) => {
                    chain.push((base, Vec::new()));
                    return Err(self.damaged_base(hash, &chain, &reason(e)));
                }
            }
        }
        let mut content: Option<Vec<u8>> = None;
        for i in (0..chain.len()).rev() {
            let (h, value) = &chain[i];
            let Ok(Stored::Frame(frame) | Stored::Delta { frame, .. }) = parse(h, value) else {
                unreachable!("parsed above")
            };
            let dict = content.as_deref().or(cached.as_deref().map(Vec::as_slice));
            let data = decompress(frame, dict)
                .and_then(|data| {
                    (Hash::of(&data) == *h)
                        .then_some(data)
                        .ok_or_else(|| "content does not match its hash".to_string())
                })
                .map_err(|why| {
                    if i == 0 {
                        corrupt_blob(hash, &why)
                    } else {
                        self.damaged_base(hash, &chain[..=i], &why)
                    }
                })?;
            if i > 0 && dict.is_none() && data.starts_with(&DICT_MAGIC) {
                // A repack's dictionary: the base of many heads, read again and again.
                let mut last = self.dictionary.lock().unwrap_or_else(|e| e.into_inner());
                *last = Some((*h, std::sync::Arc::new(data.clone())));
            }
            content = Some(data);
        }
        Ok(content.expect("the chain holds the blob itself"))
    }

    /// Whether a blob of `chain` (as read) is now stored otherwise.
    fn chain_changed(&self, chain: &[(Hash, Vec<u8>)]) -> bool {
        chain
            .iter()
            .any(|(h, v)| self.value_of(h).ok().as_ref() != Some(v))
    }

    /// The content of `hash` if it is the dictionary read last (`Store::dictionary`).
    fn dictionary_read(&self, hash: &Hash) -> Option<std::sync::Arc<Vec<u8>>> {
        let last = self.dictionary.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .filter(|(h, _)| h == hash)
            .map(|(_, d)| d.clone())
    }

    /// The error for a blob whose delta chain breaks at its last link: which base, and the
    /// paths whose recorded content needs that base (a scan of the store: only on this path).
    fn damaged_base(&self, hash: &Hash, chain: &[(Hash, Vec<u8>)], why: &str) -> Error {
        let base = chain.last().expect("not empty").0;
        let link = chain.len() - 1;
        let paths = match self.paths_needing(&base) {
            Ok(paths) if paths.is_empty() => "no recorded path".to_string(),
            Ok(paths) => {
                let shown: Vec<String> = paths
                    .iter()
                    .take(10)
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect();
                let more = paths.len().saturating_sub(shown.len());
                if more > 0 {
                    format!("{} and {more} more", shown.join(", "))
                } else {
                    shown.join(", ")
                }
            }
            Err(e) => format!("cannot tell ({e})"),
        };
        corrupt_blob(
            hash,
            &format!(
                "its delta base {base} ({link} of {} down its chain) is damaged: {why}; content \
                 stored on that base cannot be read, for: {paths}",
                chain.len() - 1
            ),
        )
    }

    /// Every path a recorded change of which has content that needs the blob `base` to be
    /// read (through deltas and chunk manifests), sorted.
    pub fn paths_needing(&self, base: &Hash) -> Result<Vec<Vec<u8>>> {
        let db = self.db()?;
        // Who needs whom, from every blob's header (manifests decoded, frames not).
        let mut needed_by: HashMap<Hash, Vec<Hash>> = HashMap::new();
        for item in db.iterator_cf(db.cf(CF_BLOBS), rocksdb::IteratorMode::Start) {
            let (key, value) = item.map_err(Store::db_error("scan blobs"))?;
            let Ok(hash) = <[u8; 32]>::try_from(&key[..]).map(Hash) else {
                continue;
            };
            if let Some((b, _)) = delta_base(&value) {
                needed_by.entry(b).or_default().push(hash);
            } else if let Ok(Some(m)) = manifest_of(&hash, &value) {
                for (chunk, _) in m.chunks {
                    needed_by.entry(Hash(chunk)).or_default().push(hash);
                }
            }
        }
        let mut affected = std::collections::HashSet::from([*base]);
        let mut todo = vec![*base];
        while let Some(h) = todo.pop() {
            for &d in needed_by.get(&h).into_iter().flatten() {
                if affected.insert(d) {
                    todo.push(d);
                }
            }
        }
        drop(db);
        self.paths_naming(&affected)
    }

    /// Every path a recorded change of which has one of `contents`, sorted.
    pub(super) fn paths_naming(
        &self,
        contents: &std::collections::HashSet<Hash>,
    ) -> Result<Vec<Vec<u8>>> {
        let db = self.db()?;
        let mut paths = std::collections::BTreeSet::new();
        for item in db.iterator_cf(db.cf(super::CF_CHANGES), rocksdb::IteratorMode::Start) {
            let (key, value) = item.map_err(Store::db_error("scan changes"))?;
            let Ok(c) = super::ChangeRecord::decode(super::CF_CHANGES, &key, &value) else {
                continue;
            };
            let needs = [&c.before, &c.after]
                .into_iter()
                .flatten()
                .filter_map(|s| s.hash)
                .any(|h| contents.contains(&Hash(h)));
            if needs {
                paths.insert(c.path);
            }
        }
        Ok(paths.into_iter().collect())
    }

    /// Write a blob's content to `out`, one chunk at a time, each checked against its hash and
    /// the whole against the blob's. Returns the number of bytes. On an error part of the
    /// content may have been written: to check content before using it, read it into a sink
    /// first ([`Store::verify_blob`]).
    pub fn read_blob_to(&self, hash: &Hash, out: &mut impl Write) -> Result<u64> {
        let io = |source| Error::Io {
            path: PathBuf::from(format!("<blob {}>", hash.to_hex())),
            source,
        };
        match self.blob(hash)? {
            Blob::Inline(data) => {
                out.write_all(&data).map_err(io)?;
                Ok(data.len() as u64)
            }
            Blob::Chunked(manifest) => {
                let mut whole = blake3::Hasher::new();
                let mut offset = 0u64;
                for (i, (chunk_hash, len)) in manifest.chunks.iter().enumerate() {
                    let damaged = |why: &str| {
                        let end = offset + u64::from(*len);
                        let reason = format!(
                            "chunk {} of {} (bytes {offset}..{end}, blob {}) is damaged: {why}",
                            i + 1,
                            manifest.chunks.len(),
                            Hash(*chunk_hash).to_hex()
                        );
                        corrupt_blob(hash, &reason)
                    };
                    let data = match self.blob(&Hash(*chunk_hash)) {
                        Ok(Blob::Inline(data)) if data.len() == *len as usize => data,
                        Ok(Blob::Inline(_)) => return Err(damaged("its length differs")),
                        Ok(Blob::Chunked(_)) => return Err(damaged("it is itself a manifest")),
                        Err(Error::Corrupt { reason, .. }) => return Err(damaged(&reason)),
                        Err(e) => return Err(e),
                    };
                    whole.update(&data);
                    out.write_all(&data).map_err(io)?;
                    offset += u64::from(*len);
                }
                if whole.finalize().as_bytes() != &hash.0 {
                    return Err(corrupt_blob(hash, "chunks do not add up to the hash"));
                }
                Ok(manifest.size)
            }
        }
    }

    /// Read a blob through to the end without keeping it: `Ok` means every byte is there and
    /// matches its hash.
    pub fn verify_blob(&self, hash: &Hash) -> Result<u64> {
        self.read_blob_to(hash, &mut std::io::sink())
    }

    /// A blob's whole content in memory. For content that may be large use [`read_blob_to`].
    ///
    /// [`read_blob_to`]: Store::read_blob_to
    pub fn read_blob(&self, hash: &Hash) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_blob_to(hash, &mut out)?;
        Ok(out)
    }
}

/// What a store error says, without the family and key of the blob it is about (the caller
/// names the blob).
fn reason(e: Error) -> String {
    match e {
        Error::Corrupt { reason, .. } => reason,
        e => e.to_string(),
    }
}

fn corrupt_blob(hash: &Hash, reason: &str) -> Error {
    Error::Corrupt {
        cf: CF_BLOBS,
        key: hash.to_hex(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Level 8 where zstd's level 9 would build a binary tree (content and base together up
    /// to 16 KiB), level 9 above, other levels as asked; frames at either side of the bound
    /// decode back, whole and as deltas.
    #[test]
    fn small_inputs_are_compressed_at_level_8() {
        assert_eq!(level_for(FILE_LEVEL, SMALL_INPUT, 0), SMALL_INPUT_LEVEL);
        assert_eq!(level_for(FILE_LEVEL, SMALL_INPUT / 2, SMALL_INPUT / 2), 8);
        assert_eq!(
            level_for(FILE_LEVEL, SMALL_INPUT / 2, SMALL_INPUT / 2 + 1),
            9
        );
        assert_eq!(level_for(LEVEL, 100, 0), LEVEL);
        assert_eq!(level_for(19, 100, 0), 19);
        let line = |i: usize| format!("fn item_{i}(x: u32) -> u32 {{ x * {i} }} // keep\n");
        for len in [
            SMALL_INPUT / 2 - 1,
            SMALL_INPUT / 2,
            SMALL_INPUT / 2 + 1,
            SMALL_INPUT + 1,
        ] {
            let text: String = (0..1000).map(line).collect();
            let base = text.as_bytes()[..len].to_vec();
            let mut data = base.clone();
            data[len / 2] = b'#';
            let frame = compress(&data, None, FILE_LEVEL);
            assert_eq!(decompress(&frame, None).unwrap(), data);
            let delta = compress(&data, Some(&base), FILE_LEVEL);
            assert_eq!(decompress(&delta, Some(&base)).unwrap(), data);
            assert!(delta.len() < frame.len());
        }
    }
    use crate::store::noise;

    #[test]
    fn inline_round_trip_checks_the_hash() {
        let data = b"fn main() {}\n".repeat(100);
        let hash = Hash::of(&data);
        let value = encode_inline(&data);
        assert!(value.len() < data.len());
        match decode(&hash, &value).unwrap() {
            Blob::Inline(back) => assert_eq!(back, data),
            Blob::Chunked(_) => panic!("expected inline"),
        }
        let err = decode(&Hash::of(b"other"), &value).err().unwrap();
        assert!(err.to_string().contains("does not match"), "{err}");
    }

    fn chunks(store: &Store, hash: &Hash) -> Vec<[u8; 32]> {
        match store.blob(hash).unwrap() {
            Blob::Chunked(m) => m.chunks.into_iter().map(|(h, _)| h).collect(),
            Blob::Inline(_) => panic!("expected chunks"),
        }
    }

    /// An insert and a delete in the middle of a large file each change the chunk or two
    /// around them: every other boundary stays, so the rest is stored once.
    #[test]
    fn content_defined_boundaries_survive_an_insert_and_a_delete() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut data = noise(8 << 20, 7);
        let (first, size) = store.put_blob_reader(&data[..]).unwrap();
        assert_eq!((first, size), (Hash::of(&data), data.len() as u64));
        let old = chunks(&store, &first);
        assert!(old.len() >= 8, "{} chunks", old.len());
        let stored = store.stats().unwrap().blob_bytes;

        data.splice(4_000_123..4_000_123, *b"0123456789");
        let (inserted, _) = store.put_blob_reader(&data[..]).unwrap();
        data.drain(6_000_000..6_000_010);
        let (deleted, _) = store.put_blob_reader(&data[..]).unwrap();
        for (hash, before) in [(inserted, &old), (deleted, &chunks(&store, &inserted))] {
            let new = chunks(&store, &hash);
            let fresh = new.iter().filter(|c| !before.contains(c)).count();
            assert!(fresh <= 2, "{fresh} of {} chunks are new", new.len());
        }
        let growth = store.stats().unwrap().blob_bytes - stored;
        assert!(
            growth <= 4 * CHUNK as u64,
            "{growth} bytes stored for two small edits"
        );
        assert!(store.read_blob(&deleted).unwrap() == data);
    }

    /// Source-like text of `lines` lines as of `version`: each version edits every 50th line.
    pub(crate) fn source(lines: usize, version: usize) -> Vec<u8> {
        let mut out = String::new();
        for i in 0..lines {
            let edited = match version.checked_sub(i % 50) {
                Some(since) => format!(" // edited in version {}", version - since % 50),
                None => String::new(),
            };
            out.push_str(&format!(
                "    let value_{i} = compute({i}, \"{i:x}\");{edited}\n"
            ));
        }
        out.into_bytes()
    }

    /// Record `data` as the new content of `path`, stored as [`Store::put_file_reader`] does.
    pub(crate) fn version(store: &Store, path: &str, data: &[u8]) -> Hash {
        use crate::store::format::{StateRecord, change_kind, kind};
        let (hash, size) = store.put_file_reader(path.as_bytes(), data).unwrap();
        let change = crate::store::ChangeRecord {
            id: 0,
            time_ns: 1,
            kind: change_kind::MODIFY,
            path: path.as_bytes().to_vec(),
            from: None,
            before: None,
            after: Some(StateRecord {
                kind: kind::FILE,
                size,
                mode: 0o644,
                hash: Some(hash.0),
                owner: None,
            }),
            session: "s".into(),
            agent: "a".into(),
            pid: 1,
            process: "test".into(),
            links: Vec::new(),
            groups: Vec::new(),
            turn: None,
            tool: None,
            uid: None,
        };
        let extra = crate::store::Extra::default();
        store.record_many(vec![(change, &extra)]).unwrap();
        hash
    }

    /// A reader that read a version's value just before a repack re-encoded it, and the gc
    /// after the repack then removed the base that old encoding was stored on, reads the
    /// version again instead of calling it damaged (a reader racing `gc --repack`).
    #[test]
    fn a_read_racing_a_repack_and_the_gc_after_it_reads_the_version_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let versions: Vec<(Hash, Vec<u8>)> = (0..20)
            .map(|v| {
                // Pinned only until its change is written, as by the recorder.
                let _pins = store.pin_scope();
                let data = source(300, v * 7);
                (version(&store, "src/a.rs", &data), data)
            })
            .collect();
        let (head, data) = versions.last().unwrap();
        let before = &versions[versions.len() - 2].0;
        // What the reader read before the gc: the newest version, a delta on the one before.
        let read = store.value_of(head).unwrap();
        assert_eq!(delta_base(&read).map(|(b, _)| b), Some(*before));
        // gc removes every change but the newest, then repacks: the newest is stored whole
        // and the older versions, needed by nothing now, are removed.
        let newest = |all: &[crate::store::ChangeRecord]| {
            all.iter().map(|c| c.id).max().into_iter().collect()
        };
        let report = store
            .gc(&crate::store::GcPlan {
                older_than_ns: None,
                max_bytes: Some(0),
                protect: &newest,
                dry_run: false,
                repack: true,
            })
            .unwrap();
        assert!(report.repacked > 0 && report.repack_freed > 0, "{report:?}");
        assert!(
            !store.has_blob(&versions[3].0).unwrap(),
            "the old base is gone"
        );
        assert!(store.content(head, read).unwrap() == *data);
    }

    fn depth_of(store: &Store, hash: &Hash) -> u32 {
        let db = store.db().unwrap();
        let value = db.get_cf(db.cf(CF_BLOBS), hash.0).unwrap().unwrap();
        delta_base(&value).map_or(0, |(_, d)| u32::from(d))
    }

    /// Versions of a source file are stored as deltas on the version before, in chains no
    /// longer than their bound, and every version reads back byte-exact.
    #[test]
    fn versions_are_deltas_in_bounded_chains_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut whole = 0;
        let mut hashes = Vec::new();
        for v in 0..120 {
            let data = source(400, v);
            whole += encode_inline(&data).len() as u64;
            hashes.push((version(&store, "src/lib.rs", &data), data));
        }
        let stored = store.stats().unwrap().blob_bytes;
        assert!(
            stored * 5 < whole,
            "{stored} bytes stored for versions of {whole} bytes compressed whole"
        );
        let depths: Vec<u32> = hashes.iter().map(|(h, _)| depth_of(&store, h)).collect();
        assert_eq!(depths[0], 0, "the first version has no base");
        assert_eq!(depths[1], 1);
        let deepest = *depths.iter().max().unwrap();
        assert_eq!(deepest, u32::from(MAX_DEPTH), "{depths:?}");
        assert_eq!(depths[usize::from(MAX_DEPTH) + 1], 0, "the chain is cut");
        for (hash, data) in &hashes {
            assert!(store.read_blob(hash).unwrap() == *data);
        }
        // A large file's chain is shorter: reading its deepest version decompresses about
        // CHAIN_BYTES.
        assert_eq!(max_depth(CHUNK), (CHAIN_BYTES / CHUNK) as u8);
        assert_eq!(max_depth(0), MAX_DEPTH);
    }

    /// Content that has nothing in common with the path's previous content is stored whole,
    /// and so is content without a previous version or stored without a path.
    #[test]
    fn a_delta_that_does_not_pay_is_stored_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let first = version(&store, "data.bin", &noise(50_000, 1));
        let second = version(&store, "data.bin", &noise(50_000, 2));
        let text = version(&store, "data.bin", &source(300, 0));
        let plain = store.put_blob(&source(300, 1)).unwrap();
        for (i, hash) in [first, second, text, plain].iter().enumerate() {
            assert_eq!(depth_of(&store, hash), 0, "{i}");
        }
        let edited = version(&store, "data.bin", &source(300, 2));
        assert_eq!(depth_of(&store, &edited), 1);
        // Too short for a delta to pay: not even tried.
        version(&store, "tiny", b"let x = 1;\n");
        let tiny = version(&store, "tiny", b"let x = 2;\n");
        assert_eq!(depth_of(&store, &tiny), 0);
    }

    /// A small file's version whose whole frame is a few dozen bytes is stored whole without
    /// trying a delta (none could save more than 20 bytes); one that compresses less on its
    /// own is still a delta when that pays.
    #[test]
    fn a_version_too_small_whole_for_a_delta_to_pay_is_stored_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut lines = vec!["counter 0 file 7".to_string(); 20];
        let text = |lines: &[String]| (lines.join("\n") + "\n").into_bytes();
        version(&store, "w2.txt", &text(&lines));
        lines[3] = "Counter 0 file 7".into();
        let edited = text(&lines);
        assert!(encode_whole_at(&edited, file_level(edited.len())).len() <= WHOLE_SMALL);
        let small = version(&store, "w2.txt", &edited);
        assert_eq!(depth_of(&store, &small), 0);
        // Every line different: its whole frame is larger, and a delta pays.
        for (i, line) in lines.iter_mut().enumerate() {
            *line = format!("edit {i} of file 7");
        }
        version(&store, "w2.txt", &text(&lines));
        lines[5] = "edit 25 of file 7".into();
        let edited = text(&lines);
        assert!(encode_whole_at(&edited, file_level(edited.len())).len() > WHOLE_SMALL);
        let larger = version(&store, "w2.txt", &edited);
        assert_eq!(depth_of(&store, &larger), 1);
        assert!(store.read_blob(&larger).unwrap() == edited);
    }

    #[test]
    fn garbage_is_a_corrupt_error() {
        let hash = Hash::of(b"x");
        for value in [
            &[][..],
            &[1][..],
            &[1, 0, 1, 2, 3][..],
            &[9, 9][..],
            &[1, 1, 0xff][..],
            &[1, 2, 1][..],
            &[1, 2, 0, 1, 2][..],
        ] {
            assert!(matches!(decode(&hash, value), Err(Error::Corrupt { .. })));
        }
    }
}
