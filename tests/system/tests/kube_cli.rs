//! The root's Kubernetes API and the `relay` CLI as a user meets them right after
//! `relay up`: the kubeconfig it writes (its server covered by the API certificate the
//! topology names), `relay kubeconfig --user`, namespaces as in Kubernetes, the CLI's
//! kubectl habits (`-n`, `-A`, `-l`, `-o name|yaml`, short names, `get -o yaml` applied
//! again by both clients), bad input answered with a `Status` while nothing is applied,
//! and a controller listing and watching Deployments with kube's `watcher`. Every
//! placement is checked to run on exactly the selected clusters.

#![allow(clippy::unwrap_used)]
// Tests driving processes: a sleep between polls blocks nothing else.
#![allow(clippy::disallowed_methods)]

use crate::kube_fleet::{self, Fleet};

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::WatchEvent;
use kube::runtime::watcher;
use serde_json::Value;

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: kube-cli }
spec:
  root: { name: center, api: { listen: \"127.0.0.1:0\", names: [strata.example.com] } }
  relays:
    - { name: eu, parent: center, labels: { region: eu } }
    - { name: us, parent: center, labels: { region: us } }
  clusters:
    - { name: eu-1, parent: eu, labels: { role: pos } }
    - { name: eu-2, parent: eu, labels: { role: pos } }
    - { name: us-1, parent: us, labels: { role: pos } }
";

const TOKENS: &str =
    "admin-token-0123456789\nalice-token-0123456789 user=alice role=edit spaces=team-a\n";

const WEB_AND_SETTINGS: &str = "apiVersion: v1
kind: Namespace
metadata: { name: shop }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { replicas: 2 }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: settings, namespace: shop, labels: { app: web } }
data: { currency: EUR }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: settings, namespace: default, labels: { app: web } }
data: { currency: USD }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: web }
spec:
  objects: [ { namespaces: [shop], selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { region: eu, role: pos } } }
";

