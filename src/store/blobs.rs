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
//! Value layout: `BLOB_VERSION`, then a tag: `INLINE` followed by a zstd frame, or `MANIFEST`
//! followed by a postcard [`ManifestRecord`].

use std::fmt;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use rocksdb::WriteBatch;

use super::format::ManifestRecord;
use super::{CF_BLOBS, Error, Result, Store, keys};

/// The largest content stored as one value, and the largest chunk.
pub const CHUNK: usize = 1 << 20;
/// Content-defined chunk sizes (FastCDC 2020, normalization level 1): the smallest, the
/// average a boundary is aimed at, the largest. Small enough that an edit costs little and
/// appends rewrite a small tail; large enough that a 256 MiB file is a thousand chunks.
const CDC_MIN: u32 = 64 << 10;
const CDC_AVG: u32 = 256 << 10;
const CDC_MAX: u32 = CHUNK as u32;
pub const BLOB_VERSION: u8 = 1;
const INLINE: u8 = 0;
const MANIFEST: u8 = 1;
/// zstd level: fast enough to run while an editor waits on `open`, still ~3x on source code.
const LEVEL: i32 = 3;

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

pub fn encode_inline(data: &[u8]) -> Vec<u8> {
    thread_local! {
        // A compression context is costly to set up (more than compressing a small file):
        // each thread keeps one.
        static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let compressed = COMPRESSOR.with_borrow_mut(|c| {
        let c = match c {
            Some(c) => c,
            None => c.insert(zstd::bulk::Compressor::new(LEVEL).expect("zstd level 3 is valid")),
        };
        c.compress(data).expect("zstd compresses into memory")
    });
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

/// Decode a blob value; `hash` is its key, used to check inline content and to name it in errors.
pub fn decode(hash: &Hash, value: &[u8]) -> Result<Blob> {
    let corrupt = |reason: String| Error::Corrupt {
        cf: CF_BLOBS,
        key: keys::hex(&hash.0),
        reason,
    };
    match value {
        [BLOB_VERSION, INLINE, frame @ ..] => {
            let data = zstd::stream::decode_all(frame)
                .map_err(|e| corrupt(format!("bad zstd frame: {e}")))?;
            if Hash::of(&data) != *hash {
                return Err(corrupt("content does not match its hash".into()));
            }
            Ok(Blob::Inline(data))
        }
        [BLOB_VERSION, MANIFEST, body @ ..] => postcard::from_bytes(body)
            .map(Blob::Chunked)
            .map_err(|e| corrupt(format!("bad manifest: {e}"))),
        [] | [_] => Err(corrupt("truncated value".into())),
        [version, tag, ..] => Err(corrupt(format!("unknown blob version {version} tag {tag}"))),
    }
}

/// The chunk list of a chunked blob's value; `None` for inline content, which is not read.
pub fn manifest_of(hash: &Hash, value: &[u8]) -> Result<Option<ManifestRecord>> {
    match value {
        [BLOB_VERSION, MANIFEST, ..] => match decode(hash, value)? {
            Blob::Chunked(m) => Ok(Some(m)),
            Blob::Inline(_) => unreachable!("tagged as a manifest"),
        },
        _ => Ok(None),
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
        self.put_inline(&hash, data)?;
        Ok(hash)
    }

    fn put_inline(&self, hash: &Hash, data: &[u8]) -> Result<()> {
        if self.keep_blob(hash)? {
            return self.check_writable();
        }
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        batch.put_cf(db.cf(CF_BLOBS), hash.0, encode_inline(data));
        drop(db);
        self.write("put blob", batch)
    }

    /// Store everything `reader` yields, a chunk or two in memory at a time. Returns hash and
    /// size.
    pub fn put_blob_reader(&self, reader: impl Read) -> Result<(Hash, u64)> {
        // Most content is small: read it into a buffer of its own size, not a chunk's.
        let mut reader = reader;
        let mut first = Vec::new();
        (&mut reader)
            .take(CHUNK as u64 + 1)
            .read_to_end(&mut first)
            .map_err(content_io)?;
        if first.len() <= CHUNK {
            let hash = Hash::of(&first);
            self.put_inline(&hash, &first)?;
            return Ok((hash, first.len() as u64));
        }
        let mut whole = blake3::Hasher::new();
        let mut manifest = ManifestRecord {
            size: 0,
            chunks: Vec::new(),
        };
        let source = std::io::Cursor::new(first).chain(reader);
        for chunk in fastcdc::v2020::StreamCDC::new(source, CDC_MIN, CDC_AVG, CDC_MAX) {
            let chunk = chunk.map_err(|e| content_io(e.into()))?;
            whole.update(&chunk.data);
            let hash = Hash::of(&chunk.data);
            self.put_inline(&hash, &chunk.data)?;
            manifest.chunks.push((hash.0, chunk.length as u32));
            manifest.size += chunk.length as u64;
        }
        let hash = Hash(*whole.finalize().as_bytes());
        if !self.keep_blob(&hash)? {
            let db = self.db()?;
            let mut batch = WriteBatch::default();
            batch.put_cf(db.cf(CF_BLOBS), hash.0, encode_manifest(&manifest));
            drop(db);
            self.write("put manifest", batch)?;
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

    /// How many gcs so far have deleted blobs.
    pub fn sweeps(&self) -> u64 {
        self.sweeps.load(Ordering::SeqCst)
    }

    pub fn has_blob(&self, hash: &Hash) -> Result<bool> {
        let db = self.db()?;
        let cf = db.cf(CF_BLOBS);
        if !db.key_may_exist_cf(cf, hash.0) {
            return Ok(false);
        }
        Ok(db
            .get_pinned_cf(cf, hash.0)
            .map_err(Store::db_error("read blob"))?
            .is_some())
    }

    fn blob(&self, hash: &Hash) -> Result<Blob> {
        let db = self.db()?;
        let value = db
            .get_pinned_cf(db.cf(CF_BLOBS), hash.0)
            .map_err(Store::db_error("read blob"))?
            .ok_or_else(|| corrupt_blob(hash, "blob is missing"))?;
        decode(hash, &value)
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

    #[test]
    fn garbage_is_a_corrupt_error() {
        let hash = Hash::of(b"x");
        for value in [
            &[][..],
            &[1][..],
            &[1, 0, 1, 2, 3][..],
            &[9, 9][..],
            &[1, 1, 0xff][..],
        ] {
            assert!(matches!(decode(&hash, value), Err(Error::Corrupt { .. })));
        }
    }
}
