//! `relay demo`: a whole hierarchy on this machine, a sample application rolled out to
//! one region, then moved to the other by changing one label in its placement.
//!
//! Every node is a real process (`relay serve`, `agent run` with a simulated cluster)
//! talking QUIC with mutual TLS on loopback; the demo drives them through the root's
//! HTTPS API like a user would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use hyper::Method;
use serde_json::Value;

use crate::certs::{Ca, write};
use crate::client::ApiClient;

const REGIONS: [&str; 2] = ["eu", "us"];
const SITES_PER_REGION: usize = 3;
const CLUSTERS_PER_SITE: usize = 4;

fn app(region: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{ name: shop, namespace: retail, labels: {{ app: shop }} }}
spec: {{ replicas: 3 }}
---
apiVersion: v1
kind: ConfigMap
metadata: {{ name: shop-config, namespace: retail, labels: {{ app: shop }} }}
data: {{ currency: EUR }}
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: shop }}
spec:
  objects: [ {{ selector: {{ matchLabels: {{ app: shop }} }} }} ]
  clusters: {{ selector: {{ matchLabels: {{ region: {region} }} }} }}
"
    )
}

struct Procs(Vec<(String, Child)>);

impl Procs {
    /// SIGTERM to everyone, then up to 5 s for each to exit before SIGKILL.
    async fn stop(&mut self) {
        for (_, child) in &self.0 {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for (name, child) in &mut self.0 {
            let mut stopped = false;
            for _ in 0..100 {
                if let Ok(Some(_)) = child.try_wait() {
                    stopped = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if !stopped {
                eprintln!("{name} did not stop on SIGTERM; killing it");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        self.0.clear();
    }
}

impl Drop for Procs {
    /// On an early exit, nothing is left running.
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0")?;
        let port = udp.local_addr()?.port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
}

/// Runs the demo in `dir` (a fresh temporary directory when `None`).
pub async fn run(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let tmp;
    let dir = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d)
                .with_context(|| format!("cannot create {}", d.display()))?;
            d
        }
        None => {
            tmp = TempDir::new()?;
            tmp.0.clone()
        }
    };
    let relay = std::env::current_exe()?;
    let agent = relay.with_file_name("agent");
    if !agent.exists() {
        anyhow::bail!(
            "the agent binary is not next to relay ({}); build it with `cargo build -p strata-agent` (same profile)",
            agent.display()
        );
    }
    println!("strata demo in {}", dir.display());
    let ca = Ca::generate("demo")?;
    write(&dir.join("ca.crt"), &ca.cert_pem())?;
    write(&dir.join("tokens"), "demo-token\n")?;

    let (root_port, api_port) = (free_port()?, free_port()?);
    let mut procs = Procs(Vec::new());
    let mut spawn = |name: &str, program: &Path, args: &[&str]| -> anyhow::Result<()> {
        let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
        let child = Command::new(program)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("STRATA_DEMO_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        procs.0.push((name.to_owned(), child));
        Ok(())
    };
    let node_cfg = |name: &str, body: String| -> anyhow::Result<String> {
        ca.issue(name)?.write_to(&dir)?;
        let path = dir.join(format!("{name}.yaml"));
        write(
            &path,
            &format!(
                "{body}tls: {{ cert: {name}.crt, key: {name}.key, ca: ca.crt }}\ndata: data/{name}\n"
            ),
        )?;
        Ok(path.display().to_string())
    };

    let regions: Vec<String> = REGIONS.iter().map(|r| (*r).to_owned()).collect();
    let cfg = node_cfg(
        "center",
        format!(
            "node: center\nlisten: 127.0.0.1:{root_port}\nchildren: [{}]\napi: {{ listen: 127.0.0.1:{api_port}, tokens: tokens }}\nsummary_interval_ms: 100\n",
            regions.join(", ")
        ),
    )?;
    spawn("center", &relay, &["serve", "--config", &cfg])?;
    let mut total = 0;
    let mut per_region: BTreeMap<String, usize> = BTreeMap::new();
    for region in REGIONS {
        let region_port = free_port()?;
        let sites: Vec<String> = (1..=SITES_PER_REGION)
            .map(|s| format!("{region}-site-{s}"))
            .collect();
        let cfg = node_cfg(
            region,
            format!(
                "node: {region}\nlisten: 127.0.0.1:{region_port}\nparent: {{ name: center, address: 127.0.0.1:{root_port} }}\nchildren: [{}]\nlabels: {{ region: {region} }}\nsummary_interval_ms: 100\n",
                sites.join(", ")
            ),
        )?;
        spawn(region, &relay, &["serve", "--config", &cfg])?;
        for site in &sites {
            let site_port = free_port()?;
            let clusters: Vec<String> = (1..=CLUSTERS_PER_SITE)
                .map(|c| format!("{site}-c{c}"))
                .collect();
            let cfg = node_cfg(
                site,
                format!(
                    "node: {site}\nlisten: 127.0.0.1:{site_port}\nparent: {{ name: {region}, address: 127.0.0.1:{region_port} }}\nchildren: [{}]\nlabels: {{ site: {site} }}\nsummary_interval_ms: 100\n",
                    clusters.join(", ")
                ),
            )?;
            spawn(site, &relay, &["serve", "--config", &cfg])?;
            for cluster in clusters {
                ca.issue(&cluster)?.write_to(&dir)?;
                let path = dir.join(format!("{cluster}.yaml"));
                write(
                    &path,
                    &format!(
                        "cluster: {cluster}\nlabels: {{ tier: store }}\nparent: {{ name: {site}, address: 127.0.0.1:{site_port} }}\ntls: {{ cert: {cluster}.crt, key: {cluster}.key, ca: ca.crt }}\ndata: data/{cluster}\nsimulated: {{ ready_delay_ms: 1500 }}\n"
                    ),
                )?;
                spawn(
                    &cluster,
                    &agent,
                    &["run", "--config", &path.display().to_string()],
                )?;
                total += 1;
                *per_region.entry(region.to_owned()).or_default() += 1;
            }
        }
    }
    println!(
        "started 1 root, {} regional relays, {} site relays and {total} agents (simulated clusters)",
        REGIONS.len(),
        REGIONS.len() * SITES_PER_REGION
    );
    let client = ApiClient::new(
        format!("127.0.0.1:{api_port}").parse()?,
        "center",
        &dir.join("ca.crt"),
        "demo-token",
    )?;
    let result = drive(&client, &dir, total).await;
    procs.stop().await;
    println!("stopped every process");
    result
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("strata-demo-{}", crate::serve::random_u64()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn get(client: &ApiClient, path: &str) -> Option<Value> {
    match client.request(Method::GET, path, None).await {
        Ok((status, v)) if status.is_success() => Some(v),
        _ => None,
    }
}

async fn drive(client: &ApiClient, dir: &Path, total: usize) -> anyhow::Result<()> {
    // 1. Every cluster registered through its relays.
    let mut known = 0;
    for _ in 0..600 {
        known = get(client, "/clusters")
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
            dir.display()
        );
    }
    println!("all {total} clusters registered at the root\n");

    // 2. Roll the app out to eu.
    roll(client, "eu", dir).await?;
    // 3. Move it to us with one label.
    println!("\nmoving the app from eu to us (placement: region=eu -> region=us)");
    roll(client, "us", dir).await?;
    println!("\nfinal summary:");
    print_table(client).await;
    Ok(())
}

async fn roll(client: &ApiClient, region: &str, dir: &Path) -> anyhow::Result<()> {
    let (status, v) = client
        .request(
            Method::POST,
            "/spaces/default/apply",
            Some(app(region).into_bytes()),
        )
        .await?;
    if !status.is_success() {
        anyhow::bail!("apply refused: {v}");
    }
    println!(
        "applied the app placed on region={region} at revision {}",
        v["revision"]
    );
    let mut last = String::new();
    for _ in 0..900 {
        let objects = get(client, "/spaces/default/objects?kind=deployment&name=shop").await;
        let s = objects.as_ref().and_then(|o| {
            o["items"][0]["placements"][0]["summary"]
                .as_object()
                .cloned()
        });
        if let Some(s) = s {
            let expected = s["expected"].as_u64().unwrap_or(0);
            let reporting = s["reporting"].as_u64().unwrap_or(0);
            let available = s["health"]["available"].as_u64().unwrap_or(0);
            let line = format!(
                "  {region}: {} applied {reporting}/{expected}  available {available}/{expected}",
                bar(available, expected)
            );
            if line != last {
                println!("{line}");
                last = line;
            }
            let current = s["min_revision"]
                == objects
                    .as_ref()
                    .map_or(Value::Null, |o| o["items"][0]["revision"].clone());
            let elsewhere = objects.as_ref().is_some_and(|o| {
                o["items"][0]["placements"][0]["by_child"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["child"] != region)
            });
            if expected > 0
                && available == expected
                && reporting == expected
                && current
                && !elsewhere
            {
                print_table(client).await;
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!(
        "the rollout to {region} did not complete; see the logs in {}",
        dir.display()
    )
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

async fn print_table(client: &ApiClient) {
    if let Some(v) = get(client, "/spaces/default/objects?kind=deployment").await {
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
                // Per region, as each regional relay summarized its subtree.
                for region in REGIONS {
                    let child = p["by_child"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|c| c["child"] == region);
                    match child {
                        Some(c) => println!(
                            "    {region}: clusters {} available {}",
                            c["summary"]["expected"], c["summary"]["health"]["available"]
                        ),
                        None => println!("    {region}: holds nothing of it"),
                    }
                }
            }
        }
    }
}
