//! Reports, flowing inward from child to parent: what a report is about
//! ([`ReportKey`]), its latest value ([`ReportValue`]), a link's record ([`LinkRecord`]),
//! and the batches they travel in ([`Reports`]).

use serde::{Deserialize, Serialize};

use super::{Role, ServiceEndpoints};
use crate::model::{Cluster, ObjectKey, Status};
use crate::summary::Summary;
use crate::time::UnixMillis;

/// What a report is about. Reports with equal keys supersede each other.
///
/// The variants' order on the wire is their declaration order (bincode numbers them),
/// so a new one is declared last; the order keys sort in ([`Ord`]) is
/// the declaration order but with [`ReportKey::Complete`] after every other key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The state of the link between a node (relay or agent) and its parent, as that
    /// parent sees it. Relays report their children's links and forward those of their
    /// subtree, so that the root can show the whole tier tree.
    Link {
        /// The child end of the link (node names are unique in a hierarchy, and a node
        /// has one parent).
        node: String,
    },
    /// An object born on a cluster that a placement asks to copy to the center.
    Upsynced {
        /// The cluster it lives on.
        cluster: String,
        /// The object (in the space of the placement that asked for it).
        object: ObjectKey,
    },
    /// Marks that everything this run of the child reported before it has been sent:
    /// the parent drops what the child's earlier runs reported and this run did not.
    /// It sorts after every other key (see [`ReportKey`]), so that an outbox, which
    /// sends in key order, sends it after everything queued with it.
    Complete {
        /// The child's run (see [`Hello::run`](super::Hello::run)).
        run: u64,
    },
    /// Where a Service or Ingress can be reached on one cluster (protocol version 6,
    /// [`ENDPOINTS_VERSION`](super::ENDPOINTS_VERSION)); forwarded whole up the tiers.
    Endpoints {
        /// The cluster.
        cluster: String,
        /// The Service or Ingress.
        object: ObjectKey,
    },
}

impl ReportKey {
    /// Where the key's variant sorts: the declaration order, but
    /// [`ReportKey::Complete`] last.
    fn rank(&self) -> u8 {
        match self {
            ReportKey::Status { .. } => 0,
            ReportKey::Summary { .. } => 1,
            ReportKey::Cluster { .. } => 2,
            ReportKey::Link { .. } => 3,
            ReportKey::Upsynced { .. } => 4,
            ReportKey::Endpoints { .. } => 5,
            ReportKey::Complete { .. } => 6,
        }
    }
}

impl Ord for ReportKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        use ReportKey as K;
        match (self, other) {
            (
                K::Status { cluster, object },
                K::Status {
                    cluster: c2,
                    object: o2,
                },
            )
            | (
                K::Upsynced { cluster, object },
                K::Upsynced {
                    cluster: c2,
                    object: o2,
                },
            )
            | (
                K::Endpoints { cluster, object },
                K::Endpoints {
                    cluster: c2,
                    object: o2,
                },
            ) => (cluster, object).cmp(&(c2, o2)),
            (
                K::Summary { placement, object },
                K::Summary {
                    placement: p2,
                    object: o2,
                },
            ) => (placement, object).cmp(&(p2, o2)),
            (K::Cluster { name }, K::Cluster { name: n2 }) => name.cmp(n2),
            (K::Link { node }, K::Link { node: n2 }) => node.cmp(n2),
            (K::Complete { run }, K::Complete { run: r2 }) => run.cmp(r2),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for ReportKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The latest value for a [`ReportKey`].
///
/// Kept by the hundred thousand at a relay (one per cluster and object), so the variant
/// that is large inline (a summary, 300 bytes) is boxed: every map of reports would
/// otherwise reserve that much per entry. A box encodes exactly as its contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReportValue {
    /// For [`ReportKey::Status`].
    Status(Status),
    /// For [`ReportKey::Summary`].
    Summary(Box<Summary>),
    /// For [`ReportKey::Cluster`].
    Cluster(Cluster),
    /// For [`ReportKey::Link`]. Encoded in the shape of protocol version 3 and older,
    /// without [`LinkRecord::cert_expires`]: a link's own parent sends
    /// [`ReportValue::LinkExpiring`] instead from version 4 on
    /// ([`ReportValue::for_version`]), and a receiver turns that back into this
    /// ([`ReportValue::received`]), so the rest of the code sees one variant.
    Link(
        #[serde(
            serialize_with = "super::compat::encode_as::<super::LinkRecordV3, _>",
            deserialize_with = "super::compat::decode_as::<super::LinkRecordV3, _>"
        )]
        LinkRecord,
    ),
    /// For [`ReportKey::Upsynced`]: the object's manifest as JSON.
    Upsynced(#[serde(with = "crate::model::byte_run")] Vec<u8>),
    /// The keyed thing no longer exists (object removed, cluster left).
    Removed,
    /// For [`ReportKey::Complete`].
    Complete,
    /// For [`ReportKey::Link`], with the child's certificate expiry (protocol version
    /// 4, [`RENEW_VERSION`](super::RENEW_VERSION)). Encoded in the shape of version 4,
    /// without [`LinkRecord::via`]: from version 5 on a parent is sent
    /// [`ReportValue::LinkVia`] instead.
    LinkExpiring(
        #[serde(
            serialize_with = "super::compat::encode_as::<super::LinkRecordV4, _>",
            deserialize_with = "super::compat::decode_as::<super::LinkRecordV4, _>"
        )]
        LinkRecord,
    ),
    /// For [`ReportKey::Link`], whole: with the expiry and the link's path (protocol
    /// version 5, [`PATH_VERSION`](super::PATH_VERSION)).
    LinkVia(LinkRecord),
    /// For [`ReportKey::Endpoints`] (protocol version 6).
    Endpoints(ServiceEndpoints),
}

