//! The parent's side of one child's connection.

use std::collections::VecDeque;
use std::time::Duration;

use super::liveness::{Liveness, LivenessAction};
use super::log::ObjectLog;
use super::reports::ReportInbox;
use super::upstream::Translation;
use super::{SessionError, SharedRoute, wire_estimate};
use crate::model::{Cursor, ObjectKey, Position};
use crate::time::Instant;
use crate::wire::{
    Change, ChildToParent, Delta, ErrorCode, Hello, LABELS_VERSION, MAX_PROTOCOL_VERSION,
    MIN_PROTOCOL_VERSION, ParentToChild, ProtocolVersion, REPLICA_VERSION, Report, RouteId,
    Snapshot, StreamMark, Welcome,
};

/// Tuning of a parent's sessions.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The parent's node name, told to children in the welcome.
    pub parent: String,
    /// Identifies the parent's durable state (see [`Welcome::incarnation`]).
    pub incarnation: u64,
    /// Labels every cluster below this parent carries (see [`Welcome::labels`]).
    pub labels: crate::model::Labels,
    /// Heartbeat interval when a side is otherwise silent.
    pub heartbeat: Duration,
    /// Silence after which the peer is considered gone.
    pub idle_timeout: Duration,
    /// Most unacknowledged downsync bytes (estimated) in flight to one child.
    pub window_bytes: usize,
    /// Soft limit of one downsync frame; a part closes once it reaches this size.
    pub part_bytes: usize,
    /// The protocol versions this parent speaks, lowest and highest:
    /// [`MIN_PROTOCOL_VERSION`] and [`MAX_PROTOCOL_VERSION`] unless narrowed (tests of
    /// a hierarchy of mixed versions).
    pub versions: (ProtocolVersion, ProtocolVersion),
}

/// The longest a parent lets a report ack wait for a message to ride with (it rides
/// with the heartbeat at the latest): half of how long a child waits for an ack before
/// it resends ([`crate::sync::ReportsConfig::retransmit_after`], 10 s by default).
const MAX_ACK_DEFERRAL: Duration = Duration::from_secs(5);

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            parent: String::new(),
            incarnation: 0,
            labels: crate::model::Labels::new(),
            heartbeat: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(20),
            window_bytes: 4 << 20,
            part_bytes: 256 << 10,
            versions: (MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION),
        }
    }
}

/// What a [`ChildSession`] tells its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// The handshake completed.
    Opened {
        /// The version both sides speak.
        version: ProtocolVersion,
        /// The child's hello.
        hello: Hello,
        /// Which replica of a replicated child this is (from a
        /// [`ChildToParent::ReplicaHello`]); `None` for an unreplicated child.
        replica: Option<String>,
    },
    /// The child durably applied everything up to this cursor. Persist it: it bounds
    /// how far the log may be compacted without forcing the child into a snapshot.
    Acked(Cursor),
    /// Reports from the child, in order. Persist (or merge) them before the next
    /// [`ChildSession::poll_transmit`]: that call acknowledges them.
    Reports(Vec<Report>),
    /// The session is over; send nothing more.
    Closed(SessionError),
}

#[derive(Debug)]
enum Phase {
    AwaitHello,
    Open,
    Closed,
}

