//! A controller written with kube-rs against the root (issue 45, Deliver 6): kube's
//! `watcher` with streaming lists (`sendInitialEvents=true`, the initial objects as
//! events, then the bookmark that ends them), and a `Controller` over ConfigMaps that,
//! for each ConfigMap labelled `app=demo`, server-side applies a derived ConfigMap it
//! owns, both watched with streaming lists. Every step checks through the root that the
//! derived objects exist and run on exactly the clusters their Placement selects. Every
//! step runs even when an earlier one failed; the test prints each step's outcome and
//! what the watcher and the controller reported, and asserts that all passed.

#![allow(clippy::unwrap_used)]
// The root's checks are synchronous: they run in `block_in_place`.
#![allow(clippy::disallowed_methods)]

use crate::kube_fleet::{self, Fleet};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

const NS: &str = "demo";

/// The namespace and the Placement of everything in it on the `role=pos` clusters.
const FIXTURE: &str = "apiVersion: v1
kind: Namespace
metadata: { name: demo }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: demo }
spec:
  objects: [ { namespaces: [demo] } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

/// A source ConfigMap, labelled `app=demo` when `demo`.
fn source(name: &str, greeting: &str, demo: bool) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some(NS.into());
    if demo {
        cm.metadata.labels = Some(BTreeMap::from([("app".into(), "demo".into())]));
    }
    cm.data = Some(BTreeMap::from([("greeting".into(), greeting.into())]));
    cm
}

struct Ctx {
    client: kube::Client,
}

