//! The child's side of the link to its parent.

mod config;
mod events;

pub use self::config::LinkConfig;
pub use self::events::LinkEvent;

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use super::SessionError;
use super::liveness::{Liveness, LivenessAction};
use super::reports::ReportOutbox;
use crate::model::{Cursor, ObjectKey, Position};
use crate::time::Instant;
use crate::wire::{
    Change, ChildToParent, Delta, ErrorCode, Hello, LinkPath, PATH_VERSION, ParentToChild,
    ProtocolVersion, REPLICA_VERSION, Report, RouteId, Snapshot, StreamMark,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Disconnected,
    AwaitWelcome,
    Open,
}

#[derive(Debug)]
struct PendingDelta {
    to: Position,
    next_part: u32,
}

#[derive(Debug)]
struct PendingSnapshot {
    at: Cursor,
    route: RouteId,
    next_part: u32,
    keep: BTreeSet<ObjectKey>,
}

/// The child's side of its link to the parent, across reconnections: handshake,
/// downsync applied strictly in order, acks, gap recovery, the report outbox, liveness.
///
/// The durable state is the [`Cursor`] and the [`RouteId`] (both handed out in events);
/// a restarted child passes them back to [`ParentLink::new`] and resumes without a
/// relist.
///
/// Call order:
/// 1. [`ParentLink::handle_connected`] when a transport connection is up,
///    [`ParentLink::handle_disconnected`] when it is gone;
/// 2. [`ParentLink::handle_message`] for each message, [`ParentLink::handle_timeout`]
///    when [`ParentLink::poll_timeout`] passes, [`ParentLink::push_report`] for local
///    changes;
/// 3. drain [`ParentLink::poll_event`] and persist what it hands out;
/// 4. drain [`ParentLink::poll_transmit`];
/// 5. re-arm the timer with [`ParentLink::poll_timeout`].
#[derive(Debug)]
pub struct ParentLink {
    config: LinkConfig,
    phase: Phase,
    cursor: Cursor,
    route: Option<RouteId>,
    epoch: u32,
    expected_seq: u64,
    applied_seq: Option<u64>,
    ack_due: bool,
    subscribed_at: Instant,
    delta: Option<PendingDelta>,
    snapshot: Option<PendingSnapshot>,
    /// The parent's heartbeat named frames we have not seen; resubscribe at the
    /// deadline unless they arrive.
    behind: Option<(StreamMark, Instant)>,
    outbox: ReportOutbox,
    liveness: Liveness,
    control: VecDeque<ChildToParent>,
    events: VecDeque<LinkEvent>,
    ping_nonce: u64,
    /// The version the parent chose (0 before its first welcome).
    version: ProtocolVersion,
    /// What positions of a replicated parent's log stand for in its own
    /// ([`ParentToChild::GrandparentCursor`]), newest last: `(parent cursor, grandparent cursor)`.
    hints: VecDeque<(Cursor, Cursor)>,
    /// The epoch whose subscription named a grandparent cursor ([`ChildToParent::Resume`]):
    /// its first delta may start from another replica's log.
    resumed_epoch: Option<u32>,
    /// How the current connection reached the parent, told to it after the welcome
    /// ([`ChildToParent::LinkPath`]).
    via: LinkPath,
}

/// How many [`ParentToChild::GrandparentCursor`] hints a link keeps.
const HINTS: usize = 16;

impl ParentLink {
    /// A disconnected link that will resume from `cursor` with a view cut by `route`
    /// (`None` for a child without a view: it will be sent a snapshot).
    pub fn new(now: Instant, config: LinkConfig, cursor: Cursor, route: Option<RouteId>) -> Self {
        let liveness = Liveness::new(now, config.heartbeat, config.idle_timeout);
        let outbox = ReportOutbox::new(config.reports.clone());
        ParentLink {
            config,
            phase: Phase::Disconnected,
            cursor,
            route,
            epoch: 0,
            expected_seq: 0,
            applied_seq: None,
            ack_due: false,
            subscribed_at: now,
            delta: None,
            snapshot: None,
            behind: None,
            outbox,
            liveness,
            control: VecDeque::new(),
            events: VecDeque::new(),
            ping_nonce: 0,
            version: 0,
            hints: VecDeque::new(),
            resumed_epoch: None,
            via: LinkPath::Direct,
        }
    }

    /// The durable cursor: everything up to it is applied.
    pub fn cursor(&self) -> Cursor {
        self.cursor
    }

    /// The route the child's view was cut with, if it matches one.
    pub fn route(&self) -> Option<RouteId> {
        self.route
    }

