//! The Kubernetes backend against `FakeApiServer` (a FAKE API server over real HTTP on
//! loopback): the real kube-rs client code runs, discovery, server-side apply, watch,
//! delete included.
//!
//! The agent's own integration tests, its one test binary: what runs the agent with
//! relays is in the system tests (`tests/system`). `FakeApiServer` is
//! `strata_test_tools::fake_apiserver`, shared with them.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use strata_test_tools::fake_apiserver;

use std::collections::BTreeMap;
use std::time::Duration;

use fake_apiserver::FakeApiServer;
use serde_json::{Value, json};
use strata_agent::backend::ClusterBackend;
use strata_agent::core::{AgentCore, AgentSetup};
use strata_agent::kubernetes::{
    self, Connect, KubeCluster, KubeCounters, KubeOptions, MANAGED_LABEL, MANAGED_VALUE,
};
use strata_node::clock::Clock;
use strata_node::store::ParentState;
use strata_protocol::model::{
    Cluster, ContentHash, Cursor, Health, LogId, Object, ObjectKey, ObjectKeyParts, ObjectMeta,
    Position, Revision, Space, Status,
};
use strata_protocol::sync::{LinkConfig, ObjectLog, ParentLink};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{Change, Role};

fn object(manifest: Value, rev: u64) -> Object {
    let (group, version) = match manifest["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (
            String::new(),
            manifest["apiVersion"].as_str().unwrap().to_owned(),
        ),
    };
    let body = serde_json::to_vec(&manifest).unwrap();
    // Any digest that changes with the body will do for the tests.
    let mut hash = [0u8; 32];
    for (i, b) in body.iter().enumerate() {
        hash[i % 32] = hash[i % 32].wrapping_mul(31).wrapping_add(*b);
    }
    Object {
        meta: std::sync::Arc::new(ObjectMeta {
            key: ObjectKey::new(ObjectKeyParts {
                space: Space::default_space(),
                group,
                version,
                kind: manifest["kind"].as_str().unwrap().to_owned(),
                namespace: manifest["metadata"]["namespace"]
                    .as_str()
                    .map(str::to_owned),
                name: manifest["metadata"]["name"].as_str().unwrap().to_owned(),
            }),
            labels: BTreeMap::new(),
        }),
        revision: Revision(rev),
        hash: ContentHash(hash),
        body: body.into(),
    }
}

fn options() -> KubeOptions {
    KubeOptions {
        force_conflicts: true,
        resync: Duration::from_secs(3600),
        retry: Duration::from_millis(50),
    }
}

async fn backend(fake: &FakeApiServer, dir: &std::path::Path) -> KubeCluster {
    let client = kubernetes::connect(&Connect::kubeconfig(fake.write_kubeconfig(dir)))
        .await
        .unwrap();
    KubeCluster::start(client, options(), Clock::start())
}

fn t0() -> Instant {
    Instant::from_origin(Duration::ZERO)
}

/// Polls until `f` is true (at most 10 s, in 20 ms steps).
async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..500 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Collects statuses from the backend until one for `name` satisfies `f`.
async fn status_of(
    b: &mut KubeCluster,
    seen: &mut BTreeMap<String, Status>,
    name: &str,
    f: impl Fn(&Status) -> bool,
) -> Status {
    for _ in 0..500 {
        for (k, s) in b.poll_status(t0(), UnixMillis(0)) {
            seen.insert(k.name.clone(), s);
        }
        if let Some(s) = seen.get(name).filter(|s| f(s)) {
            return s.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no matching status for {name}: last {:?}", seen.get(name));
}

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "pos"}, "data": {"k": value}})
}

