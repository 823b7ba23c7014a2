//! A relay under a flood of bogus joins keeps serving its admitted children, with real
//! processes on loopback: center → eu (admits joins) → pos-1. P1 (a config map applied
//! at the root → held by pos-1) is measured idle, then while this test sends eu bogus
//! join attempts (certificate-less connections with a wrong token) at up to 1,000 a
//! second. Asserted: every update still reaches pos-1 (not starved), and the flood is
//! refused with the rate limit's named refusal. The figures are printed, not asserted.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]
// Figures for the report only: nothing is asserted on them.
#![allow(clippy::disallowed_types)]

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Proc, bin, free_port, http_get, log_tails, relay_cli, write};
use strata_node::{tls, transport};
use strata_protocol::codec;
use strata_protocol::wire::{JoinReply, JoinRequest};
use strata_relay::certs::Ca;

const NODES: [&str; 3] = ["center", "eu", "pos-1"];

/// Places every config map labelled `app: p1` on clusters labelled `role: pos`.
const PLACEMENT: &str = "apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: p1 }
spec:
  objects: [ { selector: { matchLabels: { app: p1 } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

fn start(dir: &Path, name: &str) -> Proc {
    let cfg = dir.join(format!("{name}.yaml")).display().to_string();
    let (program, verb) = if name == "pos-1" {
        ("agent", "run")
    } else {
        ("relay", "serve")
    };
    Proc::spawn(dir, name, &bin(program), &[verb, "--config", &cfg])
}

/// Objects pos-1 holds (its metrics on `port`).
fn objects(port: u16) -> Option<u64> {
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    http_get(port, "/metrics").lines().find_map(|l| {
        l.strip_prefix("strata_agent_objects{cluster=\"pos-1\"} ")?
            .trim()
            .parse::<f64>()
            .ok()
            .map(|v| v as u64)
    })
}

fn eventually(dir: &Path, what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..300 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let names: Vec<String> = NODES.iter().map(|n| (*n).to_owned()).collect();
    panic!(
        "timed out waiting until {what}\n{}",
        log_tails(dir, &names, 20)
    );
}

/// Applies config map `p1-{i}` at the root and waits until pos-1 holds `want` objects:
/// how long that took.
fn p1(dir: &Path, api: u16, metrics: u16, i: u32, want: u64) -> Duration {
    let file = dir.join("p1.yaml");
    write(
        &file,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: p1-{i}, namespace: default, labels: {{ app: p1 }} }}\ndata: {{ value: \"{i}\" }}\n"
        ),
    );
    let started = Instant::now();
    let (ok, _, err) = relay_cli(dir, api, &["apply", "-f", &file.display().to_string()]);
    assert!(ok, "{err}");
    for _ in 0..6000 {
        if objects(metrics).is_some_and(|n| n >= want) {
            return started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("p1-{i} never reached pos-1 (starved?)");
}

fn percentile(mut v: Vec<Duration>, p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

/// What the flood saw.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    rate_limited: AtomicU64,
    other_refusal: AtomicU64,
    failed: AtomicU64,
    skipped: AtomicU64,
}

/// One bogus join attempt: a certificate-less connection with a wrong token and a
/// request that is no CSR; the relay's answer.
async fn bogus_join(endpoint: &quinn::Endpoint, addr: SocketAddr) -> Result<JoinReply, String> {
    let conn = transport::connect(endpoint, addr, "eu")
        .await
        .map_err(|e| e.to_string())?;
    let request = JoinRequest {
        cluster: "intruder".into(),
        token: "not-a-token".into(),
        csr_pem: "bogus".into(),
    };
    let mut buf = Vec::new();
    codec::encode(&request, 64 * 1024, &mut buf).map_err(|e| e.to_string())?;
    let talk = async {
        let mut s = conn.open_uni().await.map_err(|e| e.to_string())?;
        s.write_all(&buf).await.map_err(|e| e.to_string())?;
        s.finish().map_err(|e| e.to_string())?;
        let mut r = conn.accept_uni().await.map_err(|e| e.to_string())?;
        r.read_to_end(64 * 1024).await.map_err(|e| e.to_string())
    };
    let bytes = tokio::time::timeout(Duration::from_secs(10), talk)
        .await
        .map_err(|_| "no answer in time".to_owned())??;
    conn.close(0u32.into(), b"done");
    match codec::decode::<JoinReply>(&bytes, 64 * 1024) {
        Ok(Some((reply, _))) => Ok(reply),
        _ => Err("an unreadable answer".into()),
    }
}

/// Sends bogus joins to `addr` at up to `per_second` (at most 1,024 in flight; a tick
/// with none free is skipped) until `stop`.
fn flood(
    addr: SocketAddr,
    ca: PathBuf,
    per_second: u32,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let endpoint = transport::client_endpoint(
                "127.0.0.1:0".parse().unwrap(),
                tls::join_client_config(&ca).unwrap(),
            )
            .unwrap();
            let slots = Arc::new(tokio::sync::Semaphore::new(1024));
            let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut tasks = tokio::task::JoinSet::new();
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    tally.skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                tally.sent.fetch_add(1, Ordering::Relaxed);
                let (endpoint, tally) = (endpoint.clone(), tally.clone());
                tasks.spawn(async move {
                    let counter = match bogus_join(&endpoint, addr).await {
                        Ok(JoinReply::Refused { reason, .. })
                            if reason.starts_with("too many join attempts") =>
                        {
                            &tally.rate_limited
                        }
                        Ok(_) => &tally.other_refusal,
                        Err(_) => &tally.failed,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    drop(permit);
                });
                while tasks.try_join_next().is_some() {}
            }
            tasks.shutdown().await;
        });
    })
}

