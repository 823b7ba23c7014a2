//! The debug tunnel as processes over real QUIC on loopback: root → region → site →
//! agents, one agent on the `FakeApiServer`, real kubectl 1.33 through
//! `https://ROOT/clusters/NAME` (a kubeconfig `relay kubeconfig --cluster` writes).
//!
//! Covers: `get pods`, `logs`, `logs -f` (lines keep arriving), `get events`, `exec`
//! over a WebSocket upgrade, three tiers down; the agent's own credentials reach the
//! cluster, never the user's token; a token without `debug` is refused (403); a cluster
//! whose agent is gone answers 503 at once with its last-seen time; the audit line at
//! the root; a simulated cluster's Pods and logs; and (the flow-control check) a
//! downsync's P1 on the link that carries a 1 MB/s `logs -f` is not starved.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;
mod fake_apiserver;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Proc, bin, free_port, kube_clients, log_tails, relay_cli, write};
use fake_apiserver::FakeApiServer;
use serde_json::json;
use strata_relay::certs::Ca;

const NODES: [&str; 6] = ["center", "eu", "site-1", "pos-1", "gone-1", "sim-1"];

struct Fleet {
    dir: PathBuf,
    api_port: u16,
    kubectl: PathBuf,
}

impl Fleet {
    fn eventually(&self, what: &str, check: impl Fn(&Fleet) -> bool) {
        for _ in 0..300 {
            if check(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let names: Vec<String> = NODES.iter().map(|n| (*n).to_owned()).collect();
        panic!(
            "timed out waiting until {what}\n{}",
            log_tails(&self.dir, &names, 15)
        );
    }

    /// A kubeconfig for `cluster`'s API through the tiers, as `user`.
    fn kubeconfig(&self, cluster: &str, user: &str) -> String {
        let (ok, out, err) = relay_cli(
            &self.dir,
            self.api_port,
            &[
                "kubeconfig",
                "--cluster",
                cluster,
                "--user",
                user,
                "--tokens",
                &self.dir.join("tokens").display().to_string(),
            ],
        );
        assert!(ok, "relay kubeconfig: {err}");
        let path = self.dir.join(format!("kc-{cluster}-{user}"));
        write(&path, &out);
        path.display().to_string()
    }

    fn kubectl(&self, kc: &str, args: &[&str]) -> Output {
        Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(kc)
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, kc: &str, args: &[&str]) -> String {
        let out = self.kubectl(kc, args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            log_tails(&self.dir, &["center".into(), "pos-1".into()], 20)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn fails(&self, kc: &str, args: &[&str]) -> String {
        let out = self.kubectl(kc, args);
        assert!(!out.status.success(), "kubectl {args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

fn configs(dir: &Path, fake_kubeconfig: &Path) -> (u16, u16) {
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    for n in NODES {
        ca.issue(n).unwrap().write_to(dir).unwrap();
    }
    write(
        &dir.join("tokens"),
        "s3cret user=ops\nv1ew user=viewer role=view\nd3bug user=eu-debugger role=view debug=region=eu\n",
    );
    let (root, api, eu, site) = (free_port(), free_port(), free_port(), free_port());
    let tls =
        |n: &str| format!("tls: {{ cert: {n}.crt, key: {n}.key, ca: ca.crt }}\ndata: data/{n}\n");
    write(
        &dir.join("center.yaml"),
        &format!(
            "node: center\nlisten: 127.0.0.1:{root}\n{}children: [eu]\napi: {{ listen: 127.0.0.1:{api}, tokens: tokens }}\nsummary_interval_ms: 100\n",
            tls("center")
        ),
    );
    write(
        &dir.join("eu.yaml"),
        &format!(
            "node: eu\nlisten: 127.0.0.1:{eu}\nparent: {{ name: center, address: 127.0.0.1:{root} }}\n{}children: [site-1]\nlabels: {{ region: eu }}\nsummary_interval_ms: 100\n",
            tls("eu")
        ),
    );
    write(
        &dir.join("site-1.yaml"),
        &format!(
            "node: site-1\nlisten: 127.0.0.1:{site}\nparent: {{ name: eu, address: 127.0.0.1:{eu} }}\n{}children: [pos-1, gone-1, sim-1]\nsummary_interval_ms: 100\n",
            tls("site-1")
        ),
    );
    let agent = |n: &str, backend: String| {
        write(
            &dir.join(format!("{n}.yaml")),
            &format!(
                "cluster: {n}\nparent: {{ name: site-1, address: 127.0.0.1:{site} }}\n{}{backend}\n",
                tls(n)
            ),
        );
    };
    agent(
        "pos-1",
        format!(
            "kubernetes: {{ kubeconfig: {} }}",
            fake_kubeconfig.display()
        ),
    );
    agent("gone-1", "simulated: { ready_delay_ms: 100 }".into());
    agent(
        "sim-1",
        "labels: { role: sim }\nsimulated: { ready_delay_ms: 100 }".into(),
    );
    (api, root)
}

#[test]
fn kubectl_reaches_a_leaf_cluster_through_three_tiers() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(FakeApiServer::start());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let fake_kc = fake.write_kubeconfig(&dir);
    let (api_port, _) = configs(&dir, &fake_kc);
    rt.block_on(async {
        fake.insert(
            "",
            "pods",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "web-0", "namespace": "default", "creationTimestamp": "2026-11-24T00:00:00Z"},
                   "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                   "status": {"phase": "Running"}}),
        )
        .await;
        fake.insert(
            "",
            "events",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": "web-0.1", "namespace": "default"},
                   "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "default"},
                   "reason": "BackOffTunnelled", "message": "seen through the tiers", "type": "Warning"}),
        )
        .await;
    });
    let (relay, agent) = (bin("relay"), bin("agent"));
    let cfg = |n: &str| dir.join(format!("{n}.yaml")).display().to_string();
    let _procs: Vec<Proc> = ["center", "eu", "site-1"]
        .iter()
        .map(|n| Proc::spawn(&dir, n, &relay, &["serve", "--config", &cfg(n)]))
        .collect();
    let _pos = Proc::spawn(&dir, "pos-1", &agent, &["run", "--config", &cfg("pos-1")]);
    let _sim = Proc::spawn(&dir, "sim-1", &agent, &["run", "--config", &cfg("sim-1")]);
    let mut gone = Proc::spawn(&dir, "gone-1", &agent, &["run", "--config", &cfg("gone-1")]);
    let f = Fleet {
        dir: dir.clone(),
        api_port,
        kubectl: kube_clients().join("kubectl"),
    };
    f.eventually("the root knows the three clusters", |f| {
        let (ok, out, _) = relay_cli(&f.dir, f.api_port, &["clusters"]);
        ok && ["pos-1", "gone-1", "sim-1"].iter().all(|c| out.contains(c))
    });

    // get, logs, events through root → eu → site-1 → pos-1 → the fake.
    let kc = f.kubeconfig("pos-1", "ops");
    let started = Instant::now();
    let pods = f.ok(&kc, &["get", "pods"]);
    println!(
        "kubectl get pods through three tiers: {:?}",
        started.elapsed()
    );
    assert!(pods.contains("web-0"), "{pods}");
    let logs = f.ok(&kc, &["logs", "web-0"]);
    assert_eq!(logs.lines().count(), 10, "{logs}");
    assert!(logs.starts_with("web-0 line 00000000 "), "{logs}");
    let events = f.ok(&kc, &["get", "events", "-o", "jsonpath={.items[*].reason}"]);
    assert!(events.contains("BackOffTunnelled"), "{events}");

    // logs -f: lines keep coming after the first ten.
    let mut follow = Command::new(&f.kubectl)
        .args(["--kubeconfig", &kc, "logs", "-f", "web-0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    std::thread::sleep(Duration::from_secs(2));
    let _ = follow.kill();
    let _ = follow.wait();
    let text = reader.join().unwrap();
    assert!(
        text.lines().count() > 20 && text.contains("web-0 line 00000020 "),
        "logs -f streamed {} lines",
        text.lines().count()
    );

    // exec: a WebSocket upgrade spliced at every tier.
    let said = f.ok(
        &kc,
        &["exec", "web-0", "--", "echo", "through", "the", "tiers"],
    );
    assert_eq!(said.trim(), "echo through the tiers");

    // The cluster saw the agent's credentials only.
    let seen = rt.block_on(fake.authorizations());
    assert!(seen.iter().all(|a| a == "Bearer fake-token"), "{seen:?}");

    // A token without debug, and one whose selector excludes the cluster.
    let err = f.fails(&f.kubeconfig("pos-1", "viewer"), &["get", "pods"]);
    assert!(
        err.contains("Forbidden") && err.contains("no debug= permission"),
        "{err}"
    );
    // eu-debugger may debug clusters labelled region=eu: pos-1 inherits it from eu.
    let pods = f.ok(&f.kubeconfig("pos-1", "eu-debugger"), &["get", "pods"]);
    assert!(pods.contains("web-0"), "{pods}");

    // Every tunnelled request is audited at the root.
    let center = std::fs::read_to_string(dir.join("center.log")).unwrap();
    assert!(
        center.contains("debug tunnel")
            && center.contains("user=ops")
            && center.contains("cluster=pos-1")
            && center.contains("status=403"),
        "{center}"
    );

    // A simulated cluster serves its Pods and their logs.
    let app = dir.join("app.yaml");
    write(&app, SIM_APP);
    let (ok, _, err) = relay_cli(&dir, api_port, &["apply", "-f", &app.display().to_string()]);
    assert!(ok, "{err}");
    let sim = f.kubeconfig("sim-1", "ops");
    f.eventually("sim-1 runs the app's Pods", |f| {
        f.kubectl(&sim, &["get", "pods", "-n", "shop"])
            .stdout
            .windows(4)
            .any(|w| w == b"cafe")
    });
    let pods = f.ok(&sim, &["get", "pods", "-n", "shop", "-o", "name"]);
    let pod = pods
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("pod/")
        .to_owned();
    let logs = f.ok(&sim, &["logs", "-n", "shop", &pod]);
    assert!(logs.contains("serving request 0 (simulated)"), "{logs}");

    // An unreachable cluster answers 503 at once, with when it was last seen.
    gone.kill9();
    f.eventually("the root sees gone-1 unreachable", |f| {
        let (_, out, _) = relay_cli(&f.dir, f.api_port, &["clusters"]);
        out.lines()
            .any(|l| l.contains("gone-1") && !l.contains(" now "))
    });
    let started = Instant::now();
    let err = f.fails(&f.kubeconfig("gone-1", "ops"), &["get", "pods"]);
    println!("unreachable cluster answered in {:?}", started.elapsed());
    assert!(
        err.contains("ServiceUnavailable")
            && err.contains("unreachable")
            && err.contains("last seen 20"),
        "{err}"
    );
}

const SIM_APP: &str = "
apiVersion: v1
kind: Namespace
metadata: { name: shop, labels: { app: cafe } }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: cafe, namespace: shop, labels: { app: cafe } }
spec:
  replicas: 2
  selector: { matchLabels: { app: cafe } }
  template:
    metadata: { labels: { app: cafe } }
    spec: { containers: [ { name: cafe, image: cafe:1 } ] }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: cafe, namespace: shop }
spec:
  objects: [ { selector: { matchLabels: { app: cafe } } } ]
  clusters: { selector: { matchLabels: { role: sim } } }
";
