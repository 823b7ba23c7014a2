//! `relay up` of a small topology: real processes over QUIC on loopback reach
//! all-connected, the root answers with the printed credentials, SIGTERM stops every
//! process (none left running), and a second run on the same `--data` comes back on the
//! same addresses. Also: rendered agent configurations load with the agent's parser.

#![allow(clippy::unwrap_used)]
// integration tests may unwrap
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::Duration;

use strata_agent::config::AgentConfig;
use strata_topology::files;
use strata_topology::render::{Process, RenderOptions, render};

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: small }
spec:
  root: { name: center }
  relays:
    - { name: eu, parent: center, labels: { region: eu } }
    - { name: eu-site, parent: eu, labels: { site: one } }
  clusters:
    - { name: shop-1, parent: eu-site, labels: { role: pos } }
    - { name: shop-2, parent: eu-site }
    - { name: depot, parent: eu, properties: { size: large } }
";

/// Processes running a configuration from `dir` (the nodes `relay up` started).
fn processes_in(dir: &Path) -> Vec<String> {
    let needle = format!("--config {}", dir.display());
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(&needle) {
            found.push(cmd);
        }
    }
    found
}

struct Up {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Up {
    fn start(file: &Path, dir: &Path) -> Up {
        Up::start_with(file, dir, &[])
    }

