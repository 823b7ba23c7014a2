//! Fan-out figures for a hierarchy in one process over real QUIC + mTLS on loopback:
//! root -> regions -> sites -> agents with simulated clusters (in-memory stores).
//!
//! `cargo run --release -p strata-agent --example fanout -- REGIONS SITES_PER_REGION AGENTS_PER_SITE OBJECT_BYTES`
//!
//! Prints: time from apply to "held by every agent" (p50/p90/p99/max over agents, polled
//! every 10 ms, so figures are +-10 ms), time until the root's summary shows every
//! cluster available, and the bytes the root sent for one update of the object compared
//! with object size x direct children.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strata_agent::runtime::{self as agent, AgentHandle, AgentParts};
use strata_agent::simulated::{SimulatedCluster, SimulatedConfig};
use strata_protocol::model::{Cluster, Revision, Space};
use strata_protocol::sync::SessionConfig;
use strata_relay::certs::Ca;
use strata_relay::node::clock::Clock;
use strata_relay::node::runtime::{self as node, NodeHandle, NodeParts};
use strata_relay::objects::parse_manifests;
use strata_relay::store::{MemStore, Store};
use strata_relay::tls::{self, Identity};
use strata_relay::transport;

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn identity(dir: &std::path::Path, ca: &Ca, name: &str) -> anyhow::Result<Identity> {
    let (cert, key) = ca.issue(name)?.write_to(dir)?;
    Ok(Identity::load(&cert, &key, &dir.join("ca.crt"))?)
}

fn node(
    dir: &std::path::Path,
    ca: &Ca,
    name: &str,
    parent: Option<(&str, std::net::SocketAddr)>,
    children: Vec<String>,
    id: u64,
) -> anyhow::Result<(NodeHandle, std::net::SocketAddr)> {
    let identity = identity(dir, ca, name)?;
    let listener = transport::server_endpoint(
        "127.0.0.1:0".parse()?,
        tls::server_config(&identity)?,
        [id as u8; 32],
    )?;
    let addr = listener.local_addr()?;
    let connector = match parent {
        Some(_) => Some(transport::client_endpoint(
            "127.0.0.1:0".parse()?,
            tls::client_config(&identity)?,
        )?),
        None => None,
    };
    let handle = node::start(NodeParts {
        name: name.into(),
        labels: BTreeMap::new(),
        children,
        parent: parent.map(|(n, a)| (n.to_owned(), a)),
        store: Arc::new(MemStore::new(id)) as Arc<dyn Store>,
        listener: Some(listener),
        connector,
        sessions: SessionConfig::default(),
        summary_interval: Duration::from_millis(100),
        clock: Clock::start(),
        run: id,
        joining: None,
    })?;
    Ok((handle, addr))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn manifests(size: usize, version: usize) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{ name: payload, namespace: bench, labels: {{ app: bench }} }}
data: {{ blob: \"{}\", version: \"{version}\" }}
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: bench }}
spec:
  objects: [ {{ selector: {{ matchLabels: {{ app: bench }} }} }} ]
  clusters: {{ selector: {{ matchLabels: {{ tier: store }} }} }}
",
        "x".repeat(size)
    )
}

async fn apply(root: &NodeHandle, text: String) -> anyhow::Result<u64> {
    let m =
        parse_manifests(&text, &Space::default_space()).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let applied = root
        .query(move |c| c.apply_manifests(&m))
        .await
        .ok_or_else(|| anyhow::anyhow!("root stopped"))??;
    applied
        .revision
        .map(|p| p.0)
        .ok_or_else(|| anyhow::anyhow!("nothing changed"))
}

