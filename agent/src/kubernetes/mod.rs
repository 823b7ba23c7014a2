//! The Kubernetes API backend: keeps a real cluster in the agent's desired state.
//!
//! [`KubeCluster`] is the [`ClusterBackend`] the agent core drives. It hands every
//! change to its own task (the worker, `worker.rs`) over a channel and takes statuses
//! back the same way, waking the agent's loop through a [`Notify`]. The worker:
//!
//! * maps kind → resource and scope with API discovery (one request per group
//!   version, cached; a kind it cannot find yet is retried, which is how a custom
//!   resource waits for its CRD);
//! * applies with server-side apply, field manager [`FIELD_MANAGER`], namespaces and
//!   CRDs first, custom resources only once their CRD is Established;
//! * marks what it applies with [`MANAGED_LABEL`] and [`HASH_ANNOTATION`], and deletes
//!   only objects that carry the label;
//! * lists and watches every kind it manages (label-selected), re-applies the last
//!   desired state when someone edits or deletes a managed object (connected to its
//!   parent or not: the desired state is the agent's own), and writes nothing for an
//!   object that already holds it;
//! * reports health ([`health`]) as the watch sees statuses change and, for
//!   workloads, a summary of their ReplicaSets and Pods ([`associated`]), read at every
//!   resync with one LIST of each per namespace;
//! * follows the leaf-born objects an upsync rule selects ([`upsync`]);
//! * applies a Deployment or StatefulSet a volume move stopped ([`volumes::Frozen`])
//!   with 0 replicas until the move lets it run again.
//!
//! A move's volume streams are served beside it ([`volumes`], [`volume_objects`]).

pub mod associated;
pub mod health;
pub mod nodes;
pub mod reach;
pub mod upsync;
pub mod volume_objects;
pub mod volumes;
mod watch;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use strata_node::clock::Clock;
use strata_node::exposition::{HistogramVec, LATENCY_BUCKETS};
use strata_protocol::model::{Object, ObjectKey, Status};
use strata_protocol::time::{Instant, UnixMillis};
use tokio::sync::{Notify, mpsc};

use crate::backend::{BackendError, ClusterBackend, Reach};

/// The field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "strata";
/// The label on every object the agent applied; the agent deletes nothing without it.
pub const MANAGED_LABEL: &str = "strata.dev/managed-by";
/// The value of [`MANAGED_LABEL`].
pub const MANAGED_VALUE: &str = "strata-agent";
/// The annotation holding the content hash of the applied manifest.
pub const HASH_ANNOTATION: &str = "strata.dev/content-hash";

/// How to reach the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connect {
    /// This kubeconfig file.
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The context to use; the file's current context when `None`.
        context: Option<String>,
    },
    /// `KUBECONFIG`, else `~/.kube/config` (kube-rs's rules), in this context (the
    /// current one when `None`).
    KubeconfigFromEnv {
        /// The context to use.
        context: Option<String>,
    },
    /// The pod's service account (`KUBERNETES_SERVICE_HOST`, the mounted token and CA).
    InCluster,
}

impl Connect {
    /// A kubeconfig file, in its current context.
    pub fn kubeconfig(path: PathBuf) -> Connect {
        Connect::Kubeconfig {
            path,
            context: None,
        }
    }
}

/// The API server could not be reached or refused the agent. Each variant's message
/// holds the whole chain of causes, each said once (kube's errors repeat some of their
/// causes in their own message and hide others).
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant names the file or API server, and the cause (`reason`)
pub enum ConnectError {
    /// The kubeconfig file is unreadable or invalid.
    #[error("kubeconfig {path}: {reason}")]
    Kubeconfig { path: PathBuf, reason: String },
    /// No kubeconfig found through `KUBECONFIG` or the home directory.
    #[error("no kubeconfig (KUBECONFIG or ~/.kube/config): {0}")]
    NoKubeconfig(String),
    /// Not running in a pod, or its service account files are missing.
    #[error("in-cluster configuration: {0}")]
    InCluster(String),
    /// The client could not be built (TLS material, proxy).
    #[error("Kubernetes client for {server}: {reason}")]
    Client { server: String, reason: String },
    /// The API server refused or failed the first request.
    #[error("the Kubernetes API server at {server} {what}: {reason}")]
    Probe {
        server: String,
        /// "denied access" or "is unreachable".
        what: &'static str,
        reason: String,
    },
}

/// An error and its causes, each said once.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text
}

impl ConnectError {
    /// Whether the API server did not answer (as opposed to a wrong configuration or
    /// a refusal): the agent then starts anyway and reports its cluster unreachable.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ConnectError::Probe {
                what: "is unreachable",
                ..
            }
        )
    }
}

/// Builds a client and checks that the API server answers (`GET /api`), so a wrong
/// kubeconfig or missing rights fail at start with the server's name.
pub async fn connect(how: &Connect) -> Result<kube::Client, ConnectError> {
    let (client, server) = client(how).await?;
    probe(&client, &server).await?;
    Ok(client)
}

