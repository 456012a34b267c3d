//! The integration tests: one binary, so the build links once.

mod agents;
mod comments;
mod common;
mod full_disk;
mod git;
mod history;
mod hunk;
mod model;
mod mount;
mod names;
mod panic;
mod plan;
mod points;
mod posix;
mod programs;
mod quiet;
mod record;
mod retention;
mod roundtrip;
mod scale;
mod service;
mod store;
mod store_place;
mod trust;
mod turns;
mod ui;