/// The hierarchy started in `tmp` (the shared fixture, with this file's topology and
/// tokens and the real clients).
fn up(tmp: &Path) -> Fleet {
    kube_fleet::start(tmp, TOPOLOGY, TOKENS, true)
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn kubeconfig_namespaces_and_the_cli_follow_kubectl() {
    let tmp = tempfile::tempdir().unwrap();
    let f = up(tmp.path());

    // The kubeconfig relay up wrote reaches the root by its address: the API
    // certificate carries it, so no tls-server-name.
    let kc = std::fs::read_to_string(&f.kubeconfig).unwrap();
    assert!(!kc.contains("tls-server-name"), "{kc}");
    assert!(
        kc.contains("current-context: strata-default-admin\n"),
        "{kc}"
    );
    f.ok("kubectl", &["get", "ns"]);
    let alice = f.ok(
        "relay",
        &["kubeconfig", "--user", "alice", "--space", "team-a"],
    );
    assert!(alice.contains("token: alice-token-0123456789"), "{alice}");
    assert!(alice.contains("/spaces/team-a"), "{alice}");
    assert!(
        alice.contains("current-context: strata-team-a-alice"),
        "{alice}"
    );
    let err = f.fails("relay", &["kubeconfig", "--user", "bob"]);
    assert!(err.contains("no token of user \"bob\""), "{err}");
    spaces_warnings_and_custom_resources(&f, &alice);

    // A namespaced object needs its namespace, with kubectl and with relay apply.
    let lone = f.write(
        "lone.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: lone, namespace: shop }\ndata: { a: b }\n",
    );
    let err = f.fails("kubectl", &["apply", "-f", &lone]);
    assert!(err.contains("namespaces \"shop\" not found"), "{err}");
    let err = f.fails("kubectl", &["apply", "--server-side", "-f", &lone]);
    assert!(err.contains("namespaces \"shop\" not found"), "{err}");
    let err = f.fails("relay", &["apply", "-f", &lone]);
    assert!(err.contains("namespaces shop not found"), "{err}");
    assert_eq!(f.ok("relay", &["get", "cm", "-A", "-o", "name"]), "");

    // The Namespace first in the same file: kubectl sends it first, relay apply takes
    // the batch whole.
    let app = f.write("app.yaml", WEB_AND_SETTINGS);
    f.ok("kubectl", &["apply", "-f", &app]);
    f.eventually("web runs on the two eu pos clusters only", |f| {
        f.placed("deploy", "shop", "web") == Some((2, 2))
    });

    // kubectl habits: namespaces, short names, kind.group, selectors, -o name.
    assert_eq!(
        f.ok(
            "relay",
            &["get", "deployments.apps", "-n", "shop", "-o", "name"]
        ),
        "deployment.apps/web\n"
    );
    assert_eq!(f.ok("relay", &["get", "deploy", "-o", "name"]), "");
    assert_eq!(
        lines(&f.ok("relay", &["get", "cm", "-A", "-l", "app=web", "-o", "name"])),
        ["configmap/settings", "configmap/settings"]
    );
    assert_eq!(
        lines(&f.ok("relay", &["get", "ns", "-o", "name"])),
        ["namespace/shop"]
    );
    let table = f.ok("relay", &["get", "deploy", "-A", "-o", "wide"]);
    assert!(table.contains("web") && table.contains("shop"), "{table}");
    let err = f.fails("relay", &["get", "gizmos"]);
    assert!(err.contains("\"gizmos\""), "{err}");

    // get -o yaml applies again: with kubectl, then (fresh) with relay apply.
    let yaml = f.ok(
        "relay",
        &["get", "deploy", "web", "-n", "shop", "-o", "yaml"],
    );
    let three = f.write("web3.yaml", &yaml.replace("replicas: 2", "replicas: 3"));
    f.ok("kubectl", &["apply", "-f", &three]);
    let yaml = f.ok("relay", &["get", "deploy", "-n", "shop", "-o", "yaml"]);
    let four = f.write("web4.yaml", &yaml.replace("replicas: 3", "replicas: 4"));
    f.ok("relay", &["apply", "-f", &four]);
    let replicas = f.ok(
        "kubectl",
        &[
            "get",
            "deploy",
            "web",
            "-n",
            "shop",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    );
    assert_eq!(replicas, "4");

    // delete KIND NAME touches the given namespace only.
    f.ok("relay", &["delete", "cm", "settings"]);
    assert_eq!(
        f.ok("relay", &["get", "configmap", "-A", "-o", "name"]),
        "configmap/settings\n"
    );
    f.ok(
        "relay",
        &["get", "cm", "settings", "-n", "shop", "-o", "name"],
    );

    // Deleting by file deletes the Namespace first and its contents with it; the later
    // deletes of those contents are answered as done, as while Kubernetes terminates it.
    f.ok("relay", &["apply", "-f", &app]);
    f.ok("kubectl", &["delete", "-f", &app]);
    assert_eq!(f.ok("relay", &["get", "deploy", "-A", "-o", "name"]), "");
    assert_eq!(f.ok("relay", &["get", "cm", "-A", "-o", "name"]), "");
    // And deleting a Namespace alone takes what is in it.
    f.ok("relay", &["apply", "-f", &app]);
    f.ok("kubectl", &["delete", "namespace", "shop"]);
    assert_eq!(f.ok("relay", &["get", "deploy", "-A", "-o", "name"]), "");
    f.eventually("web left every cluster", |f| {
        f.placed("deploy", "shop", "web").is_none()
    });
}

/// A space nothing made is refused by name; one a token names is there while empty;
/// the first write makes a space. `--validate=warn` applies and prints what is
/// unknown. `relay apply` checks custom resources against their CRD.
fn spaces_warnings_and_custom_resources(f: &Fleet, alice: &str) {
    let nope = f.write(
        "nope.kubeconfig",
        &f.ok("relay", &["kubeconfig", "--space", "nope"]),
    );
    let err = f.fails("kubectl", &["--kubeconfig", &nope, "get", "cm"]);
    assert!(err.contains("space \"nope\" does not exist"), "{err}");
    let err = f.fails("kubectl", &["--kubeconfig", &nope, "get", "cm", "first"]);
    assert!(err.contains("space \"nope\" does not exist"), "{err}");
    let team_a = f.write("alice.kubeconfig", alice);
    let out = f.run("kubectl", &["--kubeconfig", &team_a, "get", "cm"]);
    assert!(out.status.success(), "{out:?}");
    let first = f.write(
        "first.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: first }\ndata: { a: b }\n",
    );
    f.ok("kubectl", &["--kubeconfig", &nope, "apply", "-f", &first]);
    assert_eq!(
        f.ok(
            "kubectl",
            &["--kubeconfig", &nope, "get", "cm", "-o", "name"]
        ),
        "configmap/first\n"
    );

    // Field validation: kubectl's default refuses an unknown field; Warn applies and
    // prints it, from the API's Warning header.
    let odd = f.write(
        "odd.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: odd }\ndata: { a: b }\nextra: 1\n",
    );
    let err = f.fails("kubectl", &["--kubeconfig", &nope, "apply", "-f", &odd]);
    assert!(err.contains("unknown field \"extra\""), "{err}");
    let out = f.run(
        "kubectl",
        &[
            "--kubeconfig",
            &nope,
            "apply",
            "--validate=warn",
            "-f",
            &odd,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: unknown field \"extra\""),
        "{stderr}"
    );
    f.ok("kubectl", &["--kubeconfig", &nope, "get", "cm", "odd"]);

    // relay apply: a refused value refuses the batch (the CRD in the same batch); an
    // unknown field is dropped and named.
    let menu = |spec: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{ name: menus.example.com }}
spec:
  group: example.com
  scope: Namespaced
  names: {{ plural: menus, singular: menu, kind: Menu }}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {{ type: object, properties: {{ dishes: {{ type: integer }} }} }}
---
apiVersion: example.com/v1
kind: Menu
metadata: {{ name: lunch, namespace: default }}
spec: {spec}
"
        )
    };
    let bad = f.write("menu-bad.yaml", &menu("{ dishes: many }"));
    let err = f.fails("relay", &["apply", "--space", "nope", "-f", &bad]);
    assert!(
        err.contains("spec.dishes in body must be of type integer"),
        "{err}"
    );
    let err = f.fails("kubectl", &["--kubeconfig", &nope, "get", "menus"]);
    assert!(err.contains("menus"), "nothing was applied: {err}");
    let extra = f.write("menu-extra.yaml", &menu("{ dishes: 2, foo: 1 }"));
    let out = f.run("relay", &["apply", "--space", "nope", "-f", &extra]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("unknown field \"spec.foo\""), "{stderr}");
    let spec = f.ok(
        "kubectl",
        &[
            "--kubeconfig",
            &nope,
            "get",
            "menu",
            "lunch",
            "-o",
            "jsonpath={.spec}",
        ],
    );
    assert_eq!(spec, r#"{"dishes":2}"#);
}

