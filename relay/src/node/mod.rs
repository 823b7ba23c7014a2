//! A node's runtime: the sync core (no I/O) and the tasks that drive it.

pub mod clock;
pub mod core;
pub mod follow;
pub mod reports;
pub mod runtime;
pub mod upstream;
