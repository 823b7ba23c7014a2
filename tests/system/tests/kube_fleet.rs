//! The fixture of the API conformance tests (issue 45: `python_e2e`, `kubectl_verbs`,
//! `helm_wait`, `kube_controller`): a `relay up` hierarchy of processes with four
//! simulated clusters, three of them `role=pos`, its kubeconfig, the real clients, and
//! the root's own view of where an object runs (`relay get -o summary`), which is how
//! each test checks that the selected clusters, and only those, hold a result. The
//! Kubernetes API tests with a topology of their own (`kube_cli`, `kube_delete`) start
//! it with [`start`].

#![allow(clippy::unwrap_used)]
// Synchronous helpers driving processes: a sleep between polls blocks nothing else.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use serde_json::Value;

/// Two relays, four clusters: `role=pos` selects eu-1, eu-2 and us-1, never us-2.
pub(crate) const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: conformance }
spec:
  root: { name: center }
  relays:
    - { name: eu, parent: center, labels: { region: eu } }
    - { name: us, parent: center, labels: { region: us } }
  clusters:
    - { name: eu-1, parent: eu, labels: { role: pos } }
    - { name: eu-2, parent: eu, labels: { role: pos } }
    - { name: us-1, parent: us, labels: { role: pos } }
    - { name: us-2, parent: us, labels: { role: kiosk } }
";

/// The clusters `role=pos` selects, sorted.
pub(crate) const POS: [&str; 3] = ["eu-1", "eu-2", "us-1"];

/// A running hierarchy, stopped when dropped.
pub(crate) struct Fleet {
    child: Child,
    /// The test's directory: the files written with [`Fleet::write`] and `HOME`.
    pub(crate) dir: PathBuf,
    /// `relay up`'s `STRATA_*` variables, for the `relay` CLI.
    pub(crate) env: Vec<(String, String)>,
    /// The kubeconfig `relay up` wrote (`DATA/kubeconfig`).
    pub(crate) kubeconfig: PathBuf,
    /// kubectl 1.33, Helm 4 and, when it could be had, kubectl 1.20 (when asked for).
    clients: Option<PathBuf>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        common::stop_relay_up(&mut self.child);
    }
}

/// Starts [`TOPOLOGY`] in `tmp` with an admin token and the real clients; returns once
/// `relay up` printed its credentials and the kubeconfig's path and all four clusters
/// report to the root.
pub(crate) fn up(tmp: &Path) -> Fleet {
    up_with_tokens(tmp, "")
}

/// [`up`], with more lines for the tokens file (`TOKEN user=NAME role=view`, ...)
/// after the admin's.
pub(crate) fn up_with_tokens(tmp: &Path, more: &str) -> Fleet {
    let tokens = format!("admin-token-0123456789\n{more}");
    let f = start(tmp, TOPOLOGY, &tokens, true);
    f.eventually("all four clusters report to the root", |f| {
        let out = f.run("kubectl", &["get", "clusters", "-o", "name"]);
        String::from_utf8_lossy(&out.stdout).lines().count() == 4
    });
    f
}

/// Starts `topology` with the tokens file `tokens` in `tmp` (`relay up`'s data in
/// `tmp/data`), with the real Kubernetes clients when `clients`; returns once `relay up`
/// printed its credentials and the kubeconfig's path.
pub(crate) fn start(tmp: &Path, topology: &str, tokens: &str, clients: bool) -> Fleet {
    let clients = clients.then(common::kube_clients);
    let file = tmp.join("topology.yaml");
    std::fs::write(&file, topology).unwrap();
    let data = tmp.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("api.tokens"), tokens).unwrap();
    let (child, rx) = common::relay_up(&file, &data);
    let (mut env, mut kubeconfig) = (None, None);
    for _ in 0..1200 {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            if line.contains("export STRATA_SERVER=") {
                env = Some(common::export_env(&line));
            }
            if let Some(path) = line.trim().strip_prefix("export KUBECONFIG=") {
                kubeconfig = Some(PathBuf::from(path));
            }
        }
        if env.is_some() && kubeconfig.is_some() {
            break;
        }
    }
    Fleet {
        child,
        dir: tmp.to_owned(),
        env: env.expect("relay up printed its STRATA_* variables"),
        kubeconfig: kubeconfig.expect("relay up printed export KUBECONFIG="),
        clients,
    }
}

