//! The Kubernetes Python client's own end-to-end tests against the root (issue 45,
//! Deliver 1): `tests/peers/python-client-e2e/run.sh`, vendored unchanged, installs
//! `kubernetes==37.0.2` into a virtual environment (kept in the target directory and
//! reused) and runs its default subset, every test that needs no kubelet, against a
//! `relay up` root with simulated clusters. Every one of them must pass; the suite is
//! not ours to edit, the server is what gets fixed.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::kube_fleet;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use strata_test_tools::{Tool, require};

/// How long the suite may run before it is taken as hung and killed (it has no
/// timeout of its own; a watch that never ends would block it forever). A guard, not a
/// measure: nothing is asserted on how long it took.
const HUNG_AFTER: Duration = Duration::from_secs(20 * 60);

#[test]
fn the_python_clients_own_e2e_suite_passes_against_the_root() {
    let python = require(Tool::Python3Venv);
    let runner =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/peers/python-client-e2e/run.sh");
    let venv = strata_test_tools::target().join("python-client-e2e-venv");
    let tmp = tempfile::tempdir().unwrap();
    let f = kube_fleet::up(tmp.path());
    // Some objects on the clusters, as a fleet has: the suite's own must not mind them.
    let app = f.write(
        "app.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: fleet-settings, namespace: default, labels: { app: fleet } }\ndata: { a: b }\n---\napiVersion: strata.dev/v1alpha1\nkind: Placement\nmetadata: { name: fleet }\nspec:\n  objects: [ { selector: { matchLabels: { app: fleet } } } ]\n  clusters: { selector: { matchLabels: { role: pos } } }\n",
    );
    f.ok("relay", &["apply", "-f", &app]);
    f.landed_on_pos("configmap", "default", "fleet-settings", "fleet")
        .unwrap();

    // Debian's python3 first on the PATH: run.sh makes its venv with `python3`.
    let path = format!(
        "{}:{}",
        python.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (mut reader, writer) = std::io::pipe().unwrap();
    let mut child = Command::new("bash")
        .arg(&runner)
        .arg(&f.kubeconfig)
        .arg(&venv)
        .env("PATH", path)
        .env("TMPDIR", tmp.path())
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        // Its own process group, so that a hung run is killed with pytest under it.
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, finished) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let hung = finished.recv_timeout(HUNG_AFTER).is_err();
        if hung {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
        hung
    });
    let mut printed = String::new();
    reader.read_to_string(&mut printed).unwrap();
    let status = child.wait().unwrap();
    let _ = done.send(());
    let hung = watchdog.join().unwrap();

    let last = printed.lines().last().unwrap_or_default().trim().to_owned();
    let failures: Vec<&str> = printed
        .lines()
        .filter(|l| l.starts_with("FAILED kubernetes/") || l.starts_with("ERROR kubernetes/"))
        .collect();
    eprintln!("python client e2e (kubernetes==37.0.2, default subset): {last}");
    for l in &failures {
        eprintln!("  {l}");
    }
    assert!(
        !hung,
        "the suite ran longer than {HUNG_AFTER:?} and was killed; it printed:\n{printed}"
    );
    assert_ne!(
        status.code(),
        Some(2),
        "run.sh could not install the client (python3 -m venv, pip from PyPI):\n{printed}"
    );
    let counts: Vec<u64> = last
        .split(", ")
        .filter_map(|part| part.split(' ').next()?.parse().ok())
        .collect();
    assert!(
        counts.len() == 2 && last.ends_with(" failed"),
        "run.sh's last line is not \"N passed, N failed\":\n{printed}"
    );
    assert!(
        counts[0] > 0 && counts[1] == 0 && status.success(),
        "{last} (run.sh exited {status}); failing: {failures:#?}\nthe suite's output:\n{printed}"
    );
}
