//! What a change means: who made it ([`who`]), which paths count ([`ignore`]), and turning
//! filesystem operations into recorded changes ([`recorder`]).

pub mod format;
pub mod ignore;
pub mod point;
pub mod recorder;
pub mod retention;
pub mod rollback;
pub mod time;
pub mod view;
pub mod who;

pub use recorder::{Recorder, Source};
pub use who::{Attributor, Who};