/// Builds a client from the kubeconfig or the pod's service account, without asking
/// the API server anything; with the API server's URL.
pub async fn client(how: &Connect) -> Result<(kube::Client, String), ConnectError> {
    let options = |context: &Option<String>| KubeConfigOptions {
        context: context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match how {
        Connect::Kubeconfig { path, context } => {
            let kc = Kubeconfig::read_from(path).map_err(|source| ConnectError::Kubeconfig {
                path: path.clone(),
                reason: chain(&source),
            })?;
            kube::Config::from_custom_kubeconfig(kc, &options(context))
                .await
                .map_err(|source| ConnectError::Kubeconfig {
                    path: path.clone(),
                    reason: chain(&source),
                })?
        }
        Connect::KubeconfigFromEnv { context } => kube::Config::from_kubeconfig(&options(context))
            .await
            .map_err(|e| ConnectError::NoKubeconfig(chain(&e)))?,
        Connect::InCluster => {
            kube::Config::incluster().map_err(|e| ConnectError::InCluster(chain(&e)))?
        }
    };
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(|source| ConnectError::Client {
        server: server.clone(),
        reason: chain(&source),
    })?;
    Ok((client, server))
}

/// Asks the API server for its core API versions (`GET /api`): answered, refused
/// (401, 403), or unreachable, with the cause.
pub async fn probe(client: &kube::Client, server: &str) -> Result<(), ConnectError> {
    let Err(source) = client.list_core_api_versions().await else {
        return Ok(());
    };
    let what = match &source {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => "denied access",
        _ => "is unreachable",
    };
    Err(ConnectError::Probe {
        server: server.to_owned(),
        what,
        reason: chain(&source),
    })
}

/// How the backend behaves.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// Take over fields another manager owns (`force` in server-side apply). Without
    /// it a conflict is reported as the object's failure.
    pub force_conflicts: bool,
    /// How often workloads' statuses and associated objects are read again.
    pub resync: Duration,
    /// How long to wait before retrying what could not be applied yet.
    pub retry: Duration,
}

impl Default for KubeOptions {
    fn default() -> Self {
        KubeOptions {
            force_conflicts: true,
            resync: Duration::from_secs(30),
            retry: Duration::from_secs(1),
        }
    }
}

/// Counters of the requests the backend made (for tests and figures).
#[derive(Debug)]
pub struct KubeCounters {
    /// Server-side apply requests.
    pub applies: AtomicU64,
    /// DELETE requests.
    pub deletes: AtomicU64,
    /// Applies skipped because the live object already held the desired state.
    pub unchanged: AtomicU64,
    /// Re-applies after someone changed or deleted a managed object.
    pub drift_repairs: AtomicU64,
    /// Seconds each apply (server-side apply) or delete request took, by verb.
    pub latency: tokio::sync::Mutex<HistogramVec>,
}

impl Default for KubeCounters {
    fn default() -> Self {
        KubeCounters {
            applies: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            unchanged: AtomicU64::new(0),
            drift_repairs: AtomicU64::new(0),
            latency: tokio::sync::Mutex::new(HistogramVec::new(&["verb"], LATENCY_BUCKETS)),
        }
    }
}

impl KubeCounters {
    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Records one request to the API server: `verb` (`apply`, `delete`) took `took`.
    pub async fn observe(&self, verb: &str, took: std::time::Duration) {
        self.latency
            .lock()
            .await
            .observe(vec![verb.to_owned()], took.as_secs_f64());
    }
}

enum Command {
    Apply(Box<Object>),
    Delete(ObjectKey),
    Upsync(Vec<upsync::UpsyncRule>),
}

/// A real cluster behind its API server, as the agent core drives it.
#[derive(Debug)]
pub struct KubeCluster {
    commands: mpsc::UnboundedSender<Command>,
    statuses: mpsc::UnboundedReceiver<(ObjectKey, Status)>,
    upsynced: mpsc::UnboundedReceiver<upsync::Upsynced>,
    wake: Arc<Notify>,
    counters: Arc<KubeCounters>,
    /// The workloads volume moves stopped (shared with the worker).
    frozen: volumes::Frozen,
    task: tokio::task::JoinHandle<()>,
    /// The API server's reach as the probe last found it, with its task (aborted on
    /// drop), when [`KubeCluster::probe_reach`] started one.
    reach: Option<(
        tokio::sync::watch::Receiver<Reach>,
        tokio::task::JoinHandle<()>,
    )>,
    /// The node addresses as last listed, with the listing's task (aborted on drop),
    /// when [`KubeCluster::list_nodes`] started one.
    nodes: Option<(
        tokio::sync::watch::Receiver<Vec<String>>,
        tokio::task::JoinHandle<()>,
    )>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Apply(o) => write!(f, "Apply({})", o.key()),
            Command::Delete(k) => write!(f, "Delete({k})"),
            Command::Upsync(r) => write!(f, "Upsync({} rules)", r.len()),
        }
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        self.task.abort();
        if let Some((_, probe)) = &self.reach {
            probe.abort();
        }
        if let Some((_, listing)) = &self.nodes {
            listing.abort();
        }
    }
}

