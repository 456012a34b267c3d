//! The integration tests: one binary, so the build links once.

mod agents;
mod common;
mod git;
mod history;
mod model;
mod mount;
mod plan;
mod posix;
mod programs;
mod record;
mod service;
mod store;
mod trust;
