//! The history store: one RocksDB database per workspace. It knows records, blobs and keys and
//! nothing about files; `history` gives the records their meaning.
//!
//! Column families (keys in [`keys`], values in [`format`] and [`blobs`]):
//!
//! | cf              | key                   | value                                    |
//! |-----------------|-----------------------|------------------------------------------|
//! | `blobs`         | BLAKE3 hash (32)      | zstd content, delta, or chunk manifest   |
//! | `changes`       | id (u64 BE)           | [`ChangeRecord`]                         |
//! | `by_path`       | path NUL id           | empty (path, rename source, hard links)  |
//! | `by_session`    | session NUL id        | empty                                    |
//! | `by_agent`      | agent NUL id          | empty                                    |
//! | `by_time`       | time_ns id            | empty                                    |
//! | `sessions`      | name                  | [`SessionRecord`]                        |
//! | `checkpoints`   | name                  | [`CheckpointRecord`]                     |
//! | `turns`         | session NUL number    | [`TurnRecord`]                           |
//! | `meta`          | `format`, `workspace`, `manifest`, `rollbacks` | raw             |
//! | `meta`          | `counts`              | [`Counts`]: changes, blobs, stored bytes |
//! | `meta`          | `comment` NUL id (u64 BE) | [`CommentRecord`]: a reviewer's comment (ids: `meta` `comments`) |
//! | `open_episodes` | path                  | [`EpisodeRecord`]: a write in progress   |
//! | `manifest`      | path                  | [`SeenRecord`]: the tree as the mount last left it |
//!
//! Invariants: a change, its index entries and its session's summary are written in one
//! `WriteBatch`; a blob a change refers to is written before (or with) the change. After a
//! failed write the store refuses writes until a write succeeds again ([`Store::recover`]);
//! writes go to the WAL without fsync, so they survive the death of the process, and
//! [`Store::sync`] makes them survive the machine's.
//!
//! Lock order (see docs/design.md): `gc_lock` before `writer` before `pins` before `counts`; `db` (a read lock for
//! every operation, the write lock only to reopen) is taken last and never held while
//! waiting for another lock.

pub mod blobs;
mod comments;
mod counts;
mod error;
pub mod format;
mod gc;
pub mod keys;
mod open;
mod pins;
mod query;
mod recent;
mod repack;
mod sessions;
mod similar;
mod write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, RwLock, RwLockReadGuard};

use rocksdb::{ColumnFamily, DB};

pub use blobs::{CHUNK, Hash, NewContent};
pub use counts::Counts;
pub use error::{Error, Result};
pub use format::{
    ChangeRecord, CheckpointRecord, CommentRecord, EpisodeRecord, FsyncedRecord, KnownFileRecord,
    KnownRecord, ReservedRecord, SeenRecord, SessionRecord, StateRecord, ToolRecord, TurnRecord,
};
/// The `meta` key of the files whose content the last mount knew to be stored
/// ([`KnownRecord`]); a gc that deletes blobs deletes it in the same batch.
pub const KNOWN_KEY: &[u8] = b"known";

pub use gc::{Cut, GcPlan, GcReport, Horizon, Unreadable, disk_usage};
pub use open::{check_outside, private_files, resolve};
pub use pins::{PinScope, Pins};
pub use query::{Order, Query};
pub use repack::REPACK_MAX_BLOBS;
pub use write::{Extra, Retraction, Room};

/// The store format this build writes; a store with a newer one is refused, an older one is
/// read and raised to this one when opened for writing (so an older rewind then refuses it
/// instead of misreading records it does not know).
///
/// 1. The first releases: version 1 records, fixed 1 MiB chunks.
/// 2. Version 2 and 3 change and open-episode records (hard links, turns and tool calls,
///    owners), and the `turns` family.
/// 3. Blobs stored as deltas on an earlier version (`blobs` values tagged 2, see
///    [`blobs`]): a rewind of format 2 could not read them.
/// 4. The counts `status` shows, kept in `meta` `counts` by every write (see `counts.rs`): a
///    rewind of format 3 would write without keeping them.
pub const FORMAT_VERSION: u8 = 4;

const CF_BLOBS: &str = "blobs";
const CF_CHANGES: &str = "changes";
const CF_BY_PATH: &str = "by_path";
const CF_BY_SESSION: &str = "by_session";
const CF_BY_AGENT: &str = "by_agent";
const CF_BY_TIME: &str = "by_time";
const CF_SESSIONS: &str = "sessions";
const CF_CHECKPOINTS: &str = "checkpoints";
const CF_TURNS: &str = "turns";
const CF_META: &str = "meta";
const CF_EPISODES: &str = "open_episodes";
const CF_MANIFEST: &str = "manifest";
/// Every column family, for tools (and tests) that open the database directly.
pub const ALL_CFS: [&str; 12] = [
    CF_BLOBS,
    CF_CHANGES,
    CF_BY_PATH,
    CF_BY_SESSION,
    CF_BY_AGENT,
    CF_BY_TIME,
    CF_SESSIONS,
    CF_CHECKPOINTS,
    CF_TURNS,
    CF_META,
    CF_EPISODES,
    CF_MANIFEST,
];

