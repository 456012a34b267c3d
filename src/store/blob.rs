//! Content blobs: zstd-compressed, addressed by the BLAKE3 hash of the uncompressed bytes.
//!
//! Content up to [`CHUNK`] bytes is one value. Larger content is split into chunks, each stored
//! as a blob of its own (so identical chunks are stored once too), plus a manifest under the hash
//! of the whole. Neither writing nor reading ever holds more than one chunk in memory.
//!
//! Value layout: `BLOB_VERSION`, then a tag: `INLINE` followed by a zstd frame, or `MANIFEST`
//! followed by a postcard [`Manifest`].

use serde::{Deserialize, Serialize};

use super::keys;
use super::record::Hash;
use crate::error::{Error, Result};

pub const CHUNK: usize = 1 << 20;
pub const BLOB_VERSION: u8 = 1;
const INLINE: u8 = 0;
const MANIFEST: u8 = 1;
/// zstd level: fast enough to run while an editor waits on `open`, still ~3x on source code.
const LEVEL: i32 = 3;

#[derive(Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub size: u64,
    pub chunks: Vec<(Hash, u32)>,
}

pub enum Blob {
    Inline(Vec<u8>),
    Chunked(Manifest),
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

pub fn encode_manifest(manifest: &Manifest) -> Vec<u8> {
    let mut out = vec![BLOB_VERSION, MANIFEST];
    postcard::to_io(manifest, &mut out).expect("postcard encodes into a Vec");
    out
}

/// Decode a blob value; `hash` is its key, used to check inline content and to name it in errors.
pub fn decode(hash: &Hash, value: &[u8]) -> Result<Blob> {
    let corrupt = |reason: String| Error::Corrupt {
        cf: "blobs",
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
pub fn manifest_of(hash: &Hash, value: &[u8]) -> Result<Option<Manifest>> {
    match value {
        [BLOB_VERSION, MANIFEST, ..] => match decode(hash, value)? {
            Blob::Chunked(m) => Ok(Some(m)),
            Blob::Inline(_) => unreachable!("tagged as a manifest"),
        },
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
