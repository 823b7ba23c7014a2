//! Keeping a node's own log in step with its parent's: what every child node (relay or
//! agent) does with the downsync events of its [`strata_protocol::sync::ParentLink`].

use strata_protocol::model::ObjectKey;
use strata_protocol::sync::{LinkEvent, ObjectLog};
use strata_protocol::wire::Change;

use crate::store::{Batch, UpstreamState};

/// Applies a downsync event to `log` and `upstream`, recording what must be persisted
/// in `batch`. Every change to the log's contents is shown to `on_change` first (the
/// deletions a snapshot implies included). Events that are not about downsync
/// (connection, closing) are handed back.
///
/// A batch arriving in parts is staged at the next position and committed only when
/// whole, so this node's own children never see half of it.
pub fn follow_parent(
    log: &mut ObjectLog,
    upstream: &mut UpstreamState,
    batch: &mut Batch,
    event: LinkEvent,
    mut on_change: impl FnMut(&Change),
) -> Option<LinkEvent> {
    let next = log.head().next();
    match event {
        LinkEvent::Apply(change) => {
            on_change(&change);
            // Staging above the head cannot fail.
            let _ = log.stage(next, change);
        }
        LinkEvent::Advanced(cursor) => {
            log.commit(next);
            upstream.cursor = cursor;
            batch.upstream = Some(upstream.clone());
        }
        LinkEvent::SnapshotStarted => {
            upstream.route = None;
            batch.upstream = Some(upstream.clone());
        }
        LinkEvent::SnapshotDone {
            cursor,
            route,
            keep,
        } => {
            let gone: Vec<ObjectKey> = log
                .live()
                .map(|o| o.key().clone())
                .filter(|k| !keep.contains(k))
                .collect();
            for key in gone {
                on_change(&Change::Delete(key));
            }
            let _ = log.finish_snapshot(next, &keep);
            upstream.cursor = cursor;
            upstream.route = Some(route);
            batch.upstream = Some(upstream.clone());
        }
        other => return Some(other),
    }
    None
}
