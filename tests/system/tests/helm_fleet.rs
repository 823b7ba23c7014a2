//! From a topology file to a fleet through the Helm chart, the operator's path of
//! deploy/README.md as one test: `relay topology certs` and `relay topology render
//! --helm` write each node's Helm values and Secret manifest; each node is installed
//! from them (`helm template` with its values, its Secret applied, the pod's files laid
//! out and its command started from them: `helm_pod`), as processes on loopback.
//!
//! Three tiers: the root `center`, the relay `eu-west`, and below it two "real"
//! clusters (fake API servers over HTTP, reached through kubeconfigs that render puts
//! in their agents' Secrets) and a simulated one. Covers, with the root never restarted:
//! - every cluster reports at the root, reachable, each with the backend its
//!   configuration names; an app applied at the root reaches both fake API servers;
//!   every pod's readiness probe (`/readyz` on the port its values give the chart)
//!   answers 200;
//! - a user added with `relay token create --role view` (the Secret rendered again and
//!   applied) reads the fleet with kubectl through a kubeconfig whose server is a DNS
//!   name (`relay kubeconfig --server localhost:PORT`), may not write, and once `relay
//!   token revoke`d (applied the same way) gets 401;
//! - a site behind tinyproxy whose UDP to eu-west is dropped joins with a token
//!   `relay join-token create --parent eu-west` made while eu-west runs, installed
//!   through the chart with its proxy values and the default transport (`auto`): the
//!   join and then the link fall back to TLS/TCP through the proxy; it is listed at the
//!   root;
//! - a real cluster's API server that goes away shows as unreachable at the root with
//!   the reason, the other clusters as they were, and reachable again once it is back.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use strata_test_tools::fake_apiserver::FakeApiServer;
use strata_topology::files;

use crate::common::proxies::{self, ProxyProc, UdpGate};
use crate::common::{
    POS_APP, Proc, balancers, bin, free_port, kube_clients, relay_cli, try_http_get, write,
};
use crate::helm_pod::{apply_secret, install, install_rendered, port};
use crate::real_clusters::{
    assert_api_server_unreachable, cluster, eventually, inventory, kubeconfig,
};

const NODES: &[&str] = &["center", "eu-west", "lab-1", "lab-2", "sim-1"];
/// The site that joins with a token.
const JOINED: &str = "shop-7";
/// Every process's log, for the failures' messages.
const LOGS: &[&str] = &["center", "eu-west", "lab-1", "lab-2", "sim-1", JOINED];

/// Runs `relay ARGS`, requiring success; its standard output.
fn relay(args: &[&str]) -> String {
    let out = Command::new(bin("relay")).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "relay {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The fleet as the operator left it: the directory `relay topology certs` and `render`
/// wrote (`DIR`), the topology file, the root's API port and the running pods.
struct Fleet {
    rt: tokio::runtime::Runtime,
    dir: PathBuf,
    topology: String,
    api_port: u16,
    procs: Vec<Proc>,
}

impl Fleet {
    /// `relay topology render --helm FILE -o DIR` again (after a tokens file changed),
    /// then `kubectl apply -f DIR/nodes/NODE/secret.yaml`: the running pod sees its
    /// Secret's files change.
    fn render_and_apply_secret(&self, node: &str) {
        let out = self.dir.display().to_string();
        relay(&["topology", "render", "--helm", &self.topology, "-o", &out]);
        apply_secret(&self.dir, node);
    }

    /// The root's inventory (`GET /clusters` as `ops`).
    fn inventory(&self) -> Vec<serde_json::Value> {
        inventory(&self.rt, &self.dir, self.api_port)
    }

    fn eventually(&self, what: &str, check: impl FnMut() -> bool) {
        eventually(what, &self.dir, LOGS, check);
    }

    /// How many lines of `node`'s log say it read `file` again.
    fn reloads(&self, node: &str, file: &str) -> usize {
        std::fs::read_to_string(self.dir.join(format!("{node}.log")))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("tokens-reload") && l.contains(file))
            .count()
    }

    /// Every pod still runs the process it was installed with: nothing restarted.
    fn assert_none_restarted(&mut self) {
        for p in &mut self.procs {
            assert!(
                p.child.try_wait().unwrap().is_none(),
                "{} exited or restarted",
                p.name
            );
        }
    }
}

