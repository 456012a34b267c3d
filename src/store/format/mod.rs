//! The bytes the store persists, as explicit versioned records.
//!
//! Every value starts with one version byte; the rest is the record in postcard. Records use
//! plain numbers for kinds (never a Rust enum's position), so the domain types in `history` can
//! change shape without changing what an old store means. [`v1`] is the layout written by the
//! first releases; [`v2`] adds to a change the other names of a hard-linked file, the agent's
//! turn and its tool call, and the same to an open-episode marker; [`v3`] adds the owner and
//! group of each state and the uid that made a change or began an episode; a version 3 change may
//! end with a trailer of the hard-link groups it took a name from. Values are written
//! in the newest version and read in any. The golden-bytes tests below pin every record kind, so the
//! format can only change on purpose.

pub mod comment;
pub mod v1;
pub mod v2;
pub mod v3;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Error;
use super::keys;

pub use comment::CommentRecord;
pub use v1::{
    CheckpointRecord, KnownFileRecord, KnownRecord, ManifestRecord, SeenRecord, SessionRecord,
};
pub use v2::{ToolRecord, TurnRecord};
pub use v3::{ChangeRecord, EpisodeRecord, FsyncedRecord, ReservedRecord, StateRecord};

/// The version byte of values written now, per record family.
pub const CHANGE_VERSION: u8 = 3;
pub const EPISODE_VERSION: u8 = 3;

/// File kinds as stored.
pub mod kind {
    pub const FILE: u8 = 0;
    pub const DIR: u8 = 1;
    pub const SYMLINK: u8 = 2;
    /// A special file of a type not recorded (stores of earlier versions): never restored.
    pub const SPECIAL: u8 = 3;
    pub const FIFO: u8 = 4;
    pub const SOCKET: u8 = 5;
    /// A device's state keeps its number (`st_rdev`) in `size` (a device node's size is 0).
    pub const CHAR_DEVICE: u8 = 6;
    pub const BLOCK_DEVICE: u8 = 7;
}

/// Change kinds as stored.
pub mod change_kind {
    pub const CREATE: u8 = 0;
    pub const MODIFY: u8 = 1;
    pub const DELETE: u8 = 2;
    pub const RENAME: u8 = 3;
    pub const MKDIR: u8 = 4;
    pub const RMDIR: u8 = 5;
    pub const SYMLINK: u8 = 6;
    pub const LINK: u8 = 7;
    pub const CHMOD: u8 = 8;
    pub const RESTORE: u8 = 9;
}

/// `version, postcard(record)`.
pub fn encode<T: Serialize>(version: u8, record: &T) -> Vec<u8> {
    let mut out = vec![version];
    // Plain records (numbers, strings, byte vectors) always serialize into a Vec.
    postcard::to_io(record, &mut out).expect("postcard encodes plain records into a Vec");
    out
}

/// Split a value into its version byte and body, or say why it is not a value.
pub fn split<'a>(cf: &'static str, key: &[u8], value: &'a [u8]) -> Result<(u8, &'a [u8]), Error> {
    value
        .split_first()
        .map(|(v, body)| (*v, body))
        .ok_or_else(|| corrupt(cf, key, "empty value".into()))
}

/// Decode a body known to be a `T`.
pub fn body<T: DeserializeOwned>(cf: &'static str, key: &[u8], body: &[u8]) -> Result<T, Error> {
    postcard::from_bytes(body).map_err(|e| corrupt(cf, key, format!("undecodable record: {e}")))
}

/// A record family that has only ever had one version.
pub fn decode_v1<T: DeserializeOwned>(
    cf: &'static str,
    key: &[u8],
    value: &[u8],
) -> Result<T, Error> {
    match split(cf, key, value)? {
        (1, rest) => body(cf, key, rest),
        (v, _) => Err(corrupt(cf, key, format!("unknown record version {v}"))),
    }
}

pub fn corrupt(cf: &'static str, key: &[u8], reason: String) -> Error {
    Error::Corrupt {
        cf,
        key: keys::hex(key),
        reason,
    }
}

/// The trailer tag of a change's hard-link groups.
const GROUPS: u8 = 1;

impl ChangeRecord {
    /// Version 3, then (when the change took a name from a hard-linked file) a trailer: tag 1
    /// and the groups in postcard. As with a turn's conversation, readers that predate it stop
    /// at the end of the record and never see it (a rollback by them makes the names separate
    /// files again, as it always did), so the store's format version stays as it was.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = encode(CHANGE_VERSION, self);
        if !self.groups.is_empty() {
            out.push(GROUPS);
            postcard::to_io(&self.groups, &mut out)
                .expect("postcard encodes plain records into a Vec");
        }
        out
    }

    /// A change as stored in any version.
    pub fn decode(cf: &'static str, key: &[u8], value: &[u8]) -> Result<ChangeRecord, Error> {
        match split(cf, key, value)? {
            (1, rest) => {
                let v2: v2::ChangeRecord = body::<v1::ChangeRecord>(cf, key, rest)?.into();
                Ok(v2.into())
            }
            (2, rest) => Ok(body::<v2::ChangeRecord>(cf, key, rest)?.into()),
            (3, rest) => {
                let (mut change, tail): (ChangeRecord, &[u8]) = postcard::take_from_bytes(rest)
                    .map_err(|e| corrupt(cf, key, format!("undecodable record: {e}")))?;
                // A trailer this version does not know is left alone.
                if let [GROUPS, groups @ ..] = tail {
                    change.groups = body(cf, key, groups)?;
                }
                Ok(change)
            }
            (v, _) => Err(corrupt(cf, key, format!("unknown record version {v}"))),
        }
    }
}

