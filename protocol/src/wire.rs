//! Wire messages, named by direction: [`ChildToParent`] and [`ParentToChild`].
//!
//! Both enums are `#[non_exhaustive]`: a newer peer may add variants, gated by the
//! protocol version negotiated in the handshake ([`Hello`] / [`Welcome`]). Framing and
//! encoding live in [`crate::codec`]; nothing here knows about bytes.
//!
//! Every message belongs to a [`StreamClass`], so that drivers can carry heartbeats on a
//! stream that never waits behind bulk downsync data.

use serde::{Deserialize, Serialize};

use crate::model::{Cluster, Object, ObjectKey, Revision, Status};
use crate::summary::Summary;

/// A protocol version number. Peers negotiate the highest version both support.
pub type ProtocolVersion = u16;

/// The protocol version this crate speaks natively.
pub const PROTOCOL_VERSION: ProtocolVersion = 1;

/// The oldest protocol version this crate still speaks.
pub const MIN_PROTOCOL_VERSION: ProtocolVersion = 1;

/// Which stream of a connection a message travels on. Drivers open one stream per class;
/// messages of one class stay in order, classes do not wait for each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StreamClass {
    /// Handshake, heartbeats, acks, subscriptions: small and urgent.
    Control,
    /// Downsync batches: large, flow-controlled.
    Bulk,
    /// Reports flowing inward: statuses, summaries, inventory.
    Reports,
}

/// What kind of node a child is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// A relay: has children of its own and reports summaries.
    Relay,
    /// An agent on a leaf cluster: reports per-object status for its cluster.
    Agent,
}

/// The first message a child sends on a new connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Oldest protocol version the child speaks.
    pub min_version: ProtocolVersion,
    /// Newest protocol version the child speaks.
    pub max_version: ProtocolVersion,
    /// The child's node name; must match its certificate.
    pub node: String,
    /// Whether the child is a relay or an agent.
    pub role: Role,
}

/// The parent's answer to an acceptable [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The version both sides now speak.
    pub version: ProtocolVersion,
    /// The parent's node name.
    pub parent: String,
    /// How often either side sends a heartbeat when otherwise silent, in milliseconds.
    pub heartbeat_ms: u64,
    /// Silence after which either side considers the other gone, in milliseconds.
    pub idle_timeout_ms: u64,
}

/// Why a session is refused or closed. Sent in [`ParentToChild::Refuse`] and in
/// [`ChildToParent::Goodbye`] / [`ParentToChild::Goodbye`], and logged on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// No protocol version in common.
    UnsupportedVersion,
    /// The node is not one of this parent's children.
    UnknownChild,
    /// The child reported something outside its own subtree.
    OutsideSubtree,
    /// A frame could not be decoded.
    Malformed,
    /// A frame exceeded the maximum frame size.
    Oversized,
    /// A message arrived that the session's state does not allow.
    ProtocolViolation,
    /// The peer stopped reading or acking; its queue overflowed.
    TooSlow,
    /// A newer connection of the same child took over this session.
    Replaced,
    /// The peer is shutting down.
    ShuttingDown,
    /// The parent is overloaded; retry later.
    Overloaded,
    /// The peer was silent for longer than the idle timeout.
    IdleTimeout,
}

/// One change in a downsync batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// Create or replace the object with this version.
    Upsert(Object),
    /// The object is gone from the receiver's view (deleted at the root, or no longer
    /// routed to the receiver's subtree).
    Delete(ObjectKey),
}

impl Change {
    /// The key of the object this change is about.
    pub fn key(&self) -> &ObjectKey {
        match self {
            Change::Upsert(o) => o.key(),
            Change::Delete(k) => k,
        }
    }
}

/// A part of the delta that takes a child from revision `from` to revision `to`.
///
/// A delta may be split over several parts with consecutive `seq`; the child applies
/// each part as it arrives and moves its cursor to `to` only on the part with `last`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// The subscription this part answers.
    pub epoch: u32,
    /// Position of this frame in the subscription's stream, from 0.
    pub seq: u64,
    /// The child's cursor this delta starts from.
    pub from: Revision,
    /// The cursor the child reaches once the last part is applied.
    pub to: Revision,
    /// Whether this is the last part of the delta.
    pub last: bool,
    /// Upserts and deletes, at most one per key across all parts.
    pub changes: Vec<Change>,
}

