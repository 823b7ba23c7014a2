//! The debug tunnel as processes over real QUIC on loopback: `relay up` of root → eu →
//! site-1 (with a simulated cluster `sim-1`), and two agents that join site-1 with a
//! token, `pos-1` on the `FakeApiServer` and `gone-1` (simulated, killed later); real
//! kubectl 1.33 through `https://ROOT/clusters/NAME` (a kubeconfig `relay kubeconfig
//! --cluster` writes).
//!
//! Covers: `get pods`, `logs`, `logs -f` (lines keep arriving for two seconds), `get
//! events`, `describe pod`, `exec` over a WebSocket upgrade, three tiers down; the agent's own
//! credentials reach the cluster, never the user's token; a token without `debug` is
//! refused (403, a `metav1.Status` naming why); a cluster whose agent is gone answers
//! 503 with its last-seen time; the audit line at the root; a simulated cluster's Pods
//! and logs. Prints figures: `kubectl get pods` through the tiers and directly against
//! the fake, `logs -f` throughput, and the P1 of a downsync to pos-1 with and without a
//! 1 MB/s `logs -f` on the same links (asserted only as "not starved").
//!
//! And the same kubectl commands when every link on the path runs over TLS/TCP (eu and
//! site-1 through tinyproxy): the tunnel's streams ride the TCP multiplexer.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::common;
use strata_test_tools::fake_apiserver;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Proc, bin, kube_clients, log_tails, relay_cli, write};
use fake_apiserver::FakeApiServer;
use serde_json::json;
use strata_topology::files;

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: tunnel }
spec:
  root: { name: center }
  relays:
    - { name: eu, parent: center, labels: { region: eu } }
    - { name: site-1, parent: eu }
  clusters:
    - { name: sim-1, parent: site-1, labels: { role: sim } }
  joining:
    - { parent: site-1, tokens: 2 }
";

/// The root's tokens, written before `relay up` (which keeps an existing file).
const TOKENS: &str = "s3cret user=ops\nv1ew user=viewer role=view\nd3bug user=eu-debugger role=view debug=region=eu\n";

const NODES: [&str; 6] = ["center", "eu", "site-1", "sim-1", "pos-1", "gone-1"];

/// `relay up`, stopped (SIGTERM, so that it stops its nodes) when dropped.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        common::stop_relay_up(&mut self.0);
    }
}

struct Fleet {
    /// `relay up --data`: ca.crt, api.tokens, nodes/, logs/ (the joined agents too).
    dir: PathBuf,
    api_port: u16,
    kubectl: PathBuf,
}

