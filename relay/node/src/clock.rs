//! The node's clocks: tokio's monotonic clock (which turmoil simulates) turned into the
//! protocol's [`Instant`], and a wall clock for report stamps derived from it, so that
//! a simulation that fixes the wall origin stays deterministic.

use strata_protocol::time::{Instant, UnixMillis};

/// Converts tokio's clock into protocol instants relative to the node's start.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: tokio::time::Instant,
    wall_origin: UnixMillis,
}

impl Clock {
    /// A clock whose origin is now, with the wall clock read once from the system.
    #[allow(clippy::disallowed_methods)] // the one read of the system's wall clock
    pub fn start() -> Self {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Self::start_at(UnixMillis(ms))
    }

    /// A clock whose origin is now and whose wall time starts at `wall_origin`.
    pub fn start_at(wall_origin: UnixMillis) -> Self {
        Clock {
            origin: tokio::time::Instant::now(),
            wall_origin,
        }
    }

    /// Now, as the protocol sees it.
    pub fn now(&self) -> Instant {
        Instant::from_origin(tokio::time::Instant::now() - self.origin)
    }

    /// The tokio instant of a protocol instant, for sleeping until it.
    pub fn deadline(&self, at: Instant) -> tokio::time::Instant {
        self.origin + at.since_origin()
    }

    /// The wall-clock time at the clock's origin (protocol instant zero).
    pub fn wall_origin(&self) -> UnixMillis {
        self.wall_origin
    }

    /// Wall-clock time, for stamps that cross nodes.
    pub fn wall(&self) -> UnixMillis {
        let elapsed = u64::try_from(self.now().since_origin().as_millis()).unwrap_or(u64::MAX);
        UnixMillis(self.wall_origin.0.saturating_add(elapsed))
    }
}
