//! The parent's side of one child's connection.

mod config;
mod downsync;

pub use self::config::SessionConfig;

use std::collections::VecDeque;
use std::time::Duration;

use self::downsync::{Stream, Subscription};
use super::liveness::{Liveness, LivenessAction};
use super::log::ObjectLog;
use super::reports::ReportInbox;
use super::{SessionError, SharedRoute};
use crate::model::{Cursor, Position};
use crate::time::Instant;
use crate::wire::{
    ChildToParent, ErrorCode, Hello, LABELS_VERSION, LinkPath, ParentToChild, ProtocolVersion,
    REPLICA_VERSION, Report, RouteId, StreamMark, Welcome,
};

/// The longest a parent lets a report ack wait for a message to ride with (it rides
/// with the heartbeat at the latest): half of how long a child waits for an ack before
/// it resends ([`crate::sync::ReportsConfig::retransmit_after`], 10 s by default).
const MAX_ACK_DEFERRAL: Duration = Duration::from_secs(5);

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
    /// The child said how its connection reached this parent ([`ChildToParent::LinkPath`],
    /// protocol version 5).
    LinkPath(LinkPath),
    /// The session is over; send nothing more.
    Closed(SessionError),
}

#[derive(Debug)]
enum Phase {
    AwaitHello,
    Open,
    Closed,
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
    /// A downsync frame built but sent after the [`ParentToChild::GrandparentCursor`] hint
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

    /// The protocol version negotiated in the handshake (0 before it).
    pub fn version(&self) -> ProtocolVersion {
        self.version
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
            (_, ChildToParent::Resume { grandparent }) => {
                if self.version >= REPLICA_VERSION {
                    self.resume = Some(grandparent);
                }
                Ok(())
            }
            (_, ChildToParent::LinkPath(path)) => {
                self.events.push_back(SessionEvent::LinkPath(path));
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
                grandparent: self.resume.take(),
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
            if let Some((_, bytes)) = pop_releasing(&mut sub.inflight) {
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
        pop_releasing(&mut self.events)
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
        let msg = match pop_releasing(&mut self.control) {
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
        let sub = self.sub.as_mut()?;
        if sub.inflight_bytes >= self.config.window_bytes || !log.is_serving() {
            return None;
        }
        let (msg, reached) = sub.next_frame(
            log,
            &self.route,
            self.config.part_bytes,
            self.hold.is_some(),
        )?;
        // A replica tells the child what the position it reached stands for in this node's parent's log,
        // so that the child can move to another replica with a delta. The hint goes
        // first, on the same stream: whoever applies the frame has the hint.
        if let Some(position) = reached
            && self.version >= REPLICA_VERSION
            && let Some(grandparent) = log.parent_index().parent_at(position)
        {
            self.after_hint = Some(msg);
            return Some(ParentToChild::GrandparentCursor {
                log: log.id(),
                position,
                grandparent,
            });
        }
        Some(msg)
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
        ChildToParent::LinkPath(_) => "link path",
    }
}

/// Takes the queue's front; a queue left empty gives its buffer back. A session's
/// queues are empty nearly all the time (a message is queued and sent in the same turn),
/// and a `VecDeque` keeps the capacity its first push took: four slots of a message
/// type, about 1 KiB per idle child for `control` and `events` together (issue 49's
/// heap profile of a site relay).
fn pop_releasing<T>(queue: &mut VecDeque<T>) -> Option<T> {
    let front = queue.pop_front();
    if queue.is_empty() && queue.capacity() > 0 {
        *queue = VecDeque::new();
    }
    front
}
