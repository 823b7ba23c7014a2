//! Watches of the root's Kubernetes API on the cores, in virtual time (the fixture is
//! `tree/`): a watch from a list's `resourceVersion` sees every change after that list,
//! status changes (which move no revision) included, whenever it starts.

#![allow(clippy::unwrap_used)]

use crate::tree;

use std::time::Duration;

use serde_json::Value;
use strata_protocol::model::Space;
use strata_relay::kube::catalog::{Catalog, ResourceType};
use strata_relay::kube::render;
use strata_relay::kube::selector::{FieldQuery, LabelQuery};
use strata_relay::kube::status_journal::StatusJournal;
use strata_relay::kube::watch::WatchSpec;
use strata_relay::node::core::NodeCore;
use tree::{Tree, labels};

/// A deployment placed on the point-of-sale cluster.
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
  clusters: { selector: { matchLabels: { role: pos } } }
";

fn deployments(core: &NodeCore, space: &Space) -> ResourceType {
    Catalog::of_space(core.log(), space)
        .by_kind("apps", "v1", "Deployment")
        .cloned()
        .unwrap()
}

fn watch(core: &NodeCore, space: &Space) -> WatchSpec {
    WatchSpec {
        space: space.clone(),
        resource: deployments(core, space),
        namespace: None,
        labels: LabelQuery::parse("").unwrap(),
        fields: FieldQuery::parse("").unwrap(),
        table: false,
        bookmarks: false,
        timeout: None,
    }
}

/// The Deployment `web` as the API renders it.
fn web(core: &NodeCore) -> Value {
    let o = core.log().live().find(|o| o.key().kind == "Deployment");
    render::object(core, o.unwrap())
}

/// What `kubectl wait --for=condition=Available` does: list (the object, and the
/// `resourceVersion` of the list), then watch from that version. The clusters report
/// between the two; a watch that took its first look at the statuses only once it
/// had started (as it did) never sent the change, and the wait hung.
#[test]
fn a_watch_from_a_lists_version_sees_the_status_that_changed_since() {
    let mut t = Tree::builder()
        .root("center")
        .agent("pos", "center", labels! { role: pos })
        .watch_history(10_000)
        .build();
    t.apply(APP);
    let space = Space("default".into());
    let mut journal = StatusJournal::default();

    // The list: the Deployment with no status yet, at revision `rv`; the read starts
    // the type's journal (as the API's GETs do).
    let root = t.relay("center");
    journal.observe(root, &space, &deployments(root, &space));
    let listed = web(root);
    let rv = root.log().head().0;
    assert!(listed["status"]["readyReplicas"].is_null(), "{listed}");

    // The cluster connects and reports the Deployment ready: a status change, which
    // moves no revision of the Deployment.
    t.connect_all();
    t.advance(Duration::from_secs(2));
    let root = t.relay("center");
    let now = web(root);
    assert_eq!(now["status"]["readyReplicas"], 2, "{now}");
    assert_eq!(
        now["metadata"]["resourceVersion"], listed["metadata"]["resourceVersion"],
        "the Deployment itself did not change"
    );

    // The watch from the list's version starts with that change.
    let spec = watch(root, &space);
    let (first, since, epoch) = spec.start(root, &mut journal, Some(rv)).unwrap();
    let types: Vec<_> = first
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(types, [("MODIFIED", "web")], "{first:?}");
    assert_eq!(first[0]["object"]["status"], now["status"]);

    // And goes on from there: nothing twice.
    let (next, _, _) = spec.follow(root, &mut journal, since, epoch).unwrap();
    assert!(next.is_empty(), "{next:?}");

    // A watch from now sends the object once, as ADDED, and nothing more.
    let (first, since, epoch) = spec.start(root, &mut journal, None).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["type"], "ADDED");
    let (next, _, _) = spec.follow(root, &mut journal, since, epoch).unwrap();
    assert!(next.is_empty(), "{next:?}");
}

/// A status change after the watch started reaches it when the statuses are read
/// again; a change that moves the revision is sent once, not again as a status.
#[test]
fn a_watch_follows_status_changes_and_sends_each_change_once() {
    let mut t = Tree::builder()
        .root("center")
        .agent("pos", "center", labels! { role: pos })
        .watch_history(10_000)
        .build();
    t.apply(APP);
    let space = Space("default".into());
    let mut journal = StatusJournal::default();
    let root = t.relay("center");
    let spec = watch(root, &space);
    let (first, since, epoch) = spec.start(root, &mut journal, None).unwrap();
    assert_eq!(first.len(), 1);

    t.connect_all();
    t.advance(Duration::from_secs(2));
    let root = t.relay("center");
    // Read the statuses now, as a watch does every STATUS_EVERY.
    journal.refresh(root, &space, &spec.resource);
    let (next, since, epoch) = spec.follow(root, &mut journal, since, epoch).unwrap();
    let types: Vec<_> = next.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["MODIFIED"], "{next:?}");
    assert_eq!(next[0]["object"]["status"]["readyReplicas"], 2);

    // Scale: the Deployment changes (a revision) and then its status.
    t.apply(&APP.replace("replicas: 2", "replicas: 3"));
    t.advance(Duration::from_secs(2));
    let root = t.relay("center");
    journal.refresh(root, &space, &spec.resource);
    let (next, _, _) = spec.follow(root, &mut journal, since, epoch).unwrap();
    assert_eq!(next.len(), 1, "one event for one object: {next:?}");
    assert_eq!(next[0]["object"]["status"]["readyReplicas"], 3, "{next:?}");
}

/// A watch from a version with no read of its type since the root started (say the
/// root restarted between a client's list and its watch) cannot know what the client
/// saw: it sends every selected object's status once.
#[test]
fn a_watch_with_no_read_before_it_sends_every_status_once() {
    let mut t = Tree::builder()
        .root("center")
        .agent("pos", "center", labels! { role: pos })
        .watch_history(10_000)
        .build();
    t.apply(APP);
    let rv = t.relay("center").log().head().0;
    t.connect_all();
    t.advance(Duration::from_secs(2));
    let root = t.relay("center");
    let space = Space("default".into());
    let mut journal = StatusJournal::default();
    let spec = watch(root, &space);
    let (first, since, epoch) = spec.start(root, &mut journal, Some(rv)).unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["type"], "MODIFIED");
    assert_eq!(first[0]["object"]["status"]["readyReplicas"], 2);
    let (next, _, _) = spec.follow(root, &mut journal, since, epoch).unwrap();
    assert!(next.is_empty(), "{next:?}");
}
