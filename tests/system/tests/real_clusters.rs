//! Real clusters by default, as processes over QUIC on loopback: a topology whose
//! cluster `lab-1` is reached through a kubeconfig file (a context of it that is not the
//! current one) and whose cluster `sim-1` says `simulated`, rendered with `relay
//! topology render`'s code and started from the rendered files (`relay serve`, `agent
//! run`). `lab-1`'s API server is a `FakeApiServer` over HTTP on loopback.
//!
//! Covers: the placed objects arrive in the fake API server (through the named context:
//! the current context points where nothing listens); both clusters show reachable at
//! the root with the backend each drives; once the fake API server stops, the root shows
//! `lab-1` unreachable with the reason (`relay clusters` and the API's JSON), while
//! `sim-1` stays reachable; started again on the same port, `lab-1` is reachable again.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{POS_APP, Proc, bin, log_tails, relay_cli, write};
use serde_json::Value;
use strata_test_tools::fake_apiserver::FakeApiServer;
use strata_topology::certs::{self, CertOptions};
use strata_topology::files;
use strata_topology::render::{self, Process, RenderOptions};

/// A kubeconfig whose current context points where nothing listens, and whose context
/// `lab` points at the fake API server.
pub(crate) fn kubeconfig(fake: &FakeApiServer) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: nowhere\n  cluster:\n    server: http://127.0.0.1:1\n\
         - name: fake\n  cluster:\n    server: http://{}\n\
         users:\n- name: agent\n  user:\n    token: fake-token\n\
         contexts:\n- name: wrong\n  context: {{ cluster: nowhere, user: agent }}\n- name: lab\n  context: {{ cluster: fake, user: agent }}\n\
         current-context: wrong\n",
        fake.addr
    )
}

/// The root's inventory as JSON (`GET /clusters`); empty while the root's API does not
/// answer yet.
pub(crate) fn inventory(rt: &tokio::runtime::Runtime, dir: &Path, api_port: u16) -> Vec<Value> {
    let client = strata_relay::client::ApiClient::new(
        ([127, 0, 0, 1], api_port).into(),
        "center",
        &files::ca_cert(dir),
        "s3cret",
    )
    .unwrap();
    let Ok((code, v)) = rt.block_on(client.request(hyper::Method::GET, "/clusters", None)) else {
        return Vec::new();
    };
    assert_eq!(code.as_u16(), 200, "{v}");
    v["items"].as_array().cloned().unwrap_or_default()
}

pub(crate) fn cluster<'a>(items: &'a [Value], name: &str) -> Option<&'a Value> {
    items.iter().find(|c| c["name"] == name)
}

/// Asserts that the root's record of the cluster `name` says it is unreachable because
/// its agent cannot reach the API server on 127.0.0.1:`port`, and since when.
pub(crate) fn assert_api_server_unreachable(items: &[Value], name: &str, port: u16) {
    let c = cluster(items, name).unwrap_or_else(|| panic!("no {name} in {items:?}"));
    let reason = c["reason"].as_str().unwrap_or_default();
    assert!(
        c["reachable"] == false
            && reason.starts_with("its agent cannot reach the cluster's API server: ")
            && reason.contains(&format!("127.0.0.1:{port}"))
            && reason.contains("is unreachable"),
        "{c}"
    );
    assert!(
        c["properties"]["strata.dev/unreachable-since"].is_string(),
        "{c}"
    );
}

/// Polls `check` every 200 ms, at most 300 times (60 s); panics naming `what` with the
/// logs of the nodes `names`.
pub(crate) fn eventually(what: &str, dir: &Path, names: &[&str], mut check: impl FnMut() -> bool) {
    for _ in 0..300 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    panic!(
        "timed out waiting until {what}\n{}",
        log_tails(dir, &names, 30)
    );
}

const NODES: &[&str] = &["center", "lab-1", "sim-1"];

