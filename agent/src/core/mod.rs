//! The agent's sync core: its link to the parent, its desired state (an object log, so
//! deltas arriving in parts and snapshots work as at every tier), and the cluster it
//! keeps in that state. No I/O; the runtime drives it like a relay's core.
//!
//! Call order after every input (as for the relay's `NodeCore`, mirroring the
//! protocol's state machines):
//! 1. an input method ([`AgentCore::parent_connected`], [`AgentCore::parent_message`],
//!    [`AgentCore::parent_gone`], [`AgentCore::handle_timeout`]), or the backend's wake
//!    ([`AgentCore::backend_wake`]: the cluster changed);
//! 2. [`AgentCore::process`]: applies what the log now wants to the cluster, takes the
//!    cluster's statuses and upsynced objects; commit the returned batch durably;
//! 3. [`AgentCore::transmit`], and send what it returns (reports go up only once what
//!    they acknowledge is on disk);
//! 4. sleep until [`AgentCore::poll_timeout`] or the backend's wake.
//!
//! While the parent is away, steps 2 to 4 go on: the cluster is kept in the state the
//! log holds (drift repaired), and reports wait in the follower until it is back.
//!
//! A core boots from its store with [`AgentCore::restore`] (in `restore.rs`).

use std::collections::{BTreeMap, BTreeSet};

use strata_node::driver::ToParent;
use strata_node::follower::{Followed, ParentFollower};
use strata_node::objects::placements_in;
use strata_node::store::{Batch, ParentState};
use strata_protocol::customize::CustomizeError;
use strata_protocol::model::{Cluster, ContentHash, Health, Labels, Object, ObjectKey, Status};
use strata_protocol::placement::Placement;
use strata_protocol::route::{PLACEMENT_KIND, STRATA_GROUP};
use strata_protocol::sync::{ObjectLog, ParentLink, SessionError};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::waves::pinned_key;
use strata_protocol::wire::{Change, LinkPath, ParentToChild, Report, ReportKey, ReportValue};

use crate::backend::{ClusterBackend, Reach, UpsyncRule};
use crate::customize::{cluster_vars, render_object, set_user_entries, summarized};
use strata_protocol::wire::ServiceEndpoints;

mod endpoints;
mod pins;
mod restore;
use pins::{held_as, pinned_rules, report_key};
pub use restore::AgentBootOptions;

/// The state of one agent.
pub struct AgentCore {
    cluster: Cluster,
    parent: ParentFollower,
    log: ObjectLog,
    backend: Box<dyn ClusterBackend + Send>,
    /// The last status reported per object.
    statuses: BTreeMap<ObjectKey, Status>,
    /// The endpoints last reported per Service and Ingress (`endpoints.rs`).
    endpoints: BTreeMap<ObjectKey, ServiceEndpoints>,
    /// A status changed since the endpoints were last worked out.
    endpoints_stale: bool,
    /// The cluster's node addresses the endpoints were last worked out with.
    nodes: Vec<String>,
    batch: Batch,
    close_parent: Option<(SessionError, Option<std::time::Duration>)>,
    /// This run's id (as in the hello).
    run: u64,
    /// Upsynced objects as last reported (reported again to a parent that may have
    /// lost them).
    upsynced: BTreeMap<ObjectKey, Vec<u8>>,
    /// The placements held changed: the upsync rules must be given to the backend.
    upsync_stale: bool,
    /// What this run did to the cluster, for metrics.
    stats: AgentStats,
    /// Labels the ancestors give this cluster (for customization and summaries).
    inherited: Labels,
    /// The placements held (those on this cluster that upsync, customize or summarize).
    placements: Vec<Placement>,
    /// The content hash of what was last applied per object (rendered when customized).
    applied: BTreeMap<ObjectKey, ContentHash>,
    /// Placements or labels changed: objects may render differently, summaries too.
    customize_stale: bool,
    /// Changes of a snapshot still arriving in parts: applied once it is whole, so that
    /// every object is rendered with the placements the snapshot brings (parts are cut
    /// in key order, and placements sort after most kinds).
    deferred: Vec<Change>,
}

