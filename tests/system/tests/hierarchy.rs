//! Relays and agents in one process over real QUIC with mutual TLS on loopback, for
//! what needs the sockets, the certificates or a cluster's API: a certificate for another
//! subtree refused, the driver holding acknowledgements back while its store cannot
//! write, and the whole path to a Kubernetes cluster (behind a fake API server) and
//! back. What the cores do without sockets is tested in `cores.rs`.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use strata_test_tools::fake_apiserver;

use crate::common;

use std::time::Duration;

use common::hierarchy::Hierarchy;
use common::{APP, eventually};
use strata_agent::kubernetes::{self, Connect, KubeCluster, KubeOptions};
use strata_node::clock::Clock;
use strata_node::objects::parse_manifests;
use strata_node::store::MemStore;
use strata_protocol::model::{Position, Space};
use strata_protocol::wire::{ReportKey, ReportValue};
use strata_relay::tier::runtime::NodeHandle;

/// Applies manifests at the root; returns the revision.
async fn apply(root: &NodeHandle, text: &str) -> Position {
    let manifests = parse_manifests(text, &Space::default_space()).unwrap();
    root.query(move |c| c.apply_manifests(&manifests).unwrap().revision.unwrap())
        .await
        .unwrap()
}

/// The key of the Deployment the root holds.
async fn deployment_key(root: &NodeHandle) -> strata_protocol::model::ObjectKey {
    root.query(|c| {
        c.log()
            .live()
            .find(|o| o.key().kind == "Deployment")
            .unwrap()
            .key()
            .clone()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_subtree_is_refused() {
    let h = Hierarchy::new();
    let root = h.relay("center").children(&["site-1"]).start().await;
    let site = h
        .relay("site-1")
        .under("center")
        .children(&["pos-1"])
        .start()
        .await;
    let pos = h.agent("pos-1").role("pos").under("site-1").start();
    // "pos-9" holds a valid certificate of the hierarchy but belongs elsewhere.
    let rogue = h.agent("pos-9").role("pos").under("site-1").start();
    eventually("site-1 serves pos-1", || async {
        site.query(|c| c.children().any(|(n, _)| n == "pos-1"))
            .await
            == Some(true)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let children: Vec<String> = site
        .query(|c| c.children().map(|(n, _)| n.to_owned()).collect())
        .await
        .unwrap();
    assert_eq!(children, ["pos-1"], "the rogue got a session");
    let known = root
        .query(|c| {
            c.reports()
                .clusters()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
    assert!(
        !known.contains(&"pos-9".to_owned()),
        "the rogue's cluster reached the root"
    );
    assert_eq!(rogue.query(|a| a.connected()).await, Some(false));
    rogue.shutdown().await;
    pos.shutdown().await;
    site.shutdown().await.unwrap();
    root.shutdown().await.unwrap();
}

/// A relay whose disk is full acknowledges and forwards nothing it could not store,
/// keeps serving, and delivers everything once there is room again: the driver's side
/// (it keeps the refused batch and retries the commit; `cores.rs` checks the core's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_holds_acknowledgements_back_until_there_is_room() {
    let h = Hierarchy::new();
    let root = h.relay("center").children(&["site-1"]).start().await;
    let site_store = MemStore::new(52);
    let site = h
        .relay("site-1")
        .under("center")
        .children(&["pos-1"])
        .store(&site_store)
        .start()
        .await;
    let pos = h.agent("pos-1").role("pos").under("site-1").start();
    eventually("the root knows pos-1", || async {
        root.query(|c| c.reports().clusters().count()).await == Some(1)
    })
    .await;
    site_store.set_full(true);
    let rev = apply(&root, APP).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let stored = strata_node::store::Store::load(&site_store).unwrap();
    assert!(stored.entries.is_empty(), "the full store took entries");
    let acked = root
        .query(|c| {
            c.children()
                .map(|(_, a)| a.map(|a| a.position))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
    assert!(
        acked.iter().all(|a| a.is_none_or(|p| p < rev)),
        "acked while the disk was full: {acked:?}"
    );
    assert_eq!(
        pos.query(|a| a.log().live().count()).await,
        Some(0),
        "forwarded what it could not store"
    );
    site_store.set_full(false);
    eventually(
        "pos-1 holds the deployment once the disk has room",
        || async {
            pos.query(|a| a.log().live().any(|o| o.key().kind == "Deployment"))
                .await
                == Some(true)
        },
    )
    .await;
    // What could not be written then is on disk now: the failed batch was kept.
    let stored = strata_node::store::Store::load(&site_store).unwrap();
    assert!(
        stored
            .entries
            .iter()
            .any(|(k, e)| k.kind == "Deployment" && e.object().is_some()),
        "the write refused by the full disk was lost"
    );
    pos.shutdown().await;
    site.shutdown().await.unwrap();
    root.shutdown().await.unwrap();
}

/// The whole path with a Kubernetes cluster behind `FakeApiServer` (a fake API server
/// over real HTTP): the root places a Deployment, the agent applies it, the status the
/// cluster's controller writes comes back to the root's summary; with the root gone, a
/// deletion on the cluster is repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_cluster_is_kept_and_reports_through_the_hierarchy() {
    let h = Hierarchy::new();
    let fake = fake_apiserver::FakeApiServer::start().await;
    let client = kubernetes::connect(&Connect::kubeconfig(fake.write_kubeconfig(h.dir())))
        .await
        .unwrap();
    let root = h.relay("center").children(&["pos-k"]).start().await;
    let backend = KubeCluster::start(client, KubeOptions::default(), Clock::start());
    let pos = h
        .agent("pos-k")
        .role("pos")
        .under("center")
        .backend(Box::new(backend))
        .start();
    eventually("the root knows the cluster", || async {
        root.query(|c| c.reports().clusters().count()).await == Some(1)
    })
    .await;
    apply(&root, APP).await;
    let live = fake
        .wait_for("apps", "deployments", Some("pos"), "pos")
        .await;
    assert_eq!(live["spec"]["replicas"], 2);
    // The Deployment controller's work.
    fake.patch(
        "apps",
        "deployments",
        Some("pos"),
        "pos",
        serde_json::json!({"status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                                      "readyReplicas": 2, "availableReplicas": 2}}),
        "kube-controller-manager",
    )
    .await;
    let placement = root.query(|c| c.placements().to_vec()).await.unwrap()[0].clone();
    let key = deployment_key(&root).await;
    eventually("the root's summary shows the deployment available", || {
        let (placement, key) = (placement.clone(), key.clone());
        async {
            let s = root
                .query(move |c| c.reports().summarize(&placement, &key, c.root_view()))
                .await
                .unwrap();
            s.expected == 1 && s.health.available == 1
        }
    })
    .await;
    // Cut off from its parent, the agent still repairs its cluster.
    root.shutdown().await.unwrap();
    eventually("the agent notices", || async {
        pos.query(|a| a.connected()).await == Some(false)
    })
    .await;
    assert!(fake.remove("apps", "deployments", Some("pos"), "pos").await);
    fake.wait_for("apps", "deployments", Some("pos"), "pos")
        .await;
    assert_eq!(pos.query(|a| a.connected()).await, Some(false));
    pos.shutdown().await;
}

/// Upsync end to end: a placement asks for config maps labelled `report: "yes"` in the
/// `audit` namespace of the clusters it selects; the agent (Kubernetes backend over
/// `FakeApiServer`, a fake API server) copies them through a site relay to the root,
/// keeps them current and removes them when they go; unlabelled ones never travel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_born_objects_reach_the_root_through_a_relay_and_follow_their_cluster() {
    let h = Hierarchy::new();
    let fake = fake_apiserver::FakeApiServer::start().await;
    let client = kubernetes::connect(&Connect::kubeconfig(fake.write_kubeconfig(h.dir())))
        .await
        .unwrap();
    let cm = |name: &str, report: Option<&str>, pass: u32| {
        let labels = report.map_or(
            serde_json::json!({}),
            |r| serde_json::json!({ "report": r }),
        );
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "audit", "labels": labels},
            "data": {"pass": pass.to_string()}})
    };
    fake.insert(
        "",
        "configmaps",
        Some("audit"),
        cm("report-1", Some("yes"), 3),
    )
    .await;
    fake.insert("", "configmaps", Some("audit"), cm("scratch", None, 0))
        .await;
    let root = h.relay("center").children(&["site"]).start().await;
    let site = h
        .relay("site")
        .under("center")
        .children(&["pos-k"])
        .start()
        .await;
    let backend = KubeCluster::start(client, KubeOptions::default(), Clock::start());
    let pos = h
        .agent("pos-k")
        .role("pos")
        .under("site")
        .backend(Box::new(backend))
        .start();
    apply(
        &root,
        "
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: audit }
spec:
  objects: [ { kinds: [Nothing] } ]
  clusters: { selector: { matchLabels: { role: pos } } }
  upsync:
    - { version: v1, kind: ConfigMap, namespace: audit, selector: { matchLabels: { report: \"yes\" } } }
",
    )
    .await;
    // What the root holds of cluster pos-k's upsynced objects: name -> data.pass.
    let at_root = || async {
        root.query(|c| {
            c.reports()
                .iter()
                .filter_map(|((_, key), value)| match (key, value) {
                    (ReportKey::Upsynced { cluster, object }, ReportValue::Upsynced(body))
                        if cluster == "pos-k" =>
                    {
                        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
                        Some((
                            object.name.clone(),
                            v["data"]["pass"].as_str().unwrap().to_owned(),
                        ))
                    }
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap()
    };
    eventually("the labelled config map reaches the root", || async {
        at_root().await == [("report-1".to_owned(), "3".to_owned())]
    })
    .await;
    // The placement itself is Strata's: the agent never applied it to the cluster.
    assert!(
        fake.get("strata.dev", "placements", None, "audit")
            .await
            .is_none(),
        "a placement was applied to the cluster"
    );
    fake.patch(
        "",
        "configmaps",
        Some("audit"),
        "report-1",
        serde_json::json!({"data": {"pass": "4"}}),
        "policy-engine",
    )
    .await;
    eventually("the root follows the change", || async {
        at_root().await == [("report-1".to_owned(), "4".to_owned())]
    })
    .await;
    assert!(
        fake.remove("", "configmaps", Some("audit"), "report-1")
            .await
    );
    eventually("the root forgets it once it is gone", || async {
        at_root().await.is_empty()
    })
    .await;
    pos.shutdown().await;
    site.shutdown().await.unwrap();
    root.shutdown().await.unwrap();
}
