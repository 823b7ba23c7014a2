//! The agent's sync core: its link to the parent, its desired state (an object log, so
//! deltas arriving in parts and snapshots work as at every tier), and the cluster it
//! keeps in that state. No I/O; the runtime drives it like a relay's core.

use std::collections::BTreeMap;

use strata_node::driver::ToParent;
use strata_node::follower::{Followed, ParentFollower};
use strata_node::objects::placements_in;
use strata_node::store::{Batch, UpstreamState};
use strata_protocol::model::{Cluster, Health, ObjectKey, Status};
use strata_protocol::route::{PLACEMENT_KIND, STRATA_GROUP};
use strata_protocol::sync::{ObjectLog, ParentLink, SessionError};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{Change, ParentToChild, Report, ReportKey, ReportValue};

use crate::backend::{ClusterBackend, UpsyncRule};

/// The state of one agent.
pub struct AgentCore {
    cluster: Cluster,
    parent: ParentFollower,
    log: ObjectLog,
    backend: Box<dyn ClusterBackend + Send>,
    /// The last status reported per object.
    statuses: BTreeMap<ObjectKey, Status>,
    batch: Batch,
    close_upstream: Option<(SessionError, Option<std::time::Duration>)>,
    /// This run's id (as in the hello).
    run: u64,
    /// Upsynced objects as last reported (reported again to a parent that may have
    /// lost them).
    upsynced: BTreeMap<ObjectKey, Vec<u8>>,
    /// The placements held changed: the upsync rules must be given to the backend.
    upsync_stale: bool,
    /// What this run did to the cluster, for metrics.
    stats: AgentStats,
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
    pub upstream: UpstreamState,
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
            upstream,
            backend,
            run,
        } = setup;
        let mut core = AgentCore {
            run,
            cluster,
            parent: ParentFollower::new(link, upstream),
            log,
            backend,
            statuses: BTreeMap::new(),
            batch: Batch::default(),
            close_upstream: None,
            upsynced: BTreeMap::new(),
            upsync_stale: true,
            stats: AgentStats::default(),
        };
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

    /// What wakes the agent when the backend has statuses to report.
    pub fn backend_wake(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        self.backend.wake()
    }

    /// The link to the parent.
    pub fn link(&self) -> &ParentLink {
        self.parent.link()
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

    /// The connection to the parent is up.
    pub fn upstream_connected(&mut self, now: Instant) {
        self.parent.handle_connected(now);
    }

    /// A message from the parent.
    pub fn upstream_message(&mut self, now: Instant, msg: ParentToChild) {
        self.parent.handle_message(now, msg);
    }

    /// The connection to the parent is gone.
    pub fn upstream_gone(&mut self) {
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
        while let Some(followed) = self.parent.poll(&mut self.log, &mut self.batch) {
            match followed {
                Followed::ReportAll => self.report_all(now),
                // Routing by labels happens at the relays; an agent has nothing to do.
                Followed::Labels(_) => {}
                Followed::Changed(change) => self.apply_to_cluster(now, at, &change),
                Followed::Closed { error, retry_after } => {
                    self.close_upstream = Some((error, retry_after));
                }
            }
        }
        for (key, status) in self.backend.poll_status(now, at) {
            if self.log.get(&key).is_some() {
                self.push_status(now, &key, Some(status));
            }
        }
        if std::mem::take(&mut self.upsync_stale) {
            self.backend.set_upsync(upsync_rules(&self.log));
        }
        for u in self.backend.poll_upsync() {
            self.push_upsynced(now, u.key, u.body);
        }
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
            close: self.close_upstream.take(),
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
        // Placements reach an agent only to say what to upsync; they are ours, never
        // the cluster's.
        if change.key().group == STRATA_GROUP && change.key().kind == PLACEMENT_KIND {
            self.upsync_stale = true;
            return;
        }
        match change {
            Change::Upsert(object) => {
                self.stats.applies += 1;
                if let Err(e) = self.backend.apply(now, at, object) {
                    self.stats.apply_failures += 1;
                    tracing::warn!(object = %object.key(), error = %e, "apply failed");
                    let status = Status {
                        health: Health::Failed,
                        revision: object.revision,
                        observed_generation: None,
                        message: Some(e.reason),
                        numbers: BTreeMap::new(),
                        status: Vec::new(),
                        observed_at: at,
                    };
                    self.push_status(now, object.key(), Some(status));
                }
            }
            Change::Delete(key) => {
                self.stats.deletes += 1;
                if let Err(e) = self.backend.delete(now, key) {
                    self.stats.delete_failures += 1;
                    tracing::warn!(object = %key, error = %e, "delete failed");
                }
                if self.statuses.contains_key(key) {
                    self.push_status(now, key, None);
                }
            }
        }
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

/// The upsync rules of the placements this agent holds (its parent sends it only the
/// placements that select its cluster and ask for upsync).
fn upsync_rules(log: &ObjectLog) -> Vec<UpsyncRule> {
    placements_in(log)
        .into_iter()
        .flat_map(|p| {
            p.upsync.into_iter().map(move |u| UpsyncRule {
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