impl Fleet {
    /// A command for `program` (`relay`, or a client in [`Fleet::clients`]) with the
    /// fleet's kubeconfig, credentials and `HOME`, in the test's directory.
    pub(crate) fn command(&self, program: &str) -> Command {
        let path = if program == "relay" {
            common::bin("relay")
        } else {
            self.clients().join(program)
        };
        let mut c = Command::new(path);
        c.envs(self.env.iter().cloned())
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.dir)
            .current_dir(&self.dir);
        c
    }

    /// Where the real clients are.
    ///
    /// # Panics
    ///
    /// When the fleet was started without them.
    pub(crate) fn clients(&self) -> &Path {
        self.clients
            .as_deref()
            .expect("this fleet was started without the Kubernetes clients")
    }

    pub(crate) fn run(&self, program: &str, args: &[&str]) -> Output {
        self.command(program).args(args).output().unwrap()
    }

    /// Runs a program that must fail; returns its stderr.
    pub(crate) fn fails(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        assert!(!out.status.success(), "{program} {args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// A kube client of the space `default` from `relay up`'s kubeconfig, with `token`
    /// in place of the admin's when given; it does not retry, so that each refusal is
    /// seen as answered.
    pub(crate) async fn kube_client(&self, token: Option<&str>) -> kube::Client {
        let mut text = std::fs::read_to_string(&self.kubeconfig).unwrap();
        if let Some(t) = token {
            text = text.replace("admin-token-0123456789", t);
        }
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
    }

    /// Runs a program; `Ok(stdout)` when it succeeds, else `Err` with the command,
    /// its exit status and everything it printed.
    pub(crate) fn try_ok(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let out = self.run(program, args);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(failed(program, args, &out))
        }
    }

    /// Runs a program; panics with its output unless it succeeds; returns stdout.
    pub(crate) fn ok(&self, program: &str, args: &[&str]) -> String {
        self.try_ok(program, args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Writes `text` to `name` in the test's directory; returns the path.
    pub(crate) fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// The object as the root holds it (`relay get KIND NAME [-n NS] -o json`), or
    /// `None` when the root has no such object.
    pub(crate) fn object(&self, kind: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        let mut args = vec!["get", kind, name, "-o", "json"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        let out = self.run("relay", &args);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// The root's summary of `kind/name` in `ns`: for each placement that selects it,
    /// (placement, expected clusters, available clusters).
    pub(crate) fn placements(&self, kind: &str, ns: &str, name: &str) -> Vec<(String, u64, u64)> {
        let out = self.run("relay", &["get", kind, name, "-n", ns, "-o", "summary"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let Some(ps) = v
            .as_array()
            .and_then(|a| a.first())
            .and_then(|o| o["placements"].as_array())
        else {
            return Vec::new();
        };
        ps.iter()
            .map(|p| {
                let s = &p["summary"];
                (
                    p["placement"].as_str().unwrap_or_default().to_owned(),
                    s["expected"].as_u64().unwrap_or(0),
                    s["health"]["available"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }

    /// (expected, available) clusters of the first placement that selects `kind/name`
    /// in `ns`, if one does.
    pub(crate) fn placed(&self, kind: &str, ns: &str, name: &str) -> Option<(u64, u64)> {
        let first = self.placements(kind, ns, name).into_iter().next()?;
        Some((first.1, first.2))
    }

    /// The clusters a Placement chose, as the root's decisions name them, sorted.
    pub(crate) fn chosen(&self, placement: &str) -> Vec<String> {
        let out = self.run("relay", &["get", "placement", placement, "-o", "summary"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let mut c: Vec<String> = v
            .as_array()
            .and_then(|a| a.first())
            .and_then(|o| o["decisions"]["clusters"].as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        c.sort_unstable();
        c
    }

    /// Waits (up to 60 s) until `kind/name` in `ns` is held by exactly the clusters
    /// `placement` chose, which must be [`POS`], and is available on each of them. `Err`
    /// says what the root reported last.
    pub(crate) fn landed_on_pos(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
        placement: &str,
    ) -> Result<(), String> {
        let want = (placement.to_owned(), POS.len() as u64, POS.len() as u64);
        let mut last = (Vec::new(), Vec::new());
        for _ in 0..600 {
            let chosen = self.chosen(placement);
            let placed = self.placements(kind, ns, name);
            if chosen == POS && placed == std::slice::from_ref(&want) {
                return Ok(());
            }
            last = (chosen, placed);
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "{kind} {ns}/{name} did not land on exactly {POS:?} through placement \
             {placement}: the root says chosen {:?}, placements (name, expected, available) {:?}",
            last.0, last.1
        ))
    }

    /// Polls `check` every 100 ms for up to 30 s; panics naming `what` if it never holds.
    pub(crate) fn eventually(&self, what: &str, check: impl Fn(&Fleet) -> bool) {
        if !self.within(300, check) {
            panic!("timed out waiting until {what}");
        }
    }

    /// Whether `check` holds within `polls` polls 100 ms apart.
    pub(crate) fn within(&self, polls: u32, check: impl Fn(&Fleet) -> bool) -> bool {
        for _ in 0..polls {
            if check(self) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

/// What a failed command said: the command, its exit status, stdout and stderr.
pub(crate) fn failed(program: &str, args: &[&str], out: &Output) -> String {
    format!(
        "{program} {} ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A value at a JSON pointer of an object, as text (`""` when absent).
pub(crate) fn at(v: &Value, pointer: &str) -> String {
    match v.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}
