//! The `agent` binary.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use strata_agent::backend::{ClusterBackend, Reach};
use strata_agent::cli::{Cli, Command};
use strata_agent::config::{AgentConfig, Backend};
use strata_agent::kubernetes::volumes::KubeVolumes;
use strata_agent::kubernetes::{self, Connect, KubeCluster, KubeOptions};
use strata_agent::ops::AgentOps;
use strata_agent::runtime::{self, AgentOptions};
use strata_agent::simulated::{SimulatedCluster, SimulatedConfig};
use strata_agent::tunnel::TunnelTarget;
use strata_node::clock::Clock;
use strata_node::store::{SledStore, Store};
use strata_node::tls::Identity;
use strata_protocol::model::{BACKEND_PROPERTY, Cluster};

/// jemalloc, not glibc's malloc: see the workspace's Cargo.toml.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    strata_node::process::init_logging(&cli.logging);
    let result = match cli.command {
        Command::Run { config, kubeconfig } => run(&config, kubeconfig).await,
        Command::Mover(args) => mover(args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(path: &std::path::Path, kubeconfig: Option<PathBuf>) -> anyhow::Result<()> {
    let mut config = AgentConfig::load(path)?;
    if let Some(join) = &config.join {
        join_once(&config, &join.token).await?;
    }
    if let Some(kc) = kubeconfig {
        match &mut config.backend {
            Backend::Kubernetes(k) => {
                let context = match &k.connect {
                    Connect::Kubeconfig { context, .. }
                    | Connect::KubeconfigFromEnv { context } => context.clone(),
                    Connect::InCluster => None,
                };
                k.connect = Connect::Kubeconfig { path: kc, context };
            }
            Backend::Simulated(_) => anyhow::bail!(
                "--kubeconfig: {} names no `kubernetes:` backend (it runs a simulated cluster)",
                path.display()
            ),
        }
    }
    let clock = Clock::start();
    let mut kube_counters = None;
    let tunnel;
    let (backend, what): (Box<dyn ClusterBackend + Send>, &str) = match &config.backend {
        Backend::Simulated(s) => {
            let cluster = SimulatedCluster::new(SimulatedConfig {
                ready_delay: s.ready_delay,
                fail_all: s.fail.clone(),
            });
            tunnel = Some(TunnelTarget::Simulated(cluster.api()));
            (Box::new(cluster), "simulated cluster")
        }
        Backend::Kubernetes(k) => {
            let (client, server) = kubernetes::client(&k.connect).await?;
            // An API server that does not answer yet is reported (the cluster shows
            // unreachable at the root, with the cause), not a reason to stay away from
            // the parent; a wrong kubeconfig or a refusal stops the agent here.
            let initial = match kubernetes::probe(&client, &server).await {
                Ok(()) => Reach::Reached,
                Err(e) if e.is_unreachable() => {
                    tracing::warn!(error = %e, "starting anyway: the cluster is reported unreachable until its API server answers");
                    Reach::Unreachable(e.to_string())
                }
                Err(e) => return Err(e.into()),
            };
            let options = KubeOptions {
                force_conflicts: k.force_conflicts,
                ..KubeOptions::default()
            };
            let mut cluster = KubeCluster::start(client.clone(), options, clock);
            // The mover pods' token: new at every start (a pod outlives no agent run
            // it serves), so it is never written anywhere but the pods' env.
            let token = strata_node::process::random_bytes::<24>()
                .map_err(|e| anyhow::anyhow!("the mover token: {e}"))?
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let volumes =
                KubeVolumes::new(client.clone(), k.mover.clone(), token, cluster.frozen());
            tracing::info!(image = %k.mover.image, port = k.mover.port, snapshot_class = ?k.mover.snapshot_class, "volume moves run mover pods");
            tunnel = Some(TunnelTarget::Kube(client.clone(), Some(volumes)));
            cluster.list_nodes(client.clone(), kubernetes::nodes::LIST_EVERY);
            cluster.probe_reach(client, server, initial, kubernetes::reach::PROBE_EVERY);
            kube_counters = Some(cluster.counters());
            (Box::new(cluster), "Kubernetes API")
        }
    };
    let mut properties = config.properties.clone();
    properties.insert(
        BACKEND_PROPERTY.to_owned(),
        match &config.backend {
            Backend::Simulated(_) => "simulated",
            Backend::Kubernetes(_) => "kubernetes",
        }
        .to_owned(),
    );
    // From here on a SIGTERM waits for the agent to start and then stops it cleanly.
    let mut signals = strata_node::process::Signals::new();
    let identity = Identity::load(&config.tls.cert, &config.tls.key, &config.tls.ca)?;
    let store: Arc<dyn Store> = Arc::new(SledStore::open(&config.data)?);
    let connector = config
        .parent
        .connector(&identity)?
        .with_renewal(config.tls.renewal(&config.cluster));
    tracing::info!(parent = %config.parent.name, address = %config.parent.address, transport = %connector.mode(), proxy = ?connector.proxy(), "parent link");
    let versions = strata_node::config::protocol_versions()?;
    let handle = runtime::start_speaking(
        AgentOptions {
            cluster: Cluster {
                name: config.cluster.clone(),
                labels: config.labels.clone(),
                properties,
                path: Vec::new(),
            },
            parent: (config.parent.name.clone(), config.parent.address.clone()),
            store: store.clone(),
            connector,
            backend,
            clock,
            run: strata_node::process::random_u64(),
            tunnel,
        },
        versions,
    )?;
    tracing::info!(cluster = %config.cluster, parent = %config.parent.name, backend = what, "agent started");
    let ops = match config.metrics {
        Some(addr) => {
            let source = AgentOps {
                agent: handle.client(),
                store,
                kube: kube_counters,
            };
            tracing::info!(listen = %addr, "metrics serving at /metrics, /healthz, /readyz");
            Some(strata_node::ops::spawn(addr, Arc::new(source))?)
        }
        None => None,
    };
    signals.recv().await;
    tracing::info!("shutting down");
    if let Some(task) = ops {
        task.abort();
    }
    handle.shutdown().await;
    Ok(())
}

/// `agent mover`: serves the volume until SIGTERM or SIGINT (the pod's deletion).
async fn mover(args: strata_agent::mover::MoverArgs) -> anyhow::Result<()> {
    let token = args.token()?;
    let mut signals = strata_node::process::Signals::new();
    let (listener, volume) = args.bind().await?;
    tracing::info!(listen = %args.listen, path = %args.path.display(), mode = ?args.mode, "mover serving");
    strata_agent::mover::serve(listener, volume, token, signals.recv()).await;
    Ok(())
}

/// Joins the parent with the token unless an earlier run did (its certificate is in the
/// data directory) and that certificate has not expired: the key and chain are written
/// there durably. A certificate that expired while the agent was offline is the
/// recovery path: the token is then a recovery token (`recover=NAME` in the relay's
/// tokens file) and the agent enrolls again.
async fn join_once(config: &AgentConfig, token: &str) -> anyhow::Result<()> {
    if config.tls.cert.exists() {
        if !strata_node::renew::expired(&config.tls.cert) {
            return Ok(());
        }
        tracing::warn!(cert = %config.tls.cert.display(), "the certificate expired while the agent was offline; enrolling again with the configured (recovery) token");
    }
    let parent = &config.parent;
    tracing::info!(relay = %parent.name, cluster = %config.cluster, transport = %parent.transport, "joining with a token");
    // Over the parent link's own transport and proxy: a site whose firewall drops UDP
    // joins over TLS/TCP as it then connects.
    let joined =
        strata_node::join::join_parent(parent, &config.tls.ca, &config.cluster, token).await?;
    std::fs::create_dir_all(&config.data)
        .with_context(|| format!("cannot create {}", config.data.display()))?;
    joined.write(&config.tls.key, &config.tls.cert)?;
    tracing::info!(cert = %config.tls.cert.display(), "joined; certificate saved");
    Ok(())
}
