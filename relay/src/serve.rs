//! `relay serve`: one node from its configuration file, until SIGTERM or SIGINT.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use strata_protocol::sync::SessionConfig;

use crate::config::NodeConfig;
use crate::join::Joining;
use crate::node::runtime::{self, NodeHandle, NodeParts};
use strata_node::clock::Clock;
use strata_node::process::{random_u64, wait_for_signal};
use strata_node::store::{SledStore, Store};
use strata_node::tls::{self, Identity};
use strata_node::transport;

/// How long a graceful shutdown may take before the process gives up on it.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// Starts the node a configuration describes.
pub fn start_node(config: &NodeConfig) -> anyhow::Result<NodeHandle> {
    Ok(start_with_store(config)?.0)
}

/// Starts the node and returns its store too (for metrics).
pub fn start_with_store(config: &NodeConfig) -> anyhow::Result<(NodeHandle, Arc<dyn Store>)> {
    let identity = Identity::load(&config.tls.cert, &config.tls.key, &config.tls.ca)?;
    let store: Arc<dyn Store> = Arc::new(SledStore::open(&config.data)?);
    let secret = endpoint_secret(&config.data)?;
    let joining = match &config.join {
        Some(files) => Some(Arc::new(Joining::load(&config.node, files)?)),
        None => None,
    };
    // Only a relay admitting joins lets a client in without a certificate.
    let server_tls = match joining {
        Some(_) => tls::server_config_admitting_joins(&identity)?,
        None => tls::server_config(&identity)?,
    };
    let listener = match config.listen {
        Some(addr) => Some(transport::server_endpoint(addr, server_tls, secret)?),
        None => None,
    };
    let connector = match &config.parent {
        Some(_) => Some(transport::client_endpoint(
            "0.0.0.0:0".parse()?,
            tls::client_config(&identity)?,
        )?),
        None => None,
    };
    let handle = runtime::start(NodeParts {
        name: config.node.clone(),
        labels: config.labels.clone(),
        children: config.children.clone(),
        parent: config.parent.as_ref().map(|p| (p.name.clone(), p.address)),
        store: store.clone(),
        listener,
        connector,
        sessions: SessionConfig::default(),
        summary_interval: config.summary_interval,
        clock: Clock::start(),
        run: random_u64(),
        joining,
    })?;
    Ok((handle, store))
}

/// Runs a node until SIGTERM or SIGINT, then shuts it down within the deadline.
pub async fn serve(config_path: &Path) -> anyhow::Result<()> {
    let config = NodeConfig::load(config_path)?;
    let (handle, store) = start_with_store(&config)?;
    tracing::info!(
        node = %config.node,
        listen = ?config.listen,
        parent = ?config.parent.as_ref().map(|p| &p.name),
        data = %config.data.display(),
        "node started"
    );
    let api = match &config.api {
        Some(api) => Some(crate::api::spawn(api, &config, handle.client())?),
        None => None,
    };
    let metrics = match config.metrics {
        Some(addr) => {
            tracing::info!(listen = %addr, "metrics serving at /metrics");
            Some(crate::metrics::spawn(addr, handle.client(), store)?)
        }
        None => None,
    };
    wait_for_signal().await;
    tracing::info!("shutting down");
    for task in [api, metrics].into_iter().flatten() {
        task.abort();
    }
    match tokio::time::timeout(SHUTDOWN_DEADLINE, handle.shutdown()).await {
        Ok(r) => r.context("node stopped with an error"),
        Err(_) => anyhow::bail!("shutdown took longer than {SHUTDOWN_DEADLINE:?}; exiting anyway"),
    }
}

/// The secret that keys stateless resets and connection IDs; kept in the data
/// directory so it survives restarts.
fn endpoint_secret(dir: &Path) -> anyhow::Result<[u8; 32]> {
    let path = dir.join("endpoint.secret");
    if let Ok(bytes) = std::fs::read(&path) {
        return <[u8; 32]>::try_from(bytes.as_slice())
            .map_err(|_| anyhow::anyhow!("{}: expected 32 bytes", path.display()));
    }
    use ring::rand::SecureRandom;
    let mut secret = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut secret)
        .map_err(|_| anyhow::anyhow!("the system random source failed"))?;
    std::fs::write(&path, secret).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(secret)
}
