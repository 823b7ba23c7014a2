//! The sync core of one node: its object log, one [`ChildSession`](strata_protocol::sync::ChildSession) per connected child,
//! the [`ParentLink`] to its parent, and what its children reported. No I/O: the
//! runtime feeds it inputs, commits the [`Batch`] it hands out, then sends what it says.
//!
//! Call order after every input (mirrors the protocol's state machines):
//! 1. an input method (`child_*`, `parent_*`, `apply`, `handle_timeout`);
//! 2. [`NodeCore::process`], then commit the returned batch durably;
//! 3. [`NodeCore::transmit`], and send what it returns;
//! 4. sleep until [`NodeCore::poll_timeout`].
//!
//! # Layout
//!
//! The methods of [`NodeCore`], by responsibility:
//! * this file: getters, timers and processing (`handle_timeout`, `poll_timeout`,
//!   `process`, `transmit`);
//! * `setup.rs`: [`CoreSetup`] and [`NodeCore::new`], the core built from what it starts with;
//! * `restore.rs`: [`NodeCore::restore`], the core booted from what its store holds;
//! * `children.rs`: the children's inputs (`child_*`, `admit_child`), their sessions'
//!   events, and the routes they are sent by;
//! * `parent.rs`: the parent's inputs (`parent_*`) and what the follower's events
//!   mean here;
//! * `log.rs`: the root's writes (`apply`, `apply_manifests`), changed keys, placements
//!   and compaction;
//! * `upward.rs`: children's reports taken in, and the reports and summaries sent up;
//! * `links.rs`: the children's links as this node sees them (the tier tree's records);
//! * `revoke.rs`: names revoked at the root, refused and closed at every tier;
//! * `volume_gate.rs`: a move with volumes held until its data is restored;
//! * `volume_replicas.rs`: ReadWriteMany claims replicated across a placement's
//!   clusters, with a bounded lag.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use strata_protocol::choice::RootView;
use strata_protocol::model::{Cursor, Labels, LogId, ObjectKey, Position, Space};
use strata_protocol::placement::Placement;
use strata_protocol::summary::Summary;
use strata_protocol::sync::{ObjectLog, ParentLink, SessionConfig, SessionError};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{ChildToParent, ParentToChild, Report};

mod admission;
mod children;
mod choose;
mod endpoints;
pub mod history;
#[cfg(test)]
mod history_model;
mod lag;
mod links;
mod log;
mod parent;
mod polling;
mod replicas;
mod replicated;
mod restore;
mod revoke;
mod rollout;
mod setup;
#[cfg(test)]
pub(crate) mod testing;
mod upward;
pub mod volume_gate;
pub mod volume_replicas;
use super::reports::SubtreeReports;
pub use crate::tier::reach::{LinkLookup, Reach, backend_reason, last_seen};
pub use admission::{AdmissionConfig, DEFAULT_SETUPS, SETUP_TIMEOUT};
use children::Child;
pub use children::{node_of, session_key};
pub use choose::{CAPACITY_PROPERTY, PlanStatus, decision_key, excluded_counts};
pub use endpoints::{ClusterEndpoints, DnsTargets};
pub use lag::{LAG_BUCKETS, PropagationLag};
pub use links::LINK_REFRESH;
pub use restore::BootOptions;
pub use revoke::revocation_key;
pub use rollout::{is_rollout, rollout_key, rollouts_in, template_hash};
pub use setup::CoreSetup;
use strata_node::follower::ParentFollower;
use strata_node::store::{Batch, ReportSlot};

/// What the runtime must send after a [`NodeCore::transmit`].
#[derive(Debug, Default)]
pub struct Outgoing {
    /// Messages for children: (child, connection, message).
    pub to_children: Vec<(String, u64, ParentToChild)>,
    /// Messages for the parent.
    pub to_parent: Vec<ChildToParent>,
    /// Child connections to close after sending what is queued for them.
    pub close_children: Vec<(String, u64, SessionError)>,
    /// The connection to the parent must be closed (the link gave up on it), with the
    /// parent's hint of when to come back.
    pub close_parent: Option<(SessionError, Option<Duration>)>,
}

