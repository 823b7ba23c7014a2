//! An in-memory store for tests and the simulator. Clones share the data, so a test can
//! "crash" a node, drop everything else, and start it again on the same store.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use strata_protocol::model::{Cursor, ObjectKey};
use strata_protocol::sync::{KeyEntry, LogMeta};
use strata_protocol::wire::ReportValue;

use super::{Batch, ParentState, ReportSlot, Store, StoreError, Stored};

#[derive(Debug, Default)]
struct Data {
    node_id: u64,
    log_meta: Option<LogMeta>,
    entries: BTreeMap<ObjectKey, KeyEntry>,
    parent: Option<ParentState>,
    child_acks: BTreeMap<String, Cursor>,
    child_runs: BTreeMap<String, u64>,
    reports: BTreeMap<ReportSlot, ReportValue>,
    joined: BTreeMap<String, String>,
}

/// A store in memory.
#[derive(Debug, Clone)]
pub struct MemStore {
    inner: Arc<RwLock<Data>>,
    full: Arc<std::sync::atomic::AtomicBool>,
    commits: Arc<std::sync::atomic::AtomicU64>,
}

impl MemStore {
    /// An empty store whose node id is `node_id`.
    pub fn new(node_id: u64) -> Self {
        MemStore {
            inner: Arc::new(RwLock::new(Data {
                node_id,
                ..Data::default()
            })),
            full: Arc::default(),
            commits: Arc::default(),
        }
    }

    /// Commits written so far (a driver commits only a batch that writes something).
    pub fn commits(&self) -> u64 {
        self.commits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Simulates a full disk: while set, every commit fails and changes nothing.
    pub fn set_full(&self, full: bool) {
        self.full.store(full, std::sync::atomic::Ordering::Relaxed);
    }
}

fn poisoned() -> StoreError {
    StoreError::Write {
        detail: "the in-memory store's lock is poisoned".into(),
    }
}

fn apply<K: Ord, V>(map: &mut BTreeMap<K, V>, k: K, v: Option<V>) {
    match v {
        Some(v) => {
            map.insert(k, v);
        }
        None => {
            map.remove(&k);
        }
    }
}

impl Store for MemStore {
    fn commit_blocks(&self) -> bool {
        false
    }

    fn load(&self) -> Result<Stored, StoreError> {
        let d = self.inner.read().map_err(|_| poisoned())?;
        Ok(Stored {
            node_id: d.node_id,
            log_meta: d.log_meta,
            entries: d
                .entries
                .iter()
                .map(|(k, e)| (k.clone(), e.clone()))
                .collect(),
            parent: d.parent.clone(),
            child_acks: d.child_acks.clone(),
            child_runs: d.child_runs.clone(),
            reports: d.reports.clone(),
            joined: d.joined.clone(),
        })
    }

    fn commit(&self, batch: &Batch) -> Result<(), StoreError> {
        if self.full.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::Write {
                detail: "no space left on device (simulated)".into(),
            });
        }
        let mut d = self.inner.write().map_err(|_| poisoned())?;
        self.commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(meta) = batch.log_meta {
            d.log_meta = Some(meta);
        }
        for (k, e) in &batch.entries {
            apply(&mut d.entries, k.clone(), e.clone());
        }
        if let Some(u) = &batch.parent {
            d.parent = Some(u.clone());
        }
        d.child_acks.extend(batch.child_acks.iter().cloned());
        d.child_runs.extend(batch.child_runs.iter().cloned());
        d.joined.extend(batch.joined.iter().cloned());
        for (k, r) in &batch.reports {
            apply(&mut d.reports, k.clone(), r.clone());
        }
        Ok(())
    }

    fn size_bytes(&self) -> u64 {
        0
    }
}