/// A parent-to-child link as the parent sees it.
///
/// Link records change on connection and disconnection; a relay child's record is also
/// refreshed at most every few seconds while it is up (heartbeat and lag), an agent's
/// only when it connects or goes, so that leaves do not flood the tiers above.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRecord {
    /// Relay names from the reporter's direct child down to the link's parent end.
    /// Like [`Cluster::path`], it grows on the way up: each relay puts itself first.
    pub path: Vec<String>,
    /// Whether the child end is a relay (or an agent).
    pub role: Role,
    /// Whether the link is up.
    pub connected: bool,
    /// When the link came up or went down (the parent's wall clock).
    pub since: UnixMillis,
    /// When the parent last heard from the child (the parent's wall clock).
    pub last_heard: UnixMillis,
    /// Revisions of the parent's log the child had not acknowledged at `last_heard`
    /// (`None` before its first acknowledgement).
    pub lag: Option<u64>,
    /// Clusters below the child (1 for an agent).
    pub clusters: u64,
    /// When the child's certificate expires (`None`: not known, e.g. a link reported
    /// by a relay of an older version).
    pub cert_expires: Option<UnixMillis>,
    /// What the link runs on while up (`None`: not known, e.g. a link reported by a
    /// relay of an older version, or one that is down). Travels from protocol version
    /// 4 on, with [`LinkRecord::cert_expires`].
    pub transport: Option<LinkTransport>,
    /// Whether the link reached the parent directly or through a proxy, as the child
    /// said ([`ChildToParent::LinkPath`](super::ChildToParent::LinkPath)) while it is up
    /// (`None`: not known, e.g. a child or a reporting relay of version 4 or older, or
    /// a link that is down). Travels from protocol version 5 on.
    pub via: Option<LinkPath>,
}

/// How a child's connection reached its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkPath {
    /// Straight to the parent's address (QUIC, or TLS/TCP without a proxy).
    Direct,
    /// TLS/TCP through an HTTP CONNECT proxy.
    Proxied,
}

impl LinkPath {
    /// The path's name in the API's JSON: `direct` or `proxied`.
    pub fn name(self) -> &'static str {
        match self {
            LinkPath::Direct => "direct",
            LinkPath::Proxied => "proxied",
        }
    }
}

/// What a link runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkTransport {
    /// QUIC over UDP.
    Quic,
    /// TLS 1.3 over TCP (directly, or through an HTTP CONNECT proxy).
    Tcp,
}

/// One report: the latest value of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// What the report is about.
    pub key: ReportKey,
    /// Its latest value.
    pub value: ReportValue,
}

/// A batch of reports, acknowledged cumulatively by
/// [`ParentToChild::ReportsAck`](super::ParentToChild::ReportsAck).
///
/// Batches are numbered contiguously within an epoch. The child starts a new epoch when
/// it retransmits (go-back-N); the parent accepts a new epoch only at its `epoch_start`,
/// so a stale batch of an older epoch can never overwrite a newer value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reports {
    /// The retransmission epoch.
    pub epoch: u32,
    /// The first `seq` of this epoch.
    pub epoch_start: u64,
    /// Position of this batch in the report stream.
    pub seq: u64,
    /// At most one report per key.
    pub items: Vec<Report>,
}
