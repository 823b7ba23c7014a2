//! The simulation's wall clock: a fixed origin plus simulated time, so that stamps
//! (and certificates' validity) are reproducible.

use strata_protocol::time::UnixMillis;

/// The wall clock's origin (2026-01-01), fixed so that stamps are reproducible.
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// The wall clock: the fixed origin plus simulated time.
pub fn wall_now() -> UnixMillis {
    let elapsed = turmoil::sim_elapsed().unwrap_or_default();
    UnixMillis(EPOCH_MS + u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
}