#[test]
fn admitted_children_keep_converging_under_a_join_flood() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    bin("relay");
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    write(&dir.join("tokens"), "s3cret\n");
    for name in NODES {
        ca.issue(name).unwrap().write_to(dir).unwrap();
    }
    let join_ca = ca.issue_join_ca("eu").unwrap();
    write(&dir.join("eu.ca.crt"), &join_ca.cert_pem());
    write(&dir.join("eu.ca.key"), &join_ca.key_pem());
    write(&dir.join("eu.tokens"), "the-only-token\n");
    let (center, eu, api, metrics) = (free_port(), free_port(), free_port(), free_port());
    let tls =
        |n: &str| format!("tls: {{ cert: {n}.crt, key: {n}.key, ca: ca.crt }}\ndata: data/{n}\n");
    write(
        &dir.join("center.yaml"),
        &format!(
            "node: center\nlisten: 127.0.0.1:{center}\nchildren: [eu]\n{}api: {{ listen: 127.0.0.1:{api}, tokens: tokens }}\n",
            tls("center")
        ),
    );
    write(
        &dir.join("eu.yaml"),
        &format!(
            "node: eu\nlisten: 127.0.0.1:{eu}\nparent: {{ name: center, address: 127.0.0.1:{center} }}\nchildren: [pos-1]\n{}join: {{ tokens: eu.tokens, ca_cert: eu.ca.crt, ca_key: eu.ca.key }}\n",
            tls("eu")
        ),
    );
    write(
        &dir.join("pos-1.yaml"),
        &format!(
            "cluster: pos-1\nlabels: {{ role: pos }}\nparent: {{ name: eu, address: 127.0.0.1:{eu} }}\n{}simulated: {{ ready_delay_ms: 10 }}\nmetrics: 127.0.0.1:{metrics}\n",
            tls("pos-1")
        ),
    );
    let mut procs: Vec<Proc> = NODES.iter().map(|n| start(dir, n)).collect();
    let placement = dir.join("placement.yaml");
    write(&placement, PLACEMENT);
    eventually(dir, "the root takes the placement", || {
        relay_cli(dir, api, &["apply", "-f", &placement.display().to_string()]).0
    });
    eventually(dir, "pos-1 serves its metrics", || {
        objects(metrics).is_some()
    });
    let base = objects(metrics).unwrap();

    const ROUNDS: u32 = 10;
    let idle: Vec<Duration> = (0..ROUNDS)
        .map(|i| p1(dir, api, metrics, i, base + u64::from(i) + 1))
        .collect();

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = flood(
        ([127, 0, 0, 1], eu).into(),
        dir.join("ca.crt"),
        1000,
        tally.clone(),
        stop.clone(),
    );
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let sent_before = tally.sent.load(Ordering::Relaxed);
    let busy: Vec<Duration> = (ROUNDS..2 * ROUNDS)
        .map(|i| p1(dir, api, metrics, i, base + u64::from(i) + 1))
        .collect();
    let rate =
        (tally.sent.load(Ordering::Relaxed) - sent_before) as f64 / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    flooding.join().unwrap();

    let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "figure: P1 (apply at the root -> config map held by pos-1, two links), {ROUNDS} rounds: idle p50 {:?} max {:?}; under {rate:.0} bogus joins/s at eu p50 {:?} max {:?}",
        percentile(idle.clone(), 50),
        percentile(idle, 100),
        percentile(busy.clone(), 50),
        percentile(busy, 100),
    );
    println!(
        "flood: {} attempts sent, {} refused by the rate limit, {} refused otherwise, {} failed, {} ticks skipped (1,024 in flight)",
        count(&tally.sent),
        count(&tally.rate_limited),
        count(&tally.other_refusal),
        count(&tally.failed),
        count(&tally.skipped),
    );
    assert!(
        count(&tally.rate_limited) > 0,
        "no bogus join was refused by the rate limit"
    );
    // The one real token was never used: the flood admitted no one.
    assert!(
        !std::fs::read_to_string(dir.join("eu.log"))
            .unwrap_or_default()
            .contains("child connected child=intruder"),
    );

    for p in procs.drain(..).rev() {
        let name = p.name.clone();
        let status = p.terminate();
        assert!(status.success(), "{name} exited with {status} on SIGTERM");
    }
}
