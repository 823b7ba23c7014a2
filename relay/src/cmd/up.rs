//! `relay up FILE`: a whole hierarchy from a topology file, as processes on this machine.
//!
//! Issues what is missing of the certificates, renders every node's configuration into
//! its directory `nodes/NAME/` (loopback ports assigned and kept in `ports.yaml`, metrics
//! on every relay; see [`strata_topology::files`]), starts one
//! `relay serve` per relay and one `agent run` per cluster (a simulated cluster), waits
//! until every relay has all its children connected (read from each relay's metrics),
//! and on SIGTERM or Ctrl-C stops every process it started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use strata_topology::certs::{self, CertOptions};
use strata_topology::files;
use strata_topology::render::{self, NodeFile, Process, RenderOptions, Rendered};
use strata_topology::{Checked, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::ApiClient;

/// How to run the hierarchy.
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// `summary_interval_ms` of every relay (their default when `None`).
    pub summary_interval_ms: Option<u64>,
    /// How long simulated workloads take to become available (the agent's default when
    /// `None`), where the topology does not say. Clusters the topology names no backend
    /// for are simulated too: `relay up` and `relay demo` say so.
    pub simulated_ready_delay_ms: Option<u64>,
    /// The `RUST_LOG` of the nodes (`warn` when `None`).
    pub log: Option<String>,
}

/// A running hierarchy. Dropping it kills what is still running; [`Hierarchy::stop`]
/// asks first.
pub struct Hierarchy {
    procs: Vec<(String, Child)>,
    /// The directory with the hierarchy's files, a directory per node (`nodes/NAME/`:
    /// certificate, key, configuration, store) and logs (`logs/NAME.log`).
    pub dir: PathBuf,
    /// The topology.
    pub topology: Topology,
    /// The rendered configurations.
    pub rendered: Rendered,
    /// A bearer token the root's API accepts.
    pub token: String,
}

impl std::fmt::Debug for Hierarchy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hierarchy")
            .field("dir", &self.dir)
            .field("processes", &self.procs.len())
            .finish_non_exhaustive()
    }
}

/// How long `relay up` waits for every link.
const CONNECT_DEADLINE: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(200);
/// `println!` that ignores a closed standard output: `relay up | head`, or a caller
/// that stopped reading, must not bring the hierarchy down (`println!` panics then).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// How many of its last log lines an error names when a process exits.
const LOG_TAIL: usize = 12;

impl Hierarchy {
    /// Issues, renders and starts everything; returns once every process is started
    /// (not yet connected: see [`Hierarchy::wait_connected`]).
    pub fn start(topology: Topology, dir: &Path, options: &UpOptions) -> anyhow::Result<Self> {
        let relay = std::env::current_exe().context("cannot find the relay binary")?;
        let agent = relay.with_file_name("agent");
        if !topology.clusters.is_empty() && !agent.exists() {
            anyhow::bail!(
                "the agent binary is not next to relay ({}); build it with `cargo build -p strata-agent` (same profile)",
                agent.display()
            );
        }
        certs::issue_all(&topology, dir, &CertOptions::default())?;
        let rendered = render::render(
            &topology,
            dir,
            &RenderOptions {
                metrics_everywhere: true,
                summary_interval_ms: options.summary_interval_ms,
                simulated_ready_delay_ms: options.simulated_ready_delay_ms,
                simulate_unset: true,
            },
        )?;
        let token_file = files::api_tokens(dir);
        let token = std::fs::read_to_string(&token_file)
            .with_context(|| format!("cannot read {}", token_file.display()))?
            .lines()
            .find_map(|l| l.split_whitespace().next().filter(|t| !t.starts_with('#')))
            .unwrap_or_default()
            .to_owned();
        let logs = files::logs(dir);
        std::fs::create_dir_all(&logs)
            .with_context(|| format!("cannot create {}", logs.display()))?;
        let mut h = Hierarchy {
            procs: Vec::new(),
            dir: dir.to_owned(),
            topology,
            rendered,
            token,
        };
        let log_level = options.log.clone().unwrap_or_else(|| "warn".into());
        for node in h.rendered.nodes.clone() {
            let (program, verb) = match node.process {
                Process::Relay => (&relay, "serve"),
                Process::Agent => (&agent, "run"),
            };
            let log_path = files::node_log(dir, &node.name);
            let log = std::fs::File::create(&log_path)
                .with_context(|| format!("cannot create {}", log_path.display()))?;
            let child = Command::new(program)
                .arg(verb)
                .arg("--config")
                .arg(&node.config)
                .env("RUST_LOG", &log_level)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .with_context(|| format!("cannot start {}", node.name))?;
            h.procs.push((node.name.clone(), child));
        }
        Ok(h)
    }

    /// Relays and agents started.
    pub fn counts(&self) -> (usize, usize) {
        let relays = self.topology.relays.len();
        (relays, self.procs.len().saturating_sub(relays))
    }

