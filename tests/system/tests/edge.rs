//! A placement's `customize` rendered by each agent for its own cluster, and its
//! `statusSummary` evaluated at the edge and merged on the way to the root, on relay and
//! agent cores wired in a tree without sockets (the fixture is `tree/`).

#![allow(clippy::unwrap_used)]

use crate::tree;
use strata_test_tools::fake_apiserver;

use std::time::Duration;

use serde_json::{Value, json};
use strata_protocol::model::ObjectKey;
use tree::{Tree, labels};

/// One Deployment for every point of sale, customized per store, summarized per region.
const CUSTOMIZED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: { name: pos, namespace: shop, labels: { app: pos } }
spec:
  replicas: 1
  template:
    spec:
      containers:
        - { name: pos, image: "pos:2.1", env: [ { name: MODE, value: store } ] }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: pos }
spec:
  objects: [ { selector: { matchLabels: { app: pos } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
  customize:
    - objects: { kinds: [Deployment], names: [pos] }
      mergePatch:
        metadata: { labels: { region: "${cluster.labels.region}" } }
      jsonPatch:
        - { op: add, path: /spec/template/spec/containers/0/env/-,
            value: { name: STORE_ID, value: "store ${cluster.name}" } }
        - { op: replace, path: /spec/replicas, value: "${cluster.properties.posReplicas}" }
    - clusters: { matchLabels: { tier: gold } }
      jsonPatch:
        - { op: test, path: /spec/template/spec/containers/0/name, value: pos }
        - { op: copy, from: /spec/template/spec/containers/0/image, path: /metadata/annotations }
  statusSummary:
    - { name: ready, path: .status.readyReplicas, op: sum }
    - { name: fewest, path: .status.readyReplicas, op: min }
    - { name: images, path: ".spec.template.spec.containers[*].image", op: countBy, top: 5 }
    - { name: readyByTier, path: .status.readyReplicas, op: sum, groupBy: tier }
    - { name: stores, path: ".spec.template.spec.containers[0].env[1].value", op: count }
"#;

/// Two regions; three stores of which one lacks the `posReplicas` property.
fn fleet() -> Tree {
    Tree::builder()
        .root("center")
        .relay("eu", "center", labels! { region: eu })
        .relay("us", "center", labels! { region: us })
        .agent("store-1", "eu", labels! { role: pos, tier: gold })
        .properties(labels! { posReplicas: 3 })
        .agent("store-2", "us", labels! { role: pos, tier: basic })
        .properties(labels! { posReplicas: 1 })
        .agent("store-3", "us", labels! { role: pos, tier: basic })
        .build()
}

fn pos_key(t: &Tree) -> ObjectKey {
    let root = t.relay("center");
    let o = root.log().live().find(|o| o.key().kind == "Deployment");
    o.unwrap().key().clone()
}

fn manifest(t: &Tree, agent: &str, key: &ObjectKey) -> Option<Value> {
    let bytes = t.agent(agent).cluster_manifest(key)?;
    Some(serde_json::from_slice(&bytes).unwrap())
}

#[test]
fn each_cluster_applies_its_own_rendering_and_a_missing_variable_fails_it() {
    let mut t = fleet();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    t.apply(CUSTOMIZED);
    t.advance(Duration::from_secs(2));
    let key = pos_key(&t);

    let one = manifest(&t, "store-1", &key).expect("store-1 holds pos");
    assert_eq!(
        one["spec"]["replicas"],
        json!(3),
        "a whole-string variable is typed"
    );
    assert_eq!(
        one["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{ "name": "MODE", "value": "store" }, { "name": "STORE_ID", "value": "store store-1" }])
    );
    assert_eq!(
        one["metadata"]["labels"]["region"], "eu",
        "an inherited label"
    );
    assert_eq!(
        one["metadata"]["annotations"], "pos:2.1",
        "the gold-only rule"
    );

    let two = manifest(&t, "store-2", &key).expect("store-2 holds pos");
    assert_eq!(two["spec"]["replicas"], json!(1));
    assert_eq!(
        two["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"],
        "store store-2"
    );
    assert_eq!(two["metadata"]["labels"]["region"], "us");
    // Not gold: none of the rule's annotation; what annotations it has are the root's
    // own (the revision that set its generation).
    let annotations = two["metadata"]
        .get("annotations")
        .cloned()
        .unwrap_or_else(|| json!({}));
    assert!(
        annotations
            .as_object()
            .is_some_and(|a| a.keys().all(|k| k.starts_with("strata.dev/"))),
        "not gold: {annotations}"
    );

    // The cluster lacking the property holds nothing and says why.
    assert!(manifest(&t, "store-3", &key).is_none());
    let root = t.relay("center");
    let placement = root.placements().iter().find(|p| p.name == "pos").unwrap();
    let s = root.reports().summarize(placement, &key, root.root_view());
    assert_eq!(
        (s.expected, s.health.available, s.health.failed),
        (3, 2, 1),
        "{s:?}"
    );
    let sample = &s.error_samples[0];
    assert_eq!(sample.cluster, "store-3");
    assert!(
        sample
            .message
            .contains("cluster store-3 has no property \"posReplicas\""),
        "{}",
        sample.message
    );
    // User summary entries never show as the object's own status fields.
    assert_eq!(s.numbers["readyReplicas"].sum, 4);
}

#[test]
fn user_summaries_merge_through_the_tiers_and_follow_a_changed_rule() {
    let mut t = fleet();
    t.connect_all();
    t.apply(CUSTOMIZED);
    t.advance(Duration::from_secs(2));
    let summary = |t: &Tree| {
        let root = t.relay("center");
        let p = root.placements().iter().find(|p| p.name == "pos").unwrap();
        strata_relay::placement_summary::of_placement(root, p).unwrap()
    };
    assert_eq!(
        summary(&t),
        json!({
            "ready": 4,
            "fewest": 1,
            "images": { "pos:2.1": 2 },
            "readyByTier": { "basic": 1, "gold": 3 },
            "stores": 2,
        })
    );

    // The property arrives by a rule change: store-3 renders, applies and counts.
    t.apply(&CUSTOMIZED.replace(
        "\"${cluster.properties.posReplicas}\"",
        "\"${cluster.labels.replicas}\"",
    ));
    t.advance(Duration::from_secs(2));
    // No cluster has that label: all three fail, none is silent about it.
    let root = t.relay("center");
    let p = root.placements().iter().find(|p| p.name == "pos").unwrap();
    let s = root.reports().summarize(p, &pos_key(&t), root.root_view());
    assert_eq!(s.health.failed, 3, "{s:?}");

    t.apply(&CUSTOMIZED.replace("\"${cluster.properties.posReplicas}\"", "2"));
    t.advance(Duration::from_secs(2));
    assert_eq!(
        summary(&t),
        json!({
            "ready": 6,
            "fewest": 2,
            "images": { "pos:2.1": 3 },
            "readyByTier": { "basic": 4, "gold": 2 },
            "stores": 3,
        })
    );
    for store in ["store-1", "store-2", "store-3"] {
        let m = manifest(&t, store, &pos_key(&t)).unwrap();
        assert_eq!(m["spec"]["replicas"], json!(2), "{store}");
    }
}

/// The Kubernetes backend gets the rendered object too: what reaches the API server is
/// this cluster's variant, and drift repair restores that variant, not the root's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_backend_applies_and_repairs_the_rendered_variant() {
    use strata_agent::core::{AgentCore, AgentSetup};
    use strata_node::clock::Clock;
    use strata_node::objects::{parse_manifests, to_object};
    use strata_node::store::ParentState;
    use strata_protocol::model::{Cluster, Cursor, LogId, Position, Revision, Space};
    use strata_protocol::sync::{LinkConfig, ObjectLog, ParentLink};
    use strata_protocol::time::{Instant, UnixMillis};
    use strata_protocol::wire::{Change, Role};

    let fake = fake_apiserver::FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let client = strata_agent::kubernetes::connect(&strata_agent::kubernetes::Connect::Kubeconfig(
        fake.write_kubeconfig(dir.path()),
    ))
    .await
    .unwrap();
    let backend = strata_agent::kubernetes::KubeCluster::start(
        client,
        strata_agent::kubernetes::KubeOptions {
            force_conflicts: true,
            resync: Duration::from_secs(3600),
            retry: Duration::from_millis(50),
        },
        Clock::start(),
    );
    let mut log = ObjectLog::new(LogId(1));
    for (i, m) in parse_manifests(CUSTOMIZED, &Space::default_space())
        .unwrap()
        .iter()
        .enumerate()
    {
        let pos = Position(i as u64 + 1);
        log.stage(pos, Change::Upsert(to_object(m, Revision(pos.0))))
            .unwrap();
        log.commit(pos);
    }
    let t0 = Instant::from_origin(Duration::ZERO);
    let mut core = AgentCore::new(
        t0,
        UnixMillis(0),
        AgentSetup {
            cluster: Cluster {
                name: "store-9".into(),
                labels: labels! { role: pos },
                properties: labels! { posReplicas: 4 },
                path: vec![],
            },
            link: ParentLink::new(
                t0,
                LinkConfig::new("store-9", Role::Agent),
                Cursor::default(),
                None,
            ),
            log,
            parent_state: ParentState {
                inherited: labels! { region: eu },
                ..ParentState::default()
            },
            backend: Box::new(backend),
            run: 1,
        },
    );
    let live = || async { fake.get("apps", "deployments", Some("shop"), "pos").await };
    let mut seen = None;
    for _ in 0..500 {
        seen = live().await;
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = seen.expect("the deployment reached the API server");
    assert_eq!(d["spec"]["replicas"], json!(4));
    assert_eq!(d["metadata"]["labels"]["region"], "eu");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["env"][1],
        json!({ "name": "STORE_ID", "value": "store store-9" })
    );
    // Someone scales it by hand: the agent puts back this cluster's variant.
    fake.patch(
        "apps",
        "deployments",
        Some("shop"),
        "pos",
        json!({"spec": {"replicas": 9}}),
        "kubectl-edit",
    )
    .await;
    let mut repaired = false;
    for _ in 0..500 {
        if live()
            .await
            .is_some_and(|d| d["spec"]["replicas"] == json!(4))
        {
            repaired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(repaired, "drift repaired to the rendered replicas");
    core.process(t0, UnixMillis(0));
}
