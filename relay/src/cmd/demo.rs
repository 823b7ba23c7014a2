//! `relay demo`: the embedded demo topology (`deploy/examples/demo.yaml`: a root, 2
//! regions, 3 sites each, 4 simulated clusters per site) brought up with [`crate::cmd::up`],
//! a sample application rolled out to one region, then moved to the other by changing
//! one label in its placement, make-before-break: the first region keeps the app until
//! the second runs it, and the demo prints the longest time the app was available on
//! no cluster during the move (sampled every 50 ms; `--move breakBeforeMake` shows the
//! gap it avoids).
//!
//! Every node is a real process talking QUIC with mutual TLS on loopback; the demo
//! drives the root's HTTPS API like a user would. Its last steps show the fleet as
//! kubectl sees it at the root, then a simulated cluster three tiers down through the
//! debug tunnel (its Pods and a Pod's log; with kubectl when it is on the PATH,
//! otherwise with the same requests through the root's API). Progress is one line per region
//! (applied / available), redrawn in place on a terminal and appended as plain lines
//! when standard output is not one.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper::Method;
use serde_json::Value;

use crate::client::ApiClient;
use crate::cmd::demo_debug;
use crate::cmd::up::{Hierarchy, TempDir, UpOptions};

/// The demo's topology, embedded in the binary.
pub const TOPOLOGY: &str = include_str!("../../../deploy/examples/demo.yaml");

fn app(region: &str, strategy: &str) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{ name: retail }}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{ name: shop, namespace: retail, labels: {{ app: shop }} }}
spec: {{ replicas: 3 }}
---
apiVersion: v1
kind: ConfigMap
metadata: {{ name: shop-config, namespace: retail, labels: {{ app: shop }} }}
data: {{ currency: EUR }}
---
apiVersion: v1
kind: Service
metadata: {{ name: shop, namespace: retail, labels: {{ app: shop }} }}
spec: {{ type: LoadBalancer, ports: [ {{ name: http, port: 80 }} ] }}
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: shop }}
spec:
  objects: [ {{ selector: {{ matchLabels: {{ app: shop }} }} }} ]
  clusters: {{ selector: {{ matchLabels: {{ region: {region} }} }} }}
  move: {strategy}
"
    )
}

