//! A root, a site relay and two agents with simulated clusters, in one process over
//! real QUIC with mutual TLS on loopback: placement routing, status summaries, and an
//! agent that keeps its cluster while its relay is gone.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

mod fake_apiserver;

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::eventually;
use strata_agent::backend::ClusterBackend;
use strata_agent::kubernetes::{self, Connect, KubeCluster, KubeOptions};
use strata_agent::runtime::{self as agent, AgentHandle, AgentParts};
use strata_agent::simulated::{SimulatedCluster, SimulatedConfig};
use strata_node::clock::Clock;
use strata_node::objects::parse_manifests;
use strata_node::store::{MemStore, Store};
use strata_node::tls::{self, Identity};
use strata_node::transport;
use strata_protocol::model::{Cluster, Position, Space};
use strata_protocol::sync::SessionConfig;
use strata_protocol::wire::{ReportKey, ReportValue};
use strata_relay::certs::Ca;
use strata_relay::node::runtime::{self as node, NodeHandle, NodeParts};

fn identity(dir: &Path, ca: &Ca, name: &str) -> Identity {
    let (cert, key) = ca.issue(name).unwrap().write_to(dir).unwrap();
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca.cert_pem()).unwrap();
    Identity::load(&cert, &key, &ca_path).unwrap()
}

fn rand_run(name: &str) -> u64 {
    name.bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        ^ u64::from(std::process::id())
}

/// The hierarchy a test builds, node by node, over QUIC on loopback: each node gets a
/// certificate from the test's CA, so a test reads as the tree it sets up.
struct Hierarchy<'a> {
    dir: &'a Path,
    ca: &'a Ca,
}

impl<'a> Hierarchy<'a> {
    /// A relay named `name`; `.start()` runs it.
    fn relay(&self, name: &'a str) -> RelaySpec<'a> {
        RelaySpec {
            h: Hierarchy {
                dir: self.dir,
                ca: self.ca,
            },
            name,
            parent: None,
            children: &[],
            store: MemStore::new(rand_run(name)),
        }
    }

    /// An agent named `name` with `role: ROLE`, below `site-1` unless told otherwise.
    fn agent(&self, name: &'a str, role: &'a str) -> AgentSpec<'a> {
        AgentSpec {
            h: Hierarchy {
                dir: self.dir,
                ca: self.ca,
            },
            name,
            role,
            parent: ("site-1", None),
            backend: None,
        }
    }
}

struct RelaySpec<'a> {
    h: Hierarchy<'a>,
    name: &'a str,
    parent: Option<(&'a str, SocketAddr)>,
    children: &'a [&'a str],
    store: MemStore,
}

impl<'a> RelaySpec<'a> {
    fn parent(mut self, name: &'a str, addr: SocketAddr) -> Self {
        self.parent = Some((name, addr));
        self
    }

    fn children(mut self, children: &'a [&'a str]) -> Self {
        self.children = children;
        self
    }

    fn store(mut self, store: MemStore) -> Self {
        self.store = store;
        self
    }

    /// Runs the relay; returns it and where its children connect.
    fn start(self) -> (NodeHandle, SocketAddr) {
        let id = identity(self.h.dir, self.h.ca, self.name);
        let listener = transport::server_endpoint(
            "127.0.0.1:0".parse().unwrap(),
            tls::server_config(&id).unwrap(),
            [self.name.len() as u8; 32],
        )
        .unwrap();
        let addr = listener.local_addr().unwrap();
        let connector = self.parent.map(|_| {
            transport::client_endpoint(
                "127.0.0.1:0".parse().unwrap(),
                tls::client_config(&id).unwrap(),
            )
            .unwrap()
        });
        let handle = node::start(NodeParts {
            name: self.name.into(),
            labels: BTreeMap::new(),
            children: self.children.iter().map(|c| (*c).to_owned()).collect(),
            parent: self.parent.map(|(n, a)| (n.to_owned(), a)),
            store: Arc::new(self.store) as Arc<dyn Store>,
            listener: Some(listener),
            connector,
            sessions: SessionConfig::default(),
            summary_interval: Duration::from_millis(100),
            clock: Clock::start(),
            run: rand_run(self.name),
            joining: None,
        })
        .unwrap();
        (handle, addr)
    }
}

struct AgentSpec<'a> {
    h: Hierarchy<'a>,
    name: &'a str,
    role: &'a str,
    parent: (&'a str, Option<SocketAddr>),
    backend: Option<Box<dyn ClusterBackend + Send>>,
}