/// What a refused request answered: (code, reason, message).
async fn refused(client: &kube::Client, req: hyper::Request<Vec<u8>>) -> (u16, String, String) {
    match client.request_text(req).await {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected a Status, got {other:?}"),
    }
}

fn request(method: &str, path: &str, content_type: &str, body: Vec<u8>) -> hyper::Request<Vec<u8>> {
    hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_a_status_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let f = up(tmp.path());
    let admin = f.kube_client(None).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let good =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept"},"data":{"a":"b"}}"#;
    admin
        .request_text(request("POST", cms, "application/json", good.to_vec()))
        .await
        .unwrap();
    let count = |c: kube::Client| async move {
        let list: Value = c
            .request(request("GET", cms, "application/json", Vec::new()))
            .await
            .unwrap();
        list["items"].as_array().unwrap().len()
    };

    let json = b"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":".to_vec();
    let (code, _, message) = refused(&admin, request("POST", cms, "application/json", json)).await;
    assert_eq!(code, 400, "{message}");
    assert!(message.contains("does not parse"), "{message}");

    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata: { name: [oops\n".to_vec();
    let (code, _, message) = refused(&admin, request("POST", cms, "application/yaml", yaml)).await;
    assert_eq!(code, 400, "{message}");

    let big = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big"}},"data":{{"a":"{}"}}}}"#,
        "x".repeat(4 << 20)
    );
    let (code, reason, message) = refused(
        &admin,
        request("POST", cms, "application/json", big.into_bytes()),
    )
    .await;
    assert_eq!(
        (code, reason.as_str()),
        (413, "RequestEntityTooLarge"),
        "{message}"
    );

    let patch = br#"[{"op":"test","path":"/data/a","value":"not-b"}]"#.to_vec();
    let (code, _, message) = refused(
        &admin,
        request(
            "PATCH",
            &format!("{cms}/kept"),
            "application/json-patch+json",
            patch,
        ),
    )
    .await;
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("does not apply"), "{message}");

    let (code, reason, _) = refused(
        &f.kube_client(Some("wrong-token")).await,
        request("GET", cms, "application/json", Vec::new()),
    )
    .await;
    assert_eq!((code, reason.as_str()), (401, "Unauthorized"));

    let (code, _, message) = refused(
        &admin,
        request(
            "GET",
            "/spaces/No_Such/api/v1/configmaps",
            "application/json",
            Vec::new(),
        ),
    )
    .await;
    assert_eq!(code, 400, "{message}");
    assert!(message.contains("No_Such"), "{message}");
    // A watch of a space nothing made is refused by name too.
    let (code, _, message) = refused(
        &admin,
        request(
            "GET",
            "/spaces/nothing-here/api/v1/configmaps?watch=true",
            "application/json",
            Vec::new(),
        ),
    )
    .await;
    assert_eq!(code, 404, "{message}");
    assert!(
        message.contains("space \"nothing-here\" does not exist"),
        "{message}"
    );
    let alice = f.kube_client(Some("alice-token-0123456789")).await;
    let (code, _, message) = refused(
        &alice,
        request(
            "GET",
            "/spaces/team-b/api/v1/configmaps",
            "application/json",
            Vec::new(),
        ),
    )
    .await;
    assert_eq!(code, 403, "{message}");
    assert!(message.contains("team-b"), "{message}");

    for path in [
        format!("{cms}?resourceVersion=999999&resourceVersionMatch=NotOlderThan"),
        format!("{cms}?watch=true&resourceVersion=999999"),
    ] {
        let (code, _, message) = refused(
            &admin,
            request("GET", &path, "application/json", Vec::new()),
        )
        .await;
        assert_eq!(code, 504, "{path}: {message}");
        assert!(message.contains("Too large resource version"), "{message}");
    }

    // Nothing of it was applied, and the root still serves.
    assert_eq!(count(admin.clone()).await, 1);
    let kept: Value = admin
        .request(request(
            "GET",
            &format!("{cms}/kept"),
            "application/json",
            Vec::new(),
        ))
        .await
        .unwrap();
    assert_eq!(kept["data"]["a"], "b");
}

