//! Issue 50, as processes on loopback (`relay up`): a LoadBalancer Service placed on a
//! cluster shows up in `kubectl get serviceendpoints` (and `-o yaml`, and a watch sees
//! it change) and in DNS at the root and at its region's relay; then its placement
//! moves (a new label selector) while DNS at the root is polled every ~100 ms (each poll also reads the
//! ServiceEndpoints with kubectl, so about every 170 ms): never a
//! window with no address, never an address whose cluster no longer holds the app (as
//! the root sees the copies: the clusters reporting its endpoints), the new address
//! in, the old one out. It prints the longest window with no address and the longest
//! stale window (the figures of the closing note).

#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::disallowed_types
)]

use crate::common;
use crate::kube_fleet::{self, Fleet};

use std::net::{IpAddr, UdpSocket};
use std::process::Stdio;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use serde_json::Value;
use strata_agent::simulated::simulated_address;
use strata_protocol::model::Cluster;

fn topology(root_dns: u16, eu_dns: u16) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: {{ name: dns }}
spec:
  root:
    name: center
    dns: {{ listen: 127.0.0.1:{root_dns}, zone: apps.test, ttlSeconds: 1, drainGraceSeconds: 1 }}
  relays:
    - name: eu
      parent: center
      labels: {{ region: eu }}
      dns: {{ listen: 127.0.0.1:{eu_dns}, zone: apps.test, ttlSeconds: 1 }}
    - {{ name: us, parent: center, labels: {{ region: us }} }}
  clusters:
    - {{ name: eu-1, parent: eu, labels: {{ slot: a }} }}
    - {{ name: us-1, parent: us, labels: {{ slot: b }} }}
"
    )
}

const SHOP: &str = "apiVersion: v1
kind: Namespace
metadata: { name: shop }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: web, namespace: shop, labels: { app: web } }
spec:
  replicas: 1
  selector: { matchLabels: { app: web } }
  template:
    metadata: { labels: { app: web } }
    spec: { containers: [ { name: web, image: nginx } ] }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { type: LoadBalancer, selector: { app: web }, ports: [ { name: http, port: 80 } ] }
";

fn placement(slot: &str) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: web }}
spec:
  objects: [ {{ namespaces: [shop], selector: {{ matchLabels: {{ app: web }} }} }} ]
  clusters: {{ selector: {{ matchLabels: {{ slot: {slot} }} }} }}
"
    )
}

/// The address of a cluster's simulated load balancer.
fn address(cluster: &str) -> IpAddr {
    let c = Cluster {
        name: cluster.to_owned(),
        labels: Default::default(),
        properties: Default::default(),
        path: Vec::new(),
    };
    simulated_address(&c).parse().unwrap()
}

/// The A records of `web.shop.apps.test` at the DNS server on `port` (`None`: no
/// answer within 500 ms).
fn resolve(port: u16) -> Option<Vec<IpAddr>> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut q = Message::query();
    q.metadata.id = 4242;
    q.add_query(Query::query(
        Name::from_ascii("web.shop.apps.test.").unwrap(),
        RecordType::A,
    ));
    socket
        .send_to(&q.to_vec().unwrap(), ("127.0.0.1", port))
        .ok()?;
    let mut buf = [0u8; 1500];
    let n = socket.recv(&mut buf).ok()?;
    let m = Message::from_vec(&buf[..n]).ok()?;
    assert!(m.metadata.authoritative, "{m:?}");
    Some(
        m.answers
            .iter()
            .filter_map(|r| r.data.to_string().parse().ok())
            .collect(),
    )
}

/// The same question over TCP (two-byte length prefix): the records' addresses.
fn resolve_tcp(port: u16) -> Vec<IpAddr> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut q = Message::query();
    q.add_query(Query::query(
        Name::from_ascii("web.shop.apps.test.").unwrap(),
        RecordType::A,
    ));
    let bytes = q.to_vec().unwrap();
    let len = u16::try_from(bytes.len()).unwrap().to_be_bytes();
    stream.write_all(&len).unwrap();
    stream.write_all(&bytes).unwrap();
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).unwrap();
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut reply).unwrap();
    let m = Message::from_vec(&reply).unwrap();
    m.answers
        .iter()
        .filter_map(|r| r.data.to_string().parse().ok())
        .collect()
}

