//! Relay and agent cores wired in a tree in virtual time, without sockets (see
//! `tree/mod.rs`): routing by placement, labels inherited from ancestors (also when
//! they arrive after the children connected), summaries reaching the root, a full disk
//! acknowledging nothing, and compaction bounded by what children acknowledged.

#![allow(clippy::unwrap_used)]

mod tree;

use std::time::Duration;

use strata_protocol::model::ObjectKey;
use strata_protocol::wire::{ReportKey, ReportValue};
use tree::{Tree, labels};

const APP: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { replicas: 2 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: web }
spec:
  objects: [ { selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { region: eu } } }
";

fn two_regions() -> Tree {
    Tree::builder()
        .root("center", labels(&[]))
        .relay("eu", "center", labels(&[("region", "eu")]))
        .relay("us", "center", labels(&[("region", "us")]))
        .agent("eu-1", "eu", labels(&[("role", "pos")]))
        .agent("eu-2", "eu", labels(&[("role", "pos")]))
        .agent("us-1", "us", labels(&[("role", "pos")]))
        .build()
}

fn holds_web(t: &Tree, agent: &str) -> bool {
    t.held(agent)
        .keys()
        .any(|k| k.kind == "Deployment" && k.name == "web")
}

#[test]
fn objects_reach_only_the_clusters_a_placement_selects() {
    let mut t = two_regions();
    t.connect_all(&["eu", "us", "eu-1", "eu-2", "us-1"]);
    t.apply("center", APP);
    t.run_for(Duration::from_secs(1));
    assert!(holds_web(&t, "eu-1") && holds_web(&t, "eu-2"));
    assert!(!holds_web(&t, "us-1"), "us-1 is not in region eu");
    // The us relay is not even sent the deployment: routing, not copying.
    assert!(
        !t.relay("us")
            .log()
            .live()
            .any(|o| o.key().kind == "Deployment")
    );
}

#[test]
fn labels_learned_after_the_children_connected_reach_the_grandchildren() {
    let mut t = Tree::builder()
        .root("center", labels(&[("fleet", "acme")]))
        .relay("emea", "center", labels(&[("continent", "emea")]))
        .relay("fr", "emea", labels(&[("country", "fr")]))
        .relay("paris", "fr", labels(&[("store", "paris")]))
        .agent("paris-pos", "paris", labels(&[("role", "pos")]))
        .build();
    // Children first: the store relay welcomes its agent, and the country relay its
    // store, before anyone above them is connected.
    t.connect_all(&["paris-pos", "paris", "fr", "emea"]);
    t.apply(
        "center",
        &APP.replace("region: eu", "fleet: acme, continent: emea, role: pos"),
    );
    t.run_for(Duration::from_secs(2));
    assert!(
        holds_web(&t, "paris-pos"),
        "the store relay routed with labels it learned late"
    );
}

#[test]
fn summaries_of_the_selected_clusters_reach_the_root() {
    let mut t = two_regions();
    t.connect_all(&["eu", "us", "eu-1", "eu-2", "us-1"]);
    t.apply("center", APP);
    t.run_for(Duration::from_secs(2));
    let root = t.relay("center");
    let placement = root.placements().iter().find(|p| p.name == "web").unwrap();
    let key: ObjectKey = root
        .log()
        .live()
        .find(|o| o.key().kind == "Deployment")
        .unwrap()
        .key()
        .clone();
    let s = root.reports().summarize(placement, &key);
    assert_eq!((s.expected, s.health.available), (2, 2), "{s:?}");
    // Link records of the whole tree reach the root too: its own children's, and
    // those its relays report from below.
    let mut links: Vec<String> = root
        .links()
        .into_iter()
        .filter(|(_, l)| l.connected)
        .map(|(n, _)| n)
        .collect();
    links.extend(
        root.reports()
            .iter()
            .filter_map(|((_, k), v)| match (k, v) {
                (ReportKey::Link { node }, ReportValue::Link(l)) if l.connected => {
                    Some(node.clone())
                }
                _ => None,
            }),
    );
    for n in ["eu", "us", "eu-1", "eu-2", "us-1"] {
        assert!(links.iter().any(|l| l == n), "{n} missing from {links:?}");
    }
}

#[test]
fn a_full_disk_acknowledges_nothing_until_it_writes_again() {
    let mut t = two_regions();
    t.connect_all(&["eu", "us", "eu-1", "eu-2", "us-1"]);
    t.apply("center", APP);
    t.run_for(Duration::from_secs(1));
    let acked = |t: &Tree| {
        t.relay("center")
            .children()
            .find(|(n, _)| *n == "eu")
            .and_then(|(_, c)| c)
            .unwrap()
    };
    let before = acked(&t);
    t.disk_full("eu", true);
    t.apply("center", &APP.replace("replicas: 2", "replicas: 3"));
    t.run_for(Duration::from_secs(2));
    assert_eq!(acked(&t), before, "eu acknowledged what it could not write");
    let revision = |t: &Tree| t.held("eu-1").values().max().copied();
    let held = revision(&t);
    t.disk_full("eu", false);
    t.run_for(Duration::from_secs(2));
    assert!(acked(&t).position > before.position);
    assert!(
        revision(&t) > held,
        "the change reached eu-1 once eu could write"
    );
}

#[test]
fn compaction_keeps_the_history_a_cut_off_child_acknowledged() {
    let mut t = two_regions();
    t.connect_all(&["eu", "us", "eu-1", "eu-2", "us-1"]);
    t.apply("center", APP);
    t.run_for(Duration::from_secs(1));
    t.cut("us");
    let us_acked = t
        .relay("center")
        .children()
        .find(|(n, _)| *n == "us")
        .map(|(_, c)| c);
    // us is gone: its last acknowledged cursor bounds compaction.
    let acked = t.relay("center").log().head();
    for i in 0..20 {
        t.apply(
            "center",
            &APP.replace("replicas: 2", &format!("replicas: {}", 3 + i)),
        );
        t.run_for(Duration::from_millis(100));
    }
    let root = t.relay("center");
    assert!(
        root.log().floor() <= acked,
        "compacted to {:?} past what the cut-off child acknowledged ({acked:?}, {us_acked:?})",
        root.log().floor()
    );
    t.restore("us");
    t.run_for(Duration::from_secs(2));
    assert!(!holds_web(&t, "us-1"));
    let root = t.relay("center");
    let us = root
        .children()
        .find(|(n, _)| *n == "us")
        .and_then(|(_, c)| c);
    assert_eq!(
        us.map(|c| c.position),
        Some(root.log().head()),
        "us caught up after the cut and acknowledged it"
    );
}