type Events = futures::stream::BoxStream<'static, watcher::Result<watcher::Event<Deployment>>>;

/// The next event whose summary ("apply replicas=2 ready=4", "delete ...") starts with
/// `want`; the earlier ones are passed over.
async fn next_with(events: &mut Events, want: &str) -> Deployment {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let e = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("no event: {want}"))
            .unwrap()
            .unwrap();
        let (kind, d) = match e {
            watcher::Event::Apply(d) | watcher::Event::InitApply(d) => ("apply", d),
            watcher::Event::Delete(d) => ("delete", d),
            _ => continue,
        };
        let v = serde_json::to_value(&d).unwrap();
        let seen = format!(
            "{kind} replicas={} ready={}",
            v["spec"]["replicas"].as_i64().unwrap_or(0),
            v["status"]["readyReplicas"].as_i64().unwrap_or(0)
        );
        if seen.starts_with(want) {
            return d;
        }
    }
}

/// A GitOps-style controller: lists and watches Deployments through the root with
/// kube's `watcher`, sees an apply, a change and a delete, and waits for the fleet's
/// status as any controller would; the root says exactly the selected clusters hold it.
#[tokio::test(flavor = "multi_thread")]
async fn a_controller_lists_and_watches_through_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let f = up(tmp.path());
    let kubeconfig = f.ok("relay", &["kubeconfig"]);
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let api: kube::Api<Deployment> = kube::Api::all(client.clone());
    let mut events: Events = watcher(api, watcher::Config::default()).boxed();
    // The initial list is empty.
    loop {
        match events.next().await.unwrap().unwrap() {
            watcher::Event::InitDone => break,
            watcher::Event::InitApply(d) => panic!("unexpected {:?}", d.metadata.name),
            _ => {}
        }
    }
    let app = f.write("app.yaml", WEB_AND_SETTINGS);
    f.ok("relay", &["apply", "-f", &app]);
    // Two eu clusters, two replicas each: the fleet's status reads per cluster, as
    // the weakest cluster shows it (the totals are in its FleetStatus).
    next_with(&mut events, "apply replicas=2 ready=2").await;
    assert_eq!(f.placed("deploy", "shop", "web"), Some((2, 2)));
    f.ok(
        "kubectl",
        &["scale", "deploy/web", "-n", "shop", "--replicas=3"],
    );
    next_with(&mut events, "apply replicas=3 ready=3").await;
    assert_eq!(f.placed("deploy", "shop", "web"), Some((2, 2)));
    f.ok("relay", &["delete", "deploy", "web", "-n", "shop"]);
    let gone = next_with(&mut events, "delete").await;
    assert_eq!(gone.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(f.placed("deploy", "shop", "web"), None);

    // A watch with a label selector sees objects come into and leave the selection as
    // kube-apiserver reports them: ADDED, MODIFIED, DELETED (an informer's cache
    // follows), and nothing of what it does not select.
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    let rv = cms
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut team_a = cms
        .watch(&kube::api::WatchParams::default().labels("team=a"), &rv)
        .await
        .unwrap()
        .boxed();
    // Each step waits for its event: the root, unlike etcd, may send one event for
    // changes that land between two of its looks. Once w1 is selected it may also
    // change by itself: a watch sends MODIFIED when the fleet's status of a selected
    // object changes (the status journal, read every second), which may land after the
    // next kubectl, as a controller's status update would with kube-apiserver. MODIFIED
    // events of w1 before the one wanted are passed over; nothing else is.
    f.ok("kubectl", &["create", "configmap", "w1"]);
    let mut selected = false;
    for (args, want) in [
        (&["label", "cm", "w1", "team=a"][..], "ADDED w1"),
        (&["annotate", "cm", "w1", "note=x"][..], "MODIFIED w1"),
        (
            &["label", "cm", "w1", "team=b", "--overwrite"][..],
            "DELETED w1",
        ),
    ] {
        f.ok("kubectl", args);
        loop {
            let got = next_event(&mut team_a).await;
            if got == want {
                break;
            }
            assert!(
                selected && got == "MODIFIED w1",
                "after kubectl {args:?}: {got}, wanted {want}"
            );
        }
        selected = want != "DELETED w1";
    }
    f.ok("kubectl", &["delete", "cm", "w1"]);
    f.ok("kubectl", &["create", "configmap", "w2"]);
    f.ok("kubectl", &["label", "cm", "w2", "team=a"]);
    // Nothing of w1's delete or w2's creation came before.
    assert_eq!(next_event(&mut team_a).await, "ADDED w2");
}

/// The next event of a raw watch other than a bookmark, as "TYPE NAME".
async fn next_event(
    events: &mut futures::stream::BoxStream<'_, kube::Result<WatchEvent<ConfigMap>>>,
) -> String {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("an event within 30 s")
            .expect("the watch goes on")
            .expect("an event that parses");
        let (kind, cm) = match event {
            WatchEvent::Added(cm) => ("ADDED", cm),
            WatchEvent::Modified(cm) => ("MODIFIED", cm),
            WatchEvent::Deleted(cm) => ("DELETED", cm),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("{e:?}"),
        };
        return format!("{kind} {}", cm.metadata.name.unwrap_or_default());
    }
}
