//! Wire messages, named by direction: [`ChildToParent`] and [`ParentToChild`].
//!
//! Both enums are `#[non_exhaustive]`: a newer peer may add variants, gated by the
//! protocol version negotiated in the handshake ([`Hello`] / [`Welcome`]). Framing and
//! encoding live in [`crate::codec`]; nothing here knows about bytes.
//!
//! Every message belongs to a [`StreamClass`], so that drivers can carry heartbeats on a
//! stream that never waits behind bulk downsync data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Cursor, Object, ObjectKey, Position};

mod compat;
mod endpoints;
mod report;
pub use compat::{LinkRecordV3, LinkRecordV4};
pub use endpoints::{Endpoint, EndpointKind, EndpointPort, ServiceEndpoints};
pub use report::{LinkPath, LinkRecord, LinkTransport, Report, ReportKey, ReportValue, Reports};

/// A protocol version number. Peers negotiate the highest version both support.
pub type ProtocolVersion = u16;

/// The newest protocol version this crate speaks.
///
/// - 1: the first version.
/// - 2: adds [`ParentToChild::Labels`], so that a parent's inherited labels that change
///   while a child is connected reach it (a version-1 child is closed instead, and
///   learns them from the welcome when it reconnects).
/// - 3: adds [`ChildToParent::ReplicaHello`], the hello of one replica of a replicated
///   tier (several processes with one node name behind one address), and
///   [`ParentToChild::GrandparentCursor`] / [`ChildToParent::Resume`], with which a child moves
///   between replicas with a delta. A child sends a replica hello only when it is
///   configured as a replica, so an unreplicated child still opens with
///   [`ChildToParent::Hello`] and works with a version-1 or -2 parent; a replica needs a
///   parent of version 3 (an older one cannot decode the message and closes the
///   connection as malformed).
/// - 4: adds [`ChildToParent::Renew`] / [`ParentToChild::Renewal`] (a child renews its
///   certificate over its authenticated link), [`ErrorCode::Revoked`] and
///   [`LinkRecord::cert_expires`]. A peer of version 3 or older is refused with
///   [`ErrorCode::UnknownChild`] where this one would say `Revoked`, and is sent link
///   records without the expiry ([`ReportValue::Link`] keeps the version-3 shape; the
///   expiry travels in [`ReportValue::LinkExpiring`] from version 4 on).
/// - 5: adds [`ChildToParent::LinkPath`], with which a child says whether its link
///   reached the parent directly or through an HTTP CONNECT proxy, and
///   [`LinkRecord::via`]. A child sends it only once a parent of version 5 welcomed it,
///   so an older parent never sees it (and a child of version 4 or older is shown with
///   no path known); a parent of version 4 is sent link records without it
///   ([`ReportValue::LinkExpiring`] keeps the version-4 shape; the path travels in
///   [`ReportValue::LinkVia`] from version 5 on).
/// - 6: adds [`ReportKey::Endpoints`] / [`ReportValue::Endpoints`], where a Service or
///   Ingress can be reached on a cluster. Sent only to a parent of version 6
///   ([`Reports::for_version`] leaves them out for an older one), so an older parent
///   keeps working and knows no endpoints; a child of version 5 simply reports none.
/// - 7: volume streams ([`crate::volume`]): a stream header may continue past its
///   [`crate::tunnel::TunnelOpen`] with a [`crate::volume::VolumeOpen`]; a parent opens
///   or forwards one only to a child that negotiated [`crate::volume::VOLUME_VERSION`]
///   or later. Nothing on the links' own streams changes.
/// - 8: ReadWriteMany replication's volume streams ([`crate::volume::VolumeOpen::Replicate`],
///   [`crate::volume::VolumeOpen::CopyReplica`]), opened or forwarded only to a child that
///   negotiated [`crate::volume::REPLICATION_VERSION`] or later. Nothing else changes.
/// - 9: volume streams that carry the claim's manifest
///   ([`crate::volume::VolumeOpen::WriteClaim`], [`crate::volume::VolumeOpen::CopyClaim`]),
///   so a real cluster's agent creates the claim its mover pod writes; sent to a child
///   of version 8 or older without the manifest
///   ([`crate::volume::VolumeOpen::for_version`]). Nothing else changes.
pub const MAX_PROTOCOL_VERSION: ProtocolVersion = 9;

/// The first protocol version with [`ReportKey::Endpoints`].
pub const ENDPOINTS_VERSION: ProtocolVersion = 6;

/// The first protocol version with [`ChildToParent::LinkPath`] and
/// [`ReportValue::LinkVia`].
pub const PATH_VERSION: ProtocolVersion = 5;

