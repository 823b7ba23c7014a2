//! A root replica following the shared store ([`super::EtcdStore::replicate`]): an etcd
//! watch on the prefix from the revision the node loaded at, decoded into records the
//! node takes in; and, at a standby, the campaign for the writer lease.
//!
//! Whenever the watch breaks (a member gone, a compacted start revision) the follower
//! reads everything again at one revision and hands it over whole
//! ([`ReplicaEvent::Records`] with `full`), then watches from there: events at or below
//! that revision are skipped, so nothing is ever taken back to an older value.
//!
//! A standby that wins the lease first reads everything (the old writer is fenced by
//! then, so this is all it ever wrote), hands it over whole, then sends
//! [`ReplicaEvent::Promoted`]; the node sets the flag it carries once it has taken the
//! records in, and only then do the log's records go through the fence.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::etcd_client::{Client, WatchResponse};
use tokio::sync::mpsc::UnboundedSender;

use super::etcd_lease::{campaign, keep_alive, retrying};
use super::records::{Replicated, replicated};

/// What a follower hands the node.
#[derive(Debug)]
pub enum ReplicaEvent {
    /// Records other replicas committed. With `full`, every record there is: what the
    /// node holds and is not among them is gone.
    Records {
        /// The records, in commit order.
        records: Vec<Replicated>,
        /// Whether this is everything (after a break of the watch, or a takeover).
        full: bool,
    },
    /// This replica now holds the writer lease and everything committed before is
    /// handed over: the node writes from now on, and sets the flag (the store's) once
    /// it is ready to, so that its next commit goes through the fence.
    Promoted(Arc<AtomicBool>),
}

/// The follower's state; runs on the store's runtime.
pub(super) struct Replicator {
    pub(super) client: Client,
    pub(super) prefix: Vec<u8>,
    pub(super) writer_key: Vec<u8>,
    pub(super) id: Vec<u8>,
    pub(super) ttl_s: i64,
    pub(super) at: String,
    pub(super) writer: Arc<AtomicBool>,
    /// The revision the node's state was read at.
    pub(super) from: i64,
}

impl Replicator {
    /// Follows until `events` closes.
    pub(super) async fn run(self, events: UnboundedSender<ReplicaEvent>) {
        let mut through = self.from;
        // The writer's log records are its own; a standby's are the writer's.
        let mut writing = self.writer.load(Ordering::SeqCst);
        let campaign = {
            let (client, key, id, at) = (
                self.client.clone(),
                self.writer_key.clone(),
                self.id.clone(),
                self.at.clone(),
            );
            let ttl_s = self.ttl_s;
            async move {
                if writing {
                    return std::future::pending::<i64>().await;
                }
                loop {
                    match campaign(client.clone(), key.clone(), id.clone(), ttl_s, &at, true).await
                    {
                        Ok(Some(lease)) => return lease,
                        Ok(None) => {}
                        Err(e) => tracing::warn!(%at, error = %e, "campaign failed; again"),
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        let mut campaign = std::pin::pin!(campaign);
        let mut campaigning = !writing;
        loop {
            let watch = self.client.watch_prefix(&self.prefix, through + 1).await;
            let mut stream = match watch {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch etcd; reading everything again");
                    None
                }
            };
            while let Some(s) = stream.as_mut() {
                tokio::select! {
                    biased;
                    // What was committed first: a takeover must not overtake it.
                    msg = s.message() => match msg {
                        Ok(Some(r)) if r.canceled => break,
                        Ok(Some(r)) => {
                            let records = self.decode(&r, through, writing);
                            for e in &r.events {
                                through = through.max(e.kv.mod_revision);
                            }
                            if !records.is_empty() && events.send(ReplicaEvent::Records { records, full: false }).is_err() {
                                return;
                            }
                        }
                        Ok(None) | Err(_) => break,
                    },
                    lease = &mut campaign, if campaigning => {
                        campaigning = false;
                        // Fenced: the old writer can write no more. Take everything it
                        // wrote, then write.
                        let Some(rev) = self.resync(&events, false).await else { return };
                        through = rev;
                        writing = true;
                        tokio::spawn(keep_alive(self.client.clone(), lease, self.ttl_s, self.at.clone()));
                        tracing::info!(lease, revision = rev, "won the writer lease: this replica writes now");
                        if events.send(ReplicaEvent::Promoted(self.writer.clone())).is_err() {
                            return;
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            match self.resync(&events, writing).await {
                Some(rev) => through = rev,
                None => return,
            }
        }
    }

    /// Reads every record at one revision and hands them over whole (the log's only
    /// if this replica does not write it). Returns the revision, or `None` once the
    /// node is gone.
    async fn resync(&self, events: &UnboundedSender<ReplicaEvent>, writing: bool) -> Option<i64> {
        loop {
            let got = retrying(|| {
                let (c, p) = (self.client.clone(), self.prefix.clone());
                async move { c.get_prefix(&p).await }
            })
            .await;
            let r = match got {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read etcd; again");
                    if events.is_closed() {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            let rev = r.revision;
            let n = self.prefix.len();
            let records = r
                .kvs
                .iter()
                .filter(|kv| kv.key.len() >= n)
                .filter_map(|kv| decoded(&kv.key[n..], Some(&kv.value), writing))
                .collect();
            let full = ReplicaEvent::Records {
                records,
                full: true,
            };
            return events.send(full).ok().map(|()| rev);
        }
    }

    fn decode(&self, r: &WatchResponse, through: i64, writing: bool) -> Vec<Replicated> {
        let n = self.prefix.len();
        r.events
            .iter()
            .filter_map(|e| {
                let kv = &e.kv;
                if kv.mod_revision <= through || kv.key.len() < n {
                    return None;
                }
                let value = (!e.deleted).then_some(kv.value.as_slice());
                decoded(&kv.key[n..], value, writing)
            })
            .collect()
    }
}

/// A record as the node takes it: the log's only at a replica that does not write it;
/// an undecodable record is logged and skipped (the next full read has it again).
fn decoded(key: &[u8], value: Option<&[u8]>, writing: bool) -> Option<Replicated> {
    match replicated(key, value) {
        Ok(Some(Replicated::LogMeta(_) | Replicated::Entry(..))) if writing => None,
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "skipping a record that does not decode");
            None
        }
    }
}
