//! A rollout driven from the outside, against a `relay up` hierarchy of processes with
//! simulated clusters: `relay rollout pause|resume|undo|abort|status`, the same verbs
//! through `kubectl annotate` and `kubectl patch`, and `kubectl wait` on the
//! Placement's conditions (kubectl 1.33, installed by `.ci/install-kube-clients`).

#![allow(clippy::unwrap_used)]
// integration tests may unwrap
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

mod common;

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
    - { name: eu-1, parent: eu, labels: { role: pos } }
    - { name: eu-2, parent: eu, labels: { role: pos } }
    - { name: us-1, parent: us, labels: { role: pos } }
    - { name: us-2, parent: us, labels: { role: pos } }
";

/// The namespace the Deployment lives in at the root (not placed: simulated clusters
/// need none).
const NAMESPACE: &str = "apiVersion: v1
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
    gate: { available: 100%, for: 3s, timeout: 60s }
";

fn app(image: &str) -> String {
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

    f.apply("namespace.yaml", NAMESPACE);
    f.apply("placement.yaml", PLACEMENT);
    f.apply("app.yaml", &app("web:1"));
    f.wait_for("Complete");

    // A new revision, paused by the CLI right away: the canary at most has it.
    f.apply("app.yaml", &app("web:2"));
    f.ok("relay", &["rollout", "pause", "web"]);
    f.wait_for("Paused");
    let line = f.status();
    assert!(line.contains("Paused"), "{line}");

    // Resumed through kubectl annotate; it completes.
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
    assert!(f.status().contains("Complete"));

    // Undone by the CLI after completion: every cluster back on the previous revision.
    f.ok("relay", &["rollout", "undo", "web"]);
    f.wait_for("RolledBack");
    assert!(f.status().contains("undone by the user"), "{}", f.status());

    // Another revision, paused, then aborted through kubectl patch.
    f.apply("app.yaml", &app("web:3"));
    f.ok("relay", &["rollout", "pause", "web"]);
    f.wait_for("Paused");
    f.ok(
        "kubectl",
        &[
            "patch",
            "placement",
            "web",
            "--type=merge",
            "-p",
            r#"{"metadata":{"annotations":{"strata.dev/rollout":"abort"}}}"#,
        ],
    );
    f.wait_for("RolledBack");
    assert!(f.status().contains("aborted by the user"), "{}", f.status());

    // Resumed again from the CLI: it starts over from the canary and completes; `relay
    // get placement` says so.
    f.ok("relay", &["rollout", "resume", "web"]);
    f.wait_for("Complete");
    let table = f.ok("relay", &["get", "placement", "web"]);
    assert!(
        table.contains("rollout: web revision") && table.contains("Complete"),
        "{table}"
    );
}
