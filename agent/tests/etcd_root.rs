//! A root of two replicas keeping its state in etcd (three members on loopback):
//! one writes, the other stands by; `kill -9` of the writer in the middle of a stream of
//! applies loses nothing that was acknowledged, and the standby takes the writes over.
//! Prints the time from the kill to the next acknowledged apply (a figure, not asserted).

#![allow(clippy::unwrap_used)]
#![allow(clippy::disallowed_methods)] // polls processes from a synchronous test

mod common;
#[path = "../../relay/node/tests/etcd_cluster/mod.rs"]
mod etcd_cluster;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{bin, free_port, http_get, relay_cli, write};
use etcd_cluster::EtcdCluster;
use strata_relay::certs::Ca;

/// A root replica, killed (SIGKILL) when dropped.
struct Replica {
    child: Child,
    api_port: u16,
    ops_port: u16,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn replica(dir: &Path, name: &str, endpoints: &[String]) -> Replica {
    let (port, api_port, ops_port) = (free_port(), free_port(), free_port());
    let config = dir.join(format!("{name}.yaml"));
    write(
        &config,
        &format!(
            "node: center\nlisten: 127.0.0.1:{port}\ntls: {{ cert: center.crt, key: center.key, ca: ca.crt }}\n\
             data: data/{name}\napi: {{ listen: 127.0.0.1:{api_port}, tokens: tokens }}\nmetrics: 127.0.0.1:{ops_port}\n\
             store: {{ etcd: {{ endpoints: [{}], prefix: /strata/test, lease_ttl_s: 3 }} }}\n",
            endpoints.join(", ")
        ),
    );
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = Command::new(bin("relay"))
        .args([
            "--log",
            "info",
            "serve",
            "--config",
            config.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Replica {
        child,
        api_port,
        ops_port,
    }
}

fn config_map(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: cm-{i:03}, namespace: default }}\ndata: {{ n: \"{i}\" }}\n"
    )
}

/// Applies object `i` at `port`; true once acknowledged.
fn apply(dir: &Path, port: u16, i: usize) -> bool {
    let file = dir.join(format!("cm-{i}.yaml"));
    write(&file, &config_map(i));
    relay_cli(dir, port, &["apply", "-f", file.to_str().unwrap()]).0
}

fn logs(dir: &Path) -> String {
    ["a", "b"]
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default();
            format!("--- {n}\n{text}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn kill_9_of_the_writing_replica_loses_nothing_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut etcd = EtcdCluster::start(dir);
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    write(&dir.join("tokens"), "s3cret\n");
    ca.issue("center").unwrap().write_to(dir).unwrap();

    // Replica a starts first and writes; b stands by on the lease.
    let mut a = replica(dir, "a", &etcd.endpoints);
    let mut first = None;
    for _ in 0..300 {
        if apply(dir, a.api_port, 0) {
            first = Some(());
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        first.is_some(),
        "replica a never took an apply\n{}",
        logs(dir)
    );
    let b = replica(dir, "b", &etcd.endpoints);
    // The standby is alive and says why it is not ready.
    let mut probes = (String::new(), String::new());
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", b.ops_port)).is_ok() {
            probes = (
                http_get(b.ops_port, "/healthz"),
                http_get(b.ops_port, "/readyz"),
            );
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(probes.0.starts_with("HTTP/1.1 200"), "{probes:?}");
    assert!(
        probes.1.starts_with("HTTP/1.1 503")
            && probes
                .1
                .contains("not ready: standby: another root replica holds the etcd writer lease"),
        "{probes:?}"
    );

    // A stream of applies, each sent until one replica acknowledges it; a is killed
    // with SIGKILL after the tenth, and one etcd member after the twentieth.
    let mut acknowledged = vec![0];
    let mut failover = None;
    let total = 30;
    for i in 1..total {
        if i == 10 {
            a.child.kill().unwrap();
            a.child.wait().unwrap();
            let killed = tokio::time::Instant::now();
            let mut tries = 0;
            while !apply(dir, b.api_port, i) {
                tries += 1;
                assert!(tries < 600, "replica b never took over\n{}", logs(dir));
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            failover = Some(killed.elapsed());
            acknowledged.push(i);
            continue;
        }
        if i == 20 {
            etcd.kill(0);
        }
        let port = if i < 10 { a.api_port } else { b.api_port };
        assert!(apply(dir, port, i), "apply {i} refused\n{}", logs(dir));
        acknowledged.push(i);
    }
    eprintln!(
        "figure: kill -9 of the writing root replica to the next acknowledged apply: {:.2} s \
         (lease TTL 3 s)",
        failover.unwrap().as_secs_f64()
    );

    // Every acknowledged object is there, at the replica that writes now.
    let (ok, out, err) = relay_cli(dir, b.api_port, &["get", "configmap"]);
    assert!(ok, "{err}");
    let missing: Vec<usize> = acknowledged
        .iter()
        .copied()
        .filter(|i| !out.contains(&format!("cm-{i:03}")))
        .collect();
    assert_eq!(missing, Vec::<usize>::new(), "lost after failover:\n{out}");
    assert_eq!(acknowledged.len(), total);
    // The replica that took over is ready.
    let ready = http_get(b.ops_port, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
}