impl Fleet {
    fn logs(&self) -> PathBuf {
        files::logs(&self.dir)
    }

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
            log_tails(&self.logs(), &names, 15)
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
                &files::api_tokens(&self.dir).display().to_string(),
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
            .arg("--cache-dir")
            .arg(self.dir.join("kube-cache"))
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
            log_tails(&self.logs(), &["center".into(), "pos-1".into()], 20)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn fails(&self, kc: &str, args: &[&str]) -> String {
        let out = self.kubectl(kc, args);
        assert!(!out.status.success(), "kubectl {args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Runs `kubectl logs -f` for `secs` seconds; returns what it printed.
    /// `kubectl logs -f pod`, its output piped.
    fn logs_follow(&self, kc: &str, pod: &str) -> Child {
        Command::new(&self.kubectl)
            .args(["--kubeconfig", kc, "logs", "-f", pod])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn follow(&self, kc: &str, pod: &str, secs: u64) -> String {
        let mut follow = self.logs_follow(kc, pod);
        let mut out = follow.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        std::thread::sleep(Duration::from_secs(secs));
        let _ = follow.kill();
        let _ = follow.wait();
        reader.join().unwrap()
    }

    /// `kubectl logs -f` until a line containing `marker` arrived or `limit` passed:
    /// what it printed until then. For assertions, which must not depend on how fast a
    /// loaded machine starts kubectl and opens the tunnel (a fixed two-second window
    /// read 0 lines in one run of the whole suite).
    fn follow_until(&self, kc: &str, pod: &str, marker: &str, limit: Duration) -> String {
        let mut follow = self.logs_follow(kc, pod);
        let out = follow.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(out)) {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + limit;
        let mut text = String::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let Ok(line) = rx.recv_timeout(left) else {
                break;
            };
            text.push_str(&line);
            text.push('\n');
            if line.contains(marker) {
                break;
            }
        }
        let _ = follow.kill();
        let _ = follow.wait();
        drop(rx);
        let _ = reader.join();
        text
    }

    /// The median of `n` runs of `kubectl get pods` with `kc`.
    fn get_pods_median(&self, kc: &str, n: usize) -> Duration {
        let mut took: Vec<Duration> = (0..n)
            .map(|_| {
                let started = Instant::now();
                self.ok(kc, &["get", "pods"]);
                started.elapsed()
            })
            .collect();
        took.sort();
        took[n / 2]
    }
}

/// Starts an agent that joins site-1 with `token`, its config and log beside the others;
/// `parent` adds fields to its `parent:` (`, transport: tcp`).
fn joined_agent(f: &Fleet, name: &str, token: &str, backend: &str, parent: &str) -> Proc {
    let site = strata_relay::config::NodeConfig::load(&files::node_config(&f.dir, "site-1"))
        .unwrap()
        .listen
        .unwrap();
    let config = f.dir.join(format!("{name}.yaml"));
    write(
        &config,
        &format!(
            "cluster: {name}\nparent: {{ name: site-1, address: \"{site}\"{parent} }}\njoin: {{ token: \"{token}\", ca: {} }}\ndata: {}\n{backend}\n",
            files::ca_cert(&f.dir).display(),
            f.dir.join(format!("{name}-data")).display(),
        ),
    );
    let config = config.display().to_string();
    Proc::spawn(
        &f.logs(),
        name,
        &bin("agent"),
        &["run", "--config", &config],
    )
}

/// Puts a ConfigMap `p1` with `value` at the root (placed on pos-1) and waits until the
/// fake holds that value; returns how long it took.
fn p1(f: &Fleet, rt: &tokio::runtime::Runtime, fake: &FakeApiServer, value: u32) -> Duration {
    let file = f.dir.join("p1.yaml");
    write(
        &file,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: p1, namespace: default, labels: {{ app: p1 }} }}\ndata: {{ value: \"{value}\" }}\n"
        ),
    );
    let started = Instant::now();
    let (ok, _, err) = relay_cli(
        &f.dir,
        f.api_port,
        &["apply", "-f", &file.display().to_string()],
    );
    assert!(ok, "{err}");
    let want = value.to_string();
    for _ in 0..3000 {
        let held = rt.block_on(fake.get("", "configmaps", Some("default"), "p1"));
        if held.is_some_and(|v| v["data"]["value"] == want.as_str()) {
            return started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the downsync of p1={value} never reached pos-1 (starved?)");
}

/// The P1 of `n` downsyncs to pos-1 (median) idle, then with a 1 MB/s `logs -f` of
/// web-0 on the same links, and what that `logs -f` carried (MB/s). Needs
/// [`P1_PLACEMENT`] applied.
fn p1_idle_and_busy(
    f: &Fleet,
    rt: &tokio::runtime::Runtime,
    fake: &FakeApiServer,
    kc: &str,
    n: u32,
) -> (Duration, Duration, f64) {
    let idle: Vec<Duration> = (0..n).map(|i| p1(f, rt, fake, i)).collect();
    rt.block_on(fake.set_log_rate(1_000_000));
    let mut busy_tunnel = Command::new(&f.kubectl)
        .args(["--kubeconfig", kc, "logs", "-f", "web-0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = busy_tunnel.stdout.take().unwrap();
    let counter = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        total
    });
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let busy: Vec<Duration> = (100..100 + n).map(|i| p1(f, rt, fake, i)).collect();
    let _ = busy_tunnel.kill();
    let _ = busy_tunnel.wait();
    let streamed = counter.join().unwrap();
    let secs = started.elapsed().as_secs_f64() + 0.5;
    (median(idle), median(busy), streamed as f64 / secs / 1e6)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn kubectl_reaches_a_leaf_cluster_through_three_tiers() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(FakeApiServer::start());
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("tunnel.yaml");
    write(&file, TOPOLOGY);
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    write(&files::api_tokens(&dir), TOKENS);
    let fake_kc = fake.write_kubeconfig(tmp.path());
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

    let (child, lines) = common::relay_up_with(&file, &dir, &["--log", "info"]);
    let _up = Up(child);
    let export = lines
        .iter()
        .find(|line| line.contains("export STRATA_SERVER="))
        .expect("relay up printed no STRATA_* line");
    let env = common::export_env(&export);
    let server = &env.iter().find(|(k, _)| k == "STRATA_SERVER").unwrap().1;
    let api_port: u16 = server.rsplit(':').next().unwrap().parse().unwrap();
    let f = Fleet {
        dir: dir.clone(),
        api_port,
        kubectl: kube_clients().join("kubectl"),
    };
    let tokens = std::fs::read_to_string(files::join_tokens(&dir, "site-1")).unwrap();
    let tokens: Vec<&str> = tokens.lines().map(str::trim).collect();
    let _pos = joined_agent(
        &f,
        "pos-1",
        tokens[0],
        &format!(
            "labels: {{ role: pos }}\nkubernetes: {{ kubeconfig: {} }}",
            fake_kc.display()
        ),
        "",
    );
    let mut gone = joined_agent(
        &f,
        "gone-1",
        tokens[1],
        "simulated: { ready_delay_ms: 100 }",
        "",
    );
    f.eventually("the root knows the three clusters", |f| {
        let (ok, out, _) = relay_cli(&f.dir, f.api_port, &["clusters"]);
        ok && ["pos-1", "gone-1", "sim-1"].iter().all(|c| out.contains(c))
    });

    // get, logs, events through root → eu → site-1 → pos-1 → the fake.
    let kc = f.kubeconfig("pos-1", "ops");
    let pods = f.ok(&kc, &["get", "pods"]);
    assert!(pods.contains("web-0"), "{pods}");
    let logs = f.ok(&kc, &["logs", "web-0"]);
    assert_eq!(logs.lines().count(), 10, "{logs}");
    assert!(logs.starts_with("web-0 line 00000000 "), "{logs}");
    let events = f.ok(&kc, &["get", "events", "-o", "jsonpath={.items[*].reason}"]);
    assert!(events.contains("BackOffTunnelled"), "{events}");
    // describe: the Pod, then its events (a list with a field selector).
    let described = f.ok(&kc, &["describe", "pod", "web-0"]);
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("Name:") && l.ends_with(" web-0"))
            && described.contains("nginx")
            && described.contains("seen through the tiers"),
        "{described}"
    );
    let fake_kc = fake_kc.display().to_string();
    println!(
        "figure: kubectl get pods, median of 5: through three tiers {:?}, directly against the fake {:?}",
        f.get_pods_median(&kc, 5),
        f.get_pods_median(&fake_kc, 5)
    );

    // logs -f: lines keep coming after the first ten (the fake adds 20 a second).
    let text = f.follow_until(
        &kc,
        "web-0",
        "web-0 line 00000020 ",
        Duration::from_secs(60),
    );
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
    let center = std::fs::read_to_string(files::node_log(&dir, "center")).unwrap();
    let audited = |user: &str, status: u16| {
        center
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|v| {
                v["target"] == "audit"
                    && v["fields"]["who"] == user
                    && v["fields"]["cluster"] == "pos-1"
                    && v["fields"]["status"] == status
            })
    };
    assert!(audited("ops", 200) && audited("ops", 101), "{center}");
    assert!(audited("viewer", 403), "{center}");

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

