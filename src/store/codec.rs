//! Value encoding: one version byte, then the record in postcard. A value that does not decode is
//! an [`Error::Corrupt`] naming where it was found, never a panic.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::keys;
use crate::error::{Error, Result};

/// The version byte written in front of every record value.
pub const RECORD_VERSION: u8 = 1;

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![RECORD_VERSION];
    // Serializing our own plain records into a Vec cannot fail.
    postcard::to_io(value, &mut out).expect("postcard encodes plain records into a Vec");
    out
}

pub fn decode<T: DeserializeOwned>(cf: &'static str, key: &[u8], value: &[u8]) -> Result<T> {
    let corrupt = |reason: String| Error::Corrupt {
        cf,
        key: keys::hex(key),
        reason,
    };
    match value.split_first() {
        None => Err(corrupt("empty value".into())),
        Some((&RECORD_VERSION, body)) => {
            postcard::from_bytes(body).map_err(|e| corrupt(format!("undecodable record: {e}")))
        }
        Some((version, _)) => Err(corrupt(format!("unknown record version {version}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{Change, ChangeKind, FileKind, FileState, Hash};

    fn sample() -> Change {
        Change {
            id: 7,
            time_ns: 1_700_000_000_000_000_000,
            kind: ChangeKind::Rename,
            path: b"new \xff name".to_vec(),
            from: Some(b"old".to_vec()),
            before: None,
            after: Some(FileState {
                kind: FileKind::File,
                size: 12,
                mode: 0o644,
                hash: Some(Hash::of(b"hello world\n")),
            }),
            session: "s1".into(),
            agent: "claude".into(),
            pid: 1234,
            process: "sed".into(),
        }
    }

    #[test]
    fn records_round_trip() {
        let change = sample();
        let bytes = encode(&change);
        assert_eq!(bytes[0], RECORD_VERSION);
        let back: Change = decode("changes", b"k", &bytes).unwrap();
        assert_eq!(back, change);
    }

    #[test]
    fn bad_values_are_errors_that_name_the_key() {
        let mut bytes = encode(&sample());
        bytes.truncate(bytes.len() / 2);
        let err = decode::<Change>("changes", &[0, 1], &bytes).unwrap_err();
        assert!(err.to_string().contains("changes"), "{err}");
        assert!(err.to_string().contains("0001"), "{err}");
        assert!(decode::<Change>("changes", b"k", &[]).is_err());
        assert!(decode::<Change>("changes", b"k", &[99, 1, 2]).is_err());
    }
}