/// The root's ServiceEndpoints in `shop`, as kubectl reads them.
fn endpoints(f: &Fleet) -> Vec<Value> {
    let out = f.ok(
        "kubectl",
        &["get", "serviceendpoints", "-n", "shop", "-o", "json"],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    v["items"].as_array().cloned().unwrap_or_default()
}

/// The clusters the root's ServiceEndpoints list, placed or leaving (those whose agent
/// reports the copy), and those it serves.
fn listed(items: &[Value]) -> (Vec<String>, Vec<String>) {
    let mut all = Vec::new();
    let mut served = Vec::new();
    let of = |i: &Value, field: &str| i[field].as_array().cloned().unwrap_or_default();
    for c in items
        .iter()
        .flat_map(|i| of(i, "clusters").into_iter().chain(of(i, "leaving")))
    {
        let name = c["name"].as_str().unwrap_or_default().to_owned();
        if c["served"] == Value::Bool(true) {
            served.push(name.clone());
        }
        all.push(name);
    }
    (all, served)
}

#[test]
fn dns_at_every_tier_follows_a_move() {
    let tmp = tempfile::tempdir().unwrap();
    let (root_dns, eu_dns) = (common::free_port(), common::free_port());
    let f = kube_fleet::start(
        tmp.path(),
        &topology(root_dns, eu_dns),
        "admin-token-0123456789\n",
        true,
    );
    f.eventually("both clusters report to the root", |f| {
        let out = f.run("kubectl", &["get", "clusters", "-o", "name"]);
        String::from_utf8_lossy(&out.stdout).lines().count() == 2
    });
    let (eu_ip, us_ip) = (address("eu-1"), address("us-1"));
    let shop = f.write("shop.yaml", SHOP);
    f.ok("kubectl", &["apply", "-f", &shop]);
    let on_a = f.write("on-a.yaml", &placement("a"));
    f.ok("kubectl", &["apply", "-f", &on_a]);
    f.eventually("the root serves eu-1's address", |_| {
        resolve(root_dns) == Some(vec![eu_ip])
    });
    assert_eq!(
        resolve(eu_dns),
        Some(vec![eu_ip]),
        "the region's relay answers too"
    );
    assert_eq!(resolve_tcp(root_dns), [eu_ip], "over TCP too");
    let items = endpoints(&f);
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["metadata"]["name"], "service.web.web");
    assert_eq!(
        listed(&items),
        (vec!["eu-1".to_owned()], vec!["eu-1".to_owned()])
    );
    let table = f.ok("kubectl", &["get", "serviceendpoints", "-n", "shop"]);
    assert!(
        table.contains("SERVED") && table.contains(&eu_ip.to_string()),
        "{table}"
    );
    let yaml = f.ok(
        "kubectl",
        &[
            "get",
            "serviceendpoints",
            "service.web.web",
            "-n",
            "shop",
            "-o",
            "yaml",
        ],
    );
    assert!(
        yaml.contains("kind: ServiceEndpoints") && yaml.contains("port: 80"),
        "{yaml}"
    );

    // A watch that sees the move.
    let mut watch = f
        .command("kubectl")
        .args([
            "get",
            "serviceendpoints",
            "-n",
            "shop",
            "--watch",
            "-o",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let on_b = f.write("on-b.yaml", &placement("b"));
    f.ok("kubectl", &["apply", "-f", &on_b]);
    let started = Instant::now();
    let (mut empty, mut longest_empty) = (Duration::ZERO, Duration::ZERO);
    let (mut stale, mut longest_stale) = (Duration::ZERO, Duration::ZERO);
    let mut last = Instant::now();
    let mut polls = 0;
    let mut saw_new = false;
    let mut old_gone_from_dns = None;
    // When the old copy was last seen after its address had left DNS.
    let mut copy_outlived_dns = None;
    for _ in 0..600 {
        std::thread::sleep(Duration::from_millis(100));
        let answer = resolve(root_dns).unwrap_or_default();
        let (copies, _) = listed(&endpoints(&f));
        let now = Instant::now();
        let step = now - last;
        last = now;
        polls += 1;
        empty = if answer.is_empty() {
            empty + step
        } else {
            Duration::ZERO
        };
        longest_empty = longest_empty.max(empty);
        let gone = |ip: &IpAddr, c: &str| answer.contains(ip) && !copies.iter().any(|x| x == c);
        stale = if gone(&eu_ip, "eu-1") || gone(&us_ip, "us-1") {
            stale + step
        } else {
            Duration::ZERO
        };
        longest_stale = longest_stale.max(stale);
        saw_new |= answer.contains(&us_ip);
        if saw_new && old_gone_from_dns.is_none() && !answer.contains(&eu_ip) {
            old_gone_from_dns = Some(now - started);
        }
        if old_gone_from_dns.is_some() && copies.iter().any(|c| c == "eu-1") {
            copy_outlived_dns = Some(now - started);
        }
        if answer == [us_ip] && copies == ["us-1"] {
            break;
        }
    }
    watch.kill().unwrap();
    let out = watch.wait_with_output().unwrap();
    let events = String::from_utf8_lossy(&out.stdout);
    println!(
        "dns during the move ({polls} polls, {:?}): longest window with no address {longest_empty:?}, longest with a stale address {longest_stale:?}, old address out after {old_gone_from_dns:?}, its copy still there at {copy_outlived_dns:?}",
        started.elapsed()
    );
    assert_eq!(
        resolve(root_dns),
        Some(vec![us_ip]),
        "the new address, alone"
    );
    assert_eq!(
        listed(&endpoints(&f)),
        (vec!["us-1".to_owned()], vec!["us-1".to_owned()])
    );
    assert_eq!(
        resolve(eu_dns),
        Some(vec![]),
        "eu's relay knows the name is gone from its subtree"
    );
    assert_eq!(longest_empty, Duration::ZERO, "never an empty answer");
    assert_eq!(
        longest_stale,
        Duration::ZERO,
        "never an address whose copy is gone"
    );
    assert!(events.contains("us-1"), "the watch saw the move: {events}");
    assert!(
        copy_outlived_dns.is_some(),
        "the old copy outlives its address in DNS (the drain)"
    );
}
