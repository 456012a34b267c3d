//! rewind: a FUSE filesystem mounted over a project directory that records every change made
//! through it, so that what agents (and people) did can be read, diffed and rolled back.
//!
//! Layers, each depending only on the ones below it:
//!
//! - [`cli`]: one module per subcommand; parses arguments into validated configs.
//! - [`fs`]: the FUSE filesystem. A passthrough over a directory fd opened before mounting; data
//!   I/O goes through the kernel (FUSE passthrough), so the daemon sees only the edges of a write
//!   episode (open, truncate, rename, unlink, release), which is exactly where history is taken.
//! - [`history`]: what a change means: attribution, recording write episodes, points in time,
//!   the tree at a past point, rollback.
//! - [`store`]: RocksDB. Content blobs (zstd, BLAKE3-addressed), change records and their
//!   indexes, sessions, checkpoints.
//!
//! `docs/design.md` has the change model, the key schema, the inode model, the lock order and
//! the crash semantics.

pub mod error;
pub mod store;

pub use error::{Error, Result};
pub mod cli;
pub mod fs;
pub mod history;
pub mod logging;
