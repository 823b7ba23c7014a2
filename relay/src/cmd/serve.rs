//! `relay serve`: one node from its configuration file, until SIGTERM or SIGINT.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use strata_protocol::sync::SessionConfig;

use crate::api::ApiStartError;
use crate::config::{ConfigError, NodeConfig, StoreConfig};
use crate::join::{JoinSetupError, Joining};
use crate::metrics::MetricsBindError;
use crate::tier::runtime::{self, NodeClient, NodeError, NodeHandle, NodeOptions};
use strata_node::clock::Clock;
use strata_node::process::{RandomSourceFailed, Signals, random_bytes, random_u64};
use strata_node::store::{EtcdStore, SledStore, Store, StoreError};
use strata_node::tls::{self, Identity, TlsError};
use strata_node::transport::{self, TransportError};

/// How long a graceful shutdown may take before the process gives up on it.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// Why the node a configuration describes could not start.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // `path` is the secret's file, `source` the cause
pub enum StartError {
    /// The certificate, key or CA is unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The data directory could not be created.
    #[error("cannot create the data directory {path}")]
    DataDir {
        /// The node's `data` directory.
        path: PathBuf,
        source: std::io::Error,
    },
    /// The endpoint secret in the data directory is not 32 bytes.
    #[error("{path}: expected 32 bytes")]
    BadSecret {
        /// `endpoint.secret` in the data directory.
        path: PathBuf,
    },
    /// No endpoint secret could be drawn.
    #[error(transparent)]
    Random(#[from] RandomSourceFailed),
    /// The endpoint secret could not be written.
    #[error("cannot write {path}")]
    WriteSecret {
        /// `endpoint.secret` in the data directory.
        path: PathBuf,
        source: std::io::Error,
    },
    /// A `join:` file is unusable.
    #[error(transparent)]
    Joining(#[from] JoinSetupError),
    /// The `renew:` CA is unusable.
    #[error(transparent)]
    Signer(#[from] crate::renew::SignerError),
    /// The QUIC or TCP listener or the client endpoint could not be set up.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The connector to the parent could not be set up (an unusable `HTTPS_PROXY`).
    #[error(transparent)]
    Connector(#[from] strata_node::config::ConnectorError),
    /// The node refused to start.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// `STRATA_PROTOCOL_VERSIONS` is not a range of versions.
    #[error(transparent)]
    Versions(#[from] strata_node::config::ProtocolVersionsError),
}

/// Why `relay serve` stopped with an error.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // `source` is what ended the node
pub enum ServeError {
    /// The configuration file was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The node could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The user API could not start.
    #[error(transparent)]
    Api(#[from] ApiStartError),
    /// The metrics could not be served.
    #[error(transparent)]
    Metrics(#[from] MetricsBindError),
    /// DNS could not be served.
    #[error(transparent)]
    Dns(#[from] crate::dns::DnsError),
    /// Waiting for the writer lease ended without a store (the task panicked).
    #[error("waiting to become the writer failed: {detail}")]
    Standby { detail: String },
    /// The node ended with an error while shutting down.
    #[error("node stopped with an error")]
    Stopped { source: NodeError },
    /// The graceful shutdown did not finish in time.
    #[error("shutdown took longer than {deadline:?}; exiting anyway")]
    Deadline {
        /// [`SHUTDOWN_DEADLINE`].
        deadline: Duration,
    },
}

/// Starts the node a configuration describes.
pub fn start_node(config: &NodeConfig) -> Result<NodeHandle, StartError> {
    Ok(start_with_store(config)?.0)
}

/// Starts the node and returns its store too (for metrics).
pub fn start_with_store(config: &NodeConfig) -> Result<(NodeHandle, Arc<dyn Store>), StartError> {
    let store = open_store(config)?;
    Ok((start_on(config, store.clone())?, store))
}

/// Opens the store the configuration names. A root replica on etcd becomes the writer
/// if no replica is, else a standby that serves what the writer commits (once the
/// writer has created the store: call it off the async workers); start taking in what
/// the other replicas commit with [`replicate`].
pub fn open_store(config: &NodeConfig) -> Result<Arc<dyn Store>, StartError> {
    Ok(open_replica(config)?.0)
}

/// An open store, and the etcd store itself when it is one (to replicate from it).
type Opened = (Arc<dyn Store>, Option<Arc<EtcdStore>>);

/// [`open_store`], and the etcd store itself when it is one.
fn open_replica(config: &NodeConfig) -> Result<Opened, StartError> {
    Ok(match &config.store {
        StoreConfig::Sled => (Arc::new(SledStore::open(&config.data)?), None),
        StoreConfig::Etcd(etcd) => {
            std::fs::create_dir_all(&config.data).map_err(|source| StartError::DataDir {
                path: config.data.clone(),
                source,
            })?;
            let store = Arc::new(EtcdStore::open_replica(etcd)?);
            (store.clone(), Some(store))
        }
    })
}

/// Feeds `node` what other root replicas commit to `store` (and its takeover, at a
/// standby), until the node stops; the task is the caller's to abort.
pub fn replicate(store: &EtcdStore, node: NodeClient) -> tokio::task::JoinHandle<()> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    store.replicate(tx);
    tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if !node.replicated(event).await {
                return;
            }
        }
    })
}

/// Reads the configuration file again whenever it changes (every
/// [`crate::reload::POLL_EVERY`]) and lets the children added to its `children` connect
/// at once: adding a site below a running relay needs no restart. A child taken out of
/// the list stays allowed until the next start (revoke it to refuse it now); the other
/// fields take effect at the next start. Each reload is logged and audited
/// (`children-reload`); a file that does not validate changes nothing and is logged
/// with its faults.
fn admit_added_children(
    path: &Path,
    config: &NodeConfig,
    node: NodeClient,
) -> tokio::task::JoinHandle<()> {
    let file = path.to_owned();
    let reading = crate::reload::Reloading::spawn_as(
        path.to_owned(),
        "children",
        "children-reload",
        config.children.clone(),
        move |text| {
            NodeConfig::parse_at(text, &file).map(|c| {
                let summary = format!("{} children ({})", c.children.len(), c.children.join(", "));
                (c.children, summary)
            })
        },
        crate::reload::POLL_EVERY,
    );
    let mut known: std::collections::BTreeSet<String> = config.children.iter().cloned().collect();
    let mut changes = reading.subscribe();
    tokio::spawn(async move {
        // Held here: dropping it (this task aborted) stops the file's watcher.
        let _reading = reading;
        while changes.changed().await.is_ok() {
            let listed: Vec<String> = changes.borrow_and_update().as_ref().clone();
            let added: Vec<String> = listed
                .iter()
                .filter(|c| !known.contains(*c))
                .cloned()
                .collect();
            let dropped: Vec<&String> = known.iter().filter(|c| !listed.contains(c)).collect();
            if !dropped.is_empty() {
                tracing::warn!(
                    children = ?dropped,
                    "children taken out of the configuration stay allowed until the next start; `relay revoke` refuses one now"
                );
            }
            if added.is_empty() {
                continue;
            }
            let admitting = added.clone();
            let admitted = node
                .query(move |core: &mut crate::tier::core::NodeCore| {
                    for name in &admitting {
                        core.admit_child(name);
                    }
                })
                .await;
            if admitted.is_none() {
                return;
            }
            tracing::info!(children = ?added, "children added to the configuration may connect now");
            known.extend(added);
        }
    })
}

/// Starts the node a configuration describes on an open store.
pub fn start_on(config: &NodeConfig, store: Arc<dyn Store>) -> Result<NodeHandle, StartError> {
    let identity = Identity::load(&config.tls.cert, &config.tls.key, &config.tls.ca)?;
    let secret = endpoint_secret(&config.data)?;
    let joining = match &config.join {
        Some(files) => Some(Arc::new(
            Joining::load(&config.node, files)?.reload_tokens(crate::reload::POLL_EVERY),
        )),
        None => None,
    };
    // Only a relay admitting joins lets a client in without a certificate.
    let server_tls = match joining {
        Some(_) => tls::server_config_admitting_joins(&identity)?,
        None => tls::server_config(&identity)?,
    };
    let listener = match config.listen {
        Some(addr) => Some(transport::server_endpoint(
            addr,
            server_tls.clone(),
            secret,
        )?),
        None => None,
    };
    // TLS over TCP on the same port by default, for children whose UDP is blocked.
    let tcp_listener = match config.listen_tcp {
        Some(addr) => {
            // Port 0 for both: TCP takes the port QUIC got.
            let addr = match (addr.port(), &listener) {
                (0, Some(l)) if config.listen == Some(addr) => l.local_addr().unwrap_or(addr),
                _ => addr,
            };
            Some(strata_node::tcp::Listener::bind(addr, server_tls)?)
        }
        None => None,
    };
    let connector = match &config.parent {
        Some(p) => {
            let c = p
                .connector(&identity)?
                .with_renewal(config.tls.renewal(&config.node));
            tracing::info!(parent = %p.name, address = %p.address, transport = %c.mode(), proxy = ?c.proxy(), "parent link");
            Some(c)
        }
        None => None,
    };
    let handle = runtime::start(NodeOptions {
        name: config.node.clone(),
        labels: config.labels.clone(),
        children: config.children.clone(),
        parent: config
            .parent
            .as_ref()
            .map(|p| (p.name.clone(), p.address.clone())),
        store: store.clone(),
        listener,
        tcp_listener,
        connector,
        sessions: SessionConfig {
            versions: strata_node::config::protocol_versions()?,
            ..SessionConfig::default()
        },
        summary_interval: config.summary_interval,
        clock: Clock::start(),
        run: random_u64(),
        joining,
        tunnels_per_link: config.tunnels_per_link,
        admission_hold: config.admission_hold,
        // At the root, a finished move's old clusters drain for one DNS TTL plus a grace.
        drain: config
            .dns
            .as_ref()
            .filter(|_| config.is_root())
            .map_or(Duration::ZERO, crate::dns::DnsConfig::drain),
        admission: config.admission,
        replica: config.replica.clone(),
        signer: crate::renew::Signer::load(
            &config.node,
            config.renew.as_ref(),
            config.join.as_ref(),
        )?,
    })?;
    Ok(handle)
}

/// Runs a node until SIGTERM or SIGINT, then shuts it down within the deadline.
pub async fn serve(config_path: &Path) -> Result<(), ServeError> {
    let config = NodeConfig::load(config_path)?;
    let (store, etcd) = match (&config.store, config.metrics) {
        // A standby root replica answers its probes while it waits for the writer to
        // create the store: alive, not ready.
        (StoreConfig::Etcd(_), Some(addr)) => {
            let standby = strata_node::ops::spawn(addr, Arc::new(crate::metrics::StandbyOps))?;
            let opening = config.clone();
            let store = tokio::task::spawn_blocking(move || open_replica(&opening)).await;
            standby.abort();
            let _ = standby.await;
            store.map_err(|e| ServeError::Standby {
                detail: e.to_string(),
            })??
        }
        _ => open_replica(&config)?,
    };
    // From here on a SIGTERM waits for the node to start and then stops it cleanly.
    let mut signals = Signals::new();
    let handle = start_on(&config, store.clone())?;
    let children = admit_added_children(config_path, &config, handle.client());
    // Other replicas' commits: the writer's log at a standby, children's reports at all.
    let replicating = etcd.as_deref().map(|s| replicate(s, handle.client()));
    tracing::info!(
        node = %config.node,
        listen = ?config.listen,
        parent = ?config.parent.as_ref().map(|p| &p.name),
        data = %config.data.display(),
        "node started"
    );
    let dns_counters = Arc::new(crate::dns::DnsCounters::default());
    let dns = match config
        .dns
        .as_ref()
        .and_then(|d| Some((d.listen?, d.zone.clone())))
    {
        Some((listen, zone)) => {
            let (task, _) =
                crate::dns::spawn(listen, zone, handle.client(), dns_counters.clone()).await?;
            Some(task)
        }
        None => None,
    };
    let api_metrics = Arc::new(crate::api_metrics::ApiMetrics::default());
    // One set of checks for the metrics listener and the API port's health paths.
    let health: Arc<dyn strata_node::ops::OpsSource> = Arc::new(crate::metrics::RelayOps {
        node: handle.client(),
        store,
        api: config.api.as_ref().map(|a| (a.listen, api_metrics.clone())),
        dns: config.dns.as_ref().map(|_| dns_counters.clone()),
    });
    let api = match &config.api {
        Some(api) => Some(crate::api::spawn(
            api,
            &config,
            handle.client(),
            api_metrics.clone(),
            health.clone(),
        )?),
        None => None,
    };
    // The Kubernetes API's deletions that wait (finalizers, foreground owners,
    // terminating namespaces) are finished as the clusters report.
    let sweeper = config
        .api
        .as_ref()
        .map(|_| crate::kube::writes::deletion::sweeper(handle.client()));
    let metrics = match config.metrics {
        Some(addr) => {
            tracing::info!(listen = %addr, "metrics serving at /metrics, /healthz, /readyz");
            Some(strata_node::ops::spawn(addr, health)?)
        }
        None => None,
    };
    signals.recv().await;
    tracing::info!("shutting down");
    for task in [api, metrics, replicating, sweeper, dns, Some(children)]
        .into_iter()
        .flatten()
    {
        task.abort();
    }
    match tokio::time::timeout(SHUTDOWN_DEADLINE, handle.shutdown()).await {
        Ok(r) => r.map_err(|source| ServeError::Stopped { source }),
        Err(_) => Err(ServeError::Deadline {
            deadline: SHUTDOWN_DEADLINE,
        }),
    }
}

/// The secret that keys stateless resets and connection IDs; kept in the data
/// directory so it survives restarts.
fn endpoint_secret(dir: &Path) -> Result<[u8; 32], StartError> {
    let path = dir.join("endpoint.secret");
    if let Ok(bytes) = std::fs::read(&path) {
        return <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| StartError::BadSecret { path });
    }
    let secret = random_bytes()?;
    std::fs::write(&path, secret).map_err(|source| StartError::WriteSecret { path, source })?;
    Ok(secret)
}
