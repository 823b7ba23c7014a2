//! The root's store in etcd, for a root of several replicas (`store: { etcd: ... }`).
//!
//! Records are laid out as in sled ([`super::records`]), each under `PREFIX/`. One
//! replica writes at a time: [`EtcdStore::open`] returns only once this replica holds
//! the writer key `PREFIX/writer`, bound to an etcd lease it keeps alive. Every commit is
//! one etcd transaction guarded by "the writer key still holds my id", so a replica that
//! lost its lease (partitioned, paused, presumed dead) can never write again: the
//! fencing is etcd's, not a clock's. A replica that sees its lease gone exits at once
//! (status 75) rather than serve what may no longer be the latest state; its supervisor
//! starts it again as a standby.
//!
//! The node id (the log's incarnation) lives in etcd too, so every replica serves the
//! same log: children of a replica that died resume from their cursors on the next
//! one, with deltas only, and revisions keep growing across failovers.
//!
//! Every replica serves: [`EtcdStore::open_replica`] returns at once as a standby when
//! another replica writes, and [`EtcdStore::replicate`] then feeds the node what the writer
//! commits (an etcd watch), and campaigns for the lease in the background; a standby
//! that wins catches up with everything committed before it and becomes the writer in
//! place. A standby writes only its own children's records (reports, acks, runs),
//! unfenced: the writer follows those from the same watch.
//!
//! The store's calls block (the [`Store`] trait is synchronous); they run on a small
//! runtime of the store's own, so they may be called from any thread.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use super::etcd_client::{Client, Compare, EtcdError, Op};
use super::etcd_lease::{campaign, keep_alive, retrying};
use super::etcd_replica::{ReplicaEvent, Replicator};
use super::records::{
    FORMAT, NODE_ID, PROBE, STORE_FORMAT, batch_writes, fixed, stored_from, without_log,
};
use super::{Batch, Store, StoreError, Stored};
use crate::process::random_u64;

/// Where a root keeps its state in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members (`http://10.0.0.1:2379`, `https://...`).
    pub endpoints: Vec<String>,
    /// The key prefix of this hierarchy's records (several roots may share one etcd).
    pub prefix: String,
    /// How long the writer's lease outlives its last keep-alive: the longest a dead
    /// writer holds the others off.
    pub lease_ttl: Duration,
    /// TLS towards etcd (`https://` endpoints).
    pub tls: Option<EtcdTls>,
}

/// TLS towards etcd: the CA that signed its members, and a client certificate if etcd
/// asks for one (`--client-cert-auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM CA certificate.
    pub ca: PathBuf,
    /// PEM client certificate and key.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// A store in etcd, held by this replica as the one writer.
