//! The Kubernetes Python client's own end-to-end suite against the root (issue 45,
//! Deliver 1): `tests/peers/python-client-e2e/run.sh`, a vendored copy of the shared
//! runner and of `kubernetes/e2e_test` at the client's commit, run unchanged over its
//! default subset (every test that needs no kubelet) against a `relay up` root whose
//! four clusters are simulated. Everything in `default` is placed on the `role=pos`
//! clusters, so the objects the suite makes are delivered and reported, as a user's
//! would be. Prints the suite's summary; asserts that nothing failed.

#![allow(clippy::unwrap_used)]

use crate::kube_fleet;

use std::path::Path;
use std::process::Command;

use strata_test_tools::Tool;

/// What the suite's objects are delivered by: every object of `default` on `role=pos`.
const PLACEMENT: &str = "apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: python-e2e }
spec:
  objects: [ { namespaces: [default] } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

#[test]
fn the_python_clients_own_e2e_suite_passes_against_the_root() {
    // Debian's python3 with venv and ensurepip first on the PATH: the runner makes its
    // virtual environment with `python3 -m venv`.
    let python = strata_test_tools::require(Tool::Python3Venv);
    let tmp = tempfile::tempdir().unwrap();
    let f = kube_fleet::up(tmp.path());
    f.ok(
        "relay",
        &["apply", "-f", &f.write("placement.yaml", PLACEMENT)],
    );
    let runner =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/peers/python-client-e2e/run.sh");
    // The client and pytest, installed once per target directory (pip from PyPI).
    let venv = strata_test_tools::target().join("python-client-e2e-venv");
    let path = format!(
        "{}:{}",
        python.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg(&runner)
        .arg(&f.kubeconfig)
        .arg(&venv)
        .env("PATH", path)
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout.lines().last().unwrap_or_default().to_owned();
    println!("python client e2e suite: {summary}");
    assert!(
        out.status.success() && summary.ends_with(" passed, 0 failed"),
        "the Python client's e2e suite failed ({}): {summary}\n{stdout}\n{stderr}",
        out.status
    );
}
