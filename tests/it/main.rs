//! The integration tests: one binary, so the build links once.

mod common;
mod mount;
mod record;
mod store;