/// Polls every agent until each holds the payload at `revision`; returns arrival times.
async fn arrivals(
    agents: &[AgentHandle],
    revision: u64,
    start: tokio::time::Instant,
) -> Vec<Duration> {
    let mut seen: Vec<Option<Duration>> = vec![None; agents.len()];
    for _ in 0..6000 {
        for (i, a) in agents.iter().enumerate() {
            if seen[i].is_none() {
                let has = a
                    .query(move |a| {
                        a.log()
                            .live()
                            .any(|o| o.key().name == "payload" && o.revision.0 >= revision)
                    })
                    .await
                    .unwrap_or(false);
                if has {
                    seen[i] = Some(start.elapsed());
                }
            }
        }
        if seen.iter().all(Option::is_some) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut out: Vec<Duration> = seen.into_iter().flatten().collect();
    out.sort();
    out
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (regions, sites, per_site, size) = (arg(1, 2), arg(2, 5), arg(3, 10), arg(4, 1024));
    let total = regions * sites * per_site;
    let dir = std::env::temp_dir().join(format!("strata-fanout-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ca = Ca::generate("bench")?;
    std::fs::write(dir.join("ca.crt"), ca.cert_pem())?;
    let region_names: Vec<String> = (0..regions).map(|r| format!("r{r}")).collect();
    let (root, root_addr) = node(&dir, &ca, "center", None, region_names.clone(), 1)?;
    let mut relays = Vec::new();
    let mut agents = Vec::new();
    let mut id = 2u64;
    for r in &region_names {
        let site_names: Vec<String> = (0..sites).map(|s| format!("{r}-s{s}")).collect();
        let (region, region_addr) = node(
            &dir,
            &ca,
            r,
            Some(("center", root_addr)),
            site_names.clone(),
            id,
        )?;
        id += 1;
        relays.push(region);
        for s in &site_names {
            let agent_names: Vec<String> = (0..per_site).map(|a| format!("{s}-a{a}")).collect();
            let (site, site_addr) = node(
                &dir,
                &ca,
                s,
                Some((r, region_addr)),
                agent_names.clone(),
                id,
            )?;
            id += 1;
            relays.push(site);
            for a in agent_names {
                let identity = identity(&dir, &ca, &a)?;
                let connector = transport::client_endpoint(
                    "127.0.0.1:0".parse()?,
                    tls::client_config(&identity)?,
                )?;
                agents.push(agent::start(AgentParts {
                    cluster: Cluster {
                        name: a.clone(),
                        labels: [("tier".to_owned(), "store".to_owned())].into(),
                        properties: BTreeMap::new(),
                        path: vec![],
                    },
                    parent: (s.clone(), site_addr),
                    store: Arc::new(MemStore::new(id)),
                    connector,
                    backend: Box::new(SimulatedCluster::new(SimulatedConfig {
                        ready_delay: Duration::ZERO,
                        fail_all: None,
                    })),
                    clock: Clock::start(),
                    run: id,
                })?);
                id += 1;
            }
        }
    }
    let setup = tokio::time::Instant::now();
    loop {
        let known = root
            .query(|c| c.reports().clusters().count())
            .await
            .unwrap_or(0);
        if known == total {
            break;
        }
        if setup.elapsed() > Duration::from_secs(120) {
            anyhow::bail!("only {known} of {total} clusters registered");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "hierarchy: 1 root, {regions} regions, {} sites, {total} agents; object {size} bytes",
        regions * sites
    );
    println!("registration of {total} clusters: {:?}", setup.elapsed());

    // First delivery: the placement and the object.
    let start = tokio::time::Instant::now();
    let rev = apply(&root, manifests(size, 1)).await?;
    let times = arrivals(&agents, rev, start).await;
    report("first apply -> held by every agent", &times, total);

    // Status back: every cluster available in the root's summary.
    let placement = root
        .query(|c| c.placements().to_vec())
        .await
        .unwrap_or_default();
    let key = root
        .query(|c| {
            c.log()
                .live()
                .find(|o| o.key().name == "payload")
                .map(|o| o.key().clone())
        })
        .await
        .flatten();
    if let (Some(p), Some(k)) = (placement.first().cloned(), key) {
        loop {
            let (p, k) = (p.clone(), k.clone());
            let s = root
                .query(move |c| c.reports().summarize(&p, &k))
                .await
                .unwrap_or_default();
            if s.health.available as usize == total && s.min_revision == Some(Revision(rev)) {
                println!(
                    "apply -> root summary shows all {total} available: {:?}",
                    start.elapsed()
                );
                break;
            }
            if start.elapsed() > Duration::from_secs(120) {
                println!(
                    "root summary incomplete after 120 s: {} of {total} available",
                    s.health.available
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // An update of the object alone: bytes the root sends for it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = root.client().link_stats().await.unwrap_or_default();
    let start = tokio::time::Instant::now();
    let rev = apply(&root, manifests(size, 2)).await?;
    let times = arrivals(&agents, rev, start).await;
    report("update -> held by every agent", &times, total);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = root.client().link_stats().await.unwrap_or_default();
    let sent: u64 = after.children.iter().map(|c| c.1).sum::<u64>()
        - before.children.iter().map(|c| c.1).sum::<u64>();
    let encoded = size + 200;
    println!(
        "root bytes sent for the update: {sent} (UDP payload incl. acks, heartbeats and summaries' acks in that window); object ~{encoded} B x {regions} direct children = {}; ratio {:.2}",
        encoded * regions,
        sent as f64 / (encoded * regions) as f64
    );
    for a in agents {
        a.shutdown().await;
    }
    for r in relays {
        let _ = r.shutdown().await;
    }
    let _ = root.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn report(what: &str, times: &[Duration], total: usize) {
    if times.len() < total {
        println!("{what}: only {} of {total} agents got it", times.len());
        return;
    }
    println!(
        "{what}: p50 {:?} p90 {:?} p99 {:?} max {:?}",
        percentile(times, 0.5),
        percentile(times, 0.9),
        percentile(times, 0.99),
        times[times.len() - 1]
    );
}