impl KubeCluster {
    /// Starts the backend's worker task (inside the current tokio runtime).
    pub fn start(client: kube::Client, options: KubeOptions, clock: Clock) -> KubeCluster {
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (statuses_tx, statuses) = mpsc::unbounded_channel();
        let (upsynced_tx, upsynced) = mpsc::unbounded_channel();
        let wake = Arc::new(Notify::new());
        let counters = Arc::new(KubeCounters::default());
        let (frozen, frozen_rx) = tokio::sync::watch::channel(Default::default());
        let task = tokio::spawn(worker::run(
            client,
            options,
            clock,
            commands_rx,
            frozen_rx,
            worker::Outputs {
                statuses: statuses_tx,
                upsynced: upsynced_tx,
                wake: wake.clone(),
                counters: counters.clone(),
            },
        ));
        KubeCluster {
            commands,
            statuses,
            upsynced,
            wake,
            counters,
            frozen: Arc::new(frozen),
            task,
            reach: None,
            nodes: None,
        }
    }

    /// Lists the cluster's Nodes every `every` for their addresses (NodePort
    /// Services' endpoints, [`ClusterBackend::node_addresses`]).
    pub fn list_nodes(&mut self, client: kube::Client, every: Duration) {
        let (tx, rx) = tokio::sync::watch::channel(Vec::new());
        let task = tokio::spawn(nodes::run(client, every, tx, self.wake.clone()));
        self.nodes = Some((rx, task));
    }

    /// Asks the API server at `server` (through `client`) every `every` whether it
    /// answers, and reports every change through [`ClusterBackend::poll_reach`],
    /// starting from `initial` (what the agent found at start).
    pub fn probe_reach(
        &mut self,
        client: kube::Client,
        server: String,
        initial: Reach,
        every: Duration,
    ) {
        let (tx, mut rx) = tokio::sync::watch::channel(initial);
        // The initial value is news too: the agent reports it once.
        rx.mark_changed();
        let task = tokio::spawn(reach::run(client, server, every, tx, self.wake.clone()));
        self.reach = Some((rx, task));
    }

    /// The set of workloads volume moves stopped, which the worker holds at 0
    /// replicas ([`volumes::KubeVolumes::new`] takes it).
    pub fn frozen(&self) -> volumes::Frozen {
        self.frozen.clone()
    }

    /// The requests made so far.
    pub fn counters(&self) -> Arc<KubeCounters> {
        self.counters.clone()
    }

    /// Replaces the upsync rules: the objects they select are listed, handed out by
    /// [`KubeCluster::poll_upsync`], and followed from then on.
    pub fn set_upsync(&self, rules: Vec<upsync::UpsyncRule>) {
        let _ = self.commands.send(Command::Upsync(rules));
    }

    /// Upsynced objects that changed since the last call (at most one per change).
    pub fn poll_upsync(&mut self) -> Vec<upsync::Upsynced> {
        let mut out = Vec::new();
        while let Ok(u) = self.upsynced.try_recv() {
            out.push(u);
        }
        out
    }

    fn send(&self, key: &ObjectKey, c: Command) -> Result<(), BackendError> {
        self.commands.send(c).map_err(|_| BackendError {
            key: Box::new(key.clone()),
            reason: "the Kubernetes backend has stopped".to_owned(),
        })
    }
}

impl ClusterBackend for KubeCluster {
    fn apply(
        &mut self,
        _now: Instant,
        _at: UnixMillis,
        object: &Object,
    ) -> Result<(), BackendError> {
        self.send(object.key(), Command::Apply(Box::new(object.clone())))
    }

    fn delete(&mut self, _now: Instant, key: &ObjectKey) -> Result<(), BackendError> {
        self.send(key, Command::Delete(key.clone()))
    }

    fn poll_status(&mut self, _now: Instant, _at: UnixMillis) -> Vec<(ObjectKey, Status)> {
        let mut out = Vec::new();
        while let Ok(s) = self.statuses.try_recv() {
            out.push(s);
        }
        out
    }

    fn next_change(&self) -> Option<Instant> {
        None
    }

    fn wake(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }

    fn set_upsync(&mut self, rules: Vec<upsync::UpsyncRule>) {
        KubeCluster::set_upsync(self, rules);
    }

    fn poll_upsync(&mut self) -> Vec<upsync::Upsynced> {
        KubeCluster::poll_upsync(self)
    }

    fn node_addresses(&self) -> Vec<String> {
        self.nodes
            .as_ref()
            .map(|(rx, _)| rx.borrow().clone())
            .unwrap_or_default()
    }

    fn poll_reach(&mut self) -> Option<Reach> {
        let (rx, _) = self.reach.as_mut()?;
        if !rx.has_changed().unwrap_or(false) {
            return None;
        }
        Some(rx.borrow_and_update().clone())
    }
}
