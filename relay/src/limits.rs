//! A relay's limits on what it takes in, and their defaults: below both the node
//! runtime that enforces them and the configuration that sets them, so that neither
//! imports the other for a number.

use std::time::Duration;

/// How many children a relay takes in at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// TLS handshakes in progress at once, at most (0: no limit).
    pub handshakes: usize,
    /// Connections waiting for a handshake slot, at most; beyond that a connection is
    /// refused at once (QUIC `CONNECTION_REFUSED`, or the TCP connection closed).
    pub queue: usize,
    /// Sessions catching up at once (0: no limit); a hello beyond them is refused with
    /// a time to come back.
    pub setups: usize,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            handshakes: DEFAULT_HANDSHAKES,
            queue: DEFAULT_HANDSHAKE_QUEUE,
            setups: DEFAULT_SETUPS,
        }
    }
}

/// TLS handshakes a relay runs at once by default. A slot is held for the whole
/// handshake, the child's round trips included, not only for the relay's cryptography:
/// at 32, a storm of 10,000 agents on two loaded cores had half of them refused after
/// waiting 3 s for a slot (`accept.rs`) and coming back with backoff (a
/// 42 s storm with a 20 s tail); at 128, none refused and 33 s (see BENCHMARKS-HISTORY.md).
pub const DEFAULT_HANDSHAKES: usize = 128;
/// Connections that may wait for a handshake slot by default.
pub const DEFAULT_HANDSHAKE_QUEUE: usize = 256;

/// Sessions a relay sets up at once by default.
pub const DEFAULT_SETUPS: usize = 64;

/// How long at most a relay holds new children after a start or a reconnect to its
/// parent while it catches up with it (`admission_hold_ms`).
pub const DEFAULT_ADMISSION_HOLD: Duration = Duration::from_secs(5);

/// How many tunnels a relay carries at once on each link to a child, unless configured.
pub const DEFAULT_TUNNELS_PER_LINK: usize = 32;
