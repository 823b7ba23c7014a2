//! The sans-I/O state machines of one parent/child connection, in the shape of
//! quinn-proto: inputs are `handle_*(now, …)` calls, outputs are drained with
//! `poll_transmit`, `poll_event` and `poll_timeout`. Nothing here blocks, sleeps, or
//! reads a clock.
//!
//! * [`ObjectLog`]: the ordered, compactable log a parent serves from.
//! * [`ChildSession`]: the parent's side of one child's connection: handshake, downsync
//!   (deltas or snapshots, filtered by the child's [`Route`], flow-controlled), report
//!   intake, liveness.
//! * [`ParentLink`]: the child's side: handshake, applying deltas strictly in order,
//!   gap and duplicate detection, acks, resubscription, report outbox, liveness.
//! * [`ReportOutbox`] / [`ReportInbox`]: the inward report stream, coalesced to the
//!   latest value per key while unsent.
//! * [`Liveness`]: heartbeats and the idle timeout.
//! * [`ParentIndex`]: which positions of a replica's log stand for which cursors of
//!   its parent's, so that a child moves between replicas with a delta.
//!
//! # Guarantees
//!
//! A child that keeps reconnecting converges to exactly its route's view of the parent's
//! log at the parent's head, whatever is dropped, duplicated or reordered in between;
//! it never moves an object back to an older revision; and it acknowledges a position
//! only after the driver has been handed (and has persisted) every change up to it.

mod child_session;
mod liveness;
mod log;
mod parent_index;
mod parent_link;
mod reports;

use std::fmt;
use std::sync::Arc;

pub use child_session::{ChildSession, SessionConfig, SessionEvent};
pub use liveness::{Liveness, LivenessAction};
pub use log::{KeyEntry, LogError, LogMeta, ObjectLog};
pub use parent_index::{PARENT_INDEX_MARKS, ParentIndex, Translation};
pub use parent_link::{LinkConfig, LinkEvent, ParentLink};
pub use reports::{ReportInbox, ReportOutbox, ReportsConfig};

use crate::model::ObjectMeta;
use crate::wire::{ErrorCode, RouteId};

/// The routing predicate of one child: which objects belong to its subtree.
///
/// Implementations must be pure functions of the metadata; two routes with equal
/// [`Route::id`] must select exactly the same objects.
pub trait Route: fmt::Debug + Send + Sync {
    /// A fingerprint of the route.
    fn id(&self) -> RouteId;
    /// Whether the object belongs to the child's subtree.
    fn includes(&self, meta: &ObjectMeta) -> bool;
}

/// A shared route, as sessions hold it.
pub type SharedRoute = Arc<dyn Route>;

/// The route that selects everything (a relay child that receives the parent's whole
/// view, or tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct EverythingRoute;

impl Route for EverythingRoute {
    fn id(&self) -> RouteId {
        RouteId(0)
    }
    fn includes(&self, _meta: &ObjectMeta) -> bool {
        true
    }
}

/// Why a session must close: sent to the peer in a `Goodbye` and logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {reason}")]
pub struct SessionError {
    /// Machine-readable reason.
    pub code: ErrorCode,
    /// Human-readable detail.
    pub reason: String,
}

impl SessionError {
    pub(crate) fn new(code: ErrorCode, reason: impl Into<String>) -> Self {
        SessionError {
            code,
            reason: reason.into(),
        }
    }
}

/// A rough upper bound of an object's encoded size, for flow control and part sizing.
/// Exactness is not needed: the codec enforces the real frame limit.
pub(crate) fn wire_estimate(change: &crate::wire::Change) -> usize {
    use crate::wire::Change;
    let key = |k: &crate::model::ObjectKey| {
        k.space.0.len()
            + k.group.len()
            + k.version.len()
            + k.kind.len()
            + k.namespace.as_ref().map_or(0, String::len)
            + k.name.len()
            + 16
    };
    match change {
        Change::Upsert(o) => {
            key(o.key())
                + o.meta
                    .labels
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 4)
                    .sum::<usize>()
                + o.body.len()
                + 56
        }
        Change::Delete(k) => key(k) + 4,
    }
}
