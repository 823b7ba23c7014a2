//! A rollout driven from the outside, against a `relay up` hierarchy of processes with
//! simulated clusters: `relay rollout pause|resume|undo|abort|status`, the same verbs
//! through `kubectl annotate` and `kubectl patch`, and `kubectl wait` on the
//! Placement's conditions (kubectl 1.33, installed by `.ci/install-kube-clients`).
//! And a root killed with SIGKILL in the middle of a rollout (nodes rendered by `relay
//! topology certs|render`, each its own process): restarted on the same store, it goes
//! on from the wave it was at.

#![allow(clippy::unwrap_used)]
// integration tests may unwrap
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: rollout }
spec:
  root: { name: center }
  relays:
    - { name: eu, parent: center, labels: { region: eu } }
    - { name: us, parent: center, labels: { region: us } }
  clusters:
    - { name: eu-1, parent: eu, labels: { role: pos }, simulated: {} }
    - { name: eu-2, parent: eu, labels: { role: pos }, simulated: {} }
    - { name: us-1, parent: us, labels: { role: pos }, simulated: {} }
    - { name: us-2, parent: us, labels: { role: pos }, simulated: {} }
";

/// The namespace the Deployment lives in at the root (not placed: simulated clusters
/// need none).
pub(crate) const NAMESPACE: &str = "apiVersion: v1
kind: Namespace
metadata: { name: shop }
";

