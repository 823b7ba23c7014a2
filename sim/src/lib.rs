//! Deterministic simulation (turmoil) of the real relay and agent code, scenario files,
//! invariant checkers and the scale benchmark harness.
//!
//! Not built yet (issues 6 and 7). The protocol core has its own in-crate harness today:
//! `protocol/tests/harness/`.

pub mod bench;