fn crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                                  "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_waits_for_its_crd_to_be_established() {
    let fake = FakeApiServer::start().await;
    fake.set_establish_crds(false).await;
    let dir = tempfile::tempdir().unwrap();
    let mut b = backend(&fake, dir.path()).await;
    let cr = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w1", "namespace": "pos"}, "spec": {"size": 3}});
    // The CR arrives before its CRD.
    b.apply(t0(), UnixMillis(0), &object(cr, 2)).unwrap();
    b.apply(t0(), UnixMillis(0), &object(crd(), 1)).unwrap();
    let mut seen = BTreeMap::new();
    // (It may first say its kind is not served yet, if it came alone.)
    let waiting = status_of(&mut b, &mut seen, "w1", |s| {
        s.message
            .as_deref()
            .is_some_and(|m| m.contains("widgets.example.com"))
    })
    .await;
    assert_eq!(waiting.health, Health::Progressing);
    assert!(
        waiting
            .message
            .as_deref()
            .unwrap()
            .contains("widgets.example.com"),
        "{waiting:?}"
    );
    assert!(
        fake.get(
            kubernetes_crd_group(),
            "customresourcedefinitions",
            None,
            "widgets.example.com"
        )
        .await
        .is_some()
    );
    let cr_patches = |log: &[fake_apiserver::Logged]| {
        log.iter()
            .position(|r| r.method == "PATCH" && r.path.contains("/widgets/"))
    };
    assert_eq!(
        cr_patches(&fake.requests().await),
        None,
        "no CR write before Established"
    );
    assert!(fake.establish("widgets.example.com").await);
    fake.wait_for("example.com", "widgets", Some("pos"), "w1")
        .await;
    let log = fake.requests().await;
    let crd_patch = log
        .iter()
        .position(|r| r.method == "PATCH" && r.path.contains("customresourcedefinitions"))
        .unwrap();
    assert!(crd_patch < cr_patches(&log).unwrap());
    status_of(&mut b, &mut seen, "w1", |s| s.health == Health::Available).await;
}