pub struct EtcdStore {
    client: Client,
    /// `PREFIX/`.
    prefix: Vec<u8>,
    /// `PREFIX/writer`, holding `id` while this replica writes.
    writer_key: Vec<u8>,
    /// This replica's id (random per process).
    id: Vec<u8>,
    /// Runs the client's futures; shut down in the background when the store drops.
    runtime: Option<tokio::runtime::Runtime>,
    /// Names the store in errors (endpoints and prefix).
    at: String,
    /// Whether this replica holds the writer key (false: a standby). Set by the node
    /// when it takes over ([`ReplicaEvent::Promoted`]), never cleared: a writer that
    /// loses its lease exits.
    writer: Arc<AtomicBool>,
    /// The writer lease's TTL in seconds.
    ttl_s: i64,
    /// The etcd revision the last [`Store::load`] read at: a follower watches from the
    /// next one.
    loaded_at: AtomicI64,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl EtcdStore {
    /// Connects to etcd and waits until this replica is the writer (another replica
    /// holding the lease keeps this call waiting until that lease ends), then records
    /// the format and a node id if the store is new and checks the format otherwise.
    pub fn open(config: &EtcdConfig) -> Result<EtcdStore, StoreError> {
        Self::open_as(config, true)
    }

    /// Connects to etcd and becomes the writer if no replica is, else returns at once
    /// as a standby (once the writer has stamped the store) that serves what it reads;
    /// see [`EtcdStore::replicate`].
    pub fn open_replica(config: &EtcdConfig) -> Result<EtcdStore, StoreError> {
        Self::open_as(config, false)
    }

    /// Whether this replica writes the log (false: a standby).
    pub fn is_writer(&self) -> bool {
        self.writer.load(Ordering::SeqCst)
    }

    /// Starts following the store from the last [`Store::load`]: what other replicas
    /// commit reaches `events` (the log's records at a standby, children's reports at
    /// every replica), and a standby campaigns for the writer lease, announcing with
    /// [`ReplicaEvent::Promoted`] that it won (after a full catch-up). The task runs on
    /// the store's runtime and ends with the store or when `events` closes.
    pub fn replicate(&self, events: tokio::sync::mpsc::UnboundedSender<ReplicaEvent>) {
        let follower = Replicator {
            client: self.client.clone(),
            prefix: self.prefix.clone(),
            writer_key: self.writer_key.clone(),
            id: self.id.clone(),
            ttl_s: self.ttl_s,
            at: self.at.clone(),
            writer: self.writer.clone(),
            from: self.loaded_at.load(Ordering::SeqCst),
        };
        if let Some(rt) = &self.runtime {
            use tracing::Instrument;
            let span = tracing::info_span!("etcd-follow", at = %self.at);
            rt.spawn(follower.run(events).instrument(span));
        }
    }

    fn open_as(config: &EtcdConfig, wait: bool) -> Result<EtcdStore, StoreError> {
        let at = format!(
            "etcd {} under {:?}",
            config.endpoints.join(","),
            config.prefix
        );
        let open_err = |detail: String| StoreError::Open {
            path: PathBuf::from(&at),
            detail,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd-store")
            .enable_all()
            .build()
            .map_err(|e| open_err(e.to_string()))?;
        let tls = tls_config(config).map_err(open_err)?;
        let client = Client::new(&config.endpoints, tls).map_err(open_err)?;
        let prefix = format!("{}/", config.prefix.trim_end_matches('/')).into_bytes();
        let mut store = EtcdStore {
            writer_key: [&prefix[..], b"writer"].concat(),
            prefix,
            id: format!("{:016x}", random_u64()).into_bytes(),
            client,
            runtime: Some(runtime),
            at: at.clone(),
            writer: Arc::new(AtomicBool::new(false)),
            ttl_s: i64::try_from(config.lease_ttl.as_secs().max(2)).unwrap_or(i64::MAX),
            loaded_at: AtomicI64::new(0),
        };
        let format_err = |e| match e {
            e @ StoreError::Format { .. } => e,
            other => open_err(other.to_string()),
        };
        if store.become_writer(wait).map_err(open_err)? {
            store.writer.store(true, Ordering::SeqCst);
            store.stamp().map_err(format_err)?;
        } else {
            tracing::info!(%at, "another replica writes: serving as a standby");
            store.await_stamp().map_err(format_err)?;
        }
        Ok(store)
    }

    fn key(&self, record: &[u8]) -> Vec<u8> {
        [&self.prefix[..], record].concat()
    }

    /// Runs `f` on the store's runtime and waits for it.
    fn run<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, StoreError> {
        match &self.runtime {
            Some(rt) => block(rt, f).map_err(|detail| StoreError::Write { detail }),
            None => Err(StoreError::Write {
                detail: "the store is shut down".into(),
            }),
        }
    }

    /// Claims the writer key under a new lease it keeps alive for as long as the
    /// process lives. With `wait`, waits until no one holds it (if another replica was
    /// quicker, waits again); without, returns `false` at once when another holds it.
    fn become_writer(&mut self, wait: bool) -> Result<bool, String> {
        let client = self.client.clone();
        let (key, id) = (self.writer_key.clone(), self.id.clone());
        let ttl_s = self.ttl_s;
        let at = self.at.clone();
        let outcome = self.run(async move {
            let Some(lease) = campaign(client.clone(), key, id, ttl_s, &at, wait).await? else {
                return Ok(false);
            };
            tracing::info!(%at, lease, "this replica is the writer");
            tokio::spawn(keep_alive(client, lease, ttl_s, at));
            Ok::<bool, EtcdError>(true)
        });
        match outcome {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A standby's start: waits until the writer has recorded the node id (a store
    /// being created by another replica), then checks the format.
    fn await_stamp(&self) -> Result<(), StoreError> {
        let (f, i) = (self.key(FORMAT), self.key(NODE_ID));
        let client = self.client.clone();
        let format = self
            .run(async move {
                loop {
                    let got = retrying(|| {
                        let (c, f, i) = (client.clone(), f.clone(), i.clone());
                        async move {
                            let format = c.get(&f).await?.kvs.pop();
                            let id = c.get(&i).await?.kvs.pop();
                            Ok::<_, EtcdError>((format, id))
                        }
                    })
                    .await;
                    match got {
                        Ok((format, Some(_))) => return Ok(format),
                        Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                        Err(e) => return Err(e),
                    }
                }
            })?
            .map_err(etcd_err)?;
        let found = match &format {
            Some(kv) => u32::from_be_bytes(fixed("store format", &kv.value)?),
            None => STORE_FORMAT,
        };
        if found != STORE_FORMAT {
            return Err(StoreError::Format {
                path: PathBuf::from(&self.at),
                found,
                supported: STORE_FORMAT,
            });
        }
        Ok(())
    }

    /// Records the format and a node id in a new store; checks the format of an
    /// existing one (no migration exists yet: format 1 is the first).
    fn stamp(&self) -> Result<(), StoreError> {
        let (format_key, id_key) = (self.key(FORMAT), self.key(NODE_ID));
        let client = self.client.clone();
        let (f, i) = (format_key.clone(), id_key.clone());
        let (format, id) = self
            .run(retrying(move || {
                let (client, f, i) = (client.clone(), f.clone(), i.clone());
                async move {
                    let format = client.get(&f).await?.kvs.pop();
                    let id = client.get(&i).await?.kvs.pop();
                    Ok::<_, EtcdError>((format, id))
                }
            }))?
            .map_err(etcd_err)?;
        let format = match &format {
            Some(kv) => u32::from_be_bytes(fixed("store format", &kv.value)?),
            None => STORE_FORMAT,
        };
        if format != STORE_FORMAT {
            return Err(StoreError::Format {
                path: PathBuf::from(&self.at),
                found: format,
                supported: STORE_FORMAT,
            });
        }
        if id.is_none() {
            // Zero means "no log" on the wire; never use it.
            let node_id = random_u64().max(1);
            let writes = vec![
                (format_key, Some(STORE_FORMAT.to_be_bytes().to_vec())),
                (id_key, Some(node_id.to_be_bytes().to_vec())),
            ];
            self.fenced(writes)?;
        }
        Ok(())
    }

    /// Writes in one transaction, whoever writes the log (a standby's own records).
    fn unfenced(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let ops = txn_ops(writes);
        let client = self.client.clone();
        self.run(retrying(move || {
            let (client, ops) = (client.clone(), ops.clone());
            async move { client.txn(&[], &ops).await }
        }))?
        .map(|_| ())
        .map_err(etcd_err)
    }

    /// Writes in one transaction, if this replica is still the writer.
    fn fenced(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        let ops = txn_ops(writes);
        let fence = [Compare::ValueIs(self.writer_key.clone(), self.id.clone())];
        let client = self.client.clone();
        let response = self.run(retrying(move || {
            let (client, fence, ops) = (client.clone(), fence.clone(), ops.clone());
            async move { client.txn(&fence, &ops).await }
        }))?;
        match response {
            Ok(true) => Ok(()),
            Ok(false) => Err(StoreError::Write {
                detail: format!(
                    "{}: this replica no longer holds the writer lease; nothing was written",
                    self.at
                ),
            }),
            Err(e) => Err(etcd_err(e)),
        }
    }
}

impl Store for EtcdStore {
    fn load(&self) -> Result<Stored, StoreError> {
        let (client, prefix) = (self.client.clone(), self.prefix.clone());
        let kvs = self
            .run(retrying(move || {
                let (client, prefix) = (client.clone(), prefix.clone());
                async move { client.get_prefix(&prefix).await }
            }))?
            .map_err(etcd_err)?;
        self.loaded_at.store(kvs.revision, Ordering::SeqCst);
        let n = self.prefix.len();
        stored_from(
            kvs.kvs
                .iter()
                .filter(|kv| kv.key.len() >= n)
                .map(|kv| Ok((&kv.key[n..], kv.value.as_slice()))),
        )
    }

    fn commit(&self, batch: &Batch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        if !self.is_writer() {
            // A standby's log is the writer's, read back: only its own children's
            // records are its to write, and no fence applies to them.
            let writes = batch_writes(&without_log(batch))?
                .into_iter()
                .map(|(k, v)| (self.key(&k), v))
                .collect();
            return self.unfenced(writes);
        }
        let writes = batch_writes(batch)?
            .into_iter()
            .map(|(k, v)| (self.key(&k), v))
            .collect();
        self.fenced(writes)
    }

    fn size_bytes(&self) -> u64 {
        let client = self.client.clone();
        match self.run(async move { client.db_size().await }) {
            Ok(Ok(size)) => size,
            _ => 0,
        }
    }

    fn writes_log(&self) -> bool {
        self.is_writer()
    }

    /// A fenced write: ready means etcd takes writes and this replica is the writer.
    fn probe_write(&self) -> Result<(), StoreError> {
        self.fenced(vec![(self.key(PROBE), Some(self.id.clone()))])
    }
}

fn etcd_err(e: EtcdError) -> StoreError {
    StoreError::Write {
        detail: format!("etcd: {e}"),
    }
}

/// Runs `f` on `rt` and waits for it on this thread (which may be a runtime's worker:
/// the future runs on `rt`'s own thread, not here).
fn block<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv()
        .map_err(|_| "the etcd store's runtime stopped".to_owned())
}

/// The writes of a commit as a transaction's operations.
fn txn_ops(writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Vec<Op> {
    writes
        .into_iter()
        .map(|(k, v)| match v {
            Some(v) => Op::Put(k, v, None),
            None => Op::Delete(k),
        })
        .collect()
}

/// TLS towards `https://` members: their CA, and a client certificate if given.
fn tls_config(config: &EtcdConfig) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let Some(tls) = &config.tls else {
        return Ok(None);
    };
    let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&read(&tls.ca)?) {
        let cert = cert.map_err(|e| format!("{}: {e}", tls.ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", tls.ca.display()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(crate::net::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match &tls.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{}: {e}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_slice(&read(key)?)
                .map_err(|e| format!("{}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("{}: {e}", cert.display()))?
        }
    };
    Ok(Some(Arc::new(config)))
}