/// A part of a snapshot: the child's whole view at revision `at`. Objects the child holds
/// that no part of the snapshot names are deleted when the last part arrives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The subscription this part answers.
    pub epoch: u32,
    /// Position of this frame in the subscription's stream, from 0.
    pub seq: u64,
    /// The revision the snapshot describes.
    pub at: Revision,
    /// Whether this is the last part.
    pub last: bool,
    /// Live objects of the child's view.
    pub objects: Vec<Object>,
}

/// What a report is about. Reports with equal keys supersede each other.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ReportKey {
    /// The status of one object on one cluster.
    Status {
        /// The cluster.
        cluster: String,
        /// The object.
        object: ObjectKey,
    },
    /// The summary of one object under one placement, for the reporter's subtree.
    Summary {
        /// The placement's name (in the object's space).
        placement: String,
        /// The object.
        object: ObjectKey,
    },
    /// A cluster's inventory record.
    Cluster {
        /// The cluster's name.
        name: String,
    },
}

/// The latest value for a [`ReportKey`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum ReportValue {
    /// For [`ReportKey::Status`].
    Status(Status),
    /// For [`ReportKey::Summary`].
    Summary(Summary),
    /// For [`ReportKey::Cluster`].
    Cluster(Cluster),
    /// The keyed thing no longer exists (object removed, cluster left).
    Removed,
}

/// One report: the latest value of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// What the report is about.
    pub key: ReportKey,
    /// Its latest value.
    pub value: ReportValue,
}

/// A batch of reports, acknowledged as a whole by [`ParentToChild::ReportsAck`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reports {
    /// Position of this batch in the connection's report stream, from 0.
    pub seq: u64,
    /// At most one report per key.
    pub items: Vec<Report>,
}

/// Messages a child sends to its parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ChildToParent {
    /// Opens the session.
    Hello(Hello),
    /// "Send me everything after `after`", starting a new subscription epoch. Sent after
    /// the handshake and again whenever the child detects a gap.
    Subscribe {
        /// The new epoch; frames of older epochs are ignored from now on.
        epoch: u32,
        /// The child's durable cursor.
        after: Revision,
    },
    /// Everything up to frame `seq` of `epoch` is durably applied; the cursor is `cursor`.
    Ack {
        /// The subscription being acked.
        epoch: u32,
        /// The highest frame applied, contiguously from 0.
        seq: u64,
        /// The child's durable cursor after applying it.
        cursor: Revision,
    },
    /// Status, summaries and inventory flowing inward.
    Reports(Reports),
    /// Liveness probe; the parent answers with a pong carrying the same nonce.
    Ping {
        /// Echoed in the pong.
        nonce: u64,
    },
    /// Answer to the parent's ping.
    Pong {
        /// The ping's nonce.
        nonce: u64,
    },
    /// The child closes the session.
    Goodbye {
        /// Why.
        code: ErrorCode,
        /// Human-readable detail.
        reason: String,
    },
}

/// Messages a parent sends to a child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ParentToChild {
    /// Accepts the session.
    Welcome(Welcome),
    /// Refuses the session.
    Refuse {
        /// Why.
        code: ErrorCode,
        /// Human-readable detail.
        reason: String,
        /// When to try again, in milliseconds; `None` leaves it to the child's backoff.
        retry_after_ms: Option<u64>,
    },
    /// Part of a delta.
    Delta(Delta),
    /// Part of a snapshot.
    Snapshot(Snapshot),
    /// Report batches up to and including `seq` are durable at the parent.
    ReportsAck {
        /// The highest batch durably accepted.
        seq: u64,
    },
    /// Liveness probe.
    Ping {
        /// Echoed in the pong.
        nonce: u64,
    },
    /// Answer to the child's ping.
    Pong {
        /// The ping's nonce.
        nonce: u64,
    },
    /// The parent closes the session.
    Goodbye {
        /// Why.
        code: ErrorCode,
        /// Human-readable detail.
        reason: String,
        /// When to reconnect, in milliseconds.
        retry_after_ms: Option<u64>,
    },
}

impl ChildToParent {
    /// The stream class this message travels on.
    pub fn class(&self) -> StreamClass {
        match self {
            ChildToParent::Reports(_) => StreamClass::Reports,
            _ => StreamClass::Control,
        }
    }
}

impl ParentToChild {
    /// The stream class this message travels on.
    pub fn class(&self) -> StreamClass {
        match self {
            ParentToChild::Delta(_) | ParentToChild::Snapshot(_) => StreamClass::Bulk,
            _ => StreamClass::Control,
        }
    }
}
