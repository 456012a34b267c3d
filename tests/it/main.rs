//! The integration tests: one binary, so the build links once.

mod agents;
mod common;
mod git;
mod history;
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
mod service;
mod store;
mod store_place;
mod trust;