/// Server-side applies `NAME-derived`: the source's data and where it came from, owned
/// by the source.
async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let ns = cm.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let name = format!("{}-derived", cm.name_any());
    let mut derived = ConfigMap::default();
    derived.metadata.name = Some(name.clone());
    derived.metadata.namespace = Some(ns);
    derived.metadata.labels = Some(BTreeMap::from([("app".into(), "demo-derived".into())]));
    derived.metadata.owner_references = cm.controller_owner_ref(&()).map(|o| vec![o]);
    let mut data = cm.data.clone().unwrap_or_default();
    data.insert("derivedFrom".into(), cm.name_any());
    derived.data = Some(data);
    // Server-side apply wants the type of the object.
    let mut body = serde_json::to_value(&derived).unwrap();
    body["apiVersion"] = "v1".into();
    body["kind"] = "ConfigMap".into();
    api.patch(
        &name,
        &PatchParams::apply("demo-controller").force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_: Arc<ConfigMap>, _: &kube::Error, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

/// Runs a synchronous check of the root without stalling the runtime.
fn sync<T>(check: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(check)
}

/// Waits up to 60 s until the root holds `name` in the namespace with `greeting`, and
/// it runs on exactly the `role=pos` clusters.
async fn derived(
    f: &Fleet,
    api: &Api<ConfigMap>,
    name: &str,
    greeting: &str,
) -> Result<(), String> {
    let mut last = String::new();
    let mut found = false;
    for _ in 0..600 {
        match api.get_opt(name).await {
            Ok(Some(cm)) => {
                let data = cm.data.unwrap_or_default();
                if data.get("greeting").map(String::as_str) == Some(greeting) {
                    found = true;
                    break;
                }
                last = format!("the root holds {name} with data {data:?}");
            }
            Ok(None) => last = format!("the root has no {name}"),
            Err(e) => last = format!("GET {name}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !found {
        return Err(format!(
            "no derived ConfigMap {name} with greeting {greeting:?}: {last}"
        ));
    }
    sync(|| f.landed_on_pos("configmap", NS, name, "demo"))
}

/// The watcher's next event within 30 s, as text; errors are returned as text too.
async fn next(
    events: &mut futures::stream::BoxStream<'_, Result<watcher::Event<ConfigMap>, watcher::Error>>,
) -> String {
    match tokio::time::timeout(Duration::from_secs(30), events.next()).await {
        Err(_) => "nothing within 30 s".into(),
        Ok(None) => "the stream ended".into(),
        Ok(Some(Err(e))) => format!("error: {e}"),
        Ok(Some(Ok(e))) => match e {
            watcher::Event::Init => "Init".into(),
            watcher::Event::InitApply(cm) => format!("InitApply {}", cm.name_any()),
            watcher::Event::InitDone => "InitDone".into(),
            watcher::Event::Apply(cm) => format!("Apply {}", cm.name_any()),
            watcher::Event::Delete(cm) => format!("Delete {}", cm.name_any()),
        },
    }
}

/// `Err` unless the watcher's next events are `want`, in order, with nothing between.
async fn expect_events(
    events: &mut futures::stream::BoxStream<'_, Result<watcher::Event<ConfigMap>, watcher::Error>>,
    want: &[&str],
) -> Result<(), String> {
    let mut seen = Vec::new();
    for w in want {
        let e = next(events).await;
        seen.push(e.clone());
        if e != *w {
            return Err(format!("wanted {want:?}, the watcher gave {seen:?}"));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kube_rs_controller_with_streaming_lists_works_against_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let f = sync(|| kube_fleet::up(tmp.path()));
    sync(|| {
        let file = f.write("demo.yaml", FIXTURE);
        f.ok("relay", &["apply", "-f", &file]);
    });
    let text = std::fs::read_to_string(&f.kubeconfig).unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut failures: Vec<String> = Vec::new();
    let mut record = |step: &str, result: Result<(), String>| {
        eprintln!(
            "controller {step}: {}",
            if result.is_ok() { "passed" } else { "FAILED" }
        );
        if let Err(e) = result {
            failures.push(format!("  FAILED {step}: {e}"));
        }
    };

    // One ConfigMap before anything watches: the streaming list brings it.
    let created = api
        .create(&PostParams::default(), &source("one", "hello", true))
        .await
        .map(|_| ())
        .map_err(|e| format!("POST configmap one: {e}"));
    record("create a ConfigMap with kube-rs", created);

    // A watcher with streaming lists: the current object, the end of the initial
    // events, then a change.
    let mut events = watcher(
        api.clone(),
        watcher::Config::default()
            .labels("app=demo")
            .streaming_lists(),
    )
    .boxed();
    let initial = expect_events(&mut events, &["Init", "InitApply one", "InitDone"]).await;
    record("watcher with streaming lists: initial events", initial);
    let two = api
        .create(&PostParams::default(), &source("two", "hi", true))
        .await
        .map_err(|e| format!("POST configmap two: {e}"));
    let change = match two {
        Ok(_) => expect_events(&mut events, &["Apply two"]).await,
        Err(e) => Err(e),
    };
    record(
        "watcher with streaming lists: a change after the bookmark",
        change,
    );
    drop(events);

    // The controller: every app=demo ConfigMap gets a derived one it owns.
    // What the controller reports, each error once (the first few), for the steps' failures.
    let (errors, reported) = std::sync::mpsc::channel::<String>();
    let mut sent: Vec<String> = Vec::new();
    let controller = tokio::spawn(
        Controller::new(
            api.clone(),
            watcher::Config::default()
                .labels("app=demo")
                .streaming_lists(),
        )
        .owns(
            api.clone(),
            watcher::Config::default()
                .labels("app=demo-derived")
                .streaming_lists(),
        )
        .run(
            reconcile,
            error_policy,
            Arc::new(Ctx {
                client: client.clone(),
            }),
        )
        .for_each(move |r| {
            if let Err(e) = r {
                let e = format!(
                    "{e}: {:?}",
                    std::error::Error::source(&e).map(ToString::to_string)
                );
                if sent.len() < 10 && !sent.contains(&e) {
                    sent.push(e.clone());
                    let _ = errors.send(e);
                }
            }
            futures::future::ready(())
        }),
    );
    let mut controller_errors: Vec<String> = Vec::new();
    let mut step = |name: &str, result: Result<(), String>| {
        controller_errors.extend(reported.try_iter());
        let said = if controller_errors.is_empty() {
            String::new()
        } else {
            format!("; the controller reported: {controller_errors:#?}")
        };
        record(name, result.map_err(|e| format!("{e}{said}")));
    };

    let other = api
        .create(&PostParams::default(), &source("other", "nope", false))
        .await
        .map(|_| ())
        .map_err(|e| format!("POST configmap other: {e}"));
    step("create a ConfigMap the controller does not select", other);
    let mut both = derived(&f, &api, "one-derived", "hello").await;
    if both.is_ok() {
        both = derived(&f, &api, "two-derived", "hi").await;
    }
    step(
        "the derived ConfigMaps exist and run on exactly the selected clusters",
        both,
    );

    let change = api
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "data": { "greeting": "bonjour" } })),
        )
        .await
        .map_err(|e| format!("PATCH configmap one: {e}"));
    let followed = match change {
        Ok(_) => derived(&f, &api, "one-derived", "bonjour").await,
        Err(e) => Err(e),
    };
    step(
        "a change of the source reaches the derived ConfigMap",
        followed,
    );

    let unselected = match api.get_opt("other-derived").await {
        Ok(None) => Ok(()),
        Ok(Some(_)) => Err("the controller derived a ConfigMap it does not select".into()),
        Err(e) => Err(format!("GET other-derived: {e}")),
    };
    step("nothing derived from an unselected ConfigMap", unselected);

    let owned = match api.get_opt("two-derived").await {
        Ok(Some(cm)) => {
            let owners = cm.owner_references();
            if owners.len() == 1 && owners[0].name == "two" && owners[0].controller == Some(true) {
                Ok(())
            } else {
                Err(format!("two-derived's owners: {owners:?}"))
            }
        }
        Ok(None) => Err("the root has no two-derived".into()),
        Err(e) => Err(format!("GET two-derived: {e}")),
    };
    step("the derived ConfigMap is owned by its source", owned);

    controller.abort();
    let report = format!(
        "controller: {} failed\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{report}");
    assert!(failures.is_empty(), "{report}");
    drop(f);
}