fn kubernetes_crd_group() -> &'static str {
    "apiextensions.k8s.io"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_only_what_the_agent_owns() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    fake.insert("", "configmaps", Some("pos"), configmap("theirs", "x"))
        .await;
    let mut b = backend(&fake, dir.path()).await;
    let ours = object(configmap("ours", "1"), 1);
    b.apply(t0(), UnixMillis(0), &ours).unwrap();
    let live = fake.wait_for("", "configmaps", Some("pos"), "ours").await;
    assert_eq!(live["metadata"]["labels"][MANAGED_LABEL], MANAGED_VALUE);
    // Both are no longer placed; only ours carries the label.
    let theirs = object(configmap("theirs", "x"), 1);
    b.delete(t0(), theirs.key()).unwrap();
    b.delete(t0(), ours.key()).unwrap();
    until("ours pruned", || async {
        fake.get("", "configmaps", Some("pos"), "ours")
            .await
            .is_none()
    })
    .await;
    assert!(
        fake.get("", "configmaps", Some("pos"), "theirs")
            .await
            .is_some()
    );
    let deletes = fake
        .requests()
        .await
        .iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert_eq!(deletes, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_object_costs_no_write() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cm = object(configmap("cm", "1"), 1);
    let late = object(configmap("late", "1"), 1);
    let mut seen = BTreeMap::new();
    {
        let mut b = backend(&fake, dir.path()).await;
        b.apply(t0(), UnixMillis(0), &cm).unwrap();
        b.apply(t0(), UnixMillis(0), &late).unwrap();
        status_of(&mut b, &mut seen, "cm", |s| s.health == Health::Available).await;
        status_of(&mut b, &mut seen, "late", |s| s.health == Health::Available).await;
    }
    let writes_before = fake
        .requests()
        .await
        .iter()
        .filter(|r| r.is_write())
        .count();
    // An agent restart applies everything it holds again.
    let mut b = backend(&fake, dir.path()).await;
    let counters = b.counters();
    b.apply(t0(), UnixMillis(0), &cm).unwrap();
    let mut seen = BTreeMap::new();
    status_of(&mut b, &mut seen, "cm", |s| s.health == Health::Available).await;
    until("the reconcile", || async {
        KubeCounters::get(&counters.unchanged) == 1
    })
    .await;
    // An object restored after its kind was listed and watched is known too.
    b.apply(t0(), UnixMillis(0), &late).unwrap();
    status_of(&mut b, &mut seen, "late", |s| s.health == Health::Available).await;
    until("the second reconcile", || async {
        KubeCounters::get(&counters.unchanged) == 2
    })
    .await;
    let writes_after = fake
        .requests()
        .await
        .iter()
        .filter(|r| r.is_write())
        .count();
    assert_eq!(
        writes_after, writes_before,
        "no write for an unchanged object"
    );
    assert_eq!(KubeCounters::get(&counters.applies), 0);
    // A new revision is written.
    b.apply(t0(), UnixMillis(0), &object(configmap("cm", "2"), 2))
        .unwrap();
    until("the new revision", || async {
        fake.get("", "configmaps", Some("pos"), "cm").await.unwrap()["data"]["k"] == "2"
    })
    .await;
    // Its request's time is in the apply histogram; skipped applies are not.
    until("the apply's time observed", || async {
        counters.latency.lock().await.count(&["apply".into()]) == 1
    })
    .await;
    assert_eq!(KubeCounters::get(&counters.applies), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_reported_when_not_forcing() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cm = configmap("cm", "mine");
    cm["metadata"]["labels"] = json!({MANAGED_LABEL: MANAGED_VALUE});
    fake.insert("", "configmaps", Some("pos"), configmap("cm", "theirs"))
        .await;
    fake.patch(
        "",
        "configmaps",
        Some("pos"),
        "cm",
        json!({"data": {"k": "theirs"}}),
        "helm",
    )
    .await;
    let client = kubernetes::connect(&Connect::kubeconfig(fake.write_kubeconfig(dir.path())))
        .await
        .unwrap();
    let mut b = KubeCluster::start(
        client,
        KubeOptions {
            force_conflicts: false,
            ..options()
        },
        Clock::start(),
    );
    b.apply(t0(), UnixMillis(0), &object(configmap("cm", "mine"), 1))
        .unwrap();
    let mut seen = BTreeMap::new();
    let s = status_of(&mut b, &mut seen, "cm", |s| s.health == Health::Failed).await;
    let m = s.message.unwrap();
    assert!(
        m.contains("conflict") && m.contains("helm") && m.contains(".data.k"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_kubeconfig_or_a_denied_api_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let e = kubernetes::connect(&Connect::kubeconfig(missing.clone()))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains(&missing.display().to_string()), "{e}");
    // Nothing listens on port 1 of loopback.
    std::fs::write(
        dir.path().join("bad"),
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\n\
         users:\n- name: u\n  user: {}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    )
    .unwrap();
    let e = kubernetes::connect(&Connect::kubeconfig(dir.path().join("bad")))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("127.0.0.1:1") && e.contains("unreachable"),
        "{e}"
    );
    assert!(e.contains("Connection refused"), "the cause is said: {e}");
    let fake = FakeApiServer::start().await;
    fake.deny("get", "*").await;
    let e = kubernetes::connect(&Connect::kubeconfig(fake.write_kubeconfig(dir.path())))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("denied access"), "{e}");
    // Connected, but not allowed to write ConfigMaps: the object reports why.
    let fake = FakeApiServer::start().await;
    fake.deny("patch", "configmaps").await;
    let mut b = backend(&fake, dir.path()).await;
    b.apply(t0(), UnixMillis(0), &object(configmap("cm", "1"), 1))
        .unwrap();
    let mut seen = BTreeMap::new();
    let s = status_of(&mut b, &mut seen, "cm", |s| s.health == Health::Failed).await;
    let m = s.message.unwrap();
    assert!(
        m.contains("forbidden") && m.contains("cannot patch resource \"configmaps\""),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_repaired_while_disconnected() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let b = backend(&fake, dir.path()).await;
    let counters = b.counters();
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "pos"},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "web:1"}]}}}});
    // The agent's restored desired state; its parent is never reachable.
    let mut log = ObjectLog::new(LogId(1));
    log.stage(Position(1), Change::Upsert(object(deployment, 7)))
        .unwrap();
    log.commit(Position(1));
    let mut core = AgentCore::new(
        t0(),
        UnixMillis(0),
        AgentSetup {
            cluster: Cluster {
                name: "leaf".into(),
                labels: BTreeMap::new(),
                properties: BTreeMap::new(),
                path: vec![],
            },
            link: ParentLink::new(
                t0(),
                LinkConfig::new("leaf", Role::Agent),
                Cursor::default(),
                None,
            ),
            log,
            parent_state: ParentState::default(),
            backend: Box::new(b),
            run: 1,
        },
    );
    let replicas = || async {
        fake.get("apps", "deployments", Some("pos"), "web")
            .await
            .map(|d| d["spec"]["replicas"].clone())
    };
    until("the deployment", || async {
        replicas().await == Some(json!(2))
    })
    .await;
    // Someone scales it by hand.
    fake.patch(
        "apps",
        "deployments",
        Some("pos"),
        "web",
        json!({"spec": {"replicas": 5}}),
        "kubectl-edit",
    )
    .await;
    until("the edit repaired", || async {
        replicas().await == Some(json!(2))
    })
    .await;
    // Someone deletes it.
    assert!(fake.remove("apps", "deployments", Some("pos"), "web").await);
    until("the deletion repaired", || async {
        replicas().await == Some(json!(2))
    })
    .await;
    assert!(KubeCounters::get(&counters.drift_repairs) >= 2);
    core.process(t0(), UnixMillis(0));
    assert!(!core.connected());
}

