//! The downsync stream of one child's subscription: whether it starts with a delta or a
//! snapshot, and the frames (snapshot and delta parts) it sends within the window.

use std::collections::VecDeque;

use super::super::log::ObjectLog;
use super::super::parent_index::Translation;
use super::super::{SharedRoute, wire_estimate};
use crate::model::{Cursor, ObjectKey, Position};
use crate::wire::{Change, Delta, ParentToChild, RouteId, Snapshot};

/// What the downsync stream is doing.
#[derive(Debug)]
pub(super) enum Stream {
    /// Subscribed, but the log is not serving yet (a relay that has not synced with its
    /// own parent since it lost its disk): how to start is decided once it is.
    Undecided {
        after: Cursor,
        route: Option<RouteId>,
        /// The grandparent cursor the child's view stands for, when it named one.
        grandparent: Option<Cursor>,
    },
    /// Sent through `sent`; waits for the log to move.
    CaughtUp,
    /// Sending a snapshot of the log at `at`, in key order after `resume`.
    Snapshot {
        at: Position,
        resume: Option<ObjectKey>,
        part: u32,
    },
    /// Sending the delta `(sent, to]`: the keys changed in that range, frozen when the
    /// delta started, each sent in its latest state.
    Delta {
        to: Position,
        keys: VecDeque<ObjectKey>,
        part: u32,
    },
}

#[derive(Debug)]
pub(super) struct Subscription {
    pub(super) epoch: u32,
    pub(super) next_seq: u64,
    /// The child's position once everything sent so far is applied.
    pub(super) sent: Position,
    /// What the child has durably applied: its cursor when it subscribed, then its acks.
    pub(super) durable: Cursor,
    pub(super) stream: Stream,
    pub(super) inflight: VecDeque<(u64, usize)>,
    pub(super) inflight_bytes: usize,
}

impl Subscription {
    /// The next downsync frame of this subscription, with the position the child reaches
    /// once it applies it when the frame ends a snapshot or a delta. `held`: the decision
    /// between delta and snapshot is on hold (see `ChildSession::hold_downsync`).
    pub(super) fn next_frame(
        &mut self,
        log: &ObjectLog,
        route: &SharedRoute,
        part_bytes: usize,
        held: bool,
    ) -> Option<(ParentToChild, Option<Position>)> {
        if let Stream::Undecided {
            after,
            route: child_route,
            grandparent,
        } = self.stream
        {
            if held {
                return None;
            }
            // Deltas are sound only from a position of this very log that is still
            // covered by its history, for a view cut with the same route; or from a
            // position that stands for the grandparent cursor a child coming from
            // another replica of this tier named (see `parent_index.rs`).
            let same_route = child_route == Some(route.id());
            let deltas_ok = after.log == log.id()
                && after.position <= log.head()
                && after.position >= log.floor()
                && same_route;
            let moved_from = grandparent
                .filter(|_| same_route && after.log != log.id())
                .map(|u| log.parent_index().translate(u));
            self.stream = match moved_from {
                // A delta even when empty: the child learns it holds everything this
                // node held at its subscription (a relay admits its own children only
                // then, having learned every revocation).
                _ if deltas_ok => Stream::Delta {
                    to: log.head(),
                    keys: log.keys_changed(after.position, log.head()).into(),
                    part: 0,
                },
                // This replica has not followed its parent that far yet: wait for it
                // rather than move the child back with a snapshot.
                Some(Translation::Behind) => return None,
                Some(Translation::At(from)) if from >= log.floor() && from <= log.head() => {
                    // A delta even when empty: it moves the child's cursor onto this log.
                    self.sent = from;
                    self.durable = Cursor {
                        log: log.id(),
                        position: from,
                    };
                    Stream::Delta {
                        to: log.head(),
                        keys: log.keys_changed(from, log.head()).into(),
                        part: 0,
                    }
                }
                _ => Stream::Snapshot {
                    at: log.head(),
                    resume: None,
                    part: 0,
                },
            };
        }
        if matches!(self.stream, Stream::CaughtUp) {
            if log.head() <= self.sent {
                return None;
            }
            self.stream = Stream::Delta {
                to: log.head(),
                keys: log.keys_changed(self.sent, log.head()).into(),
                part: 0,
            };
        }
        let mut reached = None;
        let (msg, bytes) = match &mut self.stream {
            Stream::CaughtUp | Stream::Undecided { .. } => return None,
            Stream::Snapshot { at, resume, part } => {
                let mut objects = Vec::new();
                let mut bytes = 64;
                let mut last = true;
                for object in log.live_after(resume.as_ref()) {
                    if bytes >= part_bytes {
                        last = false;
                        break;
                    }
                    *resume = Some(object.key().clone());
                    if route.includes(&object.meta) {
                        let change = Change::Upsert(object.clone());
                        bytes += wire_estimate(&change);
                        if let Change::Upsert(o) = change {
                            objects.push(o);
                        }
                    }
                }
                let msg = ParentToChild::Snapshot(Snapshot {
                    epoch: self.epoch,
                    seq: self.next_seq,
                    part: *part,
                    at: Cursor {
                        log: log.id(),
                        position: *at,
                    },
                    route: route.id(),
                    last,
                    objects,
                });
                *part += 1;
                if last {
                    self.sent = *at;
                    reached = Some(*at);
                    self.stream = Stream::CaughtUp;
                }
                (msg, bytes)
            }
            Stream::Delta { to, keys, part } => {
                let mut changes = Vec::new();
                let mut bytes = 64;
                while bytes < part_bytes {
                    let Some(key) = keys.pop_front() else { break };
                    if let Some(change) = delta_change(log, route, key) {
                        bytes += wire_estimate(&change);
                        changes.push(change);
                    }
                }
                let last = keys.is_empty();
                let msg = ParentToChild::Delta(Delta {
                    epoch: self.epoch,
                    seq: self.next_seq,
                    part: *part,
                    log: log.id(),
                    from: self.sent,
                    to: *to,
                    last,
                    changes,
                });
                *part += 1;
                if last {
                    self.sent = *to;
                    reached = Some(*to);
                    self.stream = Stream::CaughtUp;
                }
                (msg, bytes)
            }
        };
        self.inflight.push_back((self.next_seq, bytes));
        self.inflight_bytes += bytes;
        self.next_seq += 1;
        Some((msg, reached))
    }
}

/// What the child must be told about `key`, whose latest change lies in the delta: its
/// latest version if the route selects it, a delete if the child may hold some version
/// the route selected, nothing otherwise (routing: unselected subtrees hear nothing).
fn delta_change(log: &ObjectLog, route: &SharedRoute, key: ObjectKey) -> Option<Change> {
    let Some(entry) = log.entry(&key) else {
        // Compacted away while the delta was under way: it was a tombstone.
        return Some(Change::Delete(key));
    };
    match entry.object() {
        Some(object) if route.includes(&object.meta) => Some(Change::Upsert(object.clone())),
        _ if entry.ever_selected(|meta| route.includes(meta)) => Some(Change::Delete(key)),
        _ => None,
    }
}
