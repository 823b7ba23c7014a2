//! A four-tier hierarchy of processes started children first, as real sites come up in
//! any order: every agent, then the store relays, the country relays, the continent
//! relays and last the root, each tier a while after the one below it has been
//! retrying. A placement selecting on a continent's label (inherited three tiers down)
//! and a cluster's own label must reach exactly the clusters it selects: a store relay
//! that welcomed its agents before its country relay knew its continent has to learn the
//! continent's label later, while connected.

#![allow(clippy::unwrap_used)]
// integration tests may unwrap
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::time::Duration;

use common::{Proc, bin, log_tails, write};
use serde_json::Value;
use strata_topology::certs::{self, CertOptions};
use strata_topology::files;
use strata_topology::render::{self, Process, RenderOptions};

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: four-tiers }
spec:
  root: { name: center }
  relays:
    - { name: emea, parent: center, labels: { continent: emea } }
    - { name: amer, parent: center, labels: { continent: amer } }
    - { name: fr, parent: emea, labels: { country: fr } }
    - { name: de, parent: emea, labels: { country: de } }
    - { name: us, parent: amer, labels: { country: us } }
    - { name: br, parent: amer, labels: { country: br } }
    - { name: fr-paris, parent: fr, labels: { store: paris } }
    - { name: de-berlin, parent: de, labels: { store: berlin } }
    - { name: us-austin, parent: us, labels: { store: austin } }
    - { name: br-rio, parent: br, labels: { store: rio } }
  clusters:
    - { name: fr-paris-pos, parent: fr-paris, labels: { role: pos } }
    - { name: fr-paris-kitchen, parent: fr-paris, labels: { role: kitchen } }
    - { name: de-berlin-pos, parent: de-berlin, labels: { role: pos } }
    - { name: de-berlin-kitchen, parent: de-berlin, labels: { role: kitchen } }
    - { name: us-austin-pos, parent: us-austin, labels: { role: pos } }
    - { name: us-austin-kitchen, parent: us-austin, labels: { role: kitchen } }
    - { name: br-rio-pos, parent: br-rio, labels: { role: pos } }
    - { name: br-rio-kitchen, parent: br-rio, labels: { role: kitchen } }
";

const POS_EMEA: &str = "
apiVersion: v1
kind: Namespace
metadata: { name: pos }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: pos, namespace: pos, labels: { app: pos } }
spec: { replicas: 1 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: pos-emea }
spec:
  objects: [ { selector: { matchLabels: { app: pos } } } ]
  clusters: { selector: { matchLabels: { role: pos, continent: emea } } }
";

/// Tiers from the leaves up: agents, stores, countries, continents, root.
fn tier_of(name: &str) -> usize {
    match name {
        "center" => 4,
        "emea" | "amer" => 3,
        "fr" | "de" | "us" | "br" => 2,
        n if n.ends_with("-pos") || n.ends_with("-kitchen") => 0,
        _ => 1,
    }
}

#[test]
fn nodes_started_children_first_converge_on_a_placement_by_an_ancestors_label() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let topology = strata_topology::parse(TOPOLOGY, &dir.join("four-tiers.yaml"))
        .unwrap()
        .topology;
    certs::issue_all(&topology, &dir, &CertOptions::default()).unwrap();
    let rendered = render::render(
        &topology,
        &dir,
        &RenderOptions {
            summary_interval_ms: Some(200),
            simulated_ready_delay_ms: Some(100),
            simulate_unset: true,
            ..RenderOptions::default()
        },
    )
    .unwrap();
    let token = std::fs::read_to_string(files::api_tokens(&dir)).unwrap();
    let token = token.lines().next().unwrap().to_owned();

    let (relay, agent) = (bin("relay"), bin("agent"));
    let mut nodes = rendered.nodes.clone();
    nodes.sort_by_key(|n| tier_of(&n.name));
    let mut procs = Vec::new();
    let mut tier = 0;
    for node in &nodes {
        // Each tier starts once the one below has been retrying its absent parents.
        if tier_of(&node.name) != tier {
            tier = tier_of(&node.name);
            std::thread::sleep(Duration::from_millis(1500));
        }
        let (program, verb) = match node.process {
            Process::Relay => (&relay, "serve"),
            Process::Agent => (&agent, "run"),
        };
        let config = node.config.display().to_string();
        procs.push(Proc::spawn(
            &dir,
            &node.name,
            program,
            &[verb, "--config", &config],
        ));
    }

    let cli = |args: &[&str]| {
        let out = std::process::Command::new(&relay)
            .args(args)
            .env("STRATA_SERVER", rendered.api.to_string())
            .env("STRATA_SERVER_NAME", &rendered.root)
            .env("STRATA_CA", files::ca_cert(&dir))
            .env("STRATA_TOKEN", &token)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let eventually = |what: &str, check: &dyn Fn() -> bool| {
        for _ in 0..600 {
            if check() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "timed out waiting until {what}\n{}",
            log_tails(&dir, &names, 8)
        );
    };
    eventually("the root knows all 8 clusters", &|| {
        let (ok, out, _) = cli(&["clusters"]);
        ok && out.lines().filter(|l| l.contains("role=")).count() == 8
    });

    write(&dir.join("app.yaml"), POS_EMEA);
    let (ok, _, err) = cli(&["apply", "-f", &dir.join("app.yaml").display().to_string()]);
    assert!(ok, "{err}");
    let summary = || -> Option<Value> {
        let (ok, out, _) = cli(&["get", "deployment", "pos", "-n", "pos", "-o", "summary"]);
        let v: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
        Some(v.as_array()?.first()?["placements"][0]["summary"].clone())
    };
    eventually(
        "the deployment is available on both emea pos clusters",
        &|| summary().is_some_and(|s| s["expected"] == 2 && s["health"]["available"] == 2),
    );
    drop(procs);
}
