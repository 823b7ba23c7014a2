//! `bench --serve-api ADDR`: the benchmark's hierarchy with every agent registered,
//! and the root's Kubernetes API and web view served on `ADDR` until interrupted.
//!
//! The web view's figures at 10,000 clusters (issue 48) need a root that knows 10,000
//! clusters and serves its API; `relay up` runs a process per node, which this machine
//! cannot hold ten thousand of. Here the nodes are the benchmark's (the relay's and
//! the agent's runtimes in one process, simulated clusters), and the API is the
//! relay's own (`strata_relay::api::spawn`), configured from files written under the
//! given directory like a root's. What a client needs is printed as `export` lines,
//! as `relay up` prints them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_relay::api_metrics::ApiMetrics;
use strata_relay::certs::Ca;
use strata_relay::config::NodeConfig;
use strata_relay::metrics::RelayOps;
use tokio::sync::mpsc;

use super::measure::wait_registered;
use super::tree::Tree;
use super::{BenchError, Options};

/// What a client of the served API needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The API's address.
    pub server: SocketAddr,
    /// The name the API's certificate carries (the root's).
    pub server_name: String,
    /// The CA file that issued it.
    pub ca: PathBuf,
    /// An admin token.
    pub token: String,
    /// Clusters registered at the root.
    pub clusters: usize,
}

impl Served {
    /// The `export` line `relay` and the examples read (`STRATA_*`, as `relay up`
    /// prints them).
    pub fn exports(&self) -> String {
        format!(
            "export STRATA_SERVER={} STRATA_SERVER_NAME={} STRATA_CA={} STRATA_TOKEN={}",
            self.server,
            self.server_name,
            self.ca.display(),
            self.token
        )
    }
}

/// Builds the hierarchy of `opts`, registers every agent, serves the root's API on
/// `listen` (files under `dir`), calls `ready` once it serves, then waits for `stop`
/// and shuts the hierarchy down.
pub async fn serve_api(
    opts: &Options,
    listen: SocketAddr,
    dir: &Path,
    ready: impl FnOnce(&Served),
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), BenchError> {
    let leaves: usize = opts.fanout.iter().product();
    // Deliveries are not measured here: what agents apply is drained and dropped.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let mut tree = Tree::build(&opts.fanout, tx, opts.transport)?;
    let root = tree.root()?;
    tree.start_agents(0..leaves)?;
    wait_registered(&root, leaves).await?;
    let root_name = tree.levels[0][0].name.clone();
    let config = write_config(dir, &root_name, listen)?;
    let store = tree.root_store();
    let metrics = Arc::new(ApiMetrics::default());
    let api_conf = config
        .api
        .clone()
        .ok_or_else(|| BenchError::setup("the API", "the written configuration has no api"))?;
    let health = Arc::new(RelayOps {
        node: root.clone(),
        store,
        api: Some((listen, metrics.clone())),
        dns: None,
    });
    let api = strata_relay::api::spawn(&api_conf, &config, root, metrics, health)
        .map_err(|e| BenchError::setup("the API", e))?;
    let token = std::fs::read_to_string(&api_conf.tokens)
        .map_err(|e| BenchError::setup("the API's tokens", e))?;
    ready(&Served {
        server: listen,
        server_name: root_name,
        ca: config.tls.ca.clone(),
        token: token
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned(),
        clusters: leaves,
    });
    stop.await;
    api.abort();
    tree.shutdown().await;
    drain.abort();
    Ok(())
}

/// Writes the root's certificate (a CA of its own naming the root), an admin token and
/// a configuration with `api:` under `dir`, and reads the configuration back as a
/// relay would.
fn write_config(dir: &Path, root: &str, listen: SocketAddr) -> Result<NodeConfig, BenchError> {
    let err = |what: &str, e: &dyn std::fmt::Display| BenchError::setup(what, e);
    std::fs::create_dir_all(dir.join("data")).map_err(|e| err("the API's directory", &e))?;
    let ca = Ca::generate("bench-api").map_err(|e| err("the API's CA", &e))?;
    let cert = ca
        .issue(root)
        .map_err(|e| err("the API's certificate", &e))?;
    let token = format!("bench-admin-{:016x}", strata_node::process::random_u64());
    let files = [
        ("ca.crt", ca.cert_pem()),
        ("api.crt", cert.cert_pem),
        ("api.key", cert.key_pem),
        ("api.tokens", format!("{token}\n")),
        (
            "config.yaml",
            format!(
                "node: {root}\ntls: {{ cert: api.crt, key: api.key, ca: ca.crt }}\ndata: data\napi: {{ listen: \"{listen}\", tokens: api.tokens }}\n"
            ),
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).map_err(|e| err(name, &e))?;
    }
    NodeConfig::load(&dir.join("config.yaml")).map_err(|e| err("the API's configuration", &e))
}