/// What the downsync stream is doing.
#[derive(Debug)]
enum Stream {
    /// Subscribed, but the log is not serving yet (a relay that has not synced with its
    /// own parent since it lost its disk): how to start is decided once it is.
    Undecided {
        after: Cursor,
        route: Option<RouteId>,
        /// The grandparent cursor the child's view stands for, when it named one.
        upstream: Option<Cursor>,
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
struct Subscription {
    epoch: u32,
    next_seq: u64,
    /// The child's position once everything sent so far is applied.
    sent: Position,
    /// What the child has durably applied: its cursor when it subscribed, then its acks.
    durable: Cursor,
    stream: Stream,
    inflight: VecDeque<(u64, usize)>,
    inflight_bytes: usize,
}

/// The parent's side of one child's session: handshake, downsync of the child's routed
/// view of an [`ObjectLog`], report intake and liveness.
///
/// The session does not own the log: the driver passes it to the calls that read it,
/// so one log serves every child.
///
/// Call order, after every input:
/// 1. [`ChildSession::handle_message`] for each message received, and
///    [`ChildSession::handle_timeout`] when [`ChildSession::poll_timeout`] passes;
/// 2. drain [`ChildSession::poll_event`], persisting what it hands out;
/// 3. drain [`ChildSession::poll_transmit`] (it acknowledges what step 2 persisted);
/// 4. re-arm the timer with [`ChildSession::poll_timeout`].
///
/// When the log gains commits, or the child's route changes
/// ([`ChildSession::set_route`]), go to step 3.
#[derive(Debug)]
pub struct ChildSession {
    config: SessionConfig,
    node: String,
    phase: Phase,
    route: SharedRoute,
    sub: Option<Subscription>,
    /// The grandparent cursor the child named for its next subscription
    /// ([`ChildToParent::Resume`]).
    resume: Option<Cursor>,
    /// Until when to hold the decision between delta and snapshot (see
    /// [`ChildSession::hold_downsync`]).
    hold: Option<Instant>,
    /// A downsync frame built but sent after the [`ParentToChild::Upstream`] hint
    /// naming the position it reaches (see `next_bulk`).
    after_hint: Option<ParentToChild>,
    acked: Option<Cursor>,
    reports: ReportInbox,
    liveness: Liveness,
    control: VecDeque<ParentToChild>,
    events: VecDeque<SessionEvent>,
    ping_nonce: u64,
    /// The version negotiated in the handshake (0 before it).
    version: ProtocolVersion,
}

impl ChildSession {
    /// A session for the child whose authenticated node name (from its certificate) is
    /// `node`, routed by `route`.
    pub fn new(now: Instant, node: String, route: SharedRoute, config: SessionConfig) -> Self {
        let liveness = Liveness::new(now, config.heartbeat, config.idle_timeout);
        ChildSession {
            config,
            node,
            phase: Phase::AwaitHello,
            route,
            sub: None,
            resume: None,
            hold: None,
            after_hint: None,
            acked: None,
            reports: ReportInbox::new(),
            liveness,
            control: VecDeque::new(),
            events: VecDeque::new(),
            ping_nonce: 0,
            version: 0,
        }
    }

    /// The child's node name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The last cursor the child acknowledged in this session.
    pub fn acked(&self) -> Option<Cursor> {
        self.acked
    }

    /// Whether the session has closed.
    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// The lowest position of `log` this session still needs history for: compacting
    /// above it would make the session's deltas unsound, or force the child into a
    /// snapshot should this connection drop before it acknowledges what was sent.
    /// `None` when the session needs nothing.
    pub fn retention_floor(&self, log: &ObjectLog) -> Option<Position> {
        let sub = self.sub.as_ref()?;
        let durable = (sub.durable.log == log.id()).then_some(sub.durable.position);
        let stream = match &sub.stream {
            Stream::Snapshot { at, .. } => Some(*at),
            Stream::Undecided { .. } => None,
            _ => Some(sub.sent),
        };
        [durable, stream].into_iter().flatten().min()
    }

    /// Holds the start of the downsync until [`ChildSession::release_downsync`] or
    /// `until`, whichever comes first: the driver does not know the child's route yet
    /// (a child that moved here from another replica of this tier is about to report
    /// its clusters), and deciding now would send it a snapshot cut with a route that
    /// is about to change.
    pub fn hold_downsync(&mut self, until: Instant) {
        self.hold = Some(until);
    }

    /// Ends a [`ChildSession::hold_downsync`].
    pub fn release_downsync(&mut self) {
        self.hold = None;
    }

    /// Changes the child's route. A different route id restarts the downsync with a
    /// snapshot, which replaces the child's view exactly.
    pub fn set_route(&mut self, route: SharedRoute, log: &ObjectLog) {
        let changed = route.id() != self.route.id();
        self.route = route;
        if let Some(sub) = &mut self.sub
            && changed
            && !matches!(sub.stream, Stream::Undecided { .. })
        {
            sub.stream = Stream::Snapshot {
                at: log.head(),
                resume: None,
                part: 0,
            };
        }
    }

    /// Changes the labels every cluster below the parent carries. A child that has not
    /// been welcomed yet learns them in its welcome; an open session is sent them
    /// ([`ParentToChild::Labels`]), or, when the child speaks a protocol version without
    /// that message, closed so that it reconnects and learns them from the welcome.
    pub fn set_labels(&mut self, labels: crate::model::Labels) {
        if labels == self.config.labels {
            return;
        }
        self.config.labels = labels;
        if !matches!(self.phase, Phase::Open) {
            return;
        }
        if self.version >= LABELS_VERSION {
            self.control.push_back(ParentToChild::Labels {
                labels: self.config.labels.clone(),
            });
        } else {
            self.close(SessionError::new(
                ErrorCode::Replaced,
                format!(
                    "the parent's labels changed and protocol version {} cannot carry them; reconnect to learn them",
                    self.version
                ),
            ));
        }
    }

    /// Handles one message from the child. An error closes the session; the driver
    /// sends what [`ChildSession::poll_transmit`] still yields (a goodbye) and drops it.
    pub fn handle_message(&mut self, now: Instant, msg: ChildToParent) {
        if matches!(self.phase, Phase::Closed) {
            return;
        }
        self.liveness.on_receive(now);
        if let Err(e) = self.dispatch(msg) {
            self.close(e);
        }
    }

    fn dispatch(&mut self, msg: ChildToParent) -> Result<(), SessionError> {
        match (&self.phase, msg) {
            (Phase::AwaitHello, ChildToParent::Hello(hello)) => self.on_hello(hello, None),
            (Phase::AwaitHello, ChildToParent::ReplicaHello { hello, replica }) => {
                if !crate::wire::valid_replica(&replica) {
                    return Err(SessionError::new(
                        ErrorCode::ProtocolViolation,
                        format!(
                            "replica id {replica:?} is not 1 to {} bytes of [a-z0-9-]",
                            crate::wire::MAX_REPLICA_LEN
                        ),
                    ));
                }
                if hello.max_version < crate::wire::REPLICA_VERSION {
                    return Err(SessionError::new(
                        ErrorCode::UnsupportedVersion,
                        format!(
                            "a replica hello needs protocol version {} but the child speaks at most {}",
                            crate::wire::REPLICA_VERSION,
                            hello.max_version
                        ),
                    ));
                }
                self.on_hello(hello, Some(replica))
            }
            (Phase::AwaitHello, other) => Err(SessionError::new(
                ErrorCode::ProtocolViolation,
                format!("expected hello, got {}", child_msg_name(&other)),
            )),
            (_, ChildToParent::Hello(_) | ChildToParent::ReplicaHello { .. }) => {
                Err(SessionError::new(
                    ErrorCode::ProtocolViolation,
                    "second hello on an open session",
                ))
            }
            (
                _,
                ChildToParent::Subscribe {
                    epoch,
                    after,
                    route,
                },
            ) => {
                self.on_subscribe(epoch, after, route);
                Ok(())
            }
            (_, ChildToParent::Resume { upstream }) => {
                if self.version >= REPLICA_VERSION {
                    self.resume = Some(upstream);
                }
                Ok(())
            }
            (_, ChildToParent::Ack { epoch, seq, cursor }) => self.on_ack(epoch, seq, cursor),
            (_, ChildToParent::Reports(batch)) => {
                if let Some(items) = self.reports.handle(batch.received()) {
                    self.events.push_back(SessionEvent::Reports(items));
                }
                Ok(())
            }
            (_, ChildToParent::Ping { nonce }) => {
                self.control.push_back(ParentToChild::Pong { nonce });
                Ok(())
            }
            (_, ChildToParent::Pong { .. }) => Ok(()),
            // Renewal requests are answered by the driver, which holds the signing CA;
            // one that reaches the session is ignored.
            (_, ChildToParent::Renew { .. }) => Ok(()),
            (_, ChildToParent::Goodbye { code, reason }) => {
                self.phase = Phase::Closed;
                self.events.push_back(SessionEvent::Closed(SessionError {
                    code,
                    reason: format!("child said goodbye: {reason}"),
                }));
                Ok(())
            }
        }
    }

    fn on_hello(&mut self, hello: Hello, replica: Option<String>) -> Result<(), SessionError> {
        if hello.node != self.node {
            return Err(SessionError::new(
                ErrorCode::UnknownChild,
                format!(
                    "hello names node {:?} but the certificate names {:?}",
                    hello.node, self.node
                ),
            ));
        }
        let (min, max) = self.config.versions;
        let version = hello.max_version.min(max);
        if version < hello.min_version || version < min {
            return Err(SessionError::new(
                ErrorCode::UnsupportedVersion,
                format!(
                    "child speaks versions {}..={}, this parent {min}..={max}",
                    hello.min_version, hello.max_version,
                ),
            ));
        }
        self.phase = Phase::Open;
        self.version = version;
        self.control.push_back(ParentToChild::Welcome(Welcome {
            version,
            parent: self.config.parent.clone(),
            heartbeat_ms: duration_ms(self.config.heartbeat),
            idle_timeout_ms: duration_ms(self.config.idle_timeout),
            incarnation: self.config.incarnation,
            labels: self.config.labels.clone(),
        }));
        self.events.push_back(SessionEvent::Opened {
            version,
            hello,
            replica,
        });
        Ok(())
    }

    fn on_subscribe(&mut self, epoch: u32, after: Cursor, route: Option<RouteId>) {
        // A frame of the previous subscription's stream would be dropped as stale.
        if self.sub.as_ref().is_none_or(|s| epoch > s.epoch) {
            self.after_hint = None;
        }
        // A delayed or duplicated subscribe must not restart a newer subscription.
        if self.sub.as_ref().is_some_and(|s| epoch <= s.epoch) {
            return;
        }
        self.sub = Some(Subscription {
            epoch,
            next_seq: 0,
            sent: after.position,
            durable: after,
            stream: Stream::Undecided {
                after,
                route,
                upstream: self.resume.take(),
            },
            inflight: VecDeque::new(),
            inflight_bytes: 0,
        });
    }

    fn on_ack(&mut self, epoch: u32, seq: u64, cursor: Cursor) -> Result<(), SessionError> {
        let Some(sub) = &mut self.sub else {
            return Ok(());
        };
        if epoch != sub.epoch {
            return Ok(());
        }
        if seq >= sub.next_seq {
            return Err(SessionError::new(
                ErrorCode::ProtocolViolation,
                format!("ack of frame {seq}, but only {} were sent", sub.next_seq),
            ));
        }
        while sub.inflight.front().is_some_and(|(s, _)| *s <= seq) {
            if let Some((_, bytes)) = sub.inflight.pop_front() {
                sub.inflight_bytes -= bytes;
            }
        }
        sub.durable = cursor;
        if self.acked.is_none_or(|a| a != cursor) {
            self.acked = Some(cursor);
            self.events.push_back(SessionEvent::Acked(cursor));
        }
        Ok(())
    }

    /// Handles the expiry of the timer from [`ChildSession::poll_timeout`].
    pub fn handle_timeout(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Closed) {
            return;
        }
        match self.liveness.poll(now) {
            LivenessAction::TimedOut => self.close(SessionError::new(
                ErrorCode::IdleTimeout,
                format!(
                    "nothing heard from {} for {:?}",
                    self.node, self.config.idle_timeout
                ),
            )),
            LivenessAction::SendPing if matches!(self.phase, Phase::Open) => {
                self.ping_nonce += 1;
                let mark = self.sub.as_ref().map(|s| StreamMark {
                    epoch: s.epoch,
                    next_seq: s.next_seq,
                });
                self.control.push_back(ParentToChild::Ping {
                    nonce: self.ping_nonce,
                    mark,
                });
                // The ack deferred until now rides with the heartbeat; else the last one
                // again (acks may have been lost).
                if let Some((epoch, seq)) = self.reports.take_or_repeat_ack() {
                    self.control
                        .push_back(ParentToChild::ReportsAck { epoch, seq });
                }
            }
            _ => {}
        }
    }

    /// When [`ChildSession::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // Pings go out only once the session is open: before the hello, only the idle
        // timeout is due (a heartbeat deadline would be handled without moving on).
        match self.phase {
            Phase::Closed => None,
            Phase::AwaitHello => Some(self.liveness.idle_deadline()),
            Phase::Open => Some(match self.hold {
                Some(h) => h.min(self.liveness.next_deadline()),
                None => self.liveness.next_deadline(),
            }),
        }
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// The next message to send. Control messages (acks, pongs, pings) come before
    /// bulk downsync, which is bounded by the flow-control window.
    pub fn poll_transmit(&mut self, now: Instant, log: &ObjectLog) -> Option<ParentToChild> {
        // An ack that is not urgent waits for a message it can ride with, at the latest
        // the heartbeat; a heartbeat longer than a child waits for an ack before it
        // resends would make it resend, so then every ack goes at once.
        let ack = if self.config.heartbeat <= MAX_ACK_DEFERRAL && self.control.is_empty() {
            self.reports.poll_ack()
        } else {
            self.reports.poll_deferred_ack()
        };
        if let Some((epoch, seq)) = ack {
            self.control
                .push_back(ParentToChild::ReportsAck { epoch, seq });
        }
        let msg = match self.control.pop_front() {
            Some(m) => Some(m),
            None if matches!(self.phase, Phase::Open) => {
                if self.hold.is_some_and(|h| now >= h) {
                    self.hold = None;
                }
                let bulk = self.next_bulk(log);
                if bulk.is_some()
                    && let Some((epoch, seq)) = self.reports.poll_deferred_ack()
                {
                    self.control
                        .push_back(ParentToChild::ReportsAck { epoch, seq });
                }
                bulk
            }
            None => None,
        };
        if msg.is_some() {
            self.liveness.on_send(now);
        }
        msg
    }

    /// Refuses the session before its hello is answered, telling the child why and
    /// when to come back (`retry_after`); the session is then closed. For a parent that
    /// is setting up as many sessions as it will at once ([`ErrorCode::Overloaded`]).
    /// Does nothing once the hello was answered.
    pub fn refuse(&mut self, error: SessionError, retry_after: Duration) {
        if !matches!(self.phase, Phase::AwaitHello) {
            return;
        }
        self.control.clear();
        self.control.push_back(ParentToChild::Refuse {
            code: error.code,
            reason: error.reason.clone(),
            retry_after_ms: Some(u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX)),
        });
        self.phase = Phase::Closed;
        self.events.push_back(SessionEvent::Closed(error));
    }

