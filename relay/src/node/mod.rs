//! A node's runtime: the sync core (no I/O) and the tasks that drive it.

pub mod core;
pub mod reports;
pub mod runtime;