/// What an apply did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The revision of the change; `None` when nothing changed.
    pub revision: Option<Position>,
    /// Objects created or changed.
    pub applied: Vec<ObjectKey>,
    /// Objects already exactly so.
    pub unchanged: Vec<ObjectKey>,
}

/// Placements' selections by (space, placement, current revision).
type Selections = BTreeMap<(Space, String, bool), super::reports::Selection>;

/// Counters for metrics.
#[derive(Debug, Default, Clone)]
pub struct CoreStats {
    /// Summary updates sent upward.
    pub summaries_sent: u64,
    /// Reports refused because they were outside the child's subtree.
    pub reports_refused: u64,
    /// Connections refused before their TLS handshake: too many handshakes at once
    /// (counted by the driver, see [`NodeCore::note_listener`]).
    pub handshakes_refused: u64,
    /// Handshakes started at the path MTU the last connection from the same address
    /// found (counted by the listener, see [`NodeCore::note_listener`]).
    pub handshakes_at_remembered_mtu: u64,
    /// Hellos refused with a time to come back: too many sessions setting up at once.
    pub sessions_refused: u64,
    /// Sessions setting up at the last processing.
    pub setting_up: u64,
    /// Child connections opened (each new connection of a child, reconnections
    /// included): a figure that climbs while links are steady means links drop.
    pub children_connected: u64,
    /// At the root: times the placements were planned again.
    pub plans: u64,
}

