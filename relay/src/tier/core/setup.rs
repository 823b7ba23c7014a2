//! A core built from what its node starts with ([`CoreSetup`], [`NodeCore::new`]); the
//! store's side of a boot is [`NodeCore::restore`] (`restore.rs`).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use strata_node::store::{Batch, ParentState};
use strata_protocol::choice::RootView;
use strata_protocol::model::{Cursor, Labels};
use strata_protocol::sync::{ObjectLog, ParentLink, SessionConfig};
use strata_protocol::time::{Instant, UnixMillis};

use super::admission::{self, AdmissionConfig};
use super::lag::PropagationLag;
use super::{CoreStats, NodeCore, Outgoing, history, polling};
use crate::tier::reports::SubtreeReports;
use strata_node::follower::ParentFollower;

/// How a node starts.
#[derive(Debug)]
pub struct CoreSetup {
    /// Node name.
    pub name: String,
    /// Labels clusters below inherit.
    pub labels: Labels,
    /// Children allowed to connect.
    pub children: Vec<String>,
    /// Session tuning (its `parent` and `incarnation` are filled in here).
    pub sessions: SessionConfig,
    /// The restored log (or a new one).
    pub log: ObjectLog,
    /// Restored reports.
    pub reports: SubtreeReports,
    /// Restored per-child acks.
    pub acked: BTreeMap<String, Cursor>,
    /// Restored per-child run ids.
    pub child_runs: BTreeMap<String, u64>,
    /// The link to the parent, if any.
    pub parent_link: Option<ParentLink>,
    /// Restored position in the parent's log.
    pub parent_state: ParentState,
    /// How often summaries go upward.
    pub summary_interval: Duration,
    /// This run's id (as in the hello to the parent).
    pub run: u64,
    /// The wall-clock time at the origin of the instants the core is given.
    pub wall_origin: UnixMillis,
    /// At the root: how many positions of history the log keeps beyond what children
    /// need, so that a Kubernetes client's watch or list from a recent
    /// `resourceVersion` is served rather than answered 410 ([`WATCH_HISTORY`](super::WATCH_HISTORY) in a
    /// node; 0 keeps only what children need).
    pub watch_history: u64,
    /// A root replica that serves the writer's log without writing it (its records
    /// come in through [`NodeCore::take_replicated`]) until [`NodeCore::promote`].
    pub standby: bool,
    /// After a start or a reconnect to its parent, how long at most new children wait
    /// to be admitted while this node catches up with its parent (learning the
    /// revocations made while it was away); zero admits at once.
    pub admission_hold: Duration,
}

impl NodeCore {
    /// A core from restored state.
    pub fn new(now: Instant, setup: CoreSetup) -> Self {
        let mut config = setup.sessions;
        config.parent = setup.name.clone();
        config.incarnation = setup.log.id().0;
        let mut reports = setup.reports;
        let all = all_labels(&setup.labels, &setup.parent_state.inherited);
        let lag = PropagationLag::new(&setup.name, setup.log.id(), setup.log.head());
        let head = setup.log.head();
        let parent = setup
            .parent_link
            .map(|link| ParentFollower::new(link, setup.parent_state));
        config.labels = all.clone();
        reports.set_labels(all);
        let mut core = NodeCore {
            name: setup.name,
            labels: setup.labels,
            allowed: setup.children.into_iter().collect(),
            config,
            log: setup.log,
            placements: Vec::new(),
            root_view: RootView::default(),
            plans: BTreeMap::new(),
            rollouts: BTreeMap::new(),
            replan: true,
            last_now: now,
            replan_on_tick: false,
            children: BTreeMap::new(),
            pending: BTreeMap::new(),
            conns: BTreeMap::new(),
            child_runs: setup.child_runs,
            acked: setup.acked,
            reports,
            parent,
            sent: BTreeMap::new(),
            dirty: BTreeSet::new(),
            paced: BTreeSet::new(),
            progress_clock: None,
            selections: RefCell::default(),
            routes_stale: true,
            stale_routes: BTreeSet::new(),
            report_all: false,
            run: setup.run,
            stale: BTreeSet::new(),
            cluster_sweeps: BTreeMap::new(),
            deferred: BTreeMap::new(),
            replay: Vec::new(),
            summary_interval: setup.summary_interval,
            drain: Duration::ZERO,
            next_summary: now,
            next_replan: now,
            batch: Batch::default(),
            outgoing: Outgoing::default(),
            stats: CoreStats::default(),
            links: BTreeMap::new(),
            cert_expires: BTreeMap::new(),
            transports: BTreeMap::new(),
            vias: BTreeMap::new(),
            revoked: BTreeSet::new(),
            admission_hold: setup.admission_hold,
            hold_until: None,
            wall_origin: setup.wall_origin,
            watch_history: setup.watch_history,
            history: history::WatchHistory::new(history::WATCH_EVENTS, head.0),
            standby: setup.standby,
            lag,
            admission: admission::Admission::new(AdmissionConfig::default()),
            polling: polling::Polling::default(),
            links_changed: BTreeSet::new(),
            relay_links_up: 0,
            volume_moves: Default::default(),
            replications: Default::default(),
        };
        core.reload_placements();
        core.hold_admissions(now);
        core
    }
}

/// This node's labels over its ancestors' (its own win).
pub(super) fn all_labels(own: &Labels, inherited: &Labels) -> Labels {
    let mut all = inherited.clone();
    all.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    all
}