    /// Whether the parent has welcomed us on the current connection.
    pub fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Reports queued or in flight.
    pub fn unacked_reports(&self) -> usize {
        self.outbox.unacked_len()
    }

    /// A transport connection is up, reaching the parent by `via`: say hello (and,
    /// once welcomed by a parent of protocol version 5 or newer, how the connection
    /// reached it).
    pub fn handle_connected(&mut self, now: Instant, via: LinkPath) {
        self.reset_connection();
        self.via = via;
        self.phase = Phase::AwaitWelcome;
        self.liveness = Liveness::new(now, self.config.heartbeat, self.config.idle_timeout);
        let hello = Hello {
            min_version: self.config.versions.0,
            max_version: self.config.versions.1,
            node: self.config.node.clone(),
            role: self.config.role,
            run: self.config.run,
        };
        self.control.push_back(match &self.config.replica {
            None => ChildToParent::Hello(hello),
            Some(replica) => ChildToParent::ReplicaHello {
                hello: Hello {
                    min_version: REPLICA_VERSION,
                    ..hello
                },
                replica: replica.clone(),
            },
        });
    }

    /// The transport connection is gone. Unfinished deltas and snapshots are abandoned
    /// (what was applied of them stays: it is never older than the cursor).
    pub fn handle_disconnected(&mut self) {
        self.reset_connection();
        self.phase = Phase::Disconnected;
    }

    fn reset_connection(&mut self) {
        self.control.clear();
        self.delta = None;
        self.snapshot = None;
        self.behind = None;
        self.ack_due = false;
        self.applied_seq = None;
        self.outbox.on_disconnected();
    }

    /// Queues a report for the parent, replacing an unsent one with the same key.
    pub fn push_report(&mut self, now: Instant, report: Report) {
        self.outbox.push(now, report);
    }

    /// Sends the pending reports with the next transmit rather than after the flush
    /// interval (see [`ReportOutbox::flush`]).
    pub fn flush_reports(&mut self) {
        self.outbox.flush();
    }

    /// Handles one message from the parent.
    pub fn handle_message(&mut self, now: Instant, msg: ParentToChild) {
        if self.phase == Phase::Disconnected {
            return;
        }
        self.liveness.on_receive(now);
        if let Err(e) = self.dispatch(now, msg) {
            self.close(e, None, true);
        }
    }

    fn dispatch(&mut self, now: Instant, msg: ParentToChild) -> Result<(), SessionError> {
        match (self.phase, msg) {
            (Phase::AwaitWelcome, ParentToChild::Welcome(w)) => {
                if !(self.config.versions.0..=self.config.versions.1).contains(&w.version) {
                    return Err(SessionError::new(
                        ErrorCode::UnsupportedVersion,
                        format!("parent chose version {}, which we do not speak", w.version),
                    ));
                }
                self.phase = Phase::Open;
                self.version = w.version;
                self.liveness.set_intervals(
                    Duration::from_millis(w.heartbeat_ms),
                    Duration::from_millis(w.idle_timeout_ms),
                );
                self.outbox.on_connected();
                if w.version >= PATH_VERSION {
                    self.control.push_back(ChildToParent::LinkPath(self.via));
                }
                self.subscribe(now);
                self.events.push_back(LinkEvent::Connected {
                    parent: w.parent,
                    version: w.version,
                    incarnation: w.incarnation,
                    labels: w.labels,
                });
                Ok(())
            }
            (
                _,
                ParentToChild::Refuse {
                    code,
                    reason,
                    retry_after_ms,
                }
                | ParentToChild::Goodbye {
                    code,
                    reason,
                    retry_after_ms,
                },
            ) => {
                self.close(
                    SessionError::new(code, format!("parent closed the session: {reason}")),
                    retry_after_ms.map(Duration::from_millis),
                    false,
                );
                Ok(())
            }
            (Phase::Open, ParentToChild::Delta(d)) => {
                self.on_delta(now, d);
                Ok(())
            }
            (Phase::Open, ParentToChild::Snapshot(s)) => {
                self.on_snapshot(now, s);
                Ok(())
            }
            (Phase::Open, ParentToChild::ReportsAck { epoch, seq }) => {
                self.outbox.handle_ack(epoch, seq);
                Ok(())
            }
            (Phase::Open, ParentToChild::Ping { nonce, mark }) => {
                self.control.push_back(ChildToParent::Pong { nonce });
                self.on_mark(now, mark);
                Ok(())
            }
            (Phase::Open, ParentToChild::Labels { labels }) => {
                self.events.push_back(LinkEvent::Labels(labels));
                Ok(())
            }
            (
                Phase::Open,
                ParentToChild::GrandparentCursor {
                    log,
                    position,
                    grandparent,
                },
            ) => {
                self.hints.retain(|(c, _)| c.log == log);
                self.hints
                    .push_back((Cursor { log, position }, grandparent));
                while self.hints.len() > HINTS {
                    self.hints.pop_front();
                }
                Ok(())
            }
            (_, ParentToChild::Pong { .. }) => Ok(()),
            // Renewal answers are the driver's (it holds the key the request was for).
            (_, ParentToChild::Renewal(_)) => Ok(()),
            (phase, other) => Err(SessionError::new(
                ErrorCode::ProtocolViolation,
                format!("unexpected {} while {phase:?}", parent_msg_name(&other)),
            )),
        }
    }