const PLACEMENT: &str = "
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: web }
spec:
  objects: [ { selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
  rollout:
    waves: [ { name: canary, clusters: 1 }, { percent: 100 } ]
    gate: { available: 100%, for: 1s, timeout: 60s }
";

pub(crate) fn app(image: &str) -> String {
    format!(
        "
apiVersion: apps/v1
kind: Deployment
metadata: {{ name: web, namespace: shop, labels: {{ app: web }} }}
spec:
  replicas: 1
  selector: {{ matchLabels: {{ app: web }} }}
  template:
    metadata: {{ labels: {{ app: web }} }}
    spec: {{ containers: [ {{ name: web, image: \"{image}\" }} ] }}
"
    )
}

struct Up {
    child: Child,
}

impl Drop for Up {
    fn drop(&mut self) {
        common::stop_relay_up(&mut self.child);
    }
}

struct Fleet {
    dir: PathBuf,
    env: Vec<(String, String)>,
    clients: PathBuf,
}

impl Fleet {
    fn run(&self, program: &str, args: &[&str]) -> Output {
        let path = if program == "relay" {
            common::bin("relay")
        } else {
            self.clients.join(program)
        };
        Command::new(path)
            .args(args)
            .envs(self.env.iter().cloned())
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .env("HOME", &self.dir)
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }

    fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn apply(&self, name: &str, text: &str) {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        self.ok("kubectl", &["apply", "-f", path.to_str().unwrap()]);
    }

    fn wait_for(&self, condition: &str) {
        self.ok(
            "kubectl",
            &[
                "wait",
                &format!("--for=condition={condition}"),
                "placement/web",
                "--timeout=60s",
            ],
        );
    }

    /// `kubectl patch` of the placement's command annotation.
    fn patch(&self, verb: &str) {
        let body = format!(r#"{{"metadata":{{"annotations":{{"strata.dev/rollout":"{verb}"}}}}}}"#);
        self.ok(
            "kubectl",
            &["patch", "placement", "web", "--type=merge", "-p", &body],
        );
    }

    /// `relay rollout status web`: one line (it returns at once unless progressing).
    fn status(&self) -> String {
        self.ok("relay", &["rollout", "status", "web"])
    }
}

fn up(file: &Path, dir: &Path) -> (Up, Vec<(String, String)>) {
    let (child, rx) = common::relay_up(file, dir);
    let up = Up { child };
    for _ in 0..1200 {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100))
            && line.contains("export STRATA_SERVER=")
        {
            return (up, common::export_env(&line));
        }
    }
    panic!("relay up never printed its credentials");
}

#[test]
fn pause_resume_undo_and_abort_from_the_cli_and_kubectl() {
    let clients = common::kube_clients();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("rollout.yaml");
    std::fs::write(&file, TOPOLOGY).unwrap();
    let (_up, env) = up(&file, &tmp.path().join("data"));
    let f = Fleet {
        dir: tmp.path().to_owned(),
        env,
        clients,
    };
    let kubeconfig = f.ok("relay", &["kubeconfig"]);
    std::fs::write(f.dir.join("kubeconfig"), kubeconfig).unwrap();

    // The app exists before its placement: what it selects then counts as rolled out.
    f.apply("namespace.yaml", NAMESPACE);
    f.apply("app.yaml", &app("web:1"));
    f.apply("placement.yaml", PLACEMENT);
    f.wait_for("Complete");

    // A new revision, paused by the CLI at once: only the canary is released.
    f.apply("app.yaml", &app("web:2"));
    f.ok("relay", &["rollout", "pause", "web"]);
    f.wait_for("Paused");
    let line = f.status();
    assert!(
        line.contains("Paused") && line.contains("released 1 "),
        "{line}"
    );

    // Resumed through kubectl annotate: it goes through the second wave and completes
    // (kubectl wait sees the condition change on its watch).
    f.ok(
        "kubectl",
        &[
            "annotate",
            "placement",
            "web",
            "strata.dev/rollout=resume",
            "--overwrite",
        ],
    );
    f.wait_for("Complete");
    let line = f.status();
    assert!(
        line.contains("Complete") && line.contains("(2/2)"),
        "{line}"
    );

    // Undone by the CLI after completion: every cluster back on the previous revision.
    f.ok("relay", &["rollout", "undo", "web"]);
    f.wait_for("RolledBack");
    assert!(f.status().contains("undone by the user"), "{}", f.status());

    // Another revision, paused through kubectl annotate, aborted by the CLI.
    f.apply("app.yaml", &app("web:3"));
    f.ok(
        "kubectl",
        &[
            "annotate",
            "placement",
            "web",
            "strata.dev/rollout=pause",
            "--overwrite",
        ],
    );
    f.wait_for("Paused");
    f.ok("relay", &["rollout", "abort", "web"]);
    f.wait_for("RolledBack");
    assert!(f.status().contains("aborted by the user"), "{}", f.status());

    // Resumed from the CLI: it starts over from the canary and completes; undone
    // through kubectl patch.
    f.ok("relay", &["rollout", "resume", "web"]);
    f.wait_for("Complete");
    f.patch("undo");
    f.wait_for("RolledBack");
    assert!(f.status().contains("undone by the user"), "{}", f.status());

    // A fourth revision, paused by the CLI, aborted through kubectl patch.
    f.apply("app.yaml", &app("web:4"));
    f.ok("relay", &["rollout", "pause", "web"]);
    f.wait_for("Paused");
    f.patch("abort");
    f.wait_for("RolledBack");
    let line = f.status();
    assert!(
        line.contains("aborted by the user") && line.contains("revision 4 "),
        "{line}"
    );

    // `relay get placement` shows where the rollout stands.
    let table = f.ok("relay", &["get", "placement", "web"]);
    assert!(
        table.contains("rollout: web revision 4 RolledBack"),
        "{table}"
    );
}

/// The placement of the root-restart test: three waves, each held 2 s once healthy.
pub(crate) const THREE_WAVES: &str = "
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: web }
spec:
  objects: [ { selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
  rollout:
    waves: [ { name: canary, clusters: 1 }, { name: second, clusters: 1 }, { percent: 100 } ]
    gate: { available: 100%, for: 2s, timeout: 120s }
";

/// A hierarchy rendered by `relay topology certs|render`, each node its own process.
struct Nodes {
    dir: PathBuf,
    env: Vec<(String, String)>,
    procs: Vec<common::Proc>,
}

impl Nodes {
    fn start(dir: &Path) -> Nodes {
        let file = dir.join("rollout.yaml");
        std::fs::write(&file, TOPOLOGY).unwrap();
        let out = dir.join("out");
        let mut api = None;
        for verb in ["certs", "render"] {
            let run = Command::new(common::bin("relay"))
                .args([
                    "topology",
                    verb,
                    file.to_str().unwrap(),
                    "-o",
                    out.to_str().unwrap(),
                ])
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
            assert!(
                run.status.success(),
                "relay topology {verb}: {stdout}{}",
                String::from_utf8_lossy(&run.stderr)
            );
            // `root "center": API on 127.0.0.1:PORT; ...`
            api = api.or_else(|| {
                let (_, rest) = stdout.split_once("API on ")?;
                Some(rest.split(';').next()?.trim().to_owned())
            });
        }
        let api = api.expect("relay topology render names the API's address");
        let tokens = std::fs::read_to_string(out.join("api.tokens")).unwrap();
        let token = tokens
            .lines()
            .find_map(|l| l.split_whitespace().next().filter(|t| !t.starts_with('#')))
            .unwrap()
            .to_owned();
        let env = vec![
            ("STRATA_SERVER".to_owned(), api),
            ("STRATA_SERVER_NAME".to_owned(), "center".to_owned()),
            (
                "STRATA_CA".to_owned(),
                out.join("ca.crt").display().to_string(),
            ),
            ("STRATA_TOKEN".to_owned(), token),
        ];
        let mut nodes = Nodes {
            dir: out,
            env,
            procs: Vec::new(),
        };
        for name in ["center", "eu", "us", "eu-1", "eu-2", "us-1", "us-2"] {
            let p = nodes.spawn(name);
            nodes.procs.push(p);
        }
        for _ in 0..600 {
            let (ok, out) = nodes.relay(&["clusters"]);
            if ok
                && ["eu-1", "eu-2", "us-1", "us-2"]
                    .iter()
                    .all(|c| out.contains(c))
            {
                return nodes;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the root never knew the four clusters");
    }

    fn spawn(&self, name: &str) -> common::Proc {
        let config = self.dir.join("nodes").join(name).join("config.yaml");
        let (program, verb) = if ["center", "eu", "us"].contains(&name) {
            (common::bin("relay"), "serve")
        } else {
            (common::bin("agent"), "run")
        };
        common::Proc::spawn(
            &self.dir,
            name,
            &program,
            &[verb, "--config", config.to_str().unwrap()],
        )
    }

    /// The `relay` CLI against the root: success and standard output (with standard
    /// error after it when it failed).
    fn relay(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(common::bin("relay"))
            .args(args)
            .envs(self.env.iter().cloned())
            .output()
            .unwrap();
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            text.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        (out.status.success(), text)
    }

    fn apply(&self, name: &str, text: &str) {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        let (ok, out) = self.relay(&["apply", "-f", path.to_str().unwrap()]);
        assert!(ok, "relay apply -f {name}: {out}");
    }

    /// Polls `relay rollout status web` (every 100 ms, up to 60 s) until `done` holds
    /// for a line; `each` sees every line the root answered.
    fn until(&self, what: &str, mut each: impl FnMut(&str), done: impl Fn(&str) -> bool) {
        for _ in 0..600 {
            let (ok, line) = self.relay(&["rollout", "status", "web"]);
            if ok {
                each(&line);
                if done(&line) {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let names: Vec<String> = ["center", "eu", "us"].map(str::to_owned).to_vec();
        panic!(
            "timed out waiting until {what}\n{}",
            common::log_tails(&self.dir, &names, 20)
        );
    }

    /// Waits until all 4 clusters report the Deployment available at the revision the
    /// root numbers it now (`what` names it in the failure).
    fn available_everywhere(&self, what: &str) {
        let (_, out) = self.relay(&["get", "deployment", "web", "-n", "shop", "-o", "summary"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let rev = v[0]["revision"].as_u64().unwrap();
        for _ in 0..600 {
            if self.available_at(rev) == 4 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(self.available_at(rev), 4, "{what} on every cluster");
    }

    /// How many clusters report the Deployment available at revision `rev` (from the
    /// summary at the root).
    fn available_at(&self, rev: u64) -> u64 {
        let (ok, out) = self.relay(&["get", "deployment", "web", "-n", "shop", "-o", "summary"]);
        if !ok {
            return 0;
        }
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let s = &v[0]["placements"][0]["summary"];
        if v[0]["revision"] != rev || s["min_revision"] != rev || s["max_revision"] != rev {
            return 0;
        }
        s["health"]["available"].as_u64().unwrap_or(0)
    }
}

/// The wave index of a status line (`wave canary (1/3)` gives 1).
fn wave_index(line: &str) -> u64 {
    line.split_once(" (")
        .and_then(|(_, rest)| rest.split_once('/'))
        .and_then(|(i, _)| i.parse().ok())
        .unwrap_or_else(|| panic!("no wave in {line:?}"))
}

#[test]
fn a_root_killed_mid_rollout_resumes_from_its_store_where_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let mut nodes = Nodes::start(tmp.path());
    nodes.apply("namespace.yaml", NAMESPACE);
    nodes.apply("app.yaml", &app("web:1"));
    nodes.apply("placement.yaml", THREE_WAVES);
    nodes.until(
        "the rollout record exists",
        |_| {},
        |l| l.contains("Complete"),
    );
    nodes.available_everywhere("web:1");

    // web:2 rolls out; once the second wave is released the root dies hard.
    nodes.apply("app.yaml", &app("web:2"));
    nodes.until(
        "the second wave is released",
        |l| assert!(l.contains("revision 2 "), "{l}"),
        |l| wave_index(l) == 2 && l.contains("released 2 "),
    );
    nodes.procs[0].kill9();
    std::thread::sleep(Duration::from_secs(1));
    nodes.procs[0] = nodes.spawn("center");

    // Restarted on the same store it goes on from the second wave (never the canary
    // again, never another revision) to completion.
    let mut lines = Vec::new();
    nodes.until(
        "the rollout completes after the restart",
        |l| {
            lines.push(l.to_owned());
            assert!(l.contains("revision 2 "), "{lines:#?}");
            assert!(
                l.contains("Complete") || (l.contains("Progressing") && wave_index(l) >= 2),
                "{lines:#?}"
            );
        },
        |l| l.contains("Complete"),
    );
    // (The second wave's gate may pass before the first answer, never the third's.)
    assert!(
        lines[0].contains("Progressing") && wave_index(&lines[0]) >= 2,
        "the restarted root goes on from the second wave: {lines:#?}"
    );
    nodes.available_everywhere("web:2");
    for p in nodes.procs.drain(..).rev() {
        let name = p.name.clone();
        let status = p.terminate();
        assert!(status.success(), "{name} exited with {status} on SIGTERM");
    }
}
