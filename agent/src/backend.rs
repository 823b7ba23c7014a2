//! What the agent needs from a cluster: apply, delete, and tell how objects are doing.
//! The simulated cluster and the Kubernetes API backend implement it.

use std::sync::Arc;

use strata_protocol::model::{Object, ObjectKey, Space, Status};
use strata_protocol::time::{Instant, UnixMillis};
use tokio::sync::Notify;

/// A cluster refused or failed an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct BackendError {
    /// The object concerned (boxed: errors travel on the cold path).
    pub key: Box<ObjectKey>,
    /// What went wrong.
    pub reason: String,
}

/// A leaf cluster as the agent drives it.
pub trait ClusterBackend {
    /// Makes the cluster hold this version of the object (idempotent).
    fn apply(&mut self, now: Instant, at: UnixMillis, object: &Object) -> Result<(), BackendError>;
    /// Removes an object this agent applied (idempotent).
    fn delete(&mut self, now: Instant, key: &ObjectKey) -> Result<(), BackendError>;
    /// Statuses that changed since the last call.
    fn poll_status(&mut self, now: Instant, at: UnixMillis) -> Vec<(ObjectKey, Status)>;
    /// When [`ClusterBackend::poll_status`] will next have something to say.
    fn next_change(&self) -> Option<Instant>;
    /// Notified when [`ClusterBackend::poll_status`] has something to say before
    /// [`ClusterBackend::next_change`] (a backend with its own task, such as the
    /// Kubernetes API backend). `None` for a backend driven by time alone.
    fn wake(&self) -> Option<Arc<Notify>> {
        None
    }
    /// Replaces the upsync rules: the placements on this cluster that ask for objects
    /// born here. A backend that cannot upsync (the simulated cluster) ignores them.
    fn set_upsync(&mut self, _rules: Vec<UpsyncRule>) {}
    /// The manifest the cluster holds for `key` as this agent applied it, for backends
    /// that keep it (the simulated cluster); `None` otherwise.
    fn manifest(&self, _key: &ObjectKey) -> Option<Vec<u8>> {
        None
    }
    /// Upsynced objects that changed since the last call (at most one per change).
    fn poll_upsync(&mut self) -> Vec<Upsynced> {
        Vec::new()
    }
    /// Whether the cluster's API server answers, when that changed since the last call
    /// (the first call says it if it is known). A backend that cannot lose its cluster
    /// (the simulated one) says nothing.
    fn poll_reach(&mut self) -> Option<Reach> {
        None
    }
    /// The addresses of the cluster's nodes (InternalIP and ExternalIP), for NodePort
    /// Services' endpoints; empty when not known.
    fn node_addresses(&self) -> Vec<String> {
        Vec::new()
    }
    /// Tells the backend which cluster it is (called once, when the agent starts): the
    /// simulated cluster derives its addresses from it.
    fn set_cluster(&mut self, _cluster: &strata_protocol::model::Cluster) {}
}

/// Whether the agent reaches its cluster's API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// It answers.
    Reached,
    /// It does not: why (the server's address and the cause).
    Unreachable(String),
}

/// Which leaf-born objects to copy to the center (from a placement's `upsync`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpsyncRule {
    /// The space of the placement that asks: upsynced objects appear there.
    pub space: Space,
    /// API group (empty for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Only this namespace, when set.
    pub namespace: Option<String>,
    /// Only these names, when not empty.
    pub names: Vec<String>,
    /// A label selector (`app=web,tier!=db`); empty selects everything.
    pub selector: String,
}

/// One upsynced object changed: its manifest now, or `None` once it is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upsynced {
    /// The object (in the space of the placement that asked for it).
    pub key: ObjectKey,
    /// The manifest as JSON, without `managedFields` and `resourceVersion`.
    pub body: Option<Vec<u8>>,
}
