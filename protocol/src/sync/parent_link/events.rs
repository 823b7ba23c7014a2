//! What a child's link to its parent tells its driver.

use std::collections::BTreeSet;
use std::time::Duration;

use super::super::SessionError;
use crate::model::{Cursor, ObjectKey};
use crate::wire::{Change, ProtocolVersion, RouteId};

/// What a [`ParentLink`](super::ParentLink) tells its driver. Apply and persist each event
/// before the next [`ParentLink::poll_transmit`](super::ParentLink::poll_transmit): that
/// call acknowledges everything handed out so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// The parent welcomed us.
    Connected {
        /// The parent's node name.
        parent: String,
        /// The negotiated version.
        version: ProtocolVersion,
        /// The parent's incarnation: when it differs from the one last seen, push every
        /// current report again.
        incarnation: u64,
        /// Labels the parent and its ancestors give every cluster below.
        labels: crate::model::Labels,
    },
    /// The labels the parent and its ancestors give every cluster below changed while
    /// connected: they replace those of [`LinkEvent::Connected`].
    Labels(crate::model::Labels),
    /// Apply this change now. It belongs to a delta or snapshot that is not complete
    /// yet: the cursor does not move until [`LinkEvent::Advanced`] or
    /// [`LinkEvent::SnapshotDone`].
    Apply(Change),
    /// A delta is complete: persist the new cursor.
    Advanced(Cursor),
    /// A snapshot begins: persist "no route" before applying its parts. A snapshot
    /// applied in part matches no route; should the link drop before it completes, the
    /// next subscription must ask for a snapshot again.
    SnapshotStarted,
    /// A snapshot is complete: remove every object whose key is not in `keep`, then
    /// persist the cursor and the route.
    SnapshotDone {
        /// The new cursor.
        cursor: Cursor,
        /// The route the snapshot was cut with.
        route: RouteId,
        /// Every key the snapshot named.
        keep: BTreeSet<ObjectKey>,
    },
    /// The session ended. Reconnect after `retry_after` if the parent named one,
    /// otherwise after the driver's own backoff.
    Closed {
        /// Why.
        error: SessionError,
        /// The parent's hint.
        retry_after: Option<Duration>,
    },
}
