//! The sync core of one node: its object log, one [`ChildSession`] per connected child,
//! the [`ParentLink`] to its parent, and what its children reported. No I/O: the
//! runtime feeds it inputs, commits the [`Batch`] it hands out, then sends what it says.
//!
//! Call order after every input (mirrors the protocol's state machines):
//! 1. an input method (`child_*`, `upstream_*`, `apply`, `handle_timeout`);
//! 2. [`NodeCore::process`], then commit the returned batch durably;
//! 3. [`NodeCore::transmit`], and send what it returns;
//! 4. sleep until [`NodeCore::poll_timeout`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use strata_protocol::model::{Cursor, Labels, LogId, ObjectKey, Position};
use strata_protocol::placement::Placement;
use strata_protocol::route::{PLACEMENT_KIND, PlacementRoute, STRATA_GROUP};
use strata_protocol::summary::Summary;
use strata_protocol::sync::{
    ChildSession, ObjectLog, ParentLink, SessionConfig, SessionError, SessionEvent, SharedRoute,
};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{Change, ChildToParent, ErrorCode, ParentToChild, ReportKey, Role};

mod links;
mod upward;
use super::reports::SubtreeReports;
pub use links::LINK_REFRESH;
use strata_node::follower::{Followed, ParentFollower};
use strata_node::store::{Batch, ReportSlot, UpstreamState};

/// One connected child.
#[derive(Debug)]
struct Child {
    conn: u64,
    session: ChildSession,
    relay: bool,
}

/// What the runtime must send after a [`NodeCore::transmit`].
#[derive(Debug, Default)]
pub struct Outgoing {
    /// Messages for children: (child, connection, message).
    pub to_children: Vec<(String, u64, ParentToChild)>,
    /// Messages for the parent.
    pub to_parent: Vec<ChildToParent>,
    /// Child connections to close after sending what is queued for them.
    pub close_children: Vec<(String, u64, SessionError)>,
    /// The upstream connection must be closed (the link gave up on it), with the
    /// parent's hint of when to come back.
    pub close_upstream: Option<(SessionError, Option<Duration>)>,
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

/// Counters for metrics.
#[derive(Debug, Default, Clone)]
pub struct CoreStats {
    /// Summary updates sent upward.
    pub summaries_sent: u64,
    /// Reports refused because they were outside the child's subtree.
    pub reports_refused: u64,
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
    children: BTreeMap<String, Child>,
    child_runs: BTreeMap<String, u64>,
    acked: BTreeMap<String, Cursor>,
    reports: SubtreeReports,
    /// The link to the parent (none at the root).
    parent: Option<ParentFollower>,
    /// Summaries last pushed upward, per (placement, object).
    sent: BTreeMap<(String, ObjectKey), Summary>,
    /// Objects whose summaries may have changed.
    dirty: BTreeSet<ObjectKey>,
    routes_stale: bool,
    /// Everything must be reported upward at the next processing.
    report_all: bool,
    /// This run's id.
    run: u64,
    /// Reports of children's earlier runs, kept (routes stay stable) until the child's
    /// new run says it has reported everything; then what it did not report again goes.
    stale: BTreeSet<ReportSlot>,
    summary_interval: Duration,
    next_summary: Instant,
    batch: Batch,
    outgoing: Outgoing,
    stats: CoreStats,
    /// Children's links as this node sees them.
    links: BTreeMap<String, links::LinkState>,
    /// The wall-clock time at the clock's origin.
    wall_origin: UnixMillis,
}

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
    pub upstream: Option<ParentLink>,
    /// Restored upstream state.
    pub upstream_state: UpstreamState,
    /// How often summaries go upward.
    pub summary_interval: Duration,
    /// This run's id (as in the hello to the parent).
    pub run: u64,
    /// The wall-clock time at the origin of the instants the core is given.
    pub wall_origin: UnixMillis,
}

