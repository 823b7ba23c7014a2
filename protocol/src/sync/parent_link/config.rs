//! The tuning of a child's link to its parent.

use std::time::Duration;

use super::super::reports::ReportsConfig;
use crate::wire::{MAX_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, Role};

/// Tuning of a child's link.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// This node's name, as its certificate states it.
    pub node: String,
    /// Relay or agent.
    pub role: Role,
    /// Identifies this run of the node, new at every start (see
    /// [`Hello::run`](crate::wire::Hello::run)).
    pub run: u64,
    /// Heartbeat interval until the parent's welcome sets it.
    pub heartbeat: Duration,
    /// Idle timeout until the parent's welcome sets it; also bounds the wait for the
    /// welcome itself.
    pub idle_timeout: Duration,
    /// How long the parent may appear ahead of what arrived (its heartbeat names frames
    /// not received) before the child subscribes again.
    pub resubscribe_after: Duration,
    /// The report stream.
    pub reports: ReportsConfig,
    /// This node's replica id when it is one replica of a replicated tier: the link then
    /// opens with a
    /// [`ChildToParent::ReplicaHello`](crate::wire::ChildToParent::ReplicaHello)
    /// (protocol version 3 and up).
    pub replica: Option<String>,
    /// The protocol versions this child speaks, lowest and highest:
    /// [`MIN_PROTOCOL_VERSION`] and [`MAX_PROTOCOL_VERSION`] unless narrowed (tests of
    /// a hierarchy of mixed versions).
    pub versions: (crate::wire::ProtocolVersion, crate::wire::ProtocolVersion),
}

impl LinkConfig {
    /// Defaults for a node of this name and role.
    pub fn new(node: impl Into<String>, role: Role) -> Self {
        LinkConfig {
            node: node.into(),
            role,
            run: 0,
            heartbeat: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(20),
            resubscribe_after: Duration::from_secs(2),
            reports: ReportsConfig::default(),
            replica: None,
            versions: (MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION),
        }
    }
}