#[test]
fn a_rendered_agent_drives_its_kubeconfig_context_and_a_lost_api_server_shows_unreachable_at_the_root()
 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let fake = rt.block_on(FakeApiServer::start());
    let fake_port = fake.addr.port();
    let kc = dir.join("lab-1.kubeconfig");
    write(&kc, &kubeconfig(&fake));
    let topology = format!(
        "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: {{ name: real }}
spec:
  root: {{ name: center }}
  clusters:
    - {{ name: lab-1, parent: center, labels: {{ role: pos }}, kubernetes: {{ kubeconfig: {}, context: lab }} }}
    - {{ name: sim-1, parent: center, labels: {{ role: pos }}, simulated: {{ readyDelayMs: 100 }} }}
",
        kc.display()
    );
    let checked = strata_topology::parse(&topology, &dir.join("real.yaml")).unwrap();
    assert_eq!(checked.warnings, Vec::<String>::new());
    write(&files::api_tokens(&dir), "s3cret user=ops\n");
    certs::issue_all(&checked.topology, &dir, &CertOptions::default()).unwrap();
    let rendered = render::render(
        &checked.topology,
        &dir,
        &RenderOptions {
            summary_interval_ms: Some(100),
            ..RenderOptions::default()
        },
    )
    .unwrap();
    assert_eq!(rendered.simulated, ["sim-1"]);
    let lab_config = std::fs::read_to_string(files::node_config(&dir, "lab-1")).unwrap();
    assert!(
        lab_config.contains(&format!(
            "kubernetes: {{ kubeconfig: \"{}\", context: \"lab\" }}",
            kc.display()
        )),
        "{lab_config}"
    );
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

    // Both clusters register, reachable, each saying what it drives.
    eventually(
        "the root knows both clusters, reachable",
        &dir,
        NODES,
        || {
            let items = inventory(&rt, &dir, api_port);
            ["lab-1", "sim-1"]
                .iter()
                .all(|n| cluster(&items, n).is_some_and(|c| c["reachable"] == true))
        },
    );
    let items = inventory(&rt, &dir, api_port);
    let backend = |n: &str| cluster(&items, n).unwrap()["properties"]["strata.dev/backend"].clone();
    assert_eq!(backend("lab-1"), "kubernetes");
    assert_eq!(backend("sim-1"), "simulated");

    // The app reaches the fake API server through the context the topology names.
    let app = dir.join("app.yaml");
    write(&app, POS_APP);
    let (ok, _, err) = relay_cli(&dir, api_port, &["apply", "-f", &app.display().to_string()]);
    assert!(ok, "{err}");
    eventually(
        "the ConfigMap arrives in the fake API server",
        &dir,
        NODES,
        || {
            rt.block_on(fake.get("", "configmaps", Some("pos"), "pos-settings"))
                .is_some_and(|cm| cm["data"]["currency"] == "EUR")
        },
    );

    // The API server goes away: the root shows lab-1 unreachable with the reason, and
    // sim-1 as it was.
    drop(fake);
    eventually("the root shows lab-1 unreachable", &dir, NODES, || {
        let items = inventory(&rt, &dir, api_port);
        cluster(&items, "lab-1").is_some_and(|c| c["reachable"] == false)
    });
    let items = inventory(&rt, &dir, api_port);
    assert_api_server_unreachable(&items, "lab-1", fake_port);
    let sim = cluster(&items, "sim-1").unwrap();
    assert!(sim["reachable"] == true && sim["reason"].is_null(), "{sim}");
    let (ok, table, err) = relay_cli(&dir, api_port, &["clusters"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = table.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(" lab-1 "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(!lines[at].contains(" now "), "{table}");
    assert!(
        lines[at + 1]
            .starts_with("  unreachable: its agent cannot reach the cluster's API server: "),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" sim-1 ") && l.contains(" now ")),
        "{table}"
    );

    // Back on the same port: reachable again, the reason gone.
    let fake = rt.block_on(FakeApiServer::start_on(fake_port));
    eventually("the root shows lab-1 reachable again", &dir, NODES, || {
        let items = inventory(&rt, &dir, api_port);
        cluster(&items, "lab-1").is_some_and(|c| c["reachable"] == true && c["reason"].is_null())
    });
    drop(fake);
    for p in procs.into_iter().rev() {
        let name = p.name.clone();
        let status = p.terminate();
        assert!(status.success(), "{name} exited with {status}");
    }
}
