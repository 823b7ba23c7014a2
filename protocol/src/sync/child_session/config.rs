//! The tuning of a parent's sessions with its children.

use std::time::Duration;

use crate::wire::{MAX_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, ProtocolVersion};

/// Tuning of a parent's sessions.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The parent's node name, told to children in the welcome.
    pub parent: String,
    /// Identifies the parent's durable state (see
    /// [`Welcome::incarnation`](crate::wire::Welcome::incarnation)).
    pub incarnation: u64,
    /// Labels every cluster below this parent carries (see
    /// [`Welcome::labels`](crate::wire::Welcome::labels)).
    pub labels: crate::model::Labels,
    /// Heartbeat interval when a side is otherwise silent.
    pub heartbeat: Duration,
    /// Silence after which the peer is considered gone.
    pub idle_timeout: Duration,
    /// Most unacknowledged downsync bytes (estimated) in flight to one child.
    pub window_bytes: usize,
    /// Soft limit of one downsync frame; a part closes once it reaches this size.
    pub part_bytes: usize,
    /// The protocol versions this parent speaks, lowest and highest:
    /// [`MIN_PROTOCOL_VERSION`] and [`MAX_PROTOCOL_VERSION`] unless narrowed (tests of
    /// a hierarchy of mixed versions).
    pub versions: (ProtocolVersion, ProtocolVersion),
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            parent: String::new(),
            incarnation: 0,
            labels: crate::model::Labels::new(),
            heartbeat: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(20),
            window_bytes: 4 << 20,
            part_bytes: 256 << 10,
            versions: (MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION),
        }
    }
}
