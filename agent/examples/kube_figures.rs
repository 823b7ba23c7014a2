//! Figures for the Kubernetes backend against `FakeApiServer` (a FAKE API server over
//! real HTTP on loopback, run as a child process so its memory is not counted).
//!
//! `cargo build --release -p strata-agent --bin agent --example kube_figures &&
//!  target/release/examples/kube_figures [OBJECTS]`
//!
//! Runs the real `agent` binary (kubernetes backend, parent unreachable) and prints: its
//! RSS idle and with OBJECTS (default 500) managed ConfigMaps restored from its sled
//! store; the API requests (and writes) of a restart that finds every object unchanged;
//! and, in this process, the time from handing an object to the backend to its applied
//! status (which includes the PATCH round trip), over 100 objects.

#![allow(clippy::unwrap_used)] // a figures program

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use strata_agent::backend::ClusterBackend;
use strata_agent::kubernetes::{self, Connect, KubeCluster, KubeOptions};
use strata_node::clock::Clock;
use strata_node::store::{Batch, SledStore, Store};
use strata_protocol::model::{
    ContentHash, Health, LogId, Object, ObjectKey, ObjectKeyParts, ObjectMeta, Position, Revision,
    Space,
};
use strata_protocol::sync::ObjectLog;
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::Change;
use strata_relay::certs::Ca;
use strata_test_tools::fake_apiserver;

fn configmap(i: usize, rev: u64) -> Object {
    let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i}"), "namespace": "pos"},
        "data": {"config": "x".repeat(200), "index": i.to_string()}});
    let body = serde_json::to_vec(&body).unwrap();
    let mut hash = [0u8; 32];
    for (j, b) in body.iter().enumerate() {
        hash[j % 32] = hash[j % 32].wrapping_mul(31).wrapping_add(*b);
    }
    Object {
        meta: std::sync::Arc::new(ObjectMeta {
            key: ObjectKey::new(ObjectKeyParts {
                space: Space::default_space(),
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("pos".into()),
                name: format!("cm-{i}"),
            }),
            labels: BTreeMap::new(),
        }),
        revision: Revision(rev),
        hash: ContentHash(hash),
        body: body.into(),
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

async fn fake_requests(port: u16) -> (u64, u64) {
    let client = kube::Client::try_from(kube::Config::new(
        format!("http://127.0.0.1:{port}").parse().unwrap(),
    ))
    .unwrap();
    let req = hyper::Request::get("/fake/requests")
        .body(Vec::new())
        .unwrap();
    let v: serde_json::Value = client.request(req).await.unwrap();
    (v["total"].as_u64().unwrap(), v["writes"].as_u64().unwrap())
}

fn start_agent(dir: &Path) -> Child {
    let exe = std::env::current_exe().unwrap();
    let agent = exe.parent().unwrap().parent().unwrap().join("agent");
    Command::new(agent)
        .args(["run", "--config"])
        .arg(dir.join("agent.yaml"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until the fake's request count has not moved for a second (at most 120 s).
async fn quiet(port: u16) -> (u64, u64) {
    let mut last = fake_requests(port).await;
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = fake_requests(port).await;
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

#[tokio::main]
async fn main() {
    if std::env::args().nth(1).as_deref() == Some("serve") {
        let fake = fake_apiserver::FakeApiServer::start().await;
        println!("{}", fake.addr.port());
        // Serve until the parent closes our stdin.
        let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
        return;
    }
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500);
    let mut server = Command::new(std::env::current_exe().unwrap())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             users:\n- name: agent\n  user: {{}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: agent}}\ncurrent-context: fake\n"
        ),
    )
    .unwrap();
    let ca = Ca::generate("figures").unwrap();
    ca.issue("leaf").unwrap().write_to(d).unwrap();
    std::fs::write(d.join("ca.crt"), ca.cert_pem()).unwrap();
    // The parent is never reachable (nothing listens on UDP port 9 of loopback).
    std::fs::write(
        d.join("agent.yaml"),
        "cluster: leaf\nparent: { name: site, address: 127.0.0.1:9 }\ntls: { cert: leaf.crt, key: leaf.key, ca: ca.crt }\n\
         data: data\nkubernetes: { kubeconfig: kubeconfig }\n",
    )
    .unwrap();

    let mut agent = start_agent(d);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = rss_kib(agent.id());
    agent.kill().unwrap();
    agent.wait().unwrap();

    {
        let store = SledStore::open(&d.join("data")).unwrap();
        let mut log = ObjectLog::new(LogId(1));
        for i in 0..n {
            let p = Position(i as u64 + 1);
            log.stage(p, Change::Upsert(configmap(i, 1))).unwrap();
            log.commit(p);
        }
        store.commit(&Batch::log_changes(&mut log)).unwrap();
    }
    let before = fake_requests(port).await;
    let mut agent = start_agent(d);
    let after = quiet(port).await;
    let full = rss_kib(agent.id());
    agent.kill().unwrap();
    agent.wait().unwrap();
    let mut agent = start_agent(d);
    let restart = quiet(port).await;
    agent.kill().unwrap();
    agent.wait().unwrap();

    println!(
        "agent RSS idle (no objects, parent unreachable): {} KiB",
        idle
    );
    println!(
        "agent RSS with {n} managed ConfigMaps: {} KiB (first start: {} requests, {} writes)",
        full,
        after.0 - before.0,
        after.1 - before.1
    );
    println!(
        "restart with {n} unchanged objects: {} API requests, {} writes",
        restart.0 - after.0,
        restart.1 - after.1
    );

    let client = kubernetes::connect(&Connect::kubeconfig(d.join("kubeconfig")))
        .await
        .unwrap();
    let mut backend = KubeCluster::start(client, KubeOptions::default(), Clock::start());
    let t0 = Instant::from_origin(Duration::ZERO);
    let mut times = Vec::new();
    for i in 0..100 {
        let o = configmap(100_000 + i, 1);
        let start = tokio::time::Instant::now();
        backend.apply(t0, UnixMillis(0), &o).unwrap();
        'wait: for _ in 0..5000 {
            for (k, s) in backend.poll_status(t0, UnixMillis(0)) {
                if k == *o.key() && s.health == Health::Available {
                    break 'wait;
                }
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        times.push(start.elapsed());
    }
    times.sort();
    println!(
        "object handed to the backend -> applied status (incl. PATCH round trip), 100 objects: p50 {:?}, p90 {:?}, max {:?} (polled every 0.2 ms)",
        times[50], times[90], times[99]
    );
    drop(server.stdin.take());
    server.wait().unwrap();
}