fn pod(
    name: &str,
    owner_uid: &str,
    phase: &str,
    ready: bool,
    restarts: i64,
    waiting: Option<&str>,
    created: &str,
) -> Value {
    let state = match waiting {
        Some(reason) => json!({"waiting": {"reason": reason}}),
        None => json!({"running": {"startedAt": created}}),
    };
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "pos", "creationTimestamp": created,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                                          "uid": owner_uid, "controller": true}]},
        "status": {"phase": phase,
                   "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                   "containerStatuses": [{"name": "web", "ready": ready, "restartCount": restarts, "state": state}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_reports_its_replicasets_and_pods() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let client = kubernetes::connect(&Connect::kubeconfig(fake.write_kubeconfig(dir.path())))
        .await
        .unwrap();
    let mut b = KubeCluster::start(
        client,
        KubeOptions {
            resync: Duration::from_millis(100),
            ..options()
        },
        Clock::start(),
    );
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "pos"}, "spec": {"replicas": 3}});
    b.apply(t0(), UnixMillis(0), &object(deployment, 1))
        .unwrap();
    let uid = fake
        .wait_for("apps", "deployments", Some("pos"), "web")
        .await["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    // What the Deployment and ReplicaSet controllers would create.
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": "pos",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": uid, "controller": true}]},
        "spec": {"replicas": 3}});
    fake.insert("apps", "replicasets", Some("pos"), rs).await;
    let rs_uid = fake
        .get("apps", "replicasets", Some("pos"), "web-1")
        .await
        .unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    fake.insert(
        "apps",
        "replicasets",
        Some("pos"),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "other", "namespace": "pos"}, "spec": {"replicas": 1}}),
    )
    .await;
    for p in [
        pod(
            "web-1-a",
            &rs_uid,
            "Running",
            true,
            0,
            None,
            "2026-11-22T10:00:00Z",
        ),
        pod(
            "web-1-b",
            &rs_uid,
            "Running",
            true,
            1,
            None,
            "2026-11-22T10:00:01Z",
        ),
        pod(
            "web-1-c",
            &rs_uid,
            "Running",
            false,
            4,
            Some("CrashLoopBackOff"),
            "2026-11-22T10:00:02Z",
        ),
        pod(
            "stranger",
            "someone-else",
            "Running",
            true,
            9,
            None,
            "2026-11-22T10:00:03Z",
        ),
    ] {
        fake.insert("", "pods", Some("pos"), p).await;
    }
    // The Deployment controller's status update.
    fake.patch(
        "apps",
        "deployments",
        Some("pos"),
        "web",
        json!({"status": {"observedGeneration": 1,
        "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2}}),
        "kube-controller-manager",
    )
    .await;
    // The associated objects are read at every resync (100 ms here).
    let mut seen = BTreeMap::new();
    let s = status_of(&mut b, &mut seen, "web", |s| {
        s.numbers.get("pods") == Some(&3) && s.numbers.get("readyReplicas") == Some(&2)
    })
    .await;
    assert_eq!(s.numbers["replicaSets"], 1);
    assert_eq!(s.numbers["pods"], 3);
    assert_eq!(s.numbers["pods.ready"], 2);
    assert_eq!(s.numbers["pods.running"], 3);
    assert_eq!(s.numbers["pods.restarts"], 5);
    assert_eq!(s.health, Health::Progressing);
    let m = s.message.unwrap();
    assert!(
        m.contains("pod web-1-c: container web: CrashLoopBackOff"),
        "{m}"
    );
    assert_eq!(s.observed_generation, Some(1));
}

fn report(name: &str, ns: &str, app: &str, pass: i64) -> Value {
    json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "summary": {"pass": pass, "fail": 0, "warn": 0, "error": 0, "skip": 0}, "results": []})
}