impl NodeCore {
    /// A core from restored state.
    pub fn new(now: Instant, setup: CoreSetup) -> Self {
        let mut config = setup.sessions;
        config.parent = setup.name.clone();
        config.incarnation = setup.log.id().0;
        let mut reports = setup.reports;
        let all = all_labels(&setup.labels, &setup.upstream_state.inherited);
        let parent = setup
            .upstream
            .map(|link| ParentFollower::new(link, setup.upstream_state));
        config.labels = all.clone();
        reports.set_labels(all);
        let mut core = NodeCore {
            name: setup.name,
            labels: setup.labels,
            allowed: setup.children.into_iter().collect(),
            config,
            log: setup.log,
            placements: Vec::new(),
            children: BTreeMap::new(),
            child_runs: setup.child_runs,
            acked: setup.acked,
            reports,
            parent,
            sent: BTreeMap::new(),
            dirty: BTreeSet::new(),
            routes_stale: true,
            report_all: false,
            run: setup.run,
            stale: BTreeSet::new(),
            summary_interval: setup.summary_interval,
            next_summary: now,
            batch: Batch::default(),
            outgoing: Outgoing::default(),
            stats: CoreStats::default(),
            links: BTreeMap::new(),
            wall_origin: setup.wall_origin,
        };
        core.reload_placements();
        core
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object log.
    pub fn log(&self) -> &ObjectLog {
        &self.log
    }

    /// What the children reported.
    pub fn reports(&self) -> &SubtreeReports {
        &self.reports
    }

    /// The placements in the log.
    pub fn placements(&self) -> &[Placement] {
        &self.placements
    }

    /// Counters.
    pub fn stats(&self) -> &CoreStats {
        &self.stats
    }

    /// Connected children and their last acked cursor.
    pub fn children(&self) -> impl Iterator<Item = (&str, Option<Cursor>)> {
        self.children
            .iter()
            .map(|(n, c)| (n.as_str(), c.session.acked().or(self.acked.get(n).copied())))
    }

    /// Whether the upstream link is open.
    pub fn upstream_open(&self) -> bool {
        self.parent.as_ref().is_some_and(ParentFollower::is_open)
    }

    /// The upstream link, if this node has a parent.
    pub fn upstream(&self) -> Option<&ParentLink> {
        self.parent.as_ref().map(ParentFollower::link)
    }

    // ---- children ------------------------------------------------------------

    /// Whether `name` may connect as a child (configured, or admitted by join token).
    pub fn is_allowed_child(&self, name: &str) -> bool {
        self.allowed.contains(name)
    }

    /// Allows `name` to connect as a child from now on: an agent admitted by join token
    /// (the runtime records it durably first).
    pub fn admit_child(&mut self, name: &str) {
        self.allowed.insert(name.to_owned());
    }

    /// A child's connection is up and its certificate names `name`. The newest
    /// connection of a child replaces its older session.
    pub fn child_connected(
        &mut self,
        now: Instant,
        name: &str,
        conn: u64,
    ) -> Result<(), SessionError> {
        if !self.allowed.contains(name) {
            return Err(SessionError {
                code: ErrorCode::UnknownChild,
                reason: format!("{name:?} is not a child of {:?}", self.name),
            });
        }
        let route = self.route_for(name, false);
        let session = ChildSession::new(now, name.to_owned(), route, self.config.clone());
        if let Some(old) = self.children.insert(
            name.to_owned(),
            Child {
                conn,
                session,
                relay: false,
            },
        ) {
            self.outgoing.close_children.push((
                name.to_owned(),
                old.conn,
                SessionError {
                    code: ErrorCode::Replaced,
                    reason: "a newer connection of this child took over".into(),
                },
            ));
        }
        Ok(())
    }

    /// A message from a child's connection.
    pub fn child_message(&mut self, now: Instant, name: &str, conn: u64, msg: ChildToParent) {
        if let Some(child) = self.children.get_mut(name).filter(|c| c.conn == conn) {
            child.session.handle_message(now, msg);
            self.link_heard(now, name);
        }
    }

    /// A child's connection is gone.
    pub fn child_gone(&mut self, now: Instant, name: &str, conn: u64) {
        if self.children.get(name).is_some_and(|c| c.conn == conn) {
            self.children.remove(name);
            self.link_down(now, name);
        }
    }

    // ---- upstream -------------------------------------------------------------

    /// The connection to the parent is up.
    pub fn upstream_connected(&mut self, now: Instant) {
        if let Some(parent) = &mut self.parent {
            parent.handle_connected(now);
        }
    }

    /// A message from the parent.
    pub fn upstream_message(&mut self, now: Instant, msg: ParentToChild) {
        if let Some(parent) = &mut self.parent {
            parent.handle_message(now, msg);
        }
    }

    /// The connection to the parent is gone.
    pub fn upstream_gone(&mut self) {
        if let Some(parent) = &mut self.parent {
            parent.handle_disconnected();
        }
    }

    // ---- the root's writes ----------------------------------------------------

    /// Applies user changes at the root in one revision (all or nothing: they are
    /// staged together and committed at one position). Returns that position.
    pub fn apply(
        &mut self,
        changes: Vec<Change>,
    ) -> Result<Position, strata_protocol::sync::LogError> {
        let pos = self.log.head().next();
        for change in changes {
            self.note_change(&change);
            self.log.stage(pos, change)?;
        }
        self.log.commit(pos);
        Ok(pos)
    }

    /// Applies user manifests at the root in one revision; manifests identical to what
    /// the log holds are left alone (applying twice changes nothing).
    pub fn apply_manifests(
        &mut self,
        manifests: &[strata_node::objects::Manifest],
    ) -> Result<Applied, strata_protocol::sync::LogError> {
        let rev = strata_protocol::model::Revision(self.log.head().next().0);
        let mut changes = Vec::new();
        let mut unchanged = Vec::new();
        for m in manifests {
            let object = strata_node::objects::to_object(m, rev);
            match self.log.get(object.key()) {
                Some(held) if held.hash == object.hash => unchanged.push(object.key().clone()),
                _ => changes.push(Change::Upsert(object)),
            }
        }
        let applied: Vec<ObjectKey> = changes.iter().map(|c| c.key().clone()).collect();
        let revision = if changes.is_empty() {
            None
        } else {
            Some(self.apply(changes)?)
        };
        Ok(Applied {
            revision,
            applied,
            unchanged,
        })
    }

    // ---- time ----------------------------------------------------------------

    /// Handles timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        for child in self.children.values_mut() {
            if child.session.poll_timeout().is_some_and(|t| t <= now) {
                child.session.handle_timeout(now);
            }
        }
        if let Some(parent) = &mut self.parent {
            parent.handle_timeout(now);
        }
    }

    /// When [`NodeCore::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let sessions = self
            .children
            .values()
            .filter_map(|c| c.session.poll_timeout());
        let link = self.parent.as_ref().and_then(ParentFollower::poll_timeout);
        // Summaries of changed objects, and the refresh of relay children's links.
        let summaries = (self.parent.is_some()
            && (!self.dirty.is_empty() || self.has_relay_child_up()))
        .then_some(self.next_summary);
        sessions.chain(link).chain(summaries).min()
    }

    // ---- processing ------------------------------------------------------------

    /// Handles every pending event and returns what must be made durable before
    /// [`NodeCore::transmit`].
    pub fn process(&mut self, now: Instant) -> Batch {
        self.drain_parent_events();
        self.drain_child_events(now);
        if std::mem::take(&mut self.report_all) {
            self.report_everything(now);
        }
        self.push_changed_links(now);
        if self.routes_stale {
            self.routes_stale = false;
            self.reload_placements();
            let names: Vec<String> = self.children.keys().cloned().collect();
            for name in names {
                let relay = self.children.get(&name).is_some_and(|c| c.relay);
                let route = self.route_for(&name, relay);
                if let Some(child) = self.children.get_mut(&name) {
                    child.session.set_route(route, &self.log);
                }
            }
        }
        if now >= self.next_summary {
            self.refresh_links(now);
            self.push_summaries(now);
            self.compact();
        }
        let mut batch = std::mem::take(&mut self.batch);
        batch.merge(Batch::log_changes(&mut self.log));
        batch
    }

    /// Drops tombstones no child needs any more: below every live session's retention
    /// floor and, for a child without one, its last acknowledged position, except that a
    /// child more than [`MAX_RETAINED`] positions behind is left to a snapshot rather
    /// than holding the log's history forever.
    fn compact(&mut self) {
        let head = self.log.head();
        let oldest_allowed = Position(head.0.saturating_sub(MAX_RETAINED));
        let log_id = self.log.id();
        // Per known child: what its live session still needs, or else (not connected,
        // or connected but not subscribed yet) what it last acknowledged.
        let floor = self
            .allowed
            .iter()
            .filter_map(|name| {
                self.children
                    .get(name)
                    .and_then(|c| c.session.retention_floor(&self.log))
                    .or_else(|| {
                        self.acked
                            .get(name)
                            .filter(|c| c.log == log_id)
                            .map(|c| c.position.max(oldest_allowed))
                    })
            })
            .min()
            .unwrap_or(head);
        if floor > self.log.floor() {
            self.log.compact(floor);
        }
    }

    /// Everything to send now. Call only once the last batch is durable: it acknowledges
    /// what that batch holds.
    pub fn transmit(&mut self, now: Instant) -> Outgoing {
        let mut out = std::mem::take(&mut self.outgoing);
        for (name, child) in &mut self.children {
            while let Some(msg) = child.session.poll_transmit(now, &self.log) {
                out.to_children.push((name.clone(), child.conn, msg));
            }
        }
        if let Some(parent) = &mut self.parent {
            while let Some(msg) = parent.poll_transmit(now) {
                out.to_parent.push(msg);
            }
        }
        let closed: Vec<String> = self
            .children
            .iter()
            .filter(|(_, c)| c.session.is_closed())
            .map(|(n, _)| n.clone())
            .collect();
        for name in closed {
            self.children.remove(&name);
            self.link_down(now, &name);
        }
        out
    }

    /// What the parent's events mean here: changes to note, labels to inherit,
    /// everything to report again, or a link to close.
    fn drain_parent_events(&mut self) {
        let Some(mut parent) = self.parent.take() else {
            return;
        };
        while let Some(followed) = parent.poll(&mut self.log, &mut self.batch) {
            match followed {
                Followed::ReportAll => self.report_all = true,
                Followed::Labels(labels) => self.inherit(labels),
                Followed::Changed(change) => self.note_key(change.key().clone()),
                Followed::Closed { error, retry_after } => {
                    self.outgoing.close_upstream = Some((error, retry_after));
                }
            }
        }
        self.parent = Some(parent);
    }

    /// The labels this node's ancestors give every cluster below changed (at a welcome,
    /// or while connected; the follower stored them): every connected child is told (so
    /// that the whole subtree routes with them, whatever order its nodes started in),
    /// and routes and summaries here are recomputed.
    fn inherit(&mut self, inherited: Labels) {
        let all = all_labels(&self.labels, &inherited);
        for child in self.children.values_mut() {
            child.session.set_labels(all.clone());
        }
        self.config.labels = all.clone();
        self.reports.set_labels(all);
        self.routes_stale = true;
        self.dirty.extend(self.log.live().map(|o| o.key().clone()));
    }

    fn note_change(&mut self, change: &Change) {
        self.note_key(change.key().clone());
    }

    /// A key changed in the log: its summaries may change, and a placement changing
    /// changes routes.
    fn note_key(&mut self, key: ObjectKey) {
        if key.group == STRATA_GROUP && key.kind == PLACEMENT_KIND {
            self.routes_stale = true;
        }
        self.dirty.insert(key);
    }

    fn drain_child_events(&mut self, now: Instant) {
        let names: Vec<String> = self.children.keys().cloned().collect();
        for name in names {
            while let Some(event) = self
                .children
                .get_mut(&name)
                .and_then(|c| c.session.poll_event())
            {
                self.on_child_event(now, &name, event);
            }
        }
    }

    fn on_child_event(&mut self, now: Instant, name: &str, event: SessionEvent) {
        match event {
            SessionEvent::Opened { hello, .. } => {
                let relay = hello.role == Role::Relay;
                if let Some(c) = self.children.get_mut(name) {
                    c.relay = relay;
                }
                self.link_up(now, name, hello.role);
                if self.child_runs.get(name) != Some(&hello.run) {
                    // A new run: what the child reported before stays (routes must not
                    // flap) until it says it has reported everything again.
                    self.child_runs.insert(name.to_owned(), hello.run);
                    self.batch.child_runs.push((name.to_owned(), hello.run));
                    self.stale.extend(self.reports.slots_of(name));
                }
                self.refresh_route(name);
            }
            SessionEvent::Acked(cursor) => {
                self.acked.insert(name.to_owned(), cursor);
                self.batch.child_acks.push((name.to_owned(), cursor));
                self.link_acked(now, name);
            }
            SessionEvent::Reports(items) => {
                let relay = self.children.get(name).is_some_and(|c| c.relay);
                for report in items {
                    if let ReportKey::Complete { run } = report.key {
                        if self.child_runs.get(name) == Some(&run) {
                            self.sweep(now, name);
                        }
                        continue;
                    }
                    if let Err(refusal) = self.reports.check(name, relay, &report) {
                        self.stats.reports_refused += 1;
                        tracing::warn!(child = name, %refusal, "closing the session: report outside its subtree");
                        if let Some(c) = self.children.get_mut(name) {
                            self.outgoing.close_children.push((
                                name.to_owned(),
                                c.conn,
                                SessionError {
                                    code: ErrorCode::OutsideSubtree,
                                    reason: refusal.to_string(),
                                },
                            ));
                        }
                        return;
                    }
                    self.accept_report(now, name, relay, report);
                }
            }
            SessionEvent::Closed(error) => {
                tracing::info!(child = name, code = ?error.code, reason = %error.reason, "child session closed");
                if let Some(c) = self.children.get(name) {
                    self.outgoing
                        .close_children
                        .push((name.to_owned(), c.conn, error));
                }
            }
        }
    }

    fn reload_placements(&mut self) {
        self.placements = strata_node::objects::placements_in(&self.log);
    }

    fn route_for(&self, child: &str, relay: bool) -> SharedRoute {
        let clusters = self.reports.clusters_below(child);
        Arc::new(PlacementRoute::new(relay, &self.placements, &clusters))
    }

    fn refresh_route(&mut self, child: &str) {
        let relay = self.children.get(child).is_some_and(|c| c.relay);
        let route = self.route_for(child, relay);
        if let Some(c) = self.children.get_mut(child) {
            c.session.set_route(route, &self.log);
        }
    }
}

/// How many positions of history a node keeps for a disconnected child before leaving
/// it to a snapshot when it returns.
pub const MAX_RETAINED: u64 = 100_000;

/// This node's labels over its ancestors' (its own win).
fn all_labels(own: &Labels, inherited: &Labels) -> Labels {
    let mut all = inherited.clone();
    all.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    all
}

/// A fresh log for a node whose store had none.
pub fn new_log(node_id: u64, root: bool) -> ObjectLog {
    let mut log = ObjectLog::new(LogId(node_id));
    if root {
        log.mark_serving();
    }
    log
}
