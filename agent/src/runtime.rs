//! The agent's tasks: the core task and the upstream link.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use quinn::{Endpoint, VarInt};
use strata_protocol::model::Cluster;
use strata_protocol::sync::{LinkConfig, ObjectLog, ParentLink};
use strata_protocol::wire::Role;
use strata_relay::node::clock::Clock;
use strata_relay::node::upstream::{Upstream, UpstreamInput, deliver_upstream, upstream_loop};
use strata_relay::store::{Batch, Store, StoreError};
use strata_relay::transport::close_code;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::backend::ClusterBackend;
use crate::core::{AgentCore, AgentSetup};

/// What an agent needs to run.
pub struct AgentParts {
    /// The cluster this agent manages (name, labels, properties).
    pub cluster: Cluster,
    /// The parent's name and address.
    pub parent: (String, SocketAddr),
    /// Durable desired state.
    pub store: Arc<dyn Store>,
    /// Endpoint for reaching the parent.
    pub connector: Endpoint,
    /// The cluster.
    pub backend: Box<dyn ClusterBackend + Send>,
    /// The clock.
    pub clock: Clock,
    /// This run's id.
    pub run: u64,
}

enum Input {
    Upstream(UpstreamInput),
    Query(Box<dyn FnOnce(&mut AgentCore) + Send>),
}

impl From<UpstreamInput> for Input {
    fn from(u: UpstreamInput) -> Self {
        Input::Upstream(u)
    }
}

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    tx: mpsc::Sender<Input>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Input")
    }
}

impl AgentHandle {
    /// Runs `f` on the agent's state inside its task.
    pub async fn query<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut AgentCore) -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        let q = Box::new(move |core: &mut AgentCore| {
            let _ = tx.send(f(core));
        });
        self.tx.send(Input::Query(q)).await.ok()?;
        rx.await.ok()
    }

    /// Stops the agent.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }

    /// Waits until the agent stops.
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Starts an agent from its store.
pub fn start(parts: AgentParts) -> Result<AgentHandle, StoreError> {
    let stored = parts.store.load()?;
    let now = parts.clock.now();
    let log = match stored.log_meta {
        Some(meta) => ObjectLog::restore(meta, stored.entries),
        None => ObjectLog::new(strata_protocol::model::LogId(stored.node_id)),
    };
    let upstream = stored.upstream.unwrap_or_default();
    let mut config = LinkConfig::new(parts.cluster.name.clone(), Role::Agent);
    config.run = parts.run;
    let link = ParentLink::new(now, config, upstream.cursor, upstream.route);
    let name = parts.cluster.name.clone();
    let core = AgentCore::new(
        now,
        parts.clock.wall(),
        AgentSetup {
            cluster: parts.cluster.clone(),
            link,
            log,
            upstream,
            backend: parts.backend,
            run: parts.run,
        },
    );
    let (tx, rx) = mpsc::channel(1024);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let task = tokio::spawn(
        drive(
            core,
            parts.store,
            parts.clock,
            parts.connector,
            parts.parent,
            tx.clone(),
            rx,
            shutdown_rx,
            parts.run,
        )
        .instrument(tracing::info_span!("agent", cluster = %name)),
    );
    Ok(AgentHandle {
        tx,
        shutdown: shutdown_tx,
        task,
    })
}

async fn backend_woke(wake: &Option<Arc<tokio::sync::Notify>>) {
    match wake {
        Some(w) => w.notified().await,
        None => std::future::pending().await,
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    mut core: AgentCore,
    store: Arc<dyn Store>,
    clock: Clock,
    connector: Endpoint,
    (parent, addr): (String, SocketAddr),
    tx: mpsc::Sender<Input>,
    mut rx: mpsc::Receiver<Input>,
    mut shutdown: watch::Receiver<bool>,
    run: u64,
) {
    let mut tasks = JoinSet::new();
    let retry_after = Arc::new(AtomicU64::new(0));
    tasks.spawn(
        upstream_loop(connector, parent, addr, tx, retry_after.clone(), run).in_current_span(),
    );
    let mut upstream: Upstream = None;
    let mut unsaved = Batch::default();
    let wake = core.backend_wake();
    loop {
        let deadline = core
            .poll_timeout()
            .map(|t| clock.deadline(t))
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            Some(input) = rx.recv() => {
                let now = clock.now();
                match input {
                    Input::Upstream(UpstreamInput::Up { conn, sender }) => {
                        tracing::info!(parent = %conn.remote_address(), "connected to parent");
                        upstream = Some((conn, sender));
                        core.upstream_connected(now);
                    }
                    Input::Upstream(UpstreamInput::Message(msg)) => core.upstream_message(now, msg),
                    Input::Upstream(UpstreamInput::Down(why)) => {
                        if upstream.take().is_some() {
                            tracing::warn!(%why, "lost the parent; keeping the cluster in its last desired state");
                        }
                        core.upstream_gone();
                    }
                    Input::Query(q) => q(&mut core),
                }
            }
            _ = tokio::time::sleep_until(deadline) => core.handle_timeout(clock.now()),
            // The backend has statuses (its own task found them); `process` polls them.
            _ = backend_woke(&wake) => {}
        }
        let now = clock.now();
        unsaved.merge(core.process(now, clock.wall()));
        if !unsaved.is_empty() {
            if let Err(e) = strata_relay::store::commit_off_workers(store.as_ref(), &unsaved) {
                // Kept and retried: nothing is acknowledged until it is durable.
                tracing::error!(error = %e, "store commit failed; acknowledgements held back");
                tokio::time::sleep(strata_relay::node::runtime::COMMIT_RETRY).await;
                continue;
            }
            unsaved = Batch::default();
        }
        let (out, close) = core.transmit(now);
        if deliver_upstream(&mut upstream, out, close, &retry_after) {
            core.upstream_gone();
        }
    }
    if let Some((conn, _)) = upstream {
        conn.close(
            VarInt::from_u32(close_code::SHUTDOWN),
            b"agent shutting down",
        );
    }
    tasks.shutdown().await;
}
