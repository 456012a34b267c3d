//! The integration tests: one binary, so the build links once.

mod common;
mod history;
mod mount;
mod record;
mod service;
mod store;
