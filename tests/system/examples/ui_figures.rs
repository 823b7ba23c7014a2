//! The web view's figures (issue 48), printed, never asserted: start a topology with
//! `relay up` (the demo's 24 clusters unless a file is given), open the view in
//! headless chromium through a `relay ui` link, and print first paint, the time until
//! the tree is drawn with its data, the bytes of the first view, the page's JavaScript
//! heap, and the update latency from a cordon at the root (`relay cordon`, answered
//! once durable) to the page showing it, over several rounds.
//!
//! ```text
//! cargo build --bin relay --bin agent
//! cargo run -p strata-system-tests --example ui_figures [-- TOPOLOGY.yaml [ROUNDS]]
//! ```
//!
//! With `STRATA_SERVER` (and `STRATA_SERVER_NAME`, `STRATA_CA`, `STRATA_TOKEN`) set,
//! no hierarchy is started: the figures are taken against that root, e.g. the
//! benchmark's 10,000 clusters (`bench --leaves 10000 --serve-api 127.0.0.1:9443`
//! prints the variables). Above 200 clusters the page shows the tiers' counts; the
//! cordoned cluster's relays are opened by clicking them, as a user would.

#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::disallowed_types
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_test_tools::webdriver::Browser;

struct Up {
    /// `relay up`, unless the root was given (`STRATA_SERVER`).
    child: Option<Child>,
    env: Vec<(String, String)>,
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

/// The root named by `STRATA_*` variables, if `STRATA_SERVER` is set.
fn given() -> Option<Up> {
    std::env::var_os("STRATA_SERVER")?;
    let env = std::env::vars()
        .filter(|(k, _)| k.starts_with("STRATA_"))
        .collect();
    Some(Up { child: None, env })
}

fn bin(name: &str) -> PathBuf {
    strata_test_tools::target().join("debug").join(name)
}

// The child is waited for by `Up`'s drop; on the panic path the bench exits with it.
#[allow(clippy::zombie_processes)]
fn up(topology: &Path, data: &Path) -> Up {
    let mut child = Command::new(bin("relay"))
        .args(["up", &topology.display().to_string(), "--data"])
        .arg(data)
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin("").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = out.lines().map_while(Result::ok);
    while let Some(line) = lines.next() {
        if let Some(rest) = line.trim().strip_prefix("export STRATA_SERVER=") {
            let env = format!("STRATA_SERVER={rest}")
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            // Keep reading what relay up prints, so that it never writes to a closed
            // pipe.
            std::thread::spawn(move || for _ in lines.by_ref() {});
            return Up {
                child: Some(child),
                env,
            };
        }
    }
    panic!("relay up ended before it printed its credentials");
}

fn relay(up: &Up, args: &[&str]) -> String {
    let out = Command::new(bin("relay"))
        .args(args)
        .envs(up.env.iter().cloned())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "relay {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let topology = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("deploy/examples/demo.yaml"));
    let rounds: usize = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(10);
    let tmp = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let up = match given() {
        Some(up) => {
            println!("the root given by STRATA_SERVER");
            up
        }
        None => {
            let up = up(&topology, &tmp.path().join("data"));
            println!(
                "relay up {}: every link connected in {:.1?}",
                topology.display(),
                started.elapsed()
            );
            up
        }
    };
    // The inventory climbs to the root after the links connect: wait until it holds
    // still for a few reads.
    let list = || -> Vec<String> {
        relay(&up, &["clusters"])
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
            .collect()
    };
    let mut clusters = list();
    let mut still = 0;
    while still < 4 {
        std::thread::sleep(Duration::from_millis(500));
        let now = list();
        still = if now == clusters { still + 1 } else { 0 };
        clusters = now;
    }
    let url = relay(&up, &["ui", "--print"]).trim().to_owned();
    let b = Browser::start(1280, 900).unwrap();
    b.goto(&url).unwrap();
    b.wait_for("return document.body.dataset.ready === 'true'", 600)
        .unwrap();
    let first = b
        .script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0];
             const r = performance.getEntriesByName('strata-ready')[0];
             const entries = performance.getEntriesByType('resource')
                 .concat(performance.getEntriesByType('navigation'));
             const bytes = entries.reduce((n, e) => n + (e.transferSize || 0), 0);
             const body = entries.reduce((n, e) => n + (e.decodedBodySize || 0), 0);
             return { firstPaintMs: p && p.startTime, readyMs: r && r.startTime,
                      transferred: bytes, decoded: body, requests: entries.length,
                      heapBytes: performance.memory && performance.memory.usedJSHeapSize,
                      rows: document.querySelectorAll('[data-cluster]').length };",
            json!([]),
        )
        .unwrap();
    println!("clusters: {}", clusters.len());
    println!(
        "first view: first paint {:.0} ms, tree drawn with data {:.0} ms, {} requests, {} bytes transferred ({} decoded), JS heap {:.1} MiB, {} cluster rows",
        first["firstPaintMs"].as_f64().unwrap_or(f64::NAN),
        first["readyMs"].as_f64().unwrap_or(f64::NAN),
        first["requests"],
        first["transferred"],
        first["decoded"],
        first["heapBytes"].as_f64().unwrap_or(0.0) / 1048576.0,
        first["rows"],
    );
    // Update latency: cordon at the root, then watch the page until it shows it.
    let Some(target) = clusters.first() else {
        println!("no cluster to cordon");
        return;
    };
    // Open the relays above it that are closed (the page opens them all below 200
    // clusters): by name, each prefix of the cluster's name that is a relay on the page
    // (the benchmark names r0, r0-s0, r0-s0-a0).
    let parts: Vec<&str> = target.split('-').collect();
    for n in 1..parts.len() {
        let relay = parts[..n].join("-");
        let head = format!("[data-relay='{relay}'][data-open='false'] > .relay-head");
        if let Some(e) = b.find(&head).unwrap() {
            b.click(&e).unwrap();
        }
    }
    let t0 = Instant::now();
    b.wait_for(
        &format!("return !!document.querySelector(\"[data-cluster='{target}']\")"),
        600,
    )
    .unwrap();
    println!(
        "{target}'s row drawn {:.0} ms after its relays were opened",
        t0.elapsed().as_secs_f64() * 1000.0
    );
    let selector = format!("[data-cluster='{target}'] [data-taint='cordoned']");
    let mut latencies = Vec::new();
    for round in 0..rounds {
        let cordon = round % 2 == 0;
        relay(&up, &[if cordon { "cordon" } else { "uncordon" }, target]);
        let t0 = Instant::now();
        let script = format!("return !!document.querySelector(\"{selector}\") === {cordon}");
        let mut shown = false;
        while t0.elapsed() < Duration::from_secs(30) {
            if b.script(&script, json!([])).unwrap() == Value::Bool(true) {
                shown = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if shown {
            latencies.push(t0.elapsed().as_secs_f64() * 1000.0);
        } else {
            println!("round {round}: the page did not show the change within 30 s");
        }
    }
    latencies.sort_by(f64::total_cmp);
    if !latencies.is_empty() {
        println!(
            "update latency (relay cordon/uncordon answered -> page shows it), {} rounds: p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms",
            latencies.len(),
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.9),
            latencies[latencies.len() - 1],
        );
    }
    let heap = b
        .script(
            "return performance.memory && performance.memory.usedJSHeapSize",
            json!([]),
        )
        .unwrap();
    println!(
        "JS heap after the rounds: {:.1} MiB",
        heap.as_f64().unwrap_or(0.0) / 1048576.0
    );
}
