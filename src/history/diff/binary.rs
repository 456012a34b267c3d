//! `GIT binary patch`: a binary file's change as `git diff --binary` writes it, so that
//! `git apply` (and `git apply -R`) can redo (and undo) it.
//!
//! The section holds the new content, then the old, each zlib-deflated and written in git's
//! base 85, 52 bytes a line. git may write a side as a `delta` against the other side when that
//! is smaller; this writes each whole (`literal`), which git applies the same way, so the bytes
//! of the encoded lines can differ from git's own output while what they apply is the same.

use std::io::Write;

use flate2::Compression;
use flate2::write::ZlibEncoder;

/// git's base 85 digits (`base85.c`).
const DIGITS: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// Bytes of deflated data on one line.
const LINE: usize = 52;

/// The `GIT binary patch` section from `old` to `new`, with the empty line that ends it.
pub(super) fn patch(out: &mut Vec<u8>, old: &[u8], new: &[u8]) {
    out.extend_from_slice(b"GIT binary patch\n");
    literal(out, new);
    literal(out, old);
}

/// `literal LEN`, then `content` deflated in lines of base 85, then an empty line.
fn literal(out: &mut Vec<u8>, content: &[u8]) {
    out.extend_from_slice(format!("literal {}\n", content.len()).as_bytes());
    for line in deflate(content).chunks(LINE) {
        // The line's length in bytes: A-Z for 1-26, a-z for 27-52.
        let n = line.len() as u8;
        out.push(if n <= 26 { b'A' + n - 1 } else { b'a' + n - 27 });
        encode_85(out, line);
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// zlib at git's default level (`core.compression` unset: fastest).
fn deflate(content: &[u8]) -> Vec<u8> {
    let mut z = ZlibEncoder::new(Vec::new(), Compression::fast());
    // Writing into memory cannot fail.
    z.write_all(content).expect("deflate into memory");
    z.finish().expect("deflate into memory")
}

/// Each 4 bytes (big-endian; the last group padded with zeros) as 5 digits, most significant
/// first, as git's `encode_85` does.
fn encode_85(out: &mut Vec<u8>, data: &[u8]) {
    for group in data.chunks(4) {
        let mut word = [0u8; 4];
        word[..group.len()].copy_from_slice(group);
        let mut acc = u32::from_be_bytes(word);
        let mut digits = [0u8; 5];
        for d in digits.iter_mut().rev() {
            *d = DIGITS[(acc % 85) as usize];
            acc /= 85;
        }
        out.extend_from_slice(&digits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// git's `literal 0` (seen in `git diff --binary` of a file made empty): the same zlib
    /// stream at the same level, so the same line.
    #[test]
    fn an_empty_side_is_gits_literal_0() {
        let mut out = Vec::new();
        literal(&mut out, b"");
        assert_eq!(out, b"literal 0\nHcmV?d00001\n\n");
    }

    /// Five digits a group, the last group padded: 9 bytes are 3 groups.
    #[test]
    fn base_85_pads_the_last_group() {
        let mut out = Vec::new();
        encode_85(&mut out, &[0, 0, 0, 0]);
        assert_eq!(out, b"00000");
        out.clear();
        encode_85(&mut out, &[0xff; 4]);
        // 2^32 - 1 in base 85: 82 23 54 12 0.
        assert_eq!(out, b"|NsC0");
        out.clear();
        encode_85(&mut out, &[1; 9]);
        assert_eq!(out.len(), 15);
    }
}