/// The state of one node.
#[derive(Debug)]
pub struct NodeCore {
    name: String,
    labels: Labels,
    allowed: BTreeSet<String>,
    config: SessionConfig,
    log: ObjectLog,
    placements: Vec<Placement>,
    /// What the root decided (the log's `Cluster` and `PlacementDecision` objects).
    root_view: RootView,
    /// At the root: each placement's choice as last planned.
    plans: BTreeMap<(Space, String), choose::PlanStatus>,
    /// At the root: each placement's rollout (the log's `Rollout` objects).
    rollouts: BTreeMap<(Space, String), strata_protocol::rollout::RolloutState>,
    /// The latest time the core was given (the root's writes plan with it).
    last_now: Instant,
    /// At the root: the inventory changed; plan again at the next tick.
    replan: bool,
    /// At the root: some choice may change with time alone; plan again at every tick.
    replan_on_tick: bool,
    /// Sessions by key (see [`session_key`]).
    children: BTreeMap<String, Child>,
    /// Connections whose first message (the hello that keys them) has not arrived.
    pending: BTreeMap<u64, Child>,
    /// The session key of each keyed connection.
    conns: BTreeMap<u64, String>,
    child_runs: BTreeMap<String, u64>,
    acked: BTreeMap<String, Cursor>,
    reports: SubtreeReports,
    /// The link to the parent (none at the root).
    parent: Option<ParentFollower>,
    /// Summaries last pushed upward, per (placement, object).
    sent: BTreeMap<(String, ObjectKey), Summary>,
    /// Objects whose summaries may have changed.
    dirty: BTreeSet<ObjectKey>,
    /// Objects whose summaries progressed but were not pushed: due again at
    /// `progress_clock` (see [`SUMMARY_PROGRESS_SPACING`]).
    paced: BTreeSet<ObjectKey>,
    /// When summaries that are only progress may next be pushed; none while nothing
    /// progressed for a spacing (the next progress starts the clock and waits for it).
    progress_clock: Option<Instant>,
    /// Which clusters each placement selects here, by (space, placement, current
    /// revision): kept across summary ticks and queries while the inventory does not
    /// move (an update moves only statuses), dropped when placements or the root's view
    /// change. A cache, so queries through `&self` fill it too ([`NodeCore::summary`]).
    selections: RefCell<Selections>,
    routes_stale: bool,
    /// Children whose clusters changed since the last processing: their routes are
    /// made again once per processing, not once per cluster record (a child's route
    /// covers its whole subtree, so a region's 10,000 clusters arriving one record at
    /// a time cost the root 10,000 routes of up to 10,000 clusters each).
    stale_routes: BTreeSet<String>,
    /// Everything must be reported upward at the next processing.
    report_all: bool,
    /// This run's id.
    run: u64,
    /// Reports of children's earlier runs, kept (routes stay stable) until the child's
    /// new run says it has reported everything; then what it did not report again goes.
    stale: BTreeSet<ReportSlot>,
    /// When the inventory records still stale of each child whose new run said it had
    /// reported everything are dropped (see [`CLUSTER_GRACE`]).
    cluster_sweeps: BTreeMap<String, Instant>,
    /// Reports of one replica of a replicated child about a hop that another replica
    /// still holds, which arrived before this replica's own link record for the hop
    /// (reports go in key order: clusters before links). Keyed by (session, hop); taken
    /// again once the link record says the hop is here (see `replicas.rs`).
    deferred: BTreeMap<(String, String), Vec<Report>>,
    /// Deferred reports due again, taken after the report that released them.
    replay: Vec<Report>,
    summary_interval: Duration,
    /// How long a finished move's old clusters drain (DNS leaves them out) before they
    /// are dropped; zero: at once (`endpoints.rs`).
    drain: Duration,
    next_summary: Instant,
    /// At the root: the earliest time of the next plan that the inventory or time asks
    /// for (see [`REPLAN_SPACING`]).
    next_replan: Instant,
    batch: Batch,
    outgoing: Outgoing,
    stats: CoreStats,
    /// Children's links as this node sees them.
    links: BTreeMap<String, links::LinkState>,
    /// When each connected child's certificate expires (from its TLS handshake).
    cert_expires: BTreeMap<String, UnixMillis>,
    /// What each child's current connection runs on.
    transports: BTreeMap<String, strata_protocol::wire::LinkTransport>,
    /// How each child's current session said its connection reached this node (by
    /// session key; none from a child of protocol version 4 or older).
    vias: BTreeMap<String, strata_protocol::wire::LinkPath>,
    /// Names revoked at the root (the log's `Revocation` objects): refused as children.
    revoked: BTreeSet<String>,
    /// See [`CoreSetup::admission_hold`].
    admission_hold: Duration,
    /// Until when new children wait to be admitted, while this node catches up with
    /// its parent after a start or a reconnect (see `revoke.rs`).
    hold_until: Option<Instant>,
    /// The wall-clock time at the clock's origin.
    wall_origin: UnixMillis,
    /// See [`CoreSetup::watch_history`].
    watch_history: u64,
    /// At the root: every committed write, for the Kubernetes API's watches.
    history: history::WatchHistory,
    /// See [`CoreSetup::standby`].
    standby: bool,
    /// Commit-to-acknowledgement time per child.
    lag: PropagationLag,
    /// How many sessions set up at once (see `admission.rs`).
    admission: admission::Admission,
    /// Which sessions this turn polls, and the sessions' timers (see `polling.rs`).
    polling: polling::Polling,
    /// Relay children whose cluster counts changed since their link record went up.
    links_changed: BTreeSet<String>,
    /// How many relay children are connected (their links are refreshed periodically).
    relay_links_up: usize,
    /// At the root: placements' volume moves (see `volume_gate.rs`).
    volume_moves: volume_gate::VolumeMoves,
    /// At the root: placements' replicated ReadWriteMany claims (see `volume_replicas.rs`).
    replications: volume_replicas::Replications,
}

impl NodeCore {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object log.
    pub fn log(&self) -> &ObjectLog {
        &self.log
    }

    /// At the root: the watch history (every committed write since this run started,
    /// up to its capacity).
    pub fn history(&self) -> &history::WatchHistory {
        &self.history
    }

    /// Keeps at most `events` writes in the watch history (see
    /// [`history::WATCH_EVENTS`]).
    pub fn set_watch_events(&mut self, events: usize) {
        self.history.set_capacity(events);
    }

