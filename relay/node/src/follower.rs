//! Following a parent: the [`ParentLink`] (the protocol's child end of a connection),
//! the durable [`ParentState`] it resumes from, and what this run has reported. A
//! relay's core and an agent's core both hold one and ask it what the parent's events
//! mean for them.

use std::collections::VecDeque;
use std::time::Duration;

use strata_protocol::model::{Labels, ObjectKey};
use strata_protocol::sync::{LinkEvent, ObjectLog, ParentLink, SessionError};
use strata_protocol::time::Instant;
use strata_protocol::wire::{Change, ChildToParent, LinkPath, ParentToChild, Report};

use crate::store::{Batch, ParentState};

/// What a parent's events mean for the node following it, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // `Closed` carries the session's error and the parent's hint
pub enum Followed {
    /// Report everything again: the parent may not hold what was reported (it is a new
    /// parent that lost its state, or this is the first connection of this run and the
    /// parent forgets a child's reports when the child restarts).
    ReportAll,
    /// The labels the ancestors give every cluster below changed (already stored).
    Labels(Labels),
    /// A change from the parent, applied to the log.
    Changed(Change),
    /// The session ended; reconnect after the parent's hint if it gave one.
    Closed {
        error: SessionError,
        /// The parent's hint of when to come back.
        retry_after: Option<Duration>,
    },
}

/// The child end of a node's link to its parent, with what the node keeps about it.
///
/// Call order: feed it the connection's inputs (`handle_*`), then drain
/// [`ParentFollower::poll`] (which applies the parent's changes to the log and stages
/// what must be durable into the batch), commit the batch, and only then drain
/// [`ParentFollower::poll_transmit`]: it acknowledges what the batch made durable.
#[derive(Debug)]
pub struct ParentFollower {
    link: ParentLink,
    state: ParentState,
    /// Whether everything was reported since this run started.
    reported_this_run: bool,
    pending: VecDeque<Followed>,
    /// Snapshots the parent started sending during this run: a resync that was a
    /// delta leaves it unchanged.
    snapshots: u64,
    /// Whether the current connection's subscription has been answered in full (a
    /// parent answers every subscription with at least one delta or snapshot).
    caught_up: bool,
}

impl ParentFollower {
    /// A follower of a link, resuming from `state` (as restored from the store).
    pub fn new(link: ParentLink, state: ParentState) -> Self {
        ParentFollower {
            link,
            state,
            reported_this_run: false,
            pending: VecDeque::new(),
            snapshots: 0,
            caught_up: false,
        }
    }

    /// How many snapshots the parent started sending during this run (a delta resync
    /// leaves it unchanged). A snapshot into a view that matches no route yet (a new
    /// node's first, or one after an interrupted snapshot) is not counted: it replaces
    /// nothing ([`strata_protocol::sync::LinkEvent::SnapshotStarted`] is not raised).
    pub fn snapshots_received(&self) -> u64 {
        self.snapshots
    }

    /// The protocol's link.
    pub fn link(&self) -> &ParentLink {
        &self.link
    }

    /// The protocol's link, to push reports into.
    pub fn link_mut(&mut self) -> &mut ParentLink {
        &mut self.link
    }

    /// What the node keeps about its parent.
    pub fn state(&self) -> &ParentState {
        &self.state
    }

    /// Whether this node holds everything its parent held when the current connection
    /// subscribed (its first delta or snapshot is applied): revocations included.
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }

    /// Whether the session is open.
    pub fn is_open(&self) -> bool {
        self.link.is_open()
    }

    /// Queues a report for the parent.
    pub fn push_report(&mut self, now: Instant, report: Report) {
        self.link.push_report(now, report);
    }

    /// Sends the queued reports with the next transmit, not after the flush interval:
    /// for reports the caller coalesced already (a relay's summary tick).
    pub fn flush_reports(&mut self) {
        self.link.flush_reports();
    }

    /// The connection to the parent is up.
    pub fn handle_connected(&mut self, now: Instant, via: LinkPath) {
        self.caught_up = false;
        self.link.handle_connected(now, via);
    }

    /// A message from the parent.
    pub fn handle_message(&mut self, now: Instant, msg: ParentToChild) {
        self.link.handle_message(now, msg);
    }

    /// The connection to the parent is gone.
    pub fn handle_disconnected(&mut self) {
        self.caught_up = false;
        self.link.handle_disconnected();
    }

    /// Handles the link's timer if it is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.link.poll_timeout().is_some_and(|t| t <= now) {
            self.link.handle_timeout(now);
        }
    }

    /// When [`ParentFollower::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.link.poll_timeout()
    }

    /// The next thing the parent's events mean, applying changes to `log` and staging
    /// what must be durable into `batch`.
    pub fn poll(&mut self, log: &mut ObjectLog, batch: &mut Batch) -> Option<Followed> {
        loop {
            if let Some(next) = self.pending.pop_front() {
                return Some(next);
            }
            let event = self.link.poll_event()?;
            self.follow(log, batch, event);
        }
    }

    /// Messages for the parent. Call only once the last batch is durable.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<ChildToParent> {
        self.link.poll_transmit(now)
    }

    fn follow(&mut self, log: &mut ObjectLog, batch: &mut Batch, event: LinkEvent) {
        let next = log.head().next();
        match event {
            LinkEvent::Connected {
                incarnation,
                labels,
                ..
            } => {
                self.inherit(labels, batch);
                if self.state.parent_incarnation != Some(incarnation) || !self.reported_this_run {
                    self.reported_this_run = true;
                    self.state.parent_incarnation = Some(incarnation);
                    batch.parent = Some(self.state.clone());
                    self.pending.push_back(Followed::ReportAll);
                }
            }
            LinkEvent::Labels(labels) => self.inherit(labels, batch),
            LinkEvent::Apply(change) => {
                // Staging above the head cannot fail. A batch arriving in parts is
                // staged at the next position and committed only when whole, so this
                // node's own children never see half of it.
                let _ = log.stage(next, change.clone());
                self.pending.push_back(Followed::Changed(change));
            }
            LinkEvent::Advanced(cursor) => {
                log.commit(next);
                log.parent_index_mut().record(next, cursor, true);
                self.caught_up = true;
                self.state.cursor = cursor;
                batch.parent = Some(self.state.clone());
            }
            LinkEvent::SnapshotStarted => {
                self.snapshots += 1;
                self.state.route = None;
                batch.parent = Some(self.state.clone());
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
                self.pending.extend(
                    gone.into_iter()
                        .map(|k| Followed::Changed(Change::Delete(k))),
                );
                let _ = log.finish_snapshot(next, &keep);
                log.parent_index_mut().record(next, cursor, false);
                self.caught_up = true;
                self.state.cursor = cursor;
                self.state.route = Some(route);
                batch.parent = Some(self.state.clone());
            }
            LinkEvent::Closed { error, retry_after } => {
                self.pending
                    .push_back(Followed::Closed { error, retry_after });
            }
        }
    }

    fn inherit(&mut self, labels: Labels, batch: &mut Batch) {
        if labels != self.state.inherited {
            self.state.inherited = labels.clone();
            batch.parent = Some(self.state.clone());
            self.pending.push_back(Followed::Labels(labels));
        }
    }
}