    fn start_with(file: &Path, dir: &Path, args: &[&str]) -> Up {
        let (child, lines) = common::relay_up_with(file, dir, args);
        Up {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one contains `what` (at most 120 s); returns it.
    fn until(&mut self, what: &str, dir: &Path) -> String {
        for _ in 0..1200 {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(what) {
                        return line;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let logs: Vec<String> = ["center", "eu", "eu-site", "shop-1", "depot"]
            .iter()
            .map(|n| {
                let log = std::fs::read_to_string(files::node_log(dir, n)).unwrap_or_default();
                format!("--- {n}\n{log}")
            })
            .collect();
        panic!(
            "relay up never printed {what:?}; it printed:\n{}\n{}",
            self.seen.join("\n"),
            logs.join("\n")
        );
    }

    fn terminate(mut self, dir: &Path) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        self.until("stopped every process", dir);
        let mut status = None;
        for _ in 0..300 {
            status = self.child.try_wait().unwrap();
            if status.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let Some(status) = status else {
            let _ = self.child.kill();
            panic!("relay up did not exit within 30 s of SIGTERM");
        };
        assert!(status.success(), "relay up exited with {status}");
    }
}

impl Drop for Up {
    /// On a failed assertion: SIGTERM, so that `relay up` stops its nodes (a SIGKILL
    /// would leave them running), then SIGKILL after 30 s.
    fn drop(&mut self) {
        common::stop_relay_up(&mut self.child);
    }
}

#[test]
fn relay_up_connects_every_link_and_stops_every_process() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("small.yaml");
    std::fs::write(&file, TOPOLOGY).unwrap();
    let dir = tmp.path().join("data");

    let mut up = Up::start(&file, &dir);
    up.until("started 3 relays and 3 agents", &dir);
    // The topology names no backend: `relay up` simulates the clusters, and says so.
    let said = up.until("clusters are simulated", &dir);
    assert!(
        said.starts_with("3 of 3 clusters are simulated (shop-1, shop-2, depot)"),
        "{said}"
    );
    up.until("links connected: 5/5", &dir);
    up.until("every link is connected", &dir);
    let export = up.until("export STRATA_SERVER=", &dir);
    assert_eq!(processes_in(&dir).len(), 6, "{:?}", processes_in(&dir));

    // The printed credentials reach the root, which knows every cluster by its path
    // (once the inventory has climbed there: links connect before reports arrive).
    let mut clusters = String::new();
    for _ in 0..100 {
        let out = Command::new(common::bin("relay"))
            .arg("clusters")
            .envs(common::export_env(&export))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        clusters = String::from_utf8_lossy(&out.stdout).into_owned();
        if ["shop-1", "shop-2", "depot"]
            .iter()
            .all(|c| clusters.contains(c))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for c in [
        "center/eu/eu-site  ",
        "shop-1",
        "shop-2",
        "depot",
        "region=eu",
    ] {
        assert!(clusters.contains(c), "{c} missing:\n{clusters}");
    }

    up.terminate(&dir);
    assert_eq!(processes_in(&dir), Vec::<String>::new(), "stray processes");
    let root_log = || std::fs::read_to_string(dir.join("logs/center.log")).unwrap();
    assert!(
        !root_log().contains(" INFO "),
        "nodes log at warn by default: {}",
        root_log()
    );

    // Same data directory: same certificates and addresses, and it connects again; the
    // nodes log at the level given to relay up.
    let mut again = Up::start_with(&file, &dir, &["--log", "info"]);
    again.until("every link is connected", &dir);
    assert_eq!(again.until("export STRATA_SERVER=", &dir), export);
    let log = root_log();
    assert!(
        log.contains(" INFO ") && log.contains("node started"),
        "relay --log info up: {log}"
    );
    again.terminate(&dir);
    assert_eq!(processes_in(&dir), Vec::<String>::new(), "stray processes");
}

#[test]
fn rendered_agent_configs_load_with_the_agents_parser() {
    let tmp = tempfile::tempdir().unwrap();
    let t = strata_topology::parse(TOPOLOGY, Path::new("small.yaml"))
        .unwrap()
        .topology;
    let options = RenderOptions {
        simulated_ready_delay_ms: Some(42),
        simulate_unset: true,
        ..RenderOptions::default()
    };
    let rendered = render(&t, tmp.path(), &options).unwrap();
    let site = rendered.nodes.iter().find(|n| n.name == "eu-site").unwrap();
    let site_listen = strata_relay::config::NodeConfig::load(&site.config)
        .unwrap()
        .listen
        .unwrap();
    let agents: Vec<AgentConfig> = rendered
        .nodes
        .iter()
        .filter(|n| n.process == Process::Agent)
        .map(|n| AgentConfig::load(&n.config).unwrap())
        .collect();
    assert_eq!(agents.len(), 3);
    let shop = &agents[0];
    assert_eq!(shop.cluster, "shop-1");
    assert_eq!(shop.labels["role"], "pos");
    assert_eq!(shop.parent.name, "eu-site");
    assert_eq!(shop.parent.address, site_listen.into());
    match &shop.backend {
        strata_agent::config::Backend::Simulated(sim) => {
            assert_eq!(sim.ready_delay, Duration::from_millis(42));
        }
        other => panic!("a rendered agent drives a simulated cluster, not {other:?}"),
    }
    assert_eq!(shop.tls.ca, files::node_ca_cert(tmp.path(), "shop-1"));
    assert_eq!(agents[2].properties["size"], "large");
}

#[test]
fn rendered_agents_drive_the_backend_the_topology_names_and_none_without_one() {
    let tmp = tempfile::tempdir().unwrap();
    let text = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: real }
spec:
  root: { name: center }
  clusters:
    - { name: store-1, parent: center, kubernetes: { inCluster: true } }
    - { name: lab-1, parent: center, kubernetes: { kubeconfig: lab-1.kubeconfig, context: lab } }
    - { name: sim-1, parent: center, simulated: { readyDelayMs: 7 } }
    - { name: sim-2, parent: center, simulated: {} }
    - { name: unsaid, parent: center }
";
    let t = strata_topology::parse(text, Path::new("real.yaml"))
        .unwrap()
        .topology;
    let options = RenderOptions {
        simulated_ready_delay_ms: Some(42),
        ..RenderOptions::default()
    };
    let rendered = render(&t, tmp.path(), &options).unwrap();
    assert_eq!(rendered.simulated, ["sim-1", "sim-2"]);
    let load = |name: &str| AgentConfig::load(&files::node_config(tmp.path(), name));
    use strata_agent::config::Backend;
    use strata_agent::kubernetes::Connect;
    assert!(matches!(
        load("store-1").unwrap().backend,
        Backend::Kubernetes(ref k) if k.connect == Connect::InCluster
    ));
    match load("lab-1").unwrap().backend {
        Backend::Kubernetes(k) => assert_eq!(
            k.connect,
            Connect::Kubeconfig {
                path: files::node_dir(tmp.path(), "lab-1").join("lab-1.kubeconfig"),
                context: Some("lab".into())
            }
        ),
        other => panic!("{other:?}"),
    }
    for (name, ms) in [("sim-1", 7), ("sim-2", 42)] {
        match load(name).unwrap().backend {
            Backend::Simulated(s) => assert_eq!(s.ready_delay, Duration::from_millis(ms)),
            other => panic!("{other:?}"),
        }
    }
    let refused = load("unsaid").unwrap_err().to_string();
    assert!(
        refused.contains("cluster \"unsaid\" names no backend: say how the agent reaches its cluster with `kubernetes: { in_cluster: true }`"),
        "{refused}"
    );
}
