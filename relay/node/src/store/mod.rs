//! The durable store every node keeps: its object log, its cursor into its parent's log,
//! the cursors its children acknowledged, and what its children reported.
//!
//! [`Store::commit`] is atomic and returns only once the batch is durable: anything a
//! node acknowledges to a peer goes through it first. The sled implementation is the
//! default (sled 0.34 calls itself beta; the kill -9 tests in `tests/store_crash.rs`
//! are how we hold it to its word); [`MemStore`] serves tests and the simulator.

mod etcd_client;
mod etcd_lease;
mod etcd_replica;
mod etcd_store;
mod memory;
mod records;
mod sled_store;

use std::collections::BTreeMap;

use strata_protocol::model::{Cursor, ObjectKey};
use strata_protocol::sync::{KeyEntry, LogMeta, ObjectLog};
use strata_protocol::wire::{ReportKey, ReportValue, RouteId};

pub use etcd_lease::LOST_LEASE_EXIT;
pub use etcd_replica::ReplicaEvent;
pub use etcd_store::{EtcdConfig, EtcdStore, EtcdTls};
pub use memory::MemStore;
pub use records::Replicated;
pub use records::STORE_FORMAT;
pub use sled_store::{SledStore, open_db as open_sled_db};

/// A node's position in its parent's log.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParentState {
    /// How far the parent's log is applied.
    pub cursor: Cursor,
    /// The route the view was cut with (`None`: no settled view).
    pub route: Option<RouteId>,
    /// The parent's incarnation when we last reported to it.
    pub parent_incarnation: Option<u64>,
    /// Labels the ancestors give every cluster below (from the parent's welcome).
    #[serde(default)]
    pub inherited: strata_protocol::model::Labels,
}

/// Where a report is kept: the child that sent it and what it is about. Two children
/// may report the same key (each its own summary of one object).
pub type ReportSlot = (String, ReportKey);

/// Everything a node keeps across restarts.
#[derive(Debug, Default)]
pub struct Stored {
    /// Chosen when the store was created; the node's log id and incarnation.
    pub node_id: u64,
    /// The log's scalar state, if a log was ever written.
    pub log_meta: Option<LogMeta>,
    /// The log's entries.
    pub entries: Vec<(ObjectKey, KeyEntry)>,
    /// Position in the parent's log.
    pub parent: Option<ParentState>,
    /// Per child: the last cursor it acknowledged.
    pub child_acks: BTreeMap<String, Cursor>,
    /// Per child: its last run id (a new run means its reports start over).
    pub child_runs: BTreeMap<String, u64>,
    /// Reports received from children.
    pub reports: BTreeMap<ReportSlot, ReportValue>,
    /// Agents admitted by join token: the used token's id (its SHA-256, hex) and the
    /// name the agent joined as.
    pub joined: BTreeMap<String, String>,
}

/// One atomic, durable write; empty fields write nothing.
#[derive(Debug, Default)]
pub struct Batch {
    /// The log's scalar state.
    pub log_meta: Option<LogMeta>,
    /// Entries to write (`None` removes).
    pub entries: Vec<(ObjectKey, Option<KeyEntry>)>,
    /// Position in the parent's log.
    pub parent: Option<ParentState>,
    /// Children's acknowledged cursors.
    pub child_acks: Vec<(String, Cursor)>,
    /// Children's run ids.
    pub child_runs: Vec<(String, u64)>,
    /// Reports to write (`None` removes).
    pub reports: Vec<(ReportSlot, Option<ReportValue>)>,
    /// Agents admitted by join token: (token id, name); never removed.
    pub joined: Vec<(String, String)>,
}

impl Batch {
    /// The log's pending changes: its meta if it changed, and every dirty entry.
    pub fn log_changes(log: &mut ObjectLog) -> Batch {
        let dirty = log.take_dirty();
        Batch {
            log_meta: log.take_meta_change(),
            entries: dirty
                .into_iter()
                .map(|k| {
                    let entry = log.entry(&k).cloned();
                    (k, entry)
                })
                .collect(),
            ..Batch::default()
        }
    }