/// What an agent did to its cluster since it started (its metrics' counters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Objects handed to the backend to apply.
    pub applies: u64,
    /// Applies the backend refused or failed.
    pub apply_failures: u64,
    /// Objects handed to the backend to delete.
    pub deletes: u64,
    /// Deletes the backend refused or failed.
    pub delete_failures: u64,
}

impl std::fmt::Debug for AgentCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentCore")
            .field("cluster", &self.cluster.name)
            .finish_non_exhaustive()
    }
}

/// What an agent starts from.
pub struct AgentSetup {
    /// The cluster it manages.
    pub cluster: Cluster,
    /// The link to its parent.
    pub link: ParentLink,
    /// The restored desired state.
    pub log: ObjectLog,
    /// The restored position in the parent's log.
    pub parent_state: ParentState,
    /// The cluster's backend.
    pub backend: Box<dyn ClusterBackend + Send>,
    /// This run's id.
    pub run: u64,
}

impl AgentCore {
    /// An agent from its restored state. Everything it held is applied again at once:
    /// the cluster is kept in its last desired state whether or not the parent is
    /// reachable.
    pub fn new(now: Instant, at: UnixMillis, setup: AgentSetup) -> Self {
        let AgentSetup {
            cluster,
            link,
            log,
            parent_state,
            backend,
            run,
        } = setup;
        let inherited = parent_state.inherited.clone();
        let placements = placements_in(&log);
        let mut core = AgentCore {
            run,
            cluster,
            inherited,
            placements,
            applied: BTreeMap::new(),
            customize_stale: false,
            deferred: Vec::new(),
            parent: ParentFollower::new(link, parent_state),
            log,
            backend,
            statuses: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            endpoints_stale: false,
            nodes: Vec::new(),
            batch: Batch::default(),
            close_parent: None,
            upsynced: BTreeMap::new(),
            upsync_stale: true,
            stats: AgentStats::default(),
        };
        core.backend.set_cluster(&core.cluster);
        let objects: Vec<_> = core.log.live().cloned().collect();
        for o in objects {
            core.apply_to_cluster(now, at, &Change::Upsert(o));
        }
        let report = core.cluster_report();
        core.parent.push_report(now, report);
        core
    }

    /// The cluster's name.
    pub fn cluster_name(&self) -> &str {
        &self.cluster.name
    }

    /// What this run did to the cluster.
    pub fn stats(&self) -> &AgentStats {
        &self.stats
    }

    /// The desired state.
    pub fn log(&self) -> &ObjectLog {
        &self.log
    }

    /// The status last reported for `key` (none before the cluster reported one).
    pub fn status(&self, key: &ObjectKey) -> Option<&Status> {
        self.statuses.get(key)
    }

    /// What wakes the agent when the backend has statuses to report.
    pub fn backend_wake(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        self.backend.wake()
    }

    /// The link to the parent.
    pub fn link(&self) -> &ParentLink {
        self.parent.link()
    }

    /// How many snapshots the parent started sending during this run; a resync that
    /// was a delta leaves it unchanged.
    pub fn snapshots_received(&self) -> u64 {
        self.parent.snapshots_received()
    }

    /// Whether the parent is connected.
    pub fn connected(&self) -> bool {
        self.parent.is_open()
    }

    fn cluster_report(&self) -> Report {
        Report {
            key: ReportKey::Cluster {
                name: self.cluster.name.clone(),
            },
            value: ReportValue::Cluster(self.cluster.clone()),
        }
    }

    /// The connection to the parent is up, reaching it by `via`.
    pub fn parent_connected(&mut self, now: Instant, via: LinkPath) {
        self.parent.handle_connected(now, via);
    }

    /// A message from the parent.
    pub fn parent_message(&mut self, now: Instant, msg: ParentToChild) {
        self.parent.handle_message(now, msg);
    }

    /// The connection to the parent is gone.
    pub fn parent_gone(&mut self) {
        self.parent.handle_disconnected();
    }