/// The first protocol version with certificate renewal ([`ChildToParent::Renew`]),
/// [`ErrorCode::Revoked`] and [`ReportValue::LinkExpiring`].
pub const RENEW_VERSION: ProtocolVersion = 4;

/// The first protocol version with [`ChildToParent::ReplicaHello`].
pub const REPLICA_VERSION: ProtocolVersion = 3;

/// The first protocol version with [`ParentToChild::Labels`].
pub const LABELS_VERSION: ProtocolVersion = 2;

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

/// Identifies the routing predicate a parent applies for a child (a fingerprint of the
/// placements and inventory it was computed from). Equal ids mean equal routes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct RouteId(pub u64);

/// The next frame a parent will send on a downsync subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamMark {
    /// The subscription.
    pub epoch: u32,
    /// The `seq` of the next frame.
    pub next_seq: u64,
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
    /// Identifies this run of the child (a new value at every start). Reports that were
    /// queued but unsent die with a run, so a parent that sees a new run forgets what
    /// the child reported before, and the child reports everything again.
    pub run: u64,
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
    /// Identifies the parent's durable state. A child that sees a new incarnation
    /// reports everything again: what it reported before may be gone.
    pub incarnation: u64,
    /// Labels the parent and its ancestors give every cluster below them. A relay routes
    /// and summarizes with them, so that placements selecting, say, `region` work at
    /// every tier, not only where the label was set.
    pub labels: BTreeMap<String, String>,
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
    /// The child's name was revoked at the root (`relay revoke`): it is refused for good.
    /// Since protocol version 4 ([`RENEW_VERSION`]); older peers are told
    /// [`ErrorCode::UnknownChild`] (see [`ErrorCode::for_version`]).
    Revoked,
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

/// A part of the delta that takes a child from position `from` to position `to` of the
/// parent's log.
///
/// A delta may be split over several parts with consecutive `seq`; the child applies
/// each part as it arrives and moves its cursor to `to` only on the part with `last`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// The subscription this part answers.
    pub epoch: u32,
    /// Position of this frame in the subscription's stream, from 0.
    pub seq: u64,
    /// Position of this part within its delta, from 0. A part 0 starts a new delta and
    /// abandons any unfinished one (whose applied parts stay applied: they only ever
    /// carry versions at least as new as the child's cursor).
    pub part: u32,
    /// The log the positions refer to.
    pub log: crate::model::LogId,
    /// The child's position this delta starts from.
    pub from: Position,
    /// The position the child reaches once the last part is applied.
    pub to: Position,
    /// Whether this is the last part of the delta.
    pub last: bool,
    /// Upserts and deletes, at most one per key across all parts.
    pub changes: Vec<Change>,
}

/// A part of a snapshot: the child's whole view at position `at` of the parent's log. Objects the child holds
/// that no part of the snapshot names are deleted when the last part arrives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The subscription this part answers.
    pub epoch: u32,
    /// Position of this frame in the subscription's stream, from 0.
    pub seq: u64,
    /// Position of this part within its snapshot, from 0. A part 0 starts the snapshot
    /// afresh, abandoning any unfinished one.
    pub part: u32,
    /// The log and position the snapshot describes.
    pub at: Cursor,
    /// The route the snapshot was cut with; the child keeps it with its cursor and
    /// names it when it subscribes again.
    pub route: RouteId,
    /// Whether this is the last part.
    pub last: bool,
    /// Live objects of the child's view.
    pub objects: Vec<Object>,
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
        after: Cursor,
        /// The route the child's view was cut with (from its last snapshot); `None`
        /// when the view matches no route (a new child, or a snapshot that did not
        /// finish). A parent whose route for the child differs answers with a snapshot.
        route: Option<RouteId>,
    },
    /// Everything up to frame `seq` of `epoch` is durably applied; the cursor is `cursor`.
    Ack {
        /// The subscription being acked.
        epoch: u32,
        /// The highest frame applied, contiguously from 0.
        seq: u64,
        /// The child's durable cursor after applying it.
        cursor: Cursor,
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
    /// Opens the session of one replica of a replicated child (protocol version 3):
    /// several processes with one node name and identity, each with its own store,
    /// behind one address. The parent keeps a session, acks, runs and reports per
    /// (node, replica), so replicas do not take each other's session over.
    ReplicaHello {
        /// The hello; its `min_version` is at least [`REPLICA_VERSION`].
        hello: Hello,
        /// Which replica this is: stable across the replica's restarts, distinct
        /// among the replicas of one node, at most [`MAX_REPLICA_LEN`] bytes of
        /// `[a-z0-9-]`.
        replica: String,
    },
    /// Sent just before a [`ChildToParent::Subscribe`] (protocol version 3): the child's
    /// view is its grandparent's log at `grandparent`, as a replica of this tier told it
    /// ([`ParentToChild::GrandparentCursor`]). A replica whose own log followed that far
    /// answers the subscription with a delta although the cursor names another
    /// replica's log.
    Resume {
        /// The cursor into the parent's own parent's log.
        grandparent: Cursor,
    },
    /// Asks the parent for a new certificate for a new key (protocol version 4,
    /// [`RENEW_VERSION`]), well before the current one expires. The parent answers
    /// with [`ParentToChild::Renewal`]; the request's name must be the name the child
    /// is authenticated as on this connection.
    Renew {
        /// A PKCS#10 certificate signing request (PEM) naming the child.
        csr_pem: String,
    },
    /// How this connection reached the parent: directly, or through an HTTP CONNECT
    /// proxy (protocol version 5, [`PATH_VERSION`]). Sent once per connection, right
    /// after the welcome and before the first [`ChildToParent::Subscribe`], and only
    /// to a parent that chose version 5 or newer. The parent shows it with the link
    /// ([`LinkRecord::via`]); a connection that never says is of an older child.
    LinkPath(LinkPath),
}

