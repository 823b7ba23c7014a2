//! The cap on debug tunnels per link, as processes over real QUIC on loopback: a root
//! `center`, a relay `site-1` configured with `tunnels_per_link: 2`, and an agent on a
//! simulated cluster `sim-1` below it; real kubectl 1.33 through
//! `https://ROOT/clusters/sim-1` (a kubeconfig `relay kubeconfig --cluster` writes).
//!
//! Covers: two `kubectl logs -f` hold both tunnels of the link site-1 → sim-1; a third
//! request is answered 429 by site-1, carried back through the root as a
//! `metav1.Status` (reason `TooManyRequests`, naming the link and its cap) that kubectl
//! shows; once one `logs -f` ends, its tunnel is given back and a new request works;
//! `kubectl describe pod` of a simulated Pod.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Proc, bin, kube_clients, log_tails, relay_cli, write};
use strata_topology::certs::{self, CertOptions};
use strata_topology::files;
use strata_topology::render::{self, Process, RenderOptions};

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: cap }
spec:
  root: { name: center }
  relays:
    - { name: site-1, parent: center }
  clusters:
    - { name: sim-1, parent: site-1, labels: { role: sim } }
";

const CAFE: &str = "
apiVersion: v1
kind: Namespace
metadata: { name: shop, labels: { app: cafe } }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: cafe, namespace: shop, labels: { app: cafe } }
spec: { replicas: 1 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: cafe, namespace: shop }
spec:
  objects: [ { selector: { matchLabels: { app: cafe } } } ]
  clusters: { selector: { matchLabels: { role: sim } } }
";

const NODES: [&str; 3] = ["center", "site-1", "sim-1"];

struct Fleet {
    dir: PathBuf,
    api_port: u16,
    kubectl: PathBuf,
    kubeconfig: PathBuf,
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

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("kube-cache"))
            .args(args)
            .output()
            .unwrap()
    }

    /// Starts `kubectl logs -f POD` and returns once it printed its first line (its
    /// tunnel is then open, and stays open while it follows). A kubectl that ends
    /// without a line is started again: right after an answer, its tunnel's permit is
    /// held until the stream has closed at every tier, so the `GET pod` kubectl sends
    /// first can keep the link full for a moment and its log request be refused.
    fn follow(&self, pod: &str) -> Child {
        for _ in 0..20 {
            let mut child = Command::new(&self.kubectl)
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .arg("--cache-dir")
                .arg(self.dir.join("kube-cache"))
                .args(["logs", "-f", "-n", "shop", pod])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let out = child.stdout.take().unwrap();
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                // Reads until kubectl ends, so that it never blocks on a full pipe.
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    let _ = tx.send(line);
                }
            });
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(first) => {
                    assert!(first.contains("(simulated)"), "{first}");
                    return child;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = child.wait();
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("kubectl logs -f printed no line in 30 s");
                }
            }
        }
        panic!("kubectl logs -f ended without a line 20 times");
    }
}

/// Writes the topology's certificates and configs in `dir`, site-1 with a cap of 2.
fn render_with_cap(dir: &Path) -> render::Rendered {
    let topology = strata_topology::parse(TOPOLOGY, &dir.join("cap.yaml"))
        .unwrap()
        .topology;
    write(&files::api_tokens(dir), "s3cret user=ops\n");
    certs::issue_all(&topology, dir, &CertOptions::default()).unwrap();
    let rendered = render::render(
        &topology,
        dir,
        &RenderOptions {
            summary_interval_ms: Some(100),
            simulated_ready_delay_ms: Some(100),
            simulate_unset: true,
            ..RenderOptions::default()
        },
    )
    .unwrap();
    let site = files::node_config(dir, "site-1");
    let config = std::fs::read_to_string(&site).unwrap();
    write(&site, &format!("{config}tunnels_per_link: 2\n"));
    rendered
}