    /// Adds `other`'s writes after this batch's (later writes win).
    pub fn merge(&mut self, other: Batch) {
        if other.log_meta.is_some() {
            self.log_meta = other.log_meta;
        }
        self.entries.extend(other.entries);
        if other.parent.is_some() {
            self.parent = other.parent;
        }
        self.child_acks.extend(other.child_acks);
        self.child_runs.extend(other.child_runs);
        self.reports.extend(other.reports);
        self.joined.extend(other.joined);
    }

    /// Whether the batch writes nothing.
    pub fn is_empty(&self) -> bool {
        self.log_meta.is_none()
            && self.entries.is_empty()
            && self.parent.is_none()
            && self.child_acks.is_empty()
            && self.child_runs.is_empty()
            && self.reports.is_empty()
            && self.joined.is_empty()
    }
}

/// Why the store failed: where (the directory, the record) and what the store or the
/// decoder said. A failed commit leaves what was committed before intact.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant says where (`path`, `record`) and what went wrong (`detail`)
pub enum StoreError {
    /// The store could not be opened.
    #[error("cannot open the store at {path}: {detail}")]
    Open {
        path: std::path::PathBuf,
        /// Why (permissions, another process holds it, corruption).
        detail: String,
    },
    /// A stored record does not decode.
    #[error("corrupt record {record} in the store: {detail}")]
    Corrupt { record: String, detail: String },
    /// A write or flush failed (a full disk, an I/O error).
    #[error("store write failed: {detail}")]
    Write { detail: String },
    /// The store was written in a format this build does not read.
    #[error("{}", format_refusal(path, *found, *supported))]
    Format {
        path: std::path::PathBuf,
        /// The format recorded in the store.
        found: u32,
        /// The one format this build reads and writes ([`STORE_FORMAT`]).
        supported: u32,
    },
}

/// What to tell an operator whose store has another format than this build's.
fn format_refusal(path: &std::path::Path, found: u32, supported: u32) -> String {
    let path = path.display();
    let empty = "or move the directory away so that this node starts empty (a relay below \
                 the root and an agent then fetch their state from their parent again; the \
                 root's state would be lost: keep the moved directory)";
    if found > supported {
        format!(
            "the store at {path} has format {found}, written by a newer build; this build \
             reads format {supported} and cannot downgrade it: run the newer build again, {empty}"
        )
    } else {
        format!(
            "the store at {path} has format {found}, older than format {supported} that this \
             build reads, and this build has no migration from it: run a build between the \
             two first (it migrates the store when it opens it), {empty}"
        )
    }
}

/// A node's durable state.
pub trait Store: Send + Sync + 'static {
    /// Everything stored, for startup.
    fn load(&self) -> Result<Stored, StoreError>;
    /// Applies `batch` atomically and returns once it is durable. On an error nothing
    /// of the batch is applied; the caller keeps it and retries (the log's dirty set it
    /// came from is already drained).
    fn commit(&self, batch: &Batch) -> Result<(), StoreError>;
    /// Approximate bytes used, for metrics.
    fn size_bytes(&self) -> u64;
    /// Makes a small durable write outside the node's records and returns once it is
    /// durable: what readiness probes ask ("does the disk take writes?"). Blocks; call
    /// it off the async workers.
    fn probe_write(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Whether this node writes its own log; `false` for a standby root replica whose
    /// log is another replica's, read back (see [`EtcdStore::replicate`]).
    fn writes_log(&self) -> bool {
        true
    }
    /// Whether [`Store::commit`] may block on I/O (a flush to disk, a round trip to
    /// etcd). `false` for a store in memory: its commit runs in place, without handing
    /// the async worker's place to another thread, which at every commit of 10,000
    /// in-memory agents cost more than the commits.
    fn commit_blocks(&self) -> bool {
        true
    }
}

/// Commits `batch`, keeping a store that flushes to disk off the async workers on a
/// multi-threaded runtime (a store in memory commits in place). On a current-thread
/// runtime (the simulator's hosts), where `block_in_place` is not allowed, the commit
/// runs in place.
pub fn commit_off_workers(store: &dyn Store, batch: &Batch) -> Result<(), StoreError> {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) if store.commit_blocks() => {
            tokio::task::block_in_place(|| store.commit(batch))
        }
        _ => store.commit(batch),
    }
}