impl<'a> AgentSpec<'a> {
    /// Below `site-1` at `addr`.
    fn under(mut self, addr: SocketAddr) -> Self {
        self.parent.1 = Some(addr);
        self
    }

    /// Below the relay `name` at `addr`.
    fn under_relay(mut self, name: &'a str, addr: SocketAddr) -> Self {
        self.parent = (name, Some(addr));
        self
    }

    /// With this cluster instead of a simulated one that is ready after 200 ms.
    fn backend(mut self, backend: Box<dyn ClusterBackend + Send>) -> Self {
        self.backend = Some(backend);
        self
    }

    fn start(self) -> AgentHandle {
        let id = identity(self.h.dir, self.h.ca, self.name);
        let connector = transport::client_endpoint(
            "127.0.0.1:0".parse().unwrap(),
            tls::client_config(&id).unwrap(),
        )
        .unwrap();
        let backend = self.backend.unwrap_or_else(|| {
            Box::new(SimulatedCluster::new(SimulatedConfig {
                ready_delay: Duration::from_millis(200),
                fail_all: None,
            }))
        });
        agent::start(AgentParts {
            cluster: Cluster {
                name: self.name.into(),
                labels: [("role".to_owned(), self.role.to_owned())].into(),
                properties: BTreeMap::new(),
                path: vec![],
            },
            parent: (self.parent.0.into(), self.parent.1.unwrap()),
            store: Arc::new(MemStore::new(rand_run(self.name))),
            connector,
            backend,
            clock: Clock::start(),
            run: rand_run(self.name),
        })
        .unwrap()
    }
}

const APP: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: { name: pos, namespace: pos, labels: { app: pos } }
spec: { replicas: 2 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: pos-app }
spec:
  objects: [ { kinds: [Deployment], selector: { matchLabels: { app: pos } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

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
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::generate("test").unwrap();
    let h = Hierarchy {
        dir: dir.path(),
        ca: &ca,
    };
    let (root, root_addr) = h
        .relay("center")
        .children(&["site-1"])
        .store(MemStore::new(31))
        .start();
    let (site, site_addr) = h
        .relay("site-1")
        .parent("center", root_addr)
        .children(&["pos-1"])
        .store(MemStore::new(32))
        .start();
    let pos = h.agent("pos-1", "pos").under(site_addr).start();
    // "pos-9" holds a valid certificate of the hierarchy but belongs elsewhere.
    let rogue = h.agent("pos-9", "pos").under(site_addr).start();
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
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::generate("test").unwrap();
    let h = Hierarchy {
        dir: dir.path(),
        ca: &ca,
    };
    let (root, root_addr) = h
        .relay("center")
        .children(&["site-1"])
        .store(MemStore::new(51))
        .start();
    let site_store = MemStore::new(52);
    let (site, site_addr) = h
        .relay("site-1")
        .parent("center", root_addr)
        .children(&["pos-1"])
        .store(site_store.clone())
        .start();
    let pos = h.agent("pos-1", "pos").under(site_addr).start();
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
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::generate("test").unwrap();
    let h = Hierarchy {
        dir: dir.path(),
        ca: &ca,
    };
    let fake = fake_apiserver::FakeApiServer::start().await;
    let client = kubernetes::connect(&Connect::Kubeconfig(fake.write_kubeconfig(dir.path())))
        .await
        .unwrap();
    let (root, root_addr) = h
        .relay("center")
        .children(&["pos-k"])
        .store(MemStore::new(31))
        .start();
    let backend = KubeCluster::start(client, KubeOptions::default(), Clock::start());
    let pos = h
        .agent("pos-k", "pos")
        .under_relay("center", root_addr)
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
                .query(move |c| c.reports().summarize(&placement, &key))
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
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::generate("test").unwrap();
    let h = Hierarchy {
        dir: dir.path(),
        ca: &ca,
    };
    let fake = fake_apiserver::FakeApiServer::start().await;
    let client = kubernetes::connect(&Connect::Kubeconfig(fake.write_kubeconfig(dir.path())))
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
    let (root, root_addr) = h
        .relay("center")
        .children(&["site"])
        .store(MemStore::new(41))
        .start();
    let (site, site_addr) = h
        .relay("site")
        .parent("center", root_addr)
        .children(&["pos-k"])
        .store(MemStore::new(42))
        .start();
    let backend = KubeCluster::start(client, KubeOptions::default(), Clock::start());
    let pos = h
        .agent("pos-k", "pos")
        .under_relay("site", site_addr)
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