/// Waits for the next `n` upsync changes.
async fn upsynced(b: &mut KubeCluster, n: usize) -> Vec<(String, Option<Value>)> {
    let mut got = Vec::new();
    for _ in 0..500 {
        for u in b.poll_upsync() {
            let body = u.body.map(|b| serde_json::from_slice(&b).unwrap());
            got.push((u.key.name.clone(), body));
        }
        if got.len() >= n {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("expected {n} upsync changes, got {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_born_objects_are_upsynced_kept_current_and_removed() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A policy engine's CRD and reports, none of them applied by the agent.
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "policyreports.wgpolicyk8s.io"},
        "spec": {"group": "wgpolicyk8s.io", "scope": "Namespaced",
                 "names": {"kind": "PolicyReport", "plural": "policyreports"},
                 "versions": [{"name": "v1alpha2", "served": true, "storage": true}]}});
    fake.insert(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        None,
        crd,
    )
    .await;
    assert!(fake.establish("policyreports.wgpolicyk8s.io").await);
    let g = "wgpolicyk8s.io";
    fake.insert(
        g,
        "policyreports",
        Some("pos"),
        report("web-1", "pos", "web", 3),
    )
    .await;
    fake.insert(
        g,
        "policyreports",
        Some("pos"),
        report("db-1", "pos", "db", 1),
    )
    .await;
    fake.insert(
        g,
        "policyreports",
        Some("other"),
        report("web-2", "other", "web", 1),
    )
    .await;
    let mut b = backend(&fake, dir.path()).await;
    b.set_upsync(vec![kubernetes::upsync::UpsyncRule {
        space: strata_protocol::model::Space::default_space(),
        group: g.into(),
        version: "v1alpha2".into(),
        kind: "PolicyReport".into(),
        namespace: Some("pos".into()),
        names: vec![],
        selector: "app=web".into(),
    }]);
    let got = upsynced(&mut b, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "web-1");
    assert_eq!(got[0].1.as_ref().unwrap()["summary"]["pass"], 3);
    // Kept current.
    fake.patch(
        g,
        "policyreports",
        Some("pos"),
        "web-1",
        json!({"summary": {"pass": 4}}),
        "kyverno",
    )
    .await;
    let got = upsynced(&mut b, 1).await;
    assert_eq!(got[0].1.as_ref().unwrap()["summary"]["pass"], 4);
    // A new one.
    fake.insert(
        g,
        "policyreports",
        Some("pos"),
        report("web-3", "pos", "web", 0),
    )
    .await;
    let got = upsynced(&mut b, 1).await;
    assert_eq!(got[0].0, "web-3");
    // Removed when it disappears.
    assert!(fake.remove(g, "policyreports", Some("pos"), "web-1").await);
    let got = upsynced(&mut b, 1).await;
    assert_eq!(got, vec![("web-1".to_owned(), None)]);
    // Nothing else moved.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(b.poll_upsync().is_empty());
    // Rules dropped: what was upsynced is removed.
    b.set_upsync(vec![]);
    let got = upsynced(&mut b, 1).await;
    assert_eq!(got, vec![("web-3".to_owned(), None)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_a_volume_move_stopped_is_held_at_zero_until_let_go() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut b = backend(&fake, dir.path()).await;
    let frozen = b.frozen();
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": "shop"},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "shop:1"}]}}}});
    b.apply(t0(), UnixMillis(0), &object(deployment, 1))
        .unwrap();
    let replicas = || async {
        fake.get("apps", "deployments", Some("shop"), "shop")
            .await
            .map(|d| d["spec"]["replicas"].clone())
    };
    until("the deployment", || async {
        replicas().await == Some(json!(2))
    })
    .await;
    // A move stops its writers: the backend applies it with 0 replicas...
    frozen.send_modify(|f| {
        f.insert(("Deployment".into(), "shop".into(), "shop".into()));
    });
    until("held at 0", || async { replicas().await == Some(json!(0)) }).await;
    // ...and its drift repair keeps it there: a scale back by someone is undone.
    fake.patch(
        "apps",
        "deployments",
        Some("shop"),
        "shop",
        json!({"spec": {"replicas": 3}}),
        "kubectl-edit",
    )
    .await;
    until("held at 0 again", || async {
        replicas().await == Some(json!(0))
    })
    .await;
    // Let go: its own replicas again.
    frozen.send_modify(|f| {
        f.clear();
    });
    until("its replicas back", || async {
        replicas().await == Some(json!(2))
    })
    .await;
    // A move's annotation alone holds it too (an agent restarted mid-move has an empty
    // set), until the move's thaw removes it.
    let annotate =
        |v: Value| json!({"metadata": {"annotations": {"strata.dev/frozen-replicas": v}}});
    let patch = |p: Value| {
        fake.patch(
            "apps",
            "deployments",
            Some("shop"),
            "shop",
            p,
            "strata-mover",
        )
    };
    patch(annotate(json!("2"))).await;
    until("held at 0 by the annotation", || async {
        replicas().await == Some(json!(0))
    })
    .await;
    patch(annotate(Value::Null)).await;
    until("its replicas back again", || async {
        replicas().await == Some(json!(2))
    })
    .await;
}