/// Counts for `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub changes: u64,
    pub last_id: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
}

pub struct Store {
    /// `None` only while [`Store::recover`] reopens the database.
    db: RwLock<Option<DB>>,
    dir: PathBuf,
    read_only: bool,
    /// Why writes are refused, after a failed one (and whether the disk was full).
    unwritable: Mutex<Option<(String, bool)>>,
    /// Held through a [`recover`](Store::recover): two at once (the recovery thread and a
    /// sync) each reopened the database, the second closing the one the first had just opened.
    recovering: Mutex<()>,
    /// When [`Store::check_room`] last asked the disk, and what it found.
    room_seen: Mutex<Option<(std::time::Instant, Room)>>,
    /// Why writes stopped for good: a panic in the daemon ([`Store::halt`]). Never cleared.
    halted: std::sync::OnceLock<String>,
    /// The last id handed out (written, or set aside for a held-back create). Held from
    /// allocating an id until its batch is written, so ids land in order.
    writer: Mutex<u64>,
    /// A reader's own scratch directory, removed on drop.
    secondary: Option<PathBuf>,
    /// The workspace the store records, which it must stay outside of (the daemon's store).
    workspace: Option<PathBuf>,
    /// Session summaries as last written, so recording a change does not read them back.
    sessions_cache: Mutex<HashMap<String, SessionRecord>>,
    /// Blobs stored or reused for records not written yet (see `pins.rs`).
    pins: std::sync::Arc<pins::PinTable>,
    /// The counts as the last write left them (see `counts.rs`).
    counts: Mutex<Counts>,
    /// How many gcs have deleted blobs: content known to be stored before the last one still is.
    sweeps: AtomicU64,
    /// How much content a store stopped for lack of room still wanted to write
    /// ([`Store::check_room_for`]): writes are taken again once the disk has that much room
    /// above the reserve. 0 when no such store stopped.
    wanted: AtomicU64,
    /// The newest id a checkpoint named: an id set aside at or below it is never handed out
    /// again, even if it goes unused.
    pinned: AtomicU64,
    /// Held by a gc from start to end, repack included: a repack takes bases that only a gc
    /// removes (`repack.rs`). Taken before `writer`.
    gc_lock: Mutex<()>,
    /// While a gc plans without the writer lock: the changes recorded and taken back since it
    /// began (`gc.rs`). Changed only with `writer` held.
    gc_watch: Mutex<Option<gc::Watch>>,
    /// The last base read that is a zstd dictionary (a repack's, which many heads are stored
    /// on: `repack.rs`), decoded and checked, so that reading them does not decode it each
    /// time. A leaf lock.
    dictionary: Mutex<Option<(Hash, std::sync::Arc<Vec<u8>>)>>,
    /// Recently recorded contents by file name and extension: where a new path's first
    /// version looks for a delta base (`similar.rs`). A leaf lock.
    similar: Mutex<similar::Similar>,
    /// The contents of the versions recorded last: the base of the next version of the same
    /// file, not read back (`recent.rs`). A leaf lock.
    recent: Mutex<recent::Recent>,
}

/// A read lock on the open database.
struct Db<'a>(RwLockReadGuard<'a, Option<DB>>);

impl std::ops::Deref for Db<'_> {
    type Target = DB;

    fn deref(&self) -> &DB {
        // `db()` checked that it is open, and the read lock keeps it so.
        self.0.as_ref().expect("checked open")
    }
}

impl Db<'_> {
    fn cf(&self, name: &str) -> &ColumnFamily {
        // Every family in ALL_CFS is created at open, so a missing one is a bug in this module.
        self.cf_handle(name).expect("column family created at open")
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(dir) = &self.secondary {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Store {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn db(&self) -> Result<Db<'_>> {
        let guard = self.db.read().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            return Err(Error::Unwritable {
                reason: "the store is being reopened after a failed write".into(),
                no_space: false,
            });
        }
        Ok(Db(guard))
    }

    fn db_error(context: &'static str) -> impl Fn(rocksdb::Error) -> Error {
        move |source| Error::Db { context, source }
    }
}

/// Names become key prefixes ended by NUL, so no name may contain one; validating names as
/// people see them is `history`'s business.
pub fn check_key_name(what: &'static str, name: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains(&0) {
        return Err(Error::BadName {
            what,
            name: String::from_utf8_lossy(name).into_owned(),
        });
    }
    Ok(())
}

/// Deterministic incompressible bytes (xorshift), for tests where compression must not hide
/// what is stored.
#[cfg(test)]
pub(crate) fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}