    /// What `relay up` and `relay demo` say about the clusters they simulate (the
    /// topology says `simulated`, or names no backend); `None` when none is.
    pub fn simulated_note(&self) -> Option<String> {
        let simulated = &self.rendered.simulated;
        if simulated.is_empty() {
            return None;
        }
        const SHOWN: usize = 5;
        let mut names = simulated[..simulated.len().min(SHOWN)].join(", ");
        if simulated.len() > SHOWN {
            names.push_str(&format!(" and {} more", simulated.len() - SHOWN));
        }
        Some(format!(
            "{} of {} clusters are simulated ({names}): nothing is applied to a real cluster there; give a cluster `kubernetes:` in the topology to drive a real one",
            simulated.len(),
            self.topology.clusters.len()
        ))
    }

    /// Links in the hierarchy (one per child).
    pub fn links(&self) -> usize {
        self.rendered.nodes.iter().map(|n| n.children).sum()
    }

    /// A client of the root's API.
    pub fn client(&self) -> anyhow::Result<ApiClient> {
        Ok(ApiClient::new(
            self.rendered.api,
            &self.rendered.root,
            &files::ca_cert(&self.dir),
            &self.token,
        )?)
    }

    /// What to export to reach the root with the `relay` CLI.
    pub fn env_lines(&self) -> String {
        format!(
            "export STRATA_SERVER={} STRATA_SERVER_NAME={} STRATA_CA={} STRATA_TOKEN={} STRATA_TOKENS={}",
            self.rendered.api,
            self.rendered.root,
            files::ca_cert(&self.dir).display(),
            self.token,
            files::api_tokens(&self.dir).display(),
        )
    }

    /// Writes `DIR/kubeconfig` for the space `default` with the first token of the
    /// root's tokens file (its server the address the API certificate covers); returns
    /// its path. Call once the root serves.
    pub async fn write_kubeconfig(&self) -> anyhow::Result<PathBuf> {
        self.write_kubeconfig_for(None).await
    }

    /// Writes `DIR/kubeconfig-CLUSTER`: `cluster`'s own Kubernetes API through the
    /// tiers (the debug tunnel), with the same token as [`Hierarchy::write_kubeconfig`];
    /// returns its path.
    pub async fn write_cluster_kubeconfig(&self, cluster: &str) -> anyhow::Result<PathBuf> {
        self.write_kubeconfig_for(Some(cluster)).await
    }

    async fn write_kubeconfig_for(&self, cluster: Option<&str>) -> anyhow::Result<PathBuf> {
        let ca_path = files::ca_cert(&self.dir);
        let ca = std::fs::read(&ca_path)
            .with_context(|| format!("cannot read {}", ca_path.display()))?;
        let tokens = std::fs::read_to_string(files::api_tokens(&self.dir)).unwrap_or_default();
        let user = crate::api::auth::parse_tokens(&tokens)
            .ok()
            .and_then(|grants| grants.into_iter().find(|g| g.token == self.token))
            .map(|g| g.user);
        let covered =
            crate::cmd::kubeconfig::covers_address(&self.rendered.api.into(), &ca_path).await;
        let server = self.rendered.api.to_string();
        let text = crate::kube::kubeconfig::kubeconfig(&crate::kube::kubeconfig::KubeconfigSpec {
            server: &server,
            tls_server_name: (!covered).then_some(self.rendered.root.as_str()),
            ca_pem: &ca,
            token: &self.token,
            space: "default",
            user: user.as_deref(),
            cluster,
        });
        let name = cluster.map_or_else(|| "kubeconfig".to_owned(), |c| format!("kubeconfig-{c}"));
        let path = std::path::absolute(self.dir.join(name))
            .with_context(|| format!("{}: no absolute path", self.dir.display()))?;
        strata_topology::certs::write_secret(&path, &text)?;
        Ok(path)
    }

    /// Waits until every relay has all its children connected, calling `progress` with
    /// (connected, total) links when the count changes. Fails when a process exits or
    /// the deadline passes, naming what is missing.
    pub async fn wait_connected(
        &mut self,
        mut progress: impl FnMut(usize, usize),
    ) -> anyhow::Result<()> {
        let total = self.links();
        let relays: Vec<NodeFile> = self
            .rendered
            .nodes
            .iter()
            .filter(|n| n.process == Process::Relay)
            .cloned()
            .collect();
        let mut last = None;
        let mut missing = Vec::new();
        let rounds = CONNECT_DEADLINE.as_millis() / POLL.as_millis();
        for _ in 0..rounds {
            self.check_alive()?;
            let mut connected = 0;
            missing.clear();
            for r in &relays {
                let n = match r.metrics {
                    Some(addr) => children_connected(addr).await.unwrap_or(0),
                    None => 0,
                };
                connected += n.min(r.children);
                if n < r.children {
                    missing.push(format!("{} ({n}/{})", r.name, r.children));
                }
            }
            if last != Some(connected) {
                progress(connected, total);
                last = Some(connected);
            }
            if connected == total {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
        anyhow::bail!(
            "not every link connected within {CONNECT_DEADLINE:?}; relays missing children: {}; see the logs in {}",
            missing.join(", "),
            files::logs(&self.dir).display()
        )
    }

    /// Fails naming the first process that exited, with the end of its log.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, child) in &mut self.procs {
            if let Ok(Some(status)) = child.try_wait() {
                // The log's last lines go with the error: whoever ran this may have
                // removed the directory by the time they read it (a test's, say).
                let log = files::node_log(&self.dir, name);
                let tail = std::fs::read_to_string(&log)
                    .map(|text| {
                        let lines: Vec<&str> = text.lines().collect();
                        lines[lines.len().saturating_sub(LOG_TAIL)..].join("\n")
                    })
                    .unwrap_or_default();
                anyhow::bail!(
                    "{name} exited ({status}); see {}; its last lines:\n{tail}",
                    log.display()
                );
            }
        }
        Ok(())
    }