/// `kubectl --kubeconfig KC ARGS`, its discovery cache in the test's directory.
fn kubectl(dir: &Path, kc: &Path, args: &[&str]) -> Output {
    Command::new(kube_clients().join("kubectl"))
        .arg("--kubeconfig")
        .arg(kc)
        .arg("--cache-dir")
        .arg(dir.join("kube-cache"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A user added while the root runs reads the fleet with kubectl through a kubeconfig
/// whose server is `localhost:PORT`, may not write (role view), and is refused once
/// revoked; the root reads its tokens again each time, no restart.
fn a_user_comes_and_goes(fleet: &mut Fleet) {
    let dir = fleet.dir.clone();
    let tokens = files::api_tokens(&dir).display().to_string();
    let reloads = fleet.reloads("center", "api.tokens");
    let token = relay(&[
        "token", "create", "viewer", "--role", "view", "--tokens", &tokens,
    ]);
    assert!(!token.trim().is_empty(), "no token printed");
    fleet.render_and_apply_secret("center");

    let server = format!("localhost:{}", fleet.api_port);
    let ca = files::ca_cert(&dir).display().to_string();
    let kc = dir.join("viewer.kubeconfig");
    let written = relay(&[
        "kubeconfig",
        "--server",
        &server,
        "--ca",
        &ca,
        "--user",
        "viewer",
        "--tokens",
        &tokens,
    ]);
    assert!(
        written.contains(&format!("    server: https://{server}\n"))
            && written.contains(token.trim()),
        "{written}"
    );
    write(&kc, &written);
    fleet.eventually(
        "kubectl lists the clusters with the new user's token",
        || {
            let o = kubectl(&dir, &kc, &["get", "clusters.strata.dev", "-o", "name"]);
            o.status.success()
                && ["lab-1", "lab-2", "sim-1"]
                    .iter()
                    .all(|c| text(&o).contains(c))
        },
    );
    let o = kubectl(&dir, &kc, &["create", "namespace", "by-viewer"]);
    assert!(
        !o.status.success() && text(&o).contains("Forbidden"),
        "a view token wrote: {}",
        text(&o)
    );
    assert!(fleet.reloads("center", "api.tokens") > reloads);

    relay(&["token", "revoke", "viewer", "--tokens", &tokens]);
    fleet.render_and_apply_secret("center");
    fleet.eventually("kubectl is refused the revoked token", || {
        let o = kubectl(&dir, &kc, &["get", "clusters.strata.dev", "-o", "name"]);
        // kubectl's words for a 401.
        !o.status.success() && text(&o).contains("You must be logged in to the server")
    });
    let (ok, _, err) = relay_cli(&dir, fleet.api_port, &["clusters"]);
    assert!(ok, "the other users' tokens stay: {err}");
    fleet.assert_none_restarted();
}

/// The network of a site that reaches eu-west through tinyproxy and whose UDP is
/// dropped on the way: eu-west as the site sees it is a port where TCP passes (haproxy,
/// in TCP mode, to eu-west) and UDP goes into a shut [`UdpGate`]. Kept as long as the
/// site runs.
struct SiteNetwork {
    /// The site's HTTP CONNECT proxy.
    proxy: ProxyProc,
    /// eu-west's address from the site.
    eu_west: String,
    _tcp: ProxyProc,
    _udp: UdpGate,
}

impl SiteNetwork {
    fn start(fleet: &Fleet) -> SiteNetwork {
        let eu_west: SocketAddr = ([127, 0, 0, 1], port(&fleet.dir, "eu-west", "quic")).into();
        let front = free_port();
        let proxy = fleet
            .rt
            .block_on(proxies::tinyproxy(&fleet.dir.join("proxy"), 600));
        let tcp = fleet
            .rt
            .block_on(balancers::haproxy(&fleet.dir, front, &[eu_west]));
        let udp = fleet
            .rt
            .block_on(UdpGate::new(([127, 0, 0, 1], front).into(), eu_west, false));
        SiteNetwork {
            proxy,
            eu_west: format!("127.0.0.1:{front}"),
            _tcp: tcp,
            _udp: udp,
        }
    }
}

/// A site behind tinyproxy whose UDP is dropped joins eu-west with a token made while
/// eu-west runs: installed through the chart from values written by hand
/// (deploy/GUIDES.md, "Join an agent with a token"), its proxy in the chart's
/// `proxy.httpsProxy`, its transport the default (`auto`: QUIC for a few seconds, then
/// TLS/TCP). Returns the site's network, which it needs from then on.
fn a_site_joins_through_a_proxy(fleet: &mut Fleet) -> SiteNetwork {
    let dir = fleet.dir.clone();
    let net = SiteNetwork::start(fleet);
    let out = dir.display().to_string();
    let reloads = fleet.reloads("eu-west", "join.tokens");
    let token = relay(&[
        "join-token",
        "create",
        "--parent",
        "eu-west",
        "--uses",
        "1",
        "--expires",
        "1h",
        "--dir",
        &out,
    ]);
    fleet.render_and_apply_secret("eu-west");
    fleet.eventually("eu-west reads its join tokens again", || {
        fleet.reloads("eu-west", "join.tokens") > reloads
    });

    let metrics = free_port();
    let ca = std::fs::read_to_string(files::ca_cert(&dir)).unwrap();
    let values = dir.join(format!("{JOINED}.values.yaml"));
    write(
        &values,
        &format!(
            "role: agent
node: {JOINED}
secretFiles:
  ca.crt: {ca}
ports:
  metrics: {metrics}
proxy:
  httpsProxy: {proxy}
config: |
  cluster: {JOINED}
  labels: {{ role: pos }}
  parent: {{ name: eu-west, address: \"{eu_west}\" }}
  join: {{ token: \"{token}\", ca: ../secret/ca.crt }}
  data: ../state/data
  metrics: 127.0.0.1:{metrics}
  simulated: {{}}
",
            ca = serde_json::to_string(&ca).unwrap(),
            proxy = net.proxy.url(None),
            eu_west = net.eu_west,
            token = token.trim(),
        ),
    );
    fleet.procs.push(install(&dir, JOINED, &values, None));
    fleet.eventually("the root lists the joined site, reachable", || {
        cluster(&fleet.inventory(), JOINED).is_some_and(|c| c["reachable"] == true)
    });
    let (ok, table, err) = relay_cli(&dir, fleet.api_port, &["clusters"]);
    assert!(ok, "{err}");
    assert!(
        table
            .lines()
            .any(|l| l.contains("center/eu-west") && l.contains(JOINED)),
        "{table}"
    );
    let data = dir.join("pods").join(JOINED).join("etc/strata/state/data");
    assert!(
        data.join(format!("{JOINED}.crt")).exists(),
        "no certificate kept"
    );
    // Two tunnels to eu-west through the proxy at least: the join's, then the link's.
    let tunnels = net
        .proxy
        .log_text()
        .matches(&format!("CONNECT {}", net.eu_west))
        .count();
    assert!(tunnels >= 2, "{tunnels} tunnels:\n{}", net.proxy.log_text());
    let log = std::fs::read_to_string(dir.join("eu-west.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("child connected") && l.contains(JOINED) && l.contains("tcp")),
        "eu-west admitted {JOINED} over TLS/TCP:\n{log}"
    );
    fleet.assert_none_restarted();
    net
}

#[test]
fn the_operators_path_from_a_topology_file_to_a_fleet_through_the_chart() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let [lab_1, lab_2] = [
        rt.block_on(FakeApiServer::start()),
        rt.block_on(FakeApiServer::start()),
    ];
    let kubeconfigs: Vec<PathBuf> = (1..=2)
        .map(|i| dir.join(format!("lab-{i}.kubeconfig")))
        .collect();
    for (path, fake) in kubeconfigs.iter().zip([&lab_1, &lab_2]) {
        write(path, &kubeconfig(fake));
    }
    let topology = dir.join("fleet.yaml");
    write(
        &topology,
        &format!(
            "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: {{ name: fleet }}
spec:
  root: {{ name: center, listen: 127.0.0.1:0, api: 127.0.0.1:0, metrics: 127.0.0.1:0 }}
  relays:
    - {{ name: eu-west, parent: center, listen: 127.0.0.1:0, metrics: 127.0.0.1:0, labels: {{ region: eu-west }} }}
  clusters:
    - {{ name: lab-1, parent: eu-west, labels: {{ role: pos }}, metrics: 127.0.0.1:0, kubernetes: {{ kubeconfig: {}, context: lab }} }}
    - {{ name: lab-2, parent: eu-west, labels: {{ role: pos }}, metrics: 127.0.0.1:0, kubernetes: {{ kubeconfig: {}, context: lab }} }}
    - {{ name: sim-1, parent: eu-west, labels: {{ role: pos }}, metrics: 127.0.0.1:0, simulated: {{ readyDelayMs: 100 }} }}
  joining:
    - {{ parent: eu-west, tokens: 1 }}
",
            kubeconfigs[0].display(),
            kubeconfigs[1].display()
        ),
    );
    write(&files::api_tokens(&dir), "s3cret user=ops\n");
    let (file, out) = (topology.display().to_string(), dir.display().to_string());
    relay(&["topology", "certs", &file, "-o", &out]);
    relay(&["topology", "render", "--helm", &file, "-o", &out]);

    let procs = NODES.iter().map(|n| install_rendered(&dir, n)).collect();
    let api_port = port(&dir, "center", "api");
    let mut fleet = Fleet {
        rt,
        dir: dir.clone(),
        topology: file,
        api_port,
        procs,
    };

    fleet.eventually("the root knows every cluster, reachable", || {
        let items = fleet.inventory();
        ["lab-1", "lab-2", "sim-1"]
            .iter()
            .all(|n| cluster(&items, n).is_some_and(|c| c["reachable"] == true))
    });
    let items = fleet.inventory();
    for (name, backend) in [
        ("lab-1", "kubernetes"),
        ("lab-2", "kubernetes"),
        ("sim-1", "simulated"),
    ] {
        let c = cluster(&items, name).unwrap();
        assert_eq!(c["properties"]["strata.dev/backend"], backend, "{c}");
        assert_eq!(c["labels"]["region"], "eu-west", "{c}");
    }

    // An app applied at the root reaches both real clusters' API servers.
    let app = dir.join("app.yaml");
    write(&app, POS_APP);
    let (ok, _, err) = relay_cli(&dir, api_port, &["apply", "-f", &app.display().to_string()]);
    assert!(ok, "{err}");
    for fake in [&lab_1, &lab_2] {
        fleet.eventually("the ConfigMap arrives in both fake API servers", || {
            fleet
                .rt
                .block_on(fake.get("", "configmaps", Some("pos"), "pos-settings"))
                .is_some_and(|cm| cm["data"]["currency"] == "EUR")
        });
    }

    // Every pod's readiness probe, on the port its values give the chart.
    for node in NODES {
        let metrics = port(&dir, node, "metrics");
        fleet.eventually(&format!("{node} is ready"), || {
            try_http_get(metrics, "/readyz").is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
        });
    }

    a_user_comes_and_goes(&mut fleet);
    let _site = a_site_joins_through_a_proxy(&mut fleet);

    // lab-1's API server goes away: the root shows it unreachable with the reason, the
    // others as they were; back on the same port, reachable again.
    let lab_1_port = lab_1.addr.port();
    drop(lab_1);
    fleet.eventually("the root shows lab-1 unreachable", || {
        cluster(&fleet.inventory(), "lab-1").is_some_and(|c| c["reachable"] == false)
    });
    let items = fleet.inventory();
    assert_api_server_unreachable(&items, "lab-1", lab_1_port);
    for name in ["lab-2", "sim-1", JOINED] {
        let c = cluster(&items, name).unwrap();
        assert!(c["reachable"] == true && c["reason"].is_null(), "{c}");
    }
    let lab_1 = fleet.rt.block_on(FakeApiServer::start_on(lab_1_port));
    fleet.eventually("the root shows lab-1 reachable again", || {
        cluster(&fleet.inventory(), "lab-1")
            .is_some_and(|c| c["reachable"] == true && c["reason"].is_null())
    });
    fleet.assert_none_restarted();
    drop((lab_1, lab_2));
    for p in std::mem::take(&mut fleet.procs).into_iter().rev() {
        let name = p.name.clone();
        let status = p.terminate();
        assert!(status.success(), "{name} exited with {status}");
    }
}
