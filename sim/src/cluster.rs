//! The simulated clusters as the observer sees them: each agent's backend is the real
//! [`SimulatedCluster`] wrapped in a `RecordingCluster`, which tells the observer what
//! the cluster removes (so that a removal undone before the next sample is still seen)
//! and publishes what the cluster holds and the health it last reported
//! ([`ClusterView`]): the cluster's own word, not its agent's. The checks of a
//! stateful move read it with the cluster's volumes ([`SimCluster`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use strata_agent::backend::{BackendError, ClusterBackend, UpsyncRule, Upsynced};
use strata_agent::sim_volumes::SimVolumes;
use strata_agent::simulated::SimulatedCluster;
use strata_protocol::model::{Health, Object, ObjectKey, Revision, Status};
use strata_protocol::time::{Instant, UnixMillis};
use tokio::sync::watch;

/// What a simulated cluster holds: every object with its revision and the health the
/// cluster last reported for it (`None` before its first status at that revision).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// By key.
    pub objects: BTreeMap<ObjectKey, (Revision, Option<Health>)>,
}

impl ClusterView {
    /// Whether the cluster holds `key`.
    pub fn holds(&self, key: &ObjectKey) -> bool {
        self.objects.contains_key(key)
    }

    /// Whether the cluster holds `key` and last reported it `Available`.
    pub fn available(&self, key: &ObjectKey) -> bool {
        self.objects.get(key).and_then(|(_, h)| *h) == Some(Health::Available)
    }
}

/// One running simulated cluster, as the checks read it.
#[derive(Debug, Clone)]
pub struct SimCluster {
    /// What it holds.
    pub view: watch::Receiver<ClusterView>,
    /// Its claims' bytes (the app writes them; moves copy them).
    pub volumes: SimVolumes,
}

/// A simulated cluster that tells the observer every object it removes and the
/// revision it held, and publishes what it holds.
pub(crate) struct RecordingCluster {
    inner: SimulatedCluster,
    removed: Sender<(ObjectKey, Revision)>,
    view: watch::Sender<ClusterView>,
}

impl RecordingCluster {
    /// Wraps `inner`; returns the wrapper and what the checks read.
    pub(crate) fn new(
        inner: SimulatedCluster,
        removed: Sender<(ObjectKey, Revision)>,
    ) -> (RecordingCluster, SimCluster) {
        let (view, seen) = watch::channel(ClusterView::default());
        let sim = SimCluster {
            view: seen,
            volumes: inner.volumes(),
        };
        let cluster = RecordingCluster {
            inner,
            removed,
            view,
        };
        (cluster, sim)
    }
}

impl ClusterBackend for RecordingCluster {
    fn apply(&mut self, now: Instant, at: UnixMillis, object: &Object) -> Result<(), BackendError> {
        self.inner.apply(now, at, object)?;
        let (key, rev) = (object.key().clone(), object.revision);
        self.view.send_if_modified(|v| match v.objects.get(&key) {
            Some((held, _)) if *held == rev => false,
            _ => {
                v.objects.insert(key, (rev, None));
                true
            }
        });
        Ok(())
    }

    fn delete(&mut self, now: Instant, key: &ObjectKey) -> Result<(), BackendError> {
        let held = self
            .inner
            .objects()
            .find_map(|(k, rev)| (k == key).then_some(rev));
        if let Some(rev) = held {
            // The observer may be gone (the run is over): nothing to tell.
            let _ = self.removed.send((key.clone(), rev));
        }
        self.inner.delete(now, key)?;
        self.view
            .send_if_modified(|v| v.objects.remove(key).is_some());
        Ok(())
    }

    fn poll_status(&mut self, now: Instant, at: UnixMillis) -> Vec<(ObjectKey, Status)> {
        let changed = self.inner.poll_status(now, at);
        if !changed.is_empty() {
            self.view.send_modify(|v| {
                for (key, status) in &changed {
                    if let Some(slot) = v.objects.get_mut(key)
                        && slot.0 == status.revision
                    {
                        slot.1 = Some(status.health);
                    }
                }
            });
        }
        changed
    }

    fn next_change(&self) -> Option<Instant> {
        self.inner.next_change()
    }

    fn wake(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.inner.wake()
    }

    fn set_upsync(&mut self, rules: Vec<UpsyncRule>) {
        self.inner.set_upsync(rules);
    }

    fn manifest(&self, key: &ObjectKey) -> Option<Vec<u8>> {
        self.inner.manifest(key)
    }

    fn poll_upsync(&mut self) -> Vec<Upsynced> {
        self.inner.poll_upsync()
    }

    // The cluster's address (its load balancers' and its nodes'), derived from its
    // name: what DNS answers for the apps it runs.
    fn node_addresses(&self) -> Vec<String> {
        self.inner.node_addresses()
    }

    fn set_cluster(&mut self, cluster: &strata_protocol::model::Cluster) {
        self.inner.set_cluster(cluster);
    }
}