    /// SIGTERM to every process (children first), then up to 10 s for each to exit
    /// before SIGKILL. Returns the processes that had to be killed.
    pub async fn stop(&mut self) -> Vec<String> {
        for (_, child) in self.procs.iter().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let mut killed = Vec::new();
        for (name, child) in &mut self.procs {
            let mut stopped = false;
            for _ in 0..200 {
                if let Ok(Some(_)) = child.try_wait() {
                    stopped = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if !stopped {
                let _ = child.kill();
                let _ = child.wait();
                killed.push(name.clone());
            }
        }
        self.procs.clear();
        killed
    }
}

impl Drop for Hierarchy {
    /// On an early exit, nothing is left running.
    fn drop(&mut self) {
        for (_, child) in &mut self.procs {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `strata_children_connected` from a relay's metrics.
async fn children_connected(addr: std::net::SocketAddr) -> Option<usize> {
    let text = tokio::time::timeout(Duration::from_secs(2), async {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = String::new();
        tcp.read_to_string(&mut out).await.ok()?;
        Some(out)
    })
    .await
    .ok()??;
    text.lines()
        .find(|l| l.starts_with("strata_children_connected{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as usize)
}

/// A directory removed on drop (runs without `--data`).
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new directory under the system's temporary directory.
    pub fn new(prefix: &str) -> anyhow::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!(
            "{prefix}-{:016x}",
            strata_node::process::random_u64()
        ));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Prints the warnings of a topology that compiled.
pub fn print_warnings(path: &Path, checked: &Checked) {
    for w in &checked.warnings {
        eprintln!("warning: {}: {w}", path.display());
    }
}

/// `relay up FILE [--data DIR]`: runs until SIGTERM or Ctrl-C.
/// The nodes log with `log` (`relay --log`), else `RUST_LOG`, else `warn`; in the format
/// of `STRATA_LOG_FORMAT`, which they inherit.
pub async fn run(file: &Path, data: Option<PathBuf>, log: Option<String>) -> anyhow::Result<()> {
    let checked = strata_topology::load(file)?;
    print_warnings(file, &checked);
    let tmp;
    let dir = match data {
        Some(d) => d,
        None => {
            tmp = TempDir::new("strata-up")?;
            tmp.0.clone()
        }
    };
    let options = UpOptions {
        log: log.or_else(|| std::env::var("RUST_LOG").ok()),
        ..UpOptions::default()
    };
    // One listener for the whole run: a SIGTERM between two waits is kept, not lost.
    let mut signals = strata_node::process::Signals::new();
    let mut h = Hierarchy::start(checked.topology, &dir, &options)?;
    let (relays, agents) = h.counts();
    say!(
        "topology {:?} in {}: started {relays} relays and {agents} agents",
        h.topology.name,
        dir.display()
    );
    if let Some(note) = h.simulated_note() {
        say!("{note}");
    }
    let connected = tokio::select! {
        r = h.wait_connected(|n, total| say!("links connected: {n}/{total}")) => r,
        _ = signals.recv() => {
            say!("stopping");
            report_stop(h.stop().await);
            return Ok(());
        }
    };
    if let Err(e) = connected {
        report_stop(h.stop().await);
        return Err(e);
    }
    let kubeconfig = match h.write_kubeconfig().await {
        Ok(path) => path,
        Err(e) => {
            report_stop(h.stop().await);
            return Err(e);
        }
    };
    say!(
        "every link is connected. The root {:?} serves its API on {}:\n  {}\n  relay clusters\nkubectl and Helm (space default):\n  export KUBECONFIG={}\n  kubectl get deploy -A\nCtrl-C or SIGTERM stops every process.",
        h.rendered.root,
        h.rendered.api,
        h.env_lines(),
        kubeconfig.display(),
    );
    let died = loop {
        tokio::select! {
            _ = signals.recv() => break None,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                if let Err(e) = h.check_alive() {
                    break Some(e);
                }
            }
        }
    };
    say!("stopping");
    report_stop(h.stop().await);
    died.map_or(Ok(()), Err)
}

fn report_stop(killed: Vec<String>) {
    if killed.is_empty() {
        say!("stopped every process");
    } else {
        say!(
            "stopped every process ({} did not stop on SIGTERM and were killed: {})",
            killed.len(),
            killed.join(", ")
        );
    }
}