    // Figures: logs -f throughput, and P1 of a downsync to pos-1 with and without a
    // 1 MB/s logs -f on the same three links.
    let (ok, _, err) = relay_cli(
        &dir,
        api_port,
        &["apply", "-f", &{
            let p = dir.join("p1-placement.yaml");
            write(&p, P1_PLACEMENT);
            p.display().to_string()
        }],
    );
    assert!(ok, "{err}");
    let (idle, busy, rate) = p1_idle_and_busy(&f, &rt, &fake, &kc, 5);
    println!(
        "figure: P1 (apply at the root -> ConfigMap at pos-1's cluster), median of 5: idle {idle:?}, with a 1 MB/s logs -f on the same links {busy:?}; the logs -f carried {rate:.2} MB/s"
    );
    rt.block_on(fake.set_log_rate(50_000_000));
    let started = Instant::now();
    let text = f.follow(&kc, "web-0", 2);
    println!(
        "figure: logs -f through three tiers, fake offering 50 MB/s: {:.2} MB/s",
        text.len() as f64 / started.elapsed().as_secs_f64() / 1e6
    );

    // An unreachable cluster answers 503 at once, with when it was last seen (kubectl
    // shows its own words for a 503; the Status carries ours).
    gone.kill9();
    f.eventually("the root sees gone-1 unreachable", |f| {
        let (_, out, _) = relay_cli(&f.dir, f.api_port, &["clusters"]);
        out.lines()
            .any(|l| l.contains("gone-1") && !l.contains(" now "))
    });
    let err = f.fails(&f.kubeconfig("gone-1", "ops"), &["get", "pods"]);
    assert!(err.contains("ServiceUnavailable"), "{err}");
    let client = strata_relay::client::ApiClient::new(
        ([127, 0, 0, 1], api_port).into(),
        "center",
        &files::ca_cert(&dir),
        "s3cret",
    )
    .unwrap();
    let started = Instant::now();
    let (code, status) = rt
        .block_on(client.request(
            hyper::Method::GET,
            "/clusters/gone-1/api/v1/namespaces/default/pods",
            None,
        ))
        .unwrap();
    println!(
        "figure: an unreachable cluster answered in {:?}",
        started.elapsed()
    );
    assert_eq!(code.as_u16(), 503, "{status}");
    assert_eq!(status["kind"], "Status", "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("unreachable") && message.contains("last seen 20"),
        "{message}"
    );
}

