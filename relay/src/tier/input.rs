//! What reaches a relay's driver besides its parent's messages: its children's
//! connections and messages (from the accept loop), questions about its core (the
//! API, the simulation, tests), and join requests.

use strata_node::link::{Link, TransportKind};
use strata_node::transport::Sender;
use strata_protocol::wire::{ChildToParent, JoinReply, JoinRequest, ParentToChild, StreamClass};
use tokio::sync::{OwnedSemaphorePermit, oneshot};

use super::core::NodeCore;

/// A request to the core from the API or a test, answered with a snapshot of state.
pub type Query = Box<dyn FnOnce(&mut NodeCore) + Send>;

/// A relay's own inputs (the parent's go to the driver). A child's input names the
/// child (`name`, from its certificate) and the connection (`conn_id`, new for every
/// connection), so that a replaced connection's late inputs are told apart; a question
/// carries where its answer goes (`reply`).
#[allow(missing_docs)] // the fields are named in the type's doc
pub enum RelayInput {
    /// A child's connection is up; its certificate names `name`.
    ChildUp {
        name: String,
        conn_id: u64,
        conn: Link,
        /// Where to send the child's messages.
        sender: Sender<ParentToChild>,
    },
    /// A message from a child's connection.
    ChildMsg {
        name: String,
        conn_id: u64,
        msg: ChildToParent,
    },
    /// A child's connection is gone, and why.
    ChildDown {
        name: String,
        conn_id: u64,
        why: String,
    },
    /// A question about the core (the API, the simulation, tests).
    Query(Query),
    /// Bytes on the node's connections.
    LinkStats(oneshot::Sender<LinkStats>),
    /// What other root replicas committed, or this replica's takeover.
    Replica(strata_node::store::ReplicaEvent),
    /// An agent asks to join with a token.
    Join {
        request: JoinRequest,
        reply: oneshot::Sender<JoinReply>,
    },
    /// Where a debug tunnel to `cluster` goes from here (the API, or a tunnel stream
    /// from the parent).
    TunnelRoute {
        cluster: String,
        reply: oneshot::Sender<Result<TunnelRoute, TunnelRefusal>>,
    },
}

impl std::fmt::Debug for RelayInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RelayInput::ChildUp { .. } => "ChildUp",
            RelayInput::ChildMsg { .. } => "ChildMsg",
            RelayInput::ChildDown { .. } => "ChildDown",
            RelayInput::Query(_) => "Query",
            RelayInput::LinkStats(_) => "LinkStats",
            RelayInput::Join { .. } => "Join",
            RelayInput::TunnelRoute { .. } => "TunnelRoute",
            RelayInput::Replica(_) => "Replica",
        })
    }
}

/// Bytes on this node's links (UDP payload as quinn counts it; multiplexer bytes for
/// TLS/TCP links), and their transports, for benchmarks and metrics.
#[derive(Debug, Clone, Default)]
pub struct LinkStats {
    /// Per connected child: (name, bytes sent, bytes received).
    pub children: Vec<(String, u64, u64)>,
    /// To and from the parent: (bytes sent, bytes received).
    pub parent: Option<(u64, u64)>,
    /// Framed bytes per stream class on every live connection: (peer, class, sent,
    /// received); the parent is the peer `parent`.
    pub streams: Vec<(String, StreamClass, u64, u64)>,
    /// Which transport each connected child's link uses.
    pub child_transports: Vec<(String, TransportKind)>,
    /// Which transport the link to the parent uses, while connected.
    pub parent_transport: Option<TransportKind>,
    /// UDP datagrams (sent, received) on every connected child's QUIC link together.
    pub child_datagrams: (u64, u64),
}

/// Where a cluster's tunnel goes from this node: the child's link, and the permit that
/// counts it against the link's cap (held as long as the tunnel lasts).
#[derive(Debug)]
pub struct TunnelRoute {
    /// The child whose subtree holds the cluster.
    pub child: String,
    /// Its live link.
    pub link: Link,
    /// This tunnel's place under the link's cap.
    pub permit: OwnedSemaphorePermit,
}

/// Why a tunnel cannot go on from this node: an HTTP status and a `metav1.Status`
/// reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelRefusal {
    /// The HTTP status (404, 429, 503).
    pub code: u16,
    /// The `metav1.Status` reason.
    pub reason: &'static str,
    /// What the user is told.
    pub message: String,
}