/// The trailer tag of an open-episode marker's fsynced file.
const FSYNCED: u8 = 1;
/// The trailer tag of the id set aside for a held-back create.
const RESERVED: u8 = 2;

impl EpisodeRecord {
    /// Version 3, then trailers, each a tag and a record in postcard: (for a new file fsynced
    /// before its create was recorded) tag 1 and the file, then (for a held-back create) tag 2
    /// and the id set aside for it with its time. Readers that predate them stop at the end of
    /// the record (or of the first trailer, or at a tag they do not know) and take the marker
    /// as one without them: a held-back create recorded with a new id at the next mount, a
    /// new file's create recorded without checking that the file is the one fsynced. So the
    /// store's format version stays as it was.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = encode(EPISODE_VERSION, self);
        if let Some(f) = &self.fsynced {
            out.push(FSYNCED);
            postcard::to_io(f, &mut out).expect("postcard encodes plain records into a Vec");
        }
        if let Some(r) = &self.reserved {
            out.push(RESERVED);
            postcard::to_io(r, &mut out).expect("postcard encodes plain records into a Vec");
        }
        out
    }

    pub fn decode(cf: &'static str, key: &[u8], value: &[u8]) -> Result<EpisodeRecord, Error> {
        match split(cf, key, value)? {
            (1, rest) => {
                let v2: v2::EpisodeRecord = body::<v1::EpisodeRecord>(cf, key, rest)?.into();
                Ok(v2.into())
            }
            (2, rest) => Ok(body::<v2::EpisodeRecord>(cf, key, rest)?.into()),
            (3, rest) => {
                let (mut episode, mut tail): (EpisodeRecord, &[u8]) = take(cf, key, rest)?;
                // A trailer this version does not know is left alone, with what follows it.
                loop {
                    tail = match tail {
                        [FSYNCED, rest @ ..] => {
                            let (f, rest) = take(cf, key, rest)?;
                            episode.fsynced = Some(f);
                            rest
                        }
                        [RESERVED, rest @ ..] => {
                            let (r, rest) = take(cf, key, rest)?;
                            episode.reserved = Some(r);
                            rest
                        }
                        _ => break,
                    };
                }
                Ok(episode)
            }
            (v, _) => Err(corrupt(cf, key, format!("unknown record version {v}"))),
        }
    }
}

/// Decode a `T` at the start of `bytes`, and what follows it.
fn take<'a, T: DeserializeOwned>(
    cf: &'static str,
    key: &[u8],
    bytes: &'a [u8],
) -> Result<(T, &'a [u8]), Error> {
    postcard::take_from_bytes(bytes)
        .map_err(|e| corrupt(cf, key, format!("undecodable record: {e}")))
}

macro_rules! v1_only {
    ($($t:ty),*) => {$(
        impl $t {
            pub fn encode(&self) -> Vec<u8> {
                encode(1, self)
            }

            pub fn decode(cf: &'static str, key: &[u8], value: &[u8]) -> Result<$t, Error> {
                decode_v1(cf, key, value)
            }
        }
    )*};
}

v1_only!(
    SessionRecord,
    CheckpointRecord,
    SeenRecord,
    CommentRecord,
    KnownRecord
);

/// The trailer tag of a turn's conversation hash.
const CONVERSATION: u8 = 1;

impl TurnRecord {
    /// Version 1, then (when the turn has a conversation) a trailer: tag 1 and the 32-byte
    /// hash. postcard stops at the end of the record and ignores what follows, so the trailer
    /// is invisible to readers that predate it, and a record without one is as it always was.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = encode(1, self);
        if let Some(h) = &self.conversation {
            out.push(CONVERSATION);
            out.extend_from_slice(h);
        }
        out
    }

    pub fn decode(cf: &'static str, key: &[u8], value: &[u8]) -> Result<TurnRecord, Error> {
        match split(cf, key, value)? {
            (1, rest) => {
                let (mut turn, tail): (TurnRecord, &[u8]) = postcard::take_from_bytes(rest)
                    .map_err(|e| corrupt(cf, key, format!("undecodable record: {e}")))?;
                // A trailer this version does not know is left alone.
                if let [CONVERSATION, hash @ ..] = tail
                    && let Some(hash) = hash.get(..32)
                {
                    turn.conversation = hash.try_into().ok();
                }
                Ok(turn)
            }
            (v, _) => Err(corrupt(cf, key, format!("unknown record version {v}"))),
        }
    }
}

#[cfg(test)]
mod tests;
