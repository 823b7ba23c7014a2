//! Writes and deletes of the root's Kubernetes API as kube-apiserver answers them,
//! over HTTPS against `relay up` with simulated clusters: a body without `apiVersion`
//! and `kind` takes them from the path; a delete answers the object or a `Status` as
//! kube-apiserver's registries do; finalizers and `deletionTimestamp`; the three
//! propagation policies and preconditions; `dryRun`; `deletecollection`; a Namespace
//! `Terminating` until nothing of it remains at the root and on the clusters; and the
//! `Status` messages, word for word.

#![allow(clippy::unwrap_used)]
// Tests driving processes: a sleep between polls blocks nothing else.
#![allow(clippy::disallowed_methods)]

use crate::kube_fleet::{self, Fleet};

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: kube-delete }
spec:
  root: { name: center, api: { listen: \"127.0.0.1:0\", names: [strata.example.com] } }
  relays:
    - { name: eu, parent: center, labels: { region: eu } }
  clusters:
    - { name: eu-1, parent: eu, labels: { role: pos } }
    - { name: eu-2, parent: eu, labels: { role: pos } }
";

const PLACEMENT: &str = "apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: shop }
spec:
  objects: [ { namespaces: [shop], selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

/// The hierarchy started in `tmp` (the shared fixture, with this file's topology; no
/// Kubernetes client but kube-rs is needed).
fn up(tmp: &Path) -> Fleet {
    kube_fleet::start(tmp, TOPOLOGY, "admin-token-0123456789\n", false)
}

/// One request: (HTTP status, body as JSON).
async fn call(c: &kube::Client, method: &str, path: &str, ct: &str, body: Value) -> (u16, Value) {
    let body = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(body)
        .unwrap();
    match c.request_text(req).await {
        Ok(text) => (200, serde_json::from_str(&text).unwrap()),
        Err(kube::Error::Api(s)) => (
            s.code,
            json!({ "reason": s.reason, "message": s.message, "status": s.status }),
        ),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const CMS: &str = "/api/v1/namespaces/shop/configmaps";

fn cm(name: &str, meta: Value) -> Value {
    let mut m = json!({ "name": name });
    if let (Some(m), Some(extra)) = (m.as_object_mut(), meta.as_object()) {
        m.extend(extra.clone());
    }
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": { "a": "b" } })
}

async fn exists(c: &kube::Client, path: &str) -> bool {
    match call(c, "GET", path, JSON, Value::Null).await {
        (200, _) => true,
        (404, _) => false,
        other => panic!("GET {path}: {other:?}"),
    }
}

async fn until_gone(c: &kube::Client, path: &str) {
    for _ in 0..300 {
        if !exists(c, path).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} is still there");
}

#[tokio::test(flavor = "multi_thread")]
async fn deletes_answer_as_kube_apiserver_does() {
    let tmp = tempfile::tempdir().unwrap();
    let f = up(tmp.path());
    let c = f.kube_client(None).await;

    // The Python client's create_namespace sends no apiVersion and kind: the path's.
    let (code, ns) = call(
        &c,
        "POST",
        "/api/v1/namespaces",
        JSON,
        json!({ "metadata": { "name": "shop" } }),
    )
    .await;
    assert_eq!(code, 200, "{ns}");
    assert_eq!(
        (ns["kind"].as_str(), ns["apiVersion"].as_str()),
        (Some("Namespace"), Some("v1"))
    );
    assert_eq!(ns["status"]["phase"], "Active", "{ns}");
    // One that contradicts the path is refused as kube-apiserver refuses it.
    let (code, err) = call(
        &c,
        "POST",
        CMS,
        JSON,
        json!({ "apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": { "name": "x" } }),
    )
    .await;
    assert_eq!(code, 400, "{err}");
    assert_eq!(
        err["message"],
        "the API version in the data (apps/v1) does not match the expected API version (v1)"
    );

    // The object for Services and Pods, a Status naming the object for the others.
    let svc = json!({ "metadata": { "name": "front" }, "spec": { "ports": [ { "port": 80 } ] } });
    assert_eq!(
        call(&c, "POST", "/api/v1/namespaces/shop/services", JSON, svc)
            .await
            .0,
        200
    );
    let (code, gone) = call(
        &c,
        "DELETE",
        "/api/v1/namespaces/shop/services/front",
        JSON,
        Value::Null,
    )
    .await;
    assert_eq!(
        (code, gone["kind"].as_str()),
        (200, Some("Service")),
        "{gone}"
    );
    assert_eq!(gone["metadata"]["name"], "front");
    let (_, made) = call(&c, "POST", CMS, JSON, cm("plain", json!({}))).await;
    let (code, status) = call(&c, "DELETE", &format!("{CMS}/plain"), JSON, Value::Null).await;
    assert_eq!(code, 200);
    assert_eq!(
        status,
        json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": { "name": "plain", "group": "", "kind": "configmaps", "uid": made["metadata"]["uid"] } })
    );

    // Finalizers keep an object, marked as being deleted, until they are emptied; none
    // can be added meanwhile.
    let held = cm("held", json!({ "finalizers": ["example.com/hold"] }));
    assert_eq!(call(&c, "POST", CMS, JSON, held).await.0, 200);
    let (code, kept) = call(&c, "DELETE", &format!("{CMS}/held"), JSON, Value::Null).await;
    assert_eq!(
        (code, kept["kind"].as_str()),
        (200, Some("ConfigMap")),
        "{kept}"
    );
    assert!(kept["metadata"]["deletionTimestamp"].is_string(), "{kept}");
    assert_eq!(kept["metadata"]["deletionGracePeriodSeconds"], 0);
    assert!(exists(&c, &format!("{CMS}/held")).await);
    let more = json!({ "metadata": { "finalizers": ["example.com/hold", "example.com/more"] } });
    let (code, err) = call(&c, "PATCH", &format!("{CMS}/held"), MERGE, more).await;
    assert_eq!(code, 422, "{err}");
    assert_eq!(
        err["message"],
        "ConfigMap \"held\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/more\"}"
    );
    let (code, _) = call(
        &c,
        "PATCH",
        &format!("{CMS}/held"),
        MERGE,
        json!({ "metadata": { "finalizers": null } }),
    )
    .await;
    assert_eq!(code, 200);
    assert!(!exists(&c, &format!("{CMS}/held")).await);
    // A deletion time sent with a new object is dropped, as kube-apiserver drops it.
    let dated = cm(
        "dated",
        json!({ "deletionTimestamp": "2026-01-01T00:00:00Z" }),
    );
    let (_, dated) = call(&c, "POST", CMS, JSON, dated).await;
    assert!(dated["metadata"]["deletionTimestamp"].is_null(), "{dated}");

    // Propagation: dependents name their owner by uid.
    async fn family(c: &kube::Client, owner: &str, kids: &[&str], kid_meta: Value) -> String {
        let (_, o) = call(c, "POST", CMS, JSON, cm(owner, json!({}))).await;
        let uid = o["metadata"]["uid"].as_str().unwrap().to_owned();
        for k in kids {
            let mut meta = kid_meta.clone();
            meta["ownerReferences"] =
                json!([ { "apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid } ]);
            assert_eq!(call(c, "POST", CMS, JSON, cm(k, meta)).await.0, 200);
        }
        uid
    }
    family(&c, "orphaner", &["orphan"], json!({})).await;
    let orphan =
        json!({ "kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan" });
    assert_eq!(
        call(&c, "DELETE", &format!("{CMS}/orphaner"), JSON, orphan)
            .await
            .0,
        200
    );
    let (_, o) = call(&c, "GET", &format!("{CMS}/orphan"), JSON, Value::Null).await;
    assert!(o["metadata"]["ownerReferences"].is_null(), "{o}");

    family(&c, "parent", &["child-1", "child-2"], json!({})).await;
    assert_eq!(
        call(&c, "DELETE", &format!("{CMS}/parent"), JSON, Value::Null)
            .await
            .0,
        200
    );
    assert!(!exists(&c, &format!("{CMS}/child-1")).await);
    assert!(!exists(&c, &format!("{CMS}/child-2")).await);

    family(
        &c,
        "lead",
        &["slow"],
        json!({ "finalizers": ["example.com/hold"] }),
    )
    .await;
    let (code, lead) = call(
        &c,
        "DELETE",
        &format!("{CMS}/lead?propagationPolicy=Foreground"),
        JSON,
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        lead["metadata"]["finalizers"],
        json!(["foregroundDeletion"]),
        "{lead}"
    );
    assert!(lead["metadata"]["deletionTimestamp"].is_string());
    assert!(
        exists(&c, &format!("{CMS}/lead")).await,
        "the owner waits for its dependent"
    );
    let (_, slow) = call(&c, "GET", &format!("{CMS}/slow"), JSON, Value::Null).await;
    assert!(slow["metadata"]["deletionTimestamp"].is_string(), "{slow}");
    call(
        &c,
        "PATCH",
        &format!("{CMS}/slow"),
        MERGE,
        json!({ "metadata": { "finalizers": [] } }),
    )
    .await;
    until_gone(&c, &format!("{CMS}/lead")).await;

    // Preconditions and dry runs.
    let (_, p) = call(&c, "POST", CMS, JSON, cm("guarded", json!({}))).await;
    let wrong = json!({ "preconditions": { "uid": "not-it" } });
    let (code, err) = call(&c, "DELETE", &format!("{CMS}/guarded"), JSON, wrong).await;
    assert_eq!(
        (code, err["reason"].as_str()),
        (409, Some("Conflict")),
        "{err}"
    );
    assert_eq!(
        err["message"],
        format!(
            "Operation cannot be fulfilled on configmaps \"guarded\": Precondition failed: UID in precondition: not-it, UID in object meta: {}",
            p["metadata"]["uid"].as_str().unwrap()
        )
    );
    let stale = json!({ "preconditions": { "resourceVersion": "1" } });
    assert_eq!(
        call(&c, "DELETE", &format!("{CMS}/guarded"), JSON, stale)
            .await
            .0,
        409
    );
    assert_eq!(
        call(
            &c,
            "DELETE",
            &format!("{CMS}/guarded?dryRun=All"),
            JSON,
            Value::Null
        )
        .await
        .0,
        200
    );
    assert!(exists(&c, &format!("{CMS}/guarded")).await);

    // deletecollection: every match, answered with the list of what was deleted.
    for n in ["batch-1", "batch-2", "batch-3"] {
        call(
            &c,
            "POST",
            CMS,
            JSON,
            cm(n, json!({ "labels": { "batch": "yes" } })),
        )
        .await;
    }
    let (code, list) = call(
        &c,
        "DELETE",
        &format!("{CMS}?labelSelector=batch%3Dyes"),
        JSON,
        Value::Null,
    )
    .await;
    assert_eq!(
        (code, list["kind"].as_str()),
        (200, Some("ConfigMapList")),
        "{list}"
    );
    assert_eq!(list["items"].as_array().unwrap().len(), 3, "{list}");
    let (_, left) = call(
        &c,
        "GET",
        &format!("{CMS}?labelSelector=batch%3Dyes"),
        JSON,
        Value::Null,
    )
    .await;
    assert_eq!(left["items"], json!([]));
    assert!(exists(&c, &format!("{CMS}/guarded")).await);

    // The messages, word for word.
    let deploys = "/apis/apps/v1/namespaces/shop/deployments";
    let web = json!({ "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web", "labels": { "app": "web" } },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "web" } },
                  "template": { "metadata": { "labels": { "app": "web" } },
                                "spec": { "containers": [ { "name": "web", "image": "nginx" } ] } } } });
    let (_, made) = call(&c, "POST", deploys, JSON, web.clone()).await;
    let (code, err) = call(&c, "POST", deploys, JSON, web.clone()).await;
    assert_eq!((code, err["reason"].as_str()), (409, Some("AlreadyExists")));
    assert_eq!(err["message"], "deployments.apps \"web\" already exists");
    let (code, err) = call(&c, "GET", &format!("{deploys}/nope"), JSON, Value::Null).await;
    assert_eq!(
        (code, err["message"].as_str()),
        (404, Some("deployments.apps \"nope\" not found"))
    );
    let mut stale = made.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    let (code, err) = call(&c, "PUT", &format!("{deploys}/web"), JSON, stale).await;
    assert_eq!(code, 409);
    assert_eq!(
        err["message"],
        "Operation cannot be fulfilled on deployments.apps \"web\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // A Namespace is Terminating until nothing of it remains at the root and on the
    // clusters; nothing can be created in it meanwhile.
    f.ok(
        "relay",
        &["apply", "-f", &{
            let p = f.dir.join("placement.yaml");
            std::fs::write(&p, PLACEMENT).unwrap();
            p.display().to_string()
        }],
    );
    for _ in 0..300 {
        if f.placed("deployment", "shop", "web") == Some((2, 2)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        f.placed("deployment", "shop", "web"),
        Some((2, 2)),
        "web runs on both clusters"
    );
    let (code, ns) = call(&c, "DELETE", "/api/v1/namespaces/shop", JSON, Value::Null).await;
    assert_eq!(
        (code, ns["kind"].as_str()),
        (200, Some("Namespace")),
        "{ns}"
    );
    assert_eq!(ns["status"]["phase"], "Terminating", "{ns}");
    assert!(ns["metadata"]["deletionTimestamp"].is_string(), "{ns}");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    let (code, err) = call(&c, "POST", CMS, JSON, cm("late", json!({}))).await;
    assert_eq!(
        (code, err["reason"].as_str()),
        (403, Some("Forbidden")),
        "{err}"
    );
    assert_eq!(
        err["message"],
        "configmaps \"late\" is forbidden: unable to create new content in namespace shop because it is being terminated"
    );
    // Its objects are gone at the root at once; the Namespace follows once the
    // clusters have removed them.
    assert!(!exists(&c, &format!("{deploys}/web")).await);
    until_gone(&c, "/api/v1/namespaces/shop").await;
    let (code, _) = call(
        &c,
        "POST",
        "/api/v1/namespaces",
        JSON,
        json!({ "metadata": { "name": "shop" } }),
    )
    .await;
    assert_eq!(code, 200, "a namespace of the same name can be made again");
}