#[test]
fn a_link_carries_at_most_its_cap_of_tunnels_and_refuses_one_more_with_429() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let rendered = render_with_cap(&dir);
    let api_port = rendered.api.port();
    let mut procs = Vec::new();
    for node in &rendered.nodes {
        let (program, verb) = match node.process {
            Process::Relay => (bin("relay"), "serve"),
            Process::Agent => (bin("agent"), "run"),
        };
        let config = node.config.display().to_string();
        procs.push(Proc::spawn(
            &dir,
            &node.name,
            &program,
            &[verb, "--config", &config],
        ));
    }
    let (ok, kc, err) = relay_cli(&dir, api_port, &["kubeconfig", "--cluster", "sim-1"]);
    assert!(ok, "relay kubeconfig: {err}");
    let kubeconfig = dir.join("kc-sim-1");
    write(&kubeconfig, &kc);
    let f = Fleet {
        dir: dir.clone(),
        api_port,
        kubectl: kube_clients().join("kubectl"),
        kubeconfig,
    };
    f.eventually("the root knows sim-1", |f| {
        let (ok, out, _) = relay_cli(&f.dir, f.api_port, &["clusters"]);
        ok && out.contains("sim-1")
    });
    let app = dir.join("app.yaml");
    write(&app, CAFE);
    let (ok, _, err) = relay_cli(&dir, api_port, &["apply", "-f", &app.display().to_string()]);
    assert!(ok, "{err}");
    f.eventually("sim-1 runs the app's Pod", |f| {
        let out = f.kubectl(&["get", "pods", "-n", "shop", "-o", "name"]);
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("pod/cafe-")
    });
    let pods = f.kubectl(&["get", "pods", "-n", "shop", "-o", "name"]);
    let pod = String::from_utf8_lossy(&pods.stdout)
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("pod/")
        .to_owned();

    // describe of the simulated Pod: the Pod, then its events (a list by field
    // selector).
    let described = f.kubectl(&["describe", "pod", "-n", "shop", &pod]);
    let text = String::from_utf8_lossy(&described.stdout);
    assert!(described.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("Name:") && l.ends_with(&pod))
            && text
                .lines()
                .any(|l| l.starts_with("Status:") && l.ends_with("Running"))
            && text.contains("started container main"),
        "{text}"
    );

    // Two followers hold both tunnels of site-1 → sim-1.
    let mut first = f.follow(&pod);
    let mut second = f.follow(&pod);

    // A third request is refused by site-1, and kubectl shows why (the Status message
    // when the refused request is its list; client-go's own words for a 429 when it is
    // a discovery request kubectl sent first).
    let third = f.kubectl(&["get", "pods", "-n", "shop"]);
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(
        !third.status.success(),
        "a third tunnel was carried: {}",
        String::from_utf8_lossy(&third.stdout)
    );
    assert!(
        err.contains("site-1 to sim-1 carries 2 debug tunnels already (its cap)")
            || err.contains("too many requests"),
        "{err}"
    );
    // The same through the root's API: 429 and a metav1.Status.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = strata_relay::client::ApiClient::new(
        ([127, 0, 0, 1], api_port).into(),
        "center",
        &files::ca_cert(&dir),
        "s3cret",
    )
    .unwrap();
    let path = "/clusters/sim-1/api/v1/namespaces/shop/pods";
    let (code, status) = rt
        .block_on(client.request(hyper::Method::GET, path, None))
        .unwrap();
    assert_eq!(code.as_u16(), 429, "{status}");
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["reason"], "TooManyRequests", "{status}");
    assert_eq!(status["code"], 429, "{status}");

    // One follower ends: its tunnel is given back, and a new request is carried.
    let _ = first.kill();
    let _ = first.wait();
    f.eventually("a request is carried again after one logs -f ended", |f| {
        f.kubectl(&["get", "pods", "-n", "shop"]).status.success()
    });
    let _ = second.kill();
    let _ = second.wait();
    drop(procs);
}