/// The pod the fake serves in these tests.
fn web_0() -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web-0", "namespace": "default", "creationTimestamp": "2026-11-24T00:00:00Z"},
           "spec": {"containers": [{"name": "web", "image": "nginx"}]},
           "status": {"phase": "Running"}})
}

/// root → eu → site-1 → pos-1 with every link over TLS/TCP (eu and site-1 through
/// tinyproxy, pos-1 directly): `get pods`, `logs`, `logs -f`, `exec` work as over QUIC.
/// Prints `get pods` latency, the P1 of a downsync with and without a busy `logs -f`,
/// and `logs -f` throughput through the TCP chain.
#[test]
fn kubectl_reaches_a_leaf_cluster_over_tls_tcp_links() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let proxy = rt.block_on(common::proxies::tinyproxy(tmp.path(), 600));
    let via = proxy.url(None);
    let fake = rt.block_on(FakeApiServer::start());
    rt.block_on(fake.insert("", "pods", Some("default"), web_0()));
    let fake_kc = fake.write_kubeconfig(tmp.path());
    let file = tmp.path().join("tunnel.yaml");
    write(
        &file,
        &format!(
            "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: {{ name: tunnel-tcp }}
spec:
  root: {{ name: center }}
  relays:
    - {{ name: eu, parent: center, transport: tcp, proxy: \"{via}\" }}
    - {{ name: site-1, parent: eu, transport: tcp, proxy: \"{via}\" }}
  joining:
    - {{ parent: site-1, tokens: 1 }}
"
        ),
    );
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    write(&files::api_tokens(&dir), TOKENS);
    let (child, lines) = common::relay_up_with(&file, &dir, &["--log", "info"]);
    let _up = Up(child);
    let export = lines
        .iter()
        .find(|line| line.contains("export STRATA_SERVER="))
        .expect("relay up printed no STRATA_* line");
    let env = common::export_env(&export);
    let server = &env.iter().find(|(k, _)| k == "STRATA_SERVER").unwrap().1;
    let api_port: u16 = server.rsplit(':').next().unwrap().parse().unwrap();
    let f = Fleet {
        dir: dir.clone(),
        api_port,
        kubectl: kube_clients().join("kubectl"),
    };
    let tokens = std::fs::read_to_string(files::join_tokens(&dir, "site-1")).unwrap();
    let backend = format!(
        "labels: {{ role: pos }}\nkubernetes: {{ kubeconfig: {} }}",
        fake_kc.display()
    );
    let _pos = joined_agent(&f, "pos-1", tokens.trim(), &backend, ", transport: tcp");
    f.eventually("the root knows pos-1", |f| {
        let (ok, out, _) = relay_cli(&f.dir, f.api_port, &["clusters"]);
        ok && out.contains("pos-1")
    });
    // Every link on the path runs over TCP.
    let (ok, status, err) = relay_cli(&dir, api_port, &["status", "--agents"]);
    assert!(ok, "{err}");
    for node in ["eu", "site-1", "pos-1"] {
        assert!(
            status
                .lines()
                .any(|l| l.contains(node) && l.contains(" over tcp")),
            "{node}'s link over tcp in relay status:\n{status}"
        );
    }

    let kc = f.kubeconfig("pos-1", "ops");
    let pods = f.ok(&kc, &["get", "pods"]);
    assert!(pods.contains("web-0"), "{pods}");
    let logs = f.ok(&kc, &["logs", "web-0"]);
    assert_eq!(logs.lines().count(), 10, "{logs}");
    let text = f.follow_until(
        &kc,
        "web-0",
        "web-0 line 00000020 ",
        Duration::from_secs(60),
    );
    assert!(
        text.lines().count() > 20 && text.contains("web-0 line 00000020 "),
        "logs -f streamed {} lines",
        text.lines().count()
    );
    let said = f.ok(
        &kc,
        &["exec", "web-0", "--", "echo", "through", "tcp", "links"],
    );
    assert_eq!(said.trim(), "echo through tcp links");
    let log = proxy.log_text();
    assert!(
        log.matches("Request (file descriptor").count() >= 2,
        "eu and site-1 did not connect through tinyproxy:\n{log}"
    );

    println!(
        "figure: kubectl get pods over TLS/TCP links, median of 5: through three tiers {:?}, directly against the fake {:?}",
        f.get_pods_median(&kc, 5),
        f.get_pods_median(&fake_kc.display().to_string(), 5)
    );
    // Desired state is not starved by a busy tunnel on TCP links either (each P1
    // must arrive; the figures are printed, not asserted).
    let placement = dir.join("p1-placement.yaml");
    write(&placement, P1_PLACEMENT);
    let (ok, _, err) = relay_cli(
        &dir,
        api_port,
        &["apply", "-f", &placement.display().to_string()],
    );
    assert!(ok, "{err}");
    let (idle, busy, rate) = p1_idle_and_busy(&f, &rt, &fake, &kc, 3);
    println!(
        "figure: P1 over TLS/TCP links, median of 3: idle {idle:?}, with a 1 MB/s logs -f on the same links {busy:?}; the logs -f carried {rate:.2} MB/s"
    );
    rt.block_on(fake.set_log_rate(50_000_000));
    let started = Instant::now();
    let text = f.follow(&kc, "web-0", 2);
    println!(
        "figure: logs -f through three tiers over TLS/TCP, fake offering 50 MB/s: {:.2} MB/s",
        text.len() as f64 / started.elapsed().as_secs_f64() / 1e6
    );
}

const P1_PLACEMENT: &str = "
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: p1 }
spec:
  objects: [ { selector: { matchLabels: { app: p1 } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

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