    /// What the children reported.
    pub fn reports(&self) -> &SubtreeReports {
        &self.reports
    }

    /// The placements in the log.
    pub fn placements(&self) -> &[Placement] {
        &self.placements
    }

    /// What the root decided that every tier routes with: cluster labels changed per
    /// space, placements' decisions.
    pub fn root_view(&self) -> &RootView {
        &self.root_view
    }

    /// Sets how many children's sessions may set up at once.
    pub fn set_admission(&mut self, config: AdmissionConfig) {
        self.admission = admission::Admission::new(config);
    }

    /// The driver's counts of connections refused before their handshake and of
    /// handshakes started at a remembered path MTU, for [`CoreStats::handshakes_refused`]
    /// and [`CoreStats::handshakes_at_remembered_mtu`].
    pub fn note_listener(&mut self, refused: u64, at_remembered_mtu: u64) {
        self.stats.handshakes_refused = refused;
        self.stats.handshakes_at_remembered_mtu = at_remembered_mtu;
    }

    /// How long each of `n` children sent away at once (a shutdown) should wait before
    /// coming back, so that their set-ups do not all land at once: the first
    /// [`AdmissionConfig::setups`] at once, the next as those would finish, and so on.
    pub fn reconnect_spread(&self, n: usize) -> Vec<Duration> {
        self.admission.spread(n)
    }

    /// Counters.
    pub fn stats(&self) -> &CoreStats {
        &self.stats
    }

    /// How long after their commit here the children acknowledged positions.
    pub fn propagation_lag(&self) -> &PropagationLag {
        &self.lag
    }

    /// Connected children and their last acked cursor.
    pub fn children(&self) -> impl Iterator<Item = (&str, Option<Cursor>)> {
        self.children
            .iter()
            .map(|(n, c)| (n.as_str(), c.session.acked().or(self.acked.get(n).copied())))
    }

    /// The lowest protocol version any session of the child `name` negotiated (its
    /// replicas may differ), if it is connected.
    pub fn child_version(&self, name: &str) -> Option<strata_protocol::wire::ProtocolVersion> {
        self.children
            .values()
            .filter(|c| c.session.node() == name)
            .map(|c| c.session.version())
            .min()
    }

    /// Whether the link to the parent is open.
    pub fn parent_open(&self) -> bool {
        self.parent.as_ref().is_some_and(ParentFollower::is_open)
    }

    /// The link to the parent, if this node has a parent.
    pub fn parent_link(&self) -> Option<&ParentLink> {
        self.parent.as_ref().map(ParentFollower::link)
    }

    /// How many snapshots the parent started sending during this run (0 at the root);
    /// a resync that was a delta leaves it unchanged.
    pub fn snapshots_received(&self) -> u64 {
        self.parent
            .as_ref()
            .map_or(0, ParentFollower::snapshots_received)
    }

    // ---- time ----------------------------------------------------------------