    /// Starts a new subscription epoch from the durable cursor.
    fn subscribe(&mut self, now: Instant) {
        self.epoch = self.epoch.wrapping_add(1);
        self.expected_seq = 0;
        self.applied_seq = None;
        self.ack_due = false;
        self.delta = None;
        self.snapshot = None;
        self.behind = None;
        self.subscribed_at = now;
        // Moving between replicas of a replicated parent: name what the view stands for
        // grandparent, so that another replica can answer with a delta.
        self.resumed_epoch = None;
        if self.version >= REPLICA_VERSION
            && let Some(&(_, grandparent)) =
                self.hints.iter().rev().find(|(c, _)| *c == self.cursor)
        {
            self.control
                .push_back(ChildToParent::Resume { grandparent });
            self.resumed_epoch = Some(self.epoch);
        }
        self.control.push_back(ChildToParent::Subscribe {
            epoch: self.epoch,
            after: self.cursor,
            route: self.route,
        });
    }

    /// Checks a frame's place in the stream. `true` when it is the next one; a gap
    /// starts a new subscription; stale epochs and duplicates are dropped.
    fn accept_frame(&mut self, now: Instant, epoch: u32, seq: u64) -> bool {
        if epoch != self.epoch || seq < self.expected_seq {
            return false;
        }
        if seq > self.expected_seq {
            self.subscribe(now);
            return false;
        }
        self.expected_seq += 1;
        self.applied_seq = Some(seq);
        self.ack_due = true;
        if self
            .behind
            .is_some_and(|(mark, _)| self.expected_seq >= mark.next_seq)
        {
            self.behind = None;
        }
        true
    }

    fn on_delta(&mut self, now: Instant, d: Delta) {
        if !self.accept_frame(now, d.epoch, d.seq) {
            return;
        }
        let in_order = if d.part == 0 {
            (d.log == self.cursor.log && d.from == self.cursor.position)
                // The first answer to a subscription that named a grandparent cursor: a
                // replica that translated it resumes us on its own log.
                || (d.log != self.cursor.log
                    && self.resumed_epoch == Some(d.epoch)
                    && d.seq == 0)
        } else {
            self.delta
                .as_ref()
                .is_some_and(|p| p.to == d.to && p.next_part == d.part)
        };
        if !in_order {
            self.subscribe(now);
            return;
        }
        self.snapshot = None;
        let pending = self.delta.get_or_insert(PendingDelta {
            to: d.to,
            next_part: 0,
        });
        pending.next_part += 1;
        self.events
            .extend(d.changes.into_iter().map(LinkEvent::Apply));
        if d.last {
            self.delta = None;
            self.cursor = Cursor {
                log: d.log,
                position: d.to,
            };
            self.events.push_back(LinkEvent::Advanced(self.cursor));
        }
    }

    fn on_snapshot(&mut self, now: Instant, s: Snapshot) {
        if !self.accept_frame(now, s.epoch, s.seq) {
            return;
        }
        if s.part == 0 {
            self.delta = None;
            if self.route.take().is_some() {
                self.events.push_back(LinkEvent::SnapshotStarted);
            }
            self.snapshot = Some(PendingSnapshot {
                at: s.at,
                route: s.route,
                next_part: 0,
                keep: BTreeSet::new(),
            });
        }
        let Some(pending) = self
            .snapshot
            .as_mut()
            .filter(|p| p.at == s.at && p.route == s.route && p.next_part == s.part)
        else {
            self.subscribe(now);
            return;
        };
        pending.next_part += 1;
        for object in s.objects {
            pending.keep.insert(object.key().clone());
            self.events
                .push_back(LinkEvent::Apply(Change::Upsert(object)));
        }
        if s.last
            && let Some(done) = self.snapshot.take()
        {
            self.cursor = done.at;
            self.route = Some(done.route);
            self.events.push_back(LinkEvent::SnapshotDone {
                cursor: done.at,
                route: done.route,
                keep: done.keep,
            });
        }
    }