    fn close(&mut self, error: SessionError) {
        self.control.clear();
        if !matches!(error.code, ErrorCode::IdleTimeout) {
            self.control.push_back(ParentToChild::Goodbye {
                // A code the child's version can decode (`Revoked` is version 4's).
                code: error.code.for_version(self.version),
                reason: error.reason.clone(),
                retry_after_ms: None,
            });
        }
        self.phase = Phase::Closed;
        self.events.push_back(SessionEvent::Closed(error));
    }

    fn next_bulk(&mut self, log: &ObjectLog) -> Option<ParentToChild> {
        if let Some(frame) = self.after_hint.take() {
            return Some(frame);
        }
        let part_bytes = self.config.part_bytes;
        let route = self.route.clone();
        let sub = self.sub.as_mut()?;
        if sub.inflight_bytes >= self.config.window_bytes || !log.is_serving() {
            return None;
        }
        if let Stream::Undecided {
            after,
            route: child_route,
            upstream,
        } = sub.stream
        {
            if self.hold.is_some() {
                return None;
            }
            // Deltas are sound only from a position of this very log that is still
            // covered by its history, for a view cut with the same route; or from a
            // position that stands for the grandparent cursor a child coming from
            // another replica of this tier named (see `upstream.rs`).
            let same_route = child_route == Some(route.id());
            let deltas_ok = after.log == log.id()
                && after.position <= log.head()
                && after.position >= log.floor()
                && same_route;
            let moved_from = upstream
                .filter(|_| same_route && after.log != log.id())
                .map(|u| log.upstream().translate(u));
            sub.stream = match moved_from {
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
                    sub.sent = from;
                    sub.durable = Cursor {
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
        if matches!(sub.stream, Stream::CaughtUp) {
            if log.head() <= sub.sent {
                return None;
            }
            sub.stream = Stream::Delta {
                to: log.head(),
                keys: log.keys_changed(sub.sent, log.head()).into(),
                part: 0,
            };
        }
        let mut reached = None;
        let (msg, bytes) = match &mut sub.stream {
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
                    epoch: sub.epoch,
                    seq: sub.next_seq,
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
                    sub.sent = *at;
                    reached = Some(*at);
                    sub.stream = Stream::CaughtUp;
                }
                (msg, bytes)
            }
            Stream::Delta { to, keys, part } => {
                let mut changes = Vec::new();
                let mut bytes = 64;
                while bytes < part_bytes {
                    let Some(key) = keys.pop_front() else { break };
                    if let Some(change) = delta_change(log, &route, key) {
                        bytes += wire_estimate(&change);
                        changes.push(change);
                    }
                }
                let last = keys.is_empty();
                let msg = ParentToChild::Delta(Delta {
                    epoch: sub.epoch,
                    seq: sub.next_seq,
                    part: *part,
                    log: log.id(),
                    from: sub.sent,
                    to: *to,
                    last,
                    changes,
                });
                *part += 1;
                if last {
                    sub.sent = *to;
                    reached = Some(*to);
                    sub.stream = Stream::CaughtUp;
                }
                (msg, bytes)
            }
        };
        sub.inflight.push_back((sub.next_seq, bytes));
        sub.inflight_bytes += bytes;
        sub.next_seq += 1;
        // A replica tells the child what the position it reached stands for upstream,
        // so that the child can move to another replica with a delta. The hint goes
        // first, on the same stream: whoever applies the frame has the hint.
        if let Some(position) = reached
            && self.version >= REPLICA_VERSION
            && let Some(upstream) = log.upstream().parent_at(position)
        {
            self.after_hint = Some(msg);
            return Some(ParentToChild::Upstream {
                log: log.id(),
                position,
                upstream,
            });
        }
        Some(msg)
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

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn child_msg_name(msg: &ChildToParent) -> &'static str {
    match msg {
        ChildToParent::Hello(_) => "hello",
        ChildToParent::Subscribe { .. } => "subscribe",
        ChildToParent::Ack { .. } => "ack",
        ChildToParent::Reports(_) => "reports",
        ChildToParent::Ping { .. } => "ping",
        ChildToParent::Pong { .. } => "pong",
        ChildToParent::Goodbye { .. } => "goodbye",
        ChildToParent::ReplicaHello { .. } => "replica hello",
        ChildToParent::Resume { .. } => "resume",
        ChildToParent::Renew { .. } => "renew",
    }
}
