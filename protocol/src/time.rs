//! Time as the protocol sees it: a monotonic instant handed in by the driver, and a
//! wall-clock stamp for reports that cross nodes.
//!
//! The protocol never reads a clock. Drivers convert their clock (tokio's, which turmoil
//! simulates) into [`Instant`] relative to an origin of their choosing.

use std::ops::{Add, Sub};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point on the driver's monotonic clock, as a duration since the driver's origin.
///
/// Only differences between two `Instant`s from the same driver mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(Duration);

impl Instant {
    /// The driver's origin.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// The instant `since_origin` after the driver's origin.
    pub const fn from_origin(since_origin: Duration) -> Self {
        Instant(since_origin)
    }

    /// How long after the driver's origin this instant lies.
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later than `self`.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(rhs))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

/// Wall-clock time in milliseconds since the Unix epoch, as stamped by the node that
/// produced a report. Used where times from different nodes meet (report age in
/// summaries); never used to order protocol events.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct UnixMillis(pub u64);