    /// Handles due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.parent.handle_timeout(now);
    }

    /// When something is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.parent.poll_timeout(), self.backend.next_change()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Handles pending events; returns what must be durable before
    /// [`AgentCore::transmit`].
    pub fn process(&mut self, now: Instant, at: UnixMillis) -> Batch {
        // Changes are applied once every pending one is in the log, so that an object
        // arriving with the placement that customizes it is rendered before its first
        // apply.
        let mut changes = Vec::new();
        while let Some(followed) = self.parent.poll(&mut self.log, &mut self.batch) {
            match followed {
                Followed::ReportAll => self.report_all(now),
                // Routing by labels happens at the relays; here they fill variables.
                Followed::Labels(labels) => {
                    self.inherited = labels;
                    self.customize_stale = true;
                }
                Followed::Changed(change) => changes.push(change),
                Followed::Closed { error, retry_after } => {
                    self.close_parent = Some((error, retry_after));
                }
            }
        }
        if changes.iter().any(|c| is_placement_key(c.key())) {
            self.placements = placements_in(&self.log);
            self.upsync_stale = true;
            self.customize_stale = true;
        }
        self.deferred.append(&mut changes);
        // No route: a snapshot is arriving (or none has settled yet).
        let whole = self.parent.state().route.is_some();
        let changes = if whole {
            std::mem::take(&mut self.deferred)
        } else {
            Vec::new()
        };
        for change in &changes {
            self.apply_to_cluster(now, at, change);
        }
        if whole && std::mem::take(&mut self.customize_stale) {
            let done: BTreeSet<&ObjectKey> = changes.iter().map(Change::key).collect();
            self.render_again(now, at, &done);
        }
        for (key, mut status) in self.backend.poll_status(now, at) {
            if let Some(object) = held_as(&self.log, &key) {
                self.add_user_entries(&object, &mut status);
                self.push_status(now, &report_key(&self.log, &key), Some(status));
            }
        }
        if std::mem::take(&mut self.upsync_stale) {
            self.backend.set_upsync(upsync_rules(&self.placements));
        }
        for u in self.backend.poll_upsync() {
            self.push_upsynced(now, u.key, u.body);
        }
        if let Some(reach) = self.backend.poll_reach() {
            self.handle_reach(now, at, &reach);
        }
        // NodePort endpoints follow the cluster's nodes too.
        let nodes = self.backend.node_addresses();
        if nodes != self.nodes {
            self.nodes = nodes;
            self.endpoints_stale = true;
        }
        if std::mem::take(&mut self.endpoints_stale) {
            self.refresh_endpoints(now);
        }
        // An agent serves no child, and only children need a log's tombstones and the
        // visibility history of its keys (deltas from a position): everything it
        // committed is settled. Uncompacted, every removed object and every change of an
        // object's labels stayed in memory and in the store for good (a rollout's pin,
        // made and released at each rollout, added two records to its history).
        // (A floor already at the head returns at once.)
        self.log.compact(self.log.head());
        let mut batch = std::mem::take(&mut self.batch);
        batch.merge(Batch::log_changes(&mut self.log));
        batch
    }

    /// Messages for the parent, and whether to close the connection (with the parent's
    /// hint of when to come back). Call only once the last batch is durable.
    pub fn transmit(&mut self, now: Instant) -> ToParent {
        let mut messages = Vec::new();
        while let Some(msg) = self.parent.poll_transmit(now) {
            messages.push(msg);
        }
        ToParent {
            messages,
            close: self.close_parent.take(),
        }
    }

    /// The cluster's API server answers again, or stopped answering: the cluster's
    /// record says so ([`Cluster::set_backend_unreachable`]), and goes up, so that the
    /// root shows the cluster unreachable with the cause and never as available.
    fn handle_reach(&mut self, now: Instant, at: UnixMillis, reach: &Reach) {
        let unreachable = match reach {
            Reach::Reached => None,
            Reach::Unreachable(why) => Some((why.as_str(), at)),
        };
        if self.cluster.set_backend_unreachable(unreachable) {
            let report = self.cluster_report();
            self.parent.push_report(now, report);
        }
    }

    /// Reports everything again: the parent may not hold it.
    fn report_all(&mut self, now: Instant) {
        let report = self.cluster_report();
        self.parent.push_report(now, report);
        let all: Vec<_> = self
            .statuses
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        for (k, s) in all {
            self.push_status(now, &k, Some(s));
        }
        let upsynced: Vec<_> = self
            .upsynced
            .iter()
            .map(|(k, b)| (k.clone(), b.clone()))
            .collect();
        for (k, body) in upsynced {
            self.push_upsynced(now, k, Some(body));
        }
        let endpoints: Vec<_> = std::mem::take(&mut self.endpoints).into_iter().collect();
        for (k, e) in endpoints {
            self.push_endpoints(now, k, Some(e));
        }
        // Everything this run knows is queued: the parent may drop what earlier runs
        // reported and this one did not.
        self.parent.push_report(
            now,
            Report {
                key: ReportKey::Complete { run: self.run },
                value: ReportValue::Complete,
            },
        );
    }

    fn apply_to_cluster(&mut self, now: Instant, at: UnixMillis, change: &Change) {
        // Placements reach an agent only to say what to upsync, customize and
        // summarize; they are ours, never the cluster's.
        if is_placement_key(change.key()) {
            return;
        }
        // A pinned previous revision (a rollout has not released this cluster) is the
        // object it copies: whichever of the two the log holds is what the cluster gets.
        let target = pinned_key(change.key()).unwrap_or_else(|| change.key().clone());
        // A delete the log has undone since (a snapshot from a parent rebuilding its
        // state: the object went, then came back in the same batch) removes nothing:
        // the cluster keeps the object, the apply below changes nothing, and no new
        // status would follow a `Removed` sent now.
        if let Change::Delete(key) = change
            && self.statuses.contains_key(key)
            && self.log.get(key).is_none()
        {
            self.push_status(now, key, None);
        }
        match held_as(&self.log, &target) {
            Some(object) => self.apply_object(now, at, &object),
            None => {
                self.stats.deletes += 1;
                self.applied.remove(&target);
                if let Err(e) = self.backend.delete(now, &target) {
                    self.stats.delete_failures += 1;
                    tracing::warn!(object = %target, error = %e, "delete failed");
                }
            }
        }
    }

    /// Renders the object for this cluster and applies it; a rule that cannot be
    /// rendered or a refused apply is the object's `Failed` status, with the reason.
    fn apply_object(&mut self, now: Instant, at: UnixMillis, object: &Object) {
        self.stats.applies += 1;
        let vars = cluster_vars(&self.cluster, &self.inherited);
        // A pinned previous revision renders with the rules its placement had then.
        let pinned = pinned_rules(&self.log, object.key(), &self.placements);
        let placements = pinned.as_deref().unwrap_or(&self.placements);
        let result = match render_object(object, placements, &vars) {
            Ok(rendered) => {
                let hash = rendered.hash;
                self.backend
                    .apply(now, at, &rendered)
                    .map(|()| hash)
                    .map_err(|e| e.reason)
            }
            Err(e) => Err(format!("customize: {e}")),
        };
        match result {
            Ok(hash) => {
                self.applied.insert(object.key().clone(), hash);
            }
            Err(reason) => {
                self.stats.apply_failures += 1;
                tracing::warn!(object = %object.key(), error = %reason, "apply failed");
                self.applied.remove(object.key());
                let report = report_key(&self.log, object.key());
                let status = Status {
                    health: Health::Failed,
                    revision: object.revision,
                    observed_generation: None,
                    message: Some(reason),
                    numbers: BTreeMap::new(),
                    status: Vec::new(),
                    observed_at: at,
                };
                self.push_status(now, &report, Some(status));
            }
        }
    }

    /// Placements or inherited labels changed: applies again every object whose
    /// rendering changed, and reports again every status whose user summaries did.
    fn render_again(&mut self, now: Instant, at: UnixMillis, done: &BTreeSet<&ObjectKey>) {
        let vars = cluster_vars(&self.cluster, &self.inherited);
        let objects: Vec<Object> = self
            .log
            .live()
            .filter(|o| !is_placement_key(o.key()))
            .filter_map(|o| {
                held_as(
                    &self.log,
                    &pinned_key(o.key()).unwrap_or_else(|| o.key().clone()),
                )
            })
            .collect();
        for object in &objects {
            let same = render_object(object, &self.placements, &vars)
                .is_ok_and(|r| self.applied.get(object.key()) == Some(&r.hash));
            let report = report_key(&self.log, object.key());
            if !same && !done.contains(object.key()) && !done.contains(&report) {
                self.apply_object(now, at, object);
            }
            if let Some(old) = self.statuses.get(&report).cloned() {
                let mut status = old.clone();
                self.add_user_entries(object, &mut status);
                if status != old {
                    self.push_status(now, &report, Some(status));
                }
            }
        }
    }

    /// Adds the user summaries the placements ask for to a status of `object`.
    fn add_user_entries(&self, object: &Object, status: &mut Status) {
        if !summarized(&self.placements, &object.meta)
            && !status
                .numbers
                .keys()
                .any(|k| strata_protocol::user_summary::is_user_entry(k))
        {
            return;
        }
        let vars = cluster_vars(&self.cluster, &self.inherited);
        // Evaluated on the object as this cluster holds it: rendered when customized. An
        // object that cannot be rendered is not held: it has nothing to summarize.
        let Ok(held) = render_object(object, &self.placements, &vars) else {
            status
                .numbers
                .retain(|k, _| !strata_protocol::user_summary::is_user_entry(k));
            return;
        };
        set_user_entries(
            &mut status.numbers,
            &self.placements,
            &held,
            &status.status,
            &vars.labels,
        );
    }

    /// The manifest the cluster holds for `key`, when its backend keeps manifests.
    pub fn cluster_manifest(&self, key: &ObjectKey) -> Option<Vec<u8>> {
        self.backend.manifest(key)
    }

    /// The manifest this agent applies for `key` on its cluster now (rendered when a
    /// placement customizes it), or why it cannot be rendered.
    pub fn desired(&self, key: &ObjectKey) -> Option<Result<Object, CustomizeError>> {
        let object = held_as(&self.log, key)?;
        let vars = cluster_vars(&self.cluster, &self.inherited);
        Some(render_object(&object, &self.placements, &vars))
    }

    fn push_upsynced(&mut self, now: Instant, key: ObjectKey, body: Option<Vec<u8>>) {
        let value = match body {
            Some(b) => {
                self.upsynced.insert(key.clone(), b.clone());
                ReportValue::Upsynced(b)
            }
            None => {
                self.upsynced.remove(&key);
                ReportValue::Removed
            }
        };
        self.parent.push_report(
            now,
            Report {
                key: ReportKey::Upsynced {
                    cluster: self.cluster.name.clone(),
                    object: key,
                },
                value,
            },
        );
    }

    fn push_status(&mut self, now: Instant, key: &ObjectKey, status: Option<Status>) {
        self.endpoints_stale = true;
        let report_key = ReportKey::Status {
            cluster: self.cluster.name.clone(),
            object: key.clone(),
        };
        let value = match status {
            Some(s) => {
                self.statuses.insert(key.clone(), s.clone());
                ReportValue::Status(s)
            }
            None => {
                self.statuses.remove(key);
                ReportValue::Removed
            }
        };
        self.parent.push_report(
            now,
            Report {
                key: report_key,
                value,
            },
        );
    }
}

fn is_placement_key(key: &ObjectKey) -> bool {
    key.group == STRATA_GROUP && key.kind == PLACEMENT_KIND
}

/// The upsync rules of the placements this agent holds (its parent sends it only the
/// placements that select its cluster and ask for upsync).
fn upsync_rules(placements: &[Placement]) -> Vec<UpsyncRule> {
    placements
        .iter()
        .flat_map(|p| {
            p.upsync.iter().cloned().map(move |u| UpsyncRule {
                space: p.space.clone(),
                group: u.group,
                version: u.version,
                kind: u.kind,
                namespace: u.namespace,
                names: u.names,
                selector: u.selector.map(|s| s.to_query()).unwrap_or_default(),
            })
        })
        .collect()
}
