//! What the agent needs from a cluster: apply, delete, and tell how objects are doing.
//! The simulated cluster and the Kubernetes API backend implement it.

use std::sync::Arc;

use strata_protocol::model::{Object, ObjectKey, Status};
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
}