    fn on_mark(&mut self, now: Instant, mark: Option<StreamMark>) {
        let overdue = now >= self.subscribed_at + self.config.resubscribe_after;
        match mark {
            // The parent never saw our subscription (or lost it): ask again.
            None => {
                if overdue {
                    self.subscribe(now);
                }
            }
            Some(m) if m.epoch != self.epoch => {
                if overdue {
                    self.subscribe(now);
                }
            }
            Some(m) if m.next_seq > self.expected_seq => {
                // Frames travel on another stream than heartbeats and may still be on
                // their way: give them until the deadline.
                if self.behind.is_none() {
                    self.behind = Some((m, now + self.config.resubscribe_after));
                }
            }
            Some(_) => {}
        }
    }

    /// Handles the expiry of the timer from [`ParentLink::poll_timeout`].
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Disconnected {
            return;
        }
        if self.behind.is_some_and(|(_, deadline)| now >= deadline) {
            self.subscribe(now);
        }
        match self.liveness.poll(now) {
            LivenessAction::TimedOut => self.close(
                SessionError::new(
                    ErrorCode::IdleTimeout,
                    format!(
                        "nothing heard from the parent for {:?}",
                        self.liveness_idle()
                    ),
                ),
                None,
                false,
            ),
            LivenessAction::SendPing if self.phase == Phase::Open => {
                self.ping_nonce += 1;
                self.control.push_back(ChildToParent::Ping {
                    nonce: self.ping_nonce,
                });
                // Acks may have been lost: repeat the last one with every heartbeat.
                self.ack_due |= self.applied_seq.is_some();
            }
            _ => {}
        }
    }

    fn liveness_idle(&self) -> Duration {
        self.config.idle_timeout
    }

    /// When [`ParentLink::handle_timeout`] or [`ParentLink::poll_transmit`] next has
    /// something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Disconnected {
            return None;
        }
        // A heartbeat is only sent on an open link: before the welcome, asking to be
        // woken when one is due would wake the driver again and again at that instant.
        let liveness = match self.phase {
            Phase::Open => self.liveness.next_deadline(),
            _ => self.liveness.idle_deadline(),
        };
        [
            Some(liveness),
            self.behind.map(|(_, d)| d),
            self.outbox.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<LinkEvent> {
        self.events.pop_front()
    }

    /// The next message to send: control first, then the ack of everything applied so
    /// far, then reports.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<ChildToParent> {
        let msg = self.control.pop_front().or_else(|| {
            if self.phase != Phase::Open {
                return None;
            }
            if self.ack_due
                && let Some(seq) = self.applied_seq
            {
                self.ack_due = false;
                // The reports pending ride in the ack's packet (an agent's status of
                // what it just applied): one packet, not two 100 ms apart.
                self.outbox.flush();
                return Some(ChildToParent::Ack {
                    epoch: self.epoch,
                    seq,
                    cursor: self.cursor,
                });
            }
            let version = self.version;
            self.outbox
                .poll_transmit(now)
                .map(|r| ChildToParent::Reports(r.for_version(version)))
        });
        if msg.is_some() {
            self.liveness.on_send(now);
        }
        msg
    }

    fn close(&mut self, error: SessionError, retry_after: Option<Duration>, tell_parent: bool) {
        self.reset_connection();
        if tell_parent {
            self.control.push_back(ChildToParent::Goodbye {
                code: error.code,
                reason: error.reason.clone(),
            });
        }
        self.phase = Phase::Disconnected;
        self.events
            .push_back(LinkEvent::Closed { error, retry_after });
    }
}

fn parent_msg_name(msg: &ParentToChild) -> &'static str {
    match msg {
        ParentToChild::Welcome(_) => "welcome",
        ParentToChild::Refuse { .. } => "refuse",
        ParentToChild::Delta(_) => "delta",
        ParentToChild::Snapshot(_) => "snapshot",
        ParentToChild::ReportsAck { .. } => "reports ack",
        ParentToChild::Ping { .. } => "ping",
        ParentToChild::Pong { .. } => "pong",
        ParentToChild::Goodbye { .. } => "goodbye",
        ParentToChild::Labels { .. } => "labels",
        ParentToChild::GrandparentCursor { .. } => "grandparent cursor",
        ParentToChild::Renewal(_) => "renewal",
    }
}
