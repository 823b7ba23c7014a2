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

impl UnixMillis {
    /// The time as RFC 3339 in UTC, to the second (`2026-11-24T00:00:00Z`), as
    /// Kubernetes writes its timestamps.
    pub fn rfc3339(self) -> String {
        let secs = self.0 / 1000;
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
        let (year, month, d) = civil_from_days(days.cast_signed());
        format!("{year:04}-{month:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
    }
}

/// Days since 1970-01-01 (negative before) to the civil date (year, month, day), in the
/// proleptic Gregorian calendar (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod rfc3339_tests {
    use super::UnixMillis;

    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(UnixMillis(0).rfc3339(), "1970-01-01T00:00:00Z");
        assert_eq!(
            UnixMillis(1_795_478_400_000).rfc3339(),
            "2026-11-24T00:00:00Z"
        );
        assert_eq!(
            UnixMillis(951_782_400_000 + 3_723_000).rfc3339(),
            "2000-02-29T01:02:03Z"
        );
    }
}