/// Runs the demo in `dir` (a fresh temporary directory when `None`).
pub async fn run(dir: Option<PathBuf>, strategy: &str) -> anyhow::Result<()> {
    let checked = strata_topology::parse(TOPOLOGY, Path::new("deploy/examples/demo.yaml"))?;
    let tmp;
    let dir = match dir {
        Some(d) => d,
        None => {
            tmp = TempDir::new("strata-demo")?;
            tmp.0.clone()
        }
    };
    println!("strata demo in {}", dir.display());
    let mut h = Hierarchy::start(
        checked.topology,
        &dir,
        &UpOptions {
            summary_interval_ms: Some(100),
            simulated_ready_delay_ms: Some(1500),
            log: std::env::var("STRATA_DEMO_LOG").ok(),
        },
    )?;
    let (relays, agents) = h.counts();
    let regions = h.topology.root().relays.len();
    println!(
        "started 1 root, {} regional relays, {} site relays and {agents} agents",
        regions,
        relays - 1 - regions
    );
    if let Some(note) = h.simulated_note() {
        println!("{note}");
    }
    let tty = std::io::stdout().is_terminal();
    let result = match h
        .wait_connected(|n, total| {
            if tty {
                print!("\r\x1b[2Klinks connected: {n}/{total}");
                if n == total {
                    println!();
                }
                let _ = std::io::stdout().flush();
            } else {
                println!("links connected: {n}/{total}");
            }
        })
        .await
    {
        Ok(()) => match h.write_kubeconfig().await {
            Ok(kubeconfig) => {
                println!(
                    "while it runs, the root is reachable with:\n  {}\nand with kubectl or Helm:\n  export KUBECONFIG={}",
                    h.env_lines(),
                    kubeconfig.display()
                );
                drive(&h, tty, strategy, &kubeconfig).await
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let killed = h.stop().await;
    if killed.is_empty() {
        println!("stopped every process");
    } else {
        println!("stopped every process (killed: {})", killed.join(", "));
    }
    result
}

async fn get(client: &ApiClient, path: &str) -> Option<Value> {
    match client.request(Method::GET, path, None).await {
        Ok((status, v)) if status.is_success() => Some(v),
        _ => None,
    }
}

/// The app's fleet status, read where every Kubernetes client reads it (its
/// `FleetStatus` objects, one per placement), in the shape of the root's `/objects`
/// items: `revision`, and per placement its `summary` and each region's (`by_child`).
async fn shop_status(client: &ApiClient) -> Option<Value> {
    let list = get(
        client,
        "/spaces/default/apis/strata.dev/v1alpha1/fleetstatuses?labelSelector=strata.dev/kind%3Ddeployment,strata.dev/name%3Dshop",
    )
    .await?;
    let counts = |s: &Value| {
        serde_json::json!({
            "expected": s["expected"],
            "reporting": s["reporting"],
            "health": { "available": s["available"], "failed": s["failed"] },
            "min_revision": s["observedRevision"],
        })
    };
    let fleet = list["items"].as_array()?;
    let placements: Vec<Value> = fleet
        .iter()
        .map(|f| {
            let by_child: Vec<Value> = f["tiers"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(f["clusters"].as_array().into_iter().flatten())
                .map(|t| serde_json::json!({ "child": t["name"], "summary": counts(t) }))
                .collect();
            serde_json::json!({
                "placement": f["placement"],
                "summary": counts(&f["summary"]),
                "silent": f["summary"]["silent"],
                "by_child": by_child,
            })
        })
        .collect();
    let first = fleet.first()?;
    Some(serde_json::json!({ "items": [ {
        "key": { "name": first["object"]["name"] },
        "revision": first["object"]["revision"],
        "placements": placements,
    } ] }))
}

/// A relay and the clusters directly below it.
type Site = (String, Vec<String>);

/// The regions (the root's child relays) and, per region, its clusters by site.
struct Map {
    regions: Vec<(String, Vec<Site>)>,
}

impl Map {
    fn of(h: &Hierarchy) -> Map {
        let t = &h.topology;
        let below = |relay: &str| -> Vec<Site> {
            // Sites under a region and the region's own clusters, in topology order.
            let mut out = Vec::new();
            let mut stack = vec![relay.to_owned()];
            while let Some(r) = stack.pop() {
                if let Some(rel) = t.relay(&r) {
                    if !rel.clusters.is_empty() {
                        out.push((r.clone(), rel.clusters.clone()));
                    }
                    stack.extend(rel.relays.iter().rev().cloned());
                }
            }
            out
        };
        Map {
            regions: t
                .root()
                .relays
                .iter()
                .map(|r| (r.clone(), below(r)))
                .collect(),
        }
    }

    fn clusters(&self, region: &str) -> usize {
        self.regions
            .iter()
            .filter(|(r, _)| r == region)
            .flat_map(|(_, sites)| sites.iter().map(|(_, c)| c.len()))
            .sum()
    }
}

async fn drive(h: &Hierarchy, tty: bool, strategy: &str, kubeconfig: &Path) -> anyhow::Result<()> {
    let client = h.client()?;
    let total = h.topology.clusters.len();
    // 1. Every cluster registered through its relays.
    let mut known = 0;
    for _ in 0..600 {
        known = get(&client, "/clusters")
            .await
            .and_then(|v| v["items"].as_array().map(Vec::len))
            .unwrap_or(0);
        if known == total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if known != total {
        anyhow::bail!(
            "only {known} of {total} clusters registered; see the logs in {}",
            strata_topology::files::logs(&h.dir).display()
        );
    }
    println!("all {total} clusters registered at the root\n");
    let map = Map::of(h);
    let (Some((first, _)), Some((second, _))) = (map.regions.first(), map.regions.get(1)) else {
        anyhow::bail!("the demo topology needs two regions");
    };
    // 2. Roll the app out to the first region.
    roll(&client, &map, first, h, tty, strategy).await?;
    println!("rolled out to {first}:");
    print_summary(&client, &map, first).await;
    // 3. Move it to the second with one label.
    println!(
        "\nmoving the app from {first} to {second} (placement: region={first} -> region={second}, {strategy})"
    );
    let gap = roll(&client, &map, second, h, tty, strategy).await?;
    println!(
        "\nduring the move, the app was available on no cluster for {} ms at most (sampled every {} ms)",
        gap.app.as_millis(),
        SAMPLE.as_millis()
    );
    if let Some((dns, name)) = gap.dns {
        println!(
            "DNS at the root ({name}): no address for {} ms at most, an address of a cluster that no longer held the app for {} ms at most",
            dns.nowhere.as_millis(),
            dns.stale.as_millis()
        );
    }
    println!("\nfinal summary:");
    print_summary(&client, &map, second).await;
    demo_debug::kubectl_step(kubeconfig)?;
    let Some((site, cluster)) = map
        .regions
        .iter()
        .filter(|(r, _)| r == second)
        .flat_map(|(_, sites)| sites.iter())
        .find_map(|(site, clusters)| clusters.first().map(|c| (site, c)))
    else {
        anyhow::bail!("region {second} has no cluster");
    };
    demo_debug::debug_step(h, &client, [second, site, cluster]).await
}

/// One region's line of progress.
fn region_line(region: &str, placement: Option<&Value>) -> String {
    let child = placement.and_then(|p| {
        p["by_child"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["child"] == region)
    });
    match child {
        Some(c) => {
            let s = &c["summary"];
            let expected = s["expected"].as_u64().unwrap_or(0);
            let available = s["health"]["available"].as_u64().unwrap_or(0);
            format!(
                "  {region:<4} {} applied {:>2}/{expected}  available {available:>2}/{expected}",
                bar(available, expected),
                s["reporting"].as_u64().unwrap_or(0),
            )
        }
        None => format!("  {region:<4} {} holds nothing of it", bar(0, 0)),
    }
}

/// How often the demo reads the root's summary while the app rolls out or moves.
const SAMPLE: Duration = Duration::from_millis(50);

/// The longest windows a roll saw.
#[derive(Debug, Default)]
struct Gaps {
    /// The root's summary showed the app available on no cluster.
    app: Duration,
    /// The root's DNS (when it serves), and the name asked.
    dns: Option<(DnsGaps, String)>,
}

/// The longest windows DNS at the root answered no address, and an address of a cluster
/// whose copy was gone (not in the app's `ServiceEndpoints` any more).
#[derive(Debug, Default)]
struct DnsGaps {
    nowhere: Duration,
    stale: Duration,
}

/// The addresses the root's `ServiceEndpoints` of the app list, placed or leaving (the
/// clusters holding its Service, as they report).
async fn listed_addresses(client: &ApiClient) -> Vec<std::net::IpAddr> {
    let Some(list) = get(
        client,
        "/spaces/default/apis/strata.dev/v1alpha1/namespaces/retail/serviceendpoints",
    )
    .await
    else {
        return Vec::new();
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| {
            let of = |field: &str| i[field].as_array().cloned().unwrap_or_default();
            of("clusters").into_iter().chain(of("leaving"))
        })
        .flat_map(|c| c["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a["address"].as_str()?.parse().ok())
        .collect()
}

/// Applies the app placed on `region` and shows progress until every cluster of the
/// region runs it and no other holds it. Returns the longest time the root's summary
/// showed the app available on no cluster, once it had been available somewhere, and
/// the same of DNS at the root when it serves.
async fn roll(
    client: &ApiClient,
    map: &Map,
    region: &str,
    h: &Hierarchy,
    tty: bool,
    strategy: &str,
) -> anyhow::Result<Gaps> {
    let dns = h
        .rendered
        .nodes
        .iter()
        .find(|n| n.name == h.rendered.root)
        .and_then(|n| n.dns);
    let zone = h
        .topology
        .root()
        .dns
        .as_ref()
        .map(|d| d.zone.trim_end_matches('.').to_owned());
    let name = zone.map(|z| format!("shop.retail.{z}."));
    let mut dns_gaps = DnsGaps::default();
    let (mut empty_since, mut stale_since): (
        Option<tokio::time::Instant>,
        Option<tokio::time::Instant>,
    ) = (None, None);
    let mut answered = false;
    let (status, v) = client
        .request(
            Method::POST,
            "/spaces/default/apply",
            Some(app(region, strategy).into_bytes()),
        )
        .await?;
    if !status.is_success() {
        anyhow::bail!("apply refused: {v}");
    }
    println!(
        "applied the app placed on region={region} at revision {}",
        v["revision"]
    );
    let mut shown: Vec<String> = Vec::new();
    let mut gap = Duration::ZERO;
    let mut nowhere_since: Option<tokio::time::Instant> = None;
    for _ in 0..3600 {
        let objects = shop_status(client).await;
        let item = objects.as_ref().map(|o| &o["items"][0]);
        let placement = item.map(|i| &i["placements"][0]);
        let lines: Vec<String> = map
            .regions
            .iter()
            .map(|(r, _)| region_line(r, placement))
            .collect();
        if tty && lines != shown {
            // Redraw the block in place.
            if !shown.is_empty() {
                print!("\x1b[{}A", shown.len());
            }
            for l in &lines {
                println!("\x1b[2K{l}");
            }
            let _ = std::io::stdout().flush();
        } else if !tty {
            for (i, l) in lines.iter().enumerate() {
                if shown.get(i) != Some(l) {
                    println!("{l}");
                }
            }
        }
        shown = lines;
        let available = placement.map_or(0, |p| {
            p["summary"]["health"]["available"].as_u64().unwrap_or(0)
        });
        let now = tokio::time::Instant::now();
        if let (Some(server), Some(name)) = (dns, &name) {
            let answer = crate::dns::lookup(server, name, Duration::from_millis(500))
                .await
                .unwrap_or_default();
            let listed = listed_addresses(client).await;
            answered |= !answer.is_empty();
            let stale = answer.iter().any(|a| !listed.contains(a));
            window(
                &mut dns_gaps.nowhere,
                &mut empty_since,
                answered && answer.is_empty(),
                now,
            );
            window(&mut dns_gaps.stale, &mut stale_since, stale, now);
        }
        match (available, nowhere_since) {
            (0, None) => nowhere_since = Some(now),
            (0, Some(_)) => {}
            (_, Some(since)) => {
                gap = gap.max(now - since);
                nowhere_since = None;
            }
            (_, None) => {}
        }
        if let (Some(item), Some(p)) = (item, placement) {
            let s = &p["summary"];
            let expected = s["expected"].as_u64().unwrap_or(0);
            let current = s["min_revision"] == item["revision"];
            let elsewhere = p["by_child"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["child"] != region);
            if expected > 0
                && s["health"]["available"].as_u64() == Some(expected)
                && s["reporting"].as_u64() == Some(expected)
                && current
                && !elsewhere
            {
                return Ok(Gaps {
                    app: gap,
                    dns: name.map(|n| (dns_gaps, n)),
                });
            }
        }
        tokio::time::sleep(SAMPLE).await;
    }
    anyhow::bail!(
        "the rollout to {region} did not complete; see the logs in {}",
        strata_topology::files::logs(&h.dir).display()
    )
}

/// Keeps `longest` the longest stretch of samples for which `now_in` held.
fn window(
    longest: &mut Duration,
    since: &mut Option<tokio::time::Instant>,
    now_in: bool,
    now: tokio::time::Instant,
) {
    match (now_in, *since) {
        (true, None) => *since = Some(now),
        (true, Some(s)) => *longest = (*longest).max(now - s),
        (false, _) => *since = None,
    }
}

fn bar(done: u64, of: u64) -> String {
    let width = 24u64;
    let filled = (done * width).checked_div(of).unwrap_or(0);
    let mut s = String::from("[");
    for i in 0..width {
        s.push(if i < filled { '#' } else { '.' });
    }
    s.push(']');
    s
}

/// The root's summary of the app, per region, and the clusters of `region` by site.
///
/// The root keeps summaries, not per-cluster statuses: a region's clusters are named
/// available when its summary counts as many clusters available as the topology puts
/// below it (every one of them is selected by `region=...`), so none can be missing.
async fn print_summary(client: &ApiClient, map: &Map, region: &str) {
    let Some(v) = shop_status(client).await else {
        println!("  (the root did not answer)");
        return;
    };
    for item in v["items"].as_array().into_iter().flatten() {
        for p in item["placements"].as_array().into_iter().flatten() {
            let s = &p["summary"];
            println!(
                "  deployment/{} placement {} rev {}: clusters {} applied {} available {} failed {} unreachable {}",
                item["key"]["name"].as_str().unwrap_or_default(),
                p["placement"].as_str().unwrap_or_default(),
                item["revision"],
                s["expected"],
                s["reporting"],
                s["health"]["available"],
                s["health"]["failed"],
                p["silent"]
            );
            for (r, sites) in &map.regions {
                let child = p["by_child"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["child"] == r.as_str());
                let Some(c) = child else {
                    println!("    {r}: holds nothing of it");
                    continue;
                };
                let available = c["summary"]["health"]["available"].as_u64().unwrap_or(0);
                println!(
                    "    {r}: clusters {} available {available}",
                    c["summary"]["expected"]
                );
                if r == region && available as usize == map.clusters(r) {
                    for (site, clusters) in sites {
                        println!("      {site:<10} available: {}", clusters.join(", "));
                    }
                }
            }
        }
    }
}