/// The longest replica id a parent accepts.
pub const MAX_REPLICA_LEN: usize = 63;

/// Whether `replica` is an acceptable replica id: 1 to [`MAX_REPLICA_LEN`] bytes of
/// lowercase letters, digits and `-`.
pub fn valid_replica(replica: &str) -> bool {
    !replica.is_empty()
        && replica.len() <= MAX_REPLICA_LEN
        && replica
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
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
        /// The epoch of the acknowledged batch.
        epoch: u32,
        /// The highest batch durably accepted.
        seq: u64,
    },
    /// Liveness probe.
    Ping {
        /// Echoed in the pong.
        nonce: u64,
        /// How far the parent's downsync stream has got; lets a child notice frames it
        /// never received and subscribe again.
        mark: Option<StreamMark>,
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
    /// The labels the parent and its ancestors give every cluster below changed since
    /// the [`Welcome`] (the parent learned new ones from its own parent, or its own
    /// changed): they replace [`Welcome::labels`]. Since protocol version 2.
    Labels {
        /// The new labels, whole.
        labels: BTreeMap<String, String>,
    },
    /// Position `position` of this parent's log `log` stands for its own parent's log at
    /// `grandparent` (protocol version 3, sent by a replica of a replicated tier after a
    /// delta or snapshot): kept by the child to name in a [`ChildToParent::Resume`]
    /// should it move to another replica.
    GrandparentCursor {
        /// This parent's log.
        log: crate::model::LogId,
        /// A position of it the child reached.
        position: Position,
        /// What that position stands for in the parent's own parent's log.
        grandparent: Cursor,
    },
    /// The answer to a [`ChildToParent::Renew`] (protocol version 4).
    Renewal(RenewReply),
}

/// A parent's answer to a certificate renewal request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RenewReply {
    /// The new certificate chain (PEM: leaf first) for the request's key.
    Granted {
        /// The chain.
        chain_pem: String,
    },
    /// Refused (no signing CA at this parent, a request naming another node, a bad
    /// request).
    Refused {
        /// The parent that refused.
        parent: String,
        /// Why.
        reason: String,
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
            // A replica's grandparent-cursor hint travels just before the frame that reaches the
            // position it names, on the same ordered stream: a child that applied the
            // frame holds the hint, even when the replica died right after sending it.
            ParentToChild::Delta(_)
            | ParentToChild::Snapshot(_)
            | ParentToChild::GrandparentCursor { .. } => StreamClass::Bulk,
            _ => StreamClass::Control,
        }
    }
}

/// What an agent that is not in the topology sends, once, on a connection without a
/// client certificate, to join a relay that admits agents by token. It is the only
/// message such a connection may carry; it travels alone on one unidirectional stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinRequest {
    /// The cluster (node) name the agent asks its certificate to carry.
    pub cluster: String,
    /// A single-use join token issued for the relay.
    pub token: String,
    /// A PKCS#10 certificate signing request (PEM) for the agent's own key.
    pub csr_pem: String,
}

/// The relay's answer to a [`JoinRequest`]; the relay closes the connection after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinReply {
    /// Admitted: the agent's certificate chain (PEM: leaf, then the relay's join CA).
    Granted {
        /// The chain.
        chain_pem: String,
    },
    /// Refused (an unknown or used token, a name already taken, a bad request).
    Refused {
        /// The relay that refused.
        relay: String,
        /// Why.
        reason: String,
    },
}