    /// Handles timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
        for conn in self.polling.due(now) {
            if let Some(child) = child_of(&mut self.pending, &self.conns, &mut self.children, conn)
            {
                child.session.handle_timeout(now);
                self.polling.touch(conn);
            }
        }
        if let Some(parent) = &mut self.parent {
            parent.handle_timeout(now);
        }
        self.history.expire(now);
    }

    /// When [`NodeCore::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // The queue holds every session's deadline as of its last poll; a session
        // touched since (inputs handled, not yet transmitted) is asked itself.
        let sessions = self
            .touched_sessions()
            .into_iter()
            .filter_map(|conn| self.child_at(conn))
            .filter_map(|c| c.session.poll_timeout())
            .chain(self.polling.next());
        let link = self.parent.as_ref().and_then(ParentFollower::poll_timeout);
        // Summaries of changed objects, and the refresh of relay children's links.
        // At the root: a choice or a rollout's gate that may change with time alone.
        let summaries = ((self.parent.is_some()
            && (!self.dirty.is_empty() || self.has_relay_child_up()))
            || self.wants_plan())
        .then_some(self.next_summary.max(self.next_replan));
        let paced = self
            .progress_clock
            .filter(|_| self.parent.is_some() && !self.paced.is_empty())
            .map(|at| at.max(self.next_summary));
        let sweeps = self.cluster_sweeps.values().min().copied();
        // At the root: the watch history's oldest writes passing their retention.
        let expiry = self.history.poll_expiry();
        sessions
            .chain(link)
            .chain(summaries)
            .chain(paced)
            .chain(sweeps)
            .chain(expiry)
            .min()
    }

    // ---- processing ------------------------------------------------------------

    /// Handles every pending event and returns what must be made durable before
    /// [`NodeCore::transmit`].
    pub fn process(&mut self, now: Instant) -> Batch {
        self.last_now = self.last_now.max(now);
        self.drain_parent_events(now);
        self.drain_child_events(now);
        if std::mem::take(&mut self.report_all) {
            self.report_everything(now);
        }
        self.push_changed_links(now);
        self.sweep_clusters_due(now);
        let stale_routes = std::mem::take(&mut self.stale_routes);
        if !self.routes_stale {
            for child in stale_routes {
                self.refresh_route(&child);
            }
        }
        if self.routes_stale {
            self.routes_stale = false;
            self.reload_placements();
            self.close_revoked();
            self.refresh_routes();
        }
        if now >= self.next_summary {
            // A standby's log is the writer's: it plans nothing and compacts nothing.
            if self.wants_plan() && now >= self.next_replan {
                self.replan(now);
                self.next_replan = now + REPLAN_SPACING;
            }
            self.refresh_links(now);
            self.push_summaries(now);
            if !self.standby {
                self.compact();
            }
        }
        self.lag.note_head(self.log.id(), self.log.head(), now);
        self.stats.setting_up = self.admission.setting_up() as u64;
        self.stats.sessions_refused = self.admission.refused();
        let mut batch = std::mem::take(&mut self.batch);
        batch.merge(Batch::log_changes(&mut self.log));
        batch
    }

    /// Everything to send now. Call only once the last batch is durable: it acknowledges
    /// what that batch holds.
    pub fn transmit(&mut self, now: Instant) -> Outgoing {
        let mut out = std::mem::take(&mut self.outgoing);
        // The sessions an input or a timer touched, or all of them when the log moved
        // or a change reached them all (see `polling.rs`).
        self.polling.note_log(self.log.generation());
        let conns = self.touched_sessions();
        self.polling.polled();
        let mut closed = Vec::new();
        for conn in conns {
            let Some(child) = child_of(&mut self.pending, &self.conns, &mut self.children, conn)
            else {
                self.polling.schedule(conn, None);
                continue;
            };
            while let Some(msg) = child.session.poll_transmit(now, &self.log) {
                out.to_children.push((child.name.clone(), conn, msg));
            }
            self.polling.schedule(conn, child.session.poll_timeout());
            if child.session.is_closed() {
                closed.push(conn);
            }
        }
        if let Some(parent) = &mut self.parent {
            while let Some(msg) = parent.poll_transmit(now) {
                out.to_parent.push(msg);
            }
        }
        for conn in closed {
            self.polling.schedule(conn, None);
            // A connection that never said hello and went silent closes like any session.
            if let Some(c) = self.pending.remove(&conn) {
                out.close_children.push((
                    c.name,
                    conn,
                    SessionError {
                        code: strata_protocol::wire::ErrorCode::IdleTimeout,
                        reason: "no hello before the idle timeout".into(),
                    },
                ));
            } else if let Some(key) = self.conns.remove(&conn) {
                self.children.remove(&key);
                self.link_down(now, &key);
            }
        }
        out
    }

    /// The connections whose sessions this turn polls: those touched so far, or every
    /// one when a change reached them all (see `polling.rs`).
    fn touched_sessions(&self) -> Vec<u64> {
        if self.polling.all_touched() {
            self.children
                .values()
                .map(|c| c.conn)
                .chain(self.pending.keys().copied())
                .collect()
        } else {
            self.polling.touched().collect()
        }
    }

    /// At the root (not a standby's): the inventory or time asks for a plan.
    fn wants_plan(&self) -> bool {
        self.parent.is_none() && !self.standby && (self.replan || self.replan_on_tick)
    }

    /// The session of a connection, keyed or not yet.
    fn child_at(&self, conn: u64) -> Option<&Child> {
        self.pending.get(&conn).or_else(|| {
            self.conns
                .get(&conn)
                .and_then(|key| self.children.get(key))
                .filter(|c| c.conn == conn)
        })
    }
}

/// The session of a connection, keyed or not yet (fields apart, so that the caller
/// may use the log and the timers meanwhile).
fn child_of<'a>(
    pending: &'a mut BTreeMap<u64, Child>,
    conns: &BTreeMap<u64, String>,
    children: &'a mut BTreeMap<String, Child>,
    conn: u64,
) -> Option<&'a mut Child> {
    if let Some(c) = pending.get_mut(&conn) {
        return Some(c);
    }
    conns
        .get(&conn)
        .and_then(|key| children.get_mut(key))
        .filter(|c| c.conn == conn)
}

/// At the root, plans that the inventory (clusters and links coming and going) or time
/// asks for run at most this often; writes plan at once, in their own revision. A plan
/// walks every cluster for every placement: a root of 10,000 clusters planning at every
/// tick while a reconnect storm moved its inventory spent a seventh of the machine on
/// plans whose outcome a second later was the same.
pub const REPLAN_SPACING: Duration = Duration::from_secs(1);

/// A relay pushes a summary that is only progress (a rollout on its way, see
/// [`Summary::is_news_after`](strata_protocol::summary::Summary::is_news_after)) at most
/// this often, and the first progress after a quiet spacing waits one spacing too; news
/// (settled, worse, or the clusters expected changed) goes at the next summary tick.
/// Each push is a packet to the parent and a QUIC ACK back: pushing every 100 ms tick
/// through a 10,000-cluster update was ~11 ACK packets per update on every link into
/// the root, a third of the root's bytes beyond the objects; pushing the start of every
/// update at once was one of the four left. An update that settles within the spacing
/// costs each link one push, the settled summary.
pub const SUMMARY_PROGRESS_SPACING: Duration = Duration::from_secs(1);

/// How long the inventory records a child reported in an earlier run outlive its new
/// run's "reported everything" when the new run has not reported them again. A relay
/// that restarted without its disk reports everything it knows at once, which is none
/// of its subtree: its children have not reconnected yet. Dropping their clusters then
/// would cut the relay's route down to nothing, its log would lose every object placed
/// below it, and the agents it admits next would delete their workloads, only to create
/// them again once they have reported. Clusters that come back within the grace are
/// never dropped; one really gone leaves the inventory (and its placements) when the
/// grace is over.
pub const CLUSTER_GRACE: Duration = Duration::from_secs(120);

/// How many positions of history a node keeps for a disconnected child before leaving
/// it to a snapshot when it returns.
pub const MAX_RETAINED: u64 = 100_000;

/// How many positions of history the root keeps for the Kubernetes API's watches and
/// lists from a `resourceVersion`, whatever its children acknowledged. Clients list,
/// then watch from the list's version; kube-apiserver serves that from etcd's history
/// (compacted every 5 minutes). Without a window, children acknowledging a write within
/// milliseconds would move the floor past a version a client just read, and its watch
/// would be answered 410 Gone. Older versions are still 410, as in Kubernetes.
pub const WATCH_HISTORY: u64 = 10_000;

/// A fresh log for a node whose store had none.
pub fn new_log(node_id: u64, root: bool) -> ObjectLog {
    let mut log = ObjectLog::new(LogId(node_id));
    if root {
        log.mark_serving();
    }
    log
}
