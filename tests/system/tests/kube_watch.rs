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
use strata_relay::tier::core::NodeCore;
use tree::{Tree, labels};

/// Starts a watch; its first events all rendered, as its stream sends them.
fn start(
    spec: &WatchSpec,
    core: &NodeCore,
    journal: &mut StatusJournal,
    from: Option<u64>,
) -> Result<(Vec<Value>, u64, u64), (u16, Value)> {
    spec.start(core, journal, from)
        .map(|(first, since, epoch)| (spec.render_first(core, first), since, epoch))
}

/// A deployment placed on the point-of-sale cluster.
const WEB: &str = "
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
        initial_events: None,
    }
}

/// A watch of the ConfigMaps of namespace `default` selected by `labels`.
fn config_maps(core: &NodeCore, labels: &str) -> WatchSpec {
    let space = Space("default".into());
    WatchSpec {
        space: space.clone(),
        resource: Catalog::of_space(core.log(), &space)
            .by_kind("", "v1", "ConfigMap")
            .cloned()
            .unwrap(),
        namespace: Some("default".into()),
        labels: LabelQuery::parse(labels).unwrap(),
        fields: FieldQuery::parse("").unwrap(),
        table: false,
        bookmarks: false,
        timeout: None,
        initial_events: None,
    }
}

fn config_map(name: &str, app: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: {name}, namespace: default, labels: {{ app: {app} }} }}\ndata: {{ k: '{value}' }}\n"
    )
}

fn delete_config_map(t: &mut Tree, name: &str) {
    let key = t
        .relay("center")
        .log()
        .live()
        .find(|o| o.key().kind == "ConfigMap" && o.key().name == name)
        .map(|o| o.key().clone())
        .unwrap();
    t.relay_mut("center")
        .apply(vec![strata_protocol::wire::Change::Delete(key)])
        .unwrap();
}

/// (type, name, resourceVersion, data.k) of each event.
fn summary(events: &[Value]) -> Vec<(String, String, String, String)> {
    events
        .iter()
        .map(|e| {
            let o = &e["object"];
            (
                e["type"].as_str().unwrap().to_owned(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                o["data"]["k"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
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
    t.apply(WEB);
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
    let (first, since, epoch) = start(&spec, root, &mut journal, Some(rv)).unwrap();
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
    let (first, since, epoch) = start(&spec, root, &mut journal, None).unwrap();
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
    t.apply(WEB);
    let space = Space("default".into());
    let mut journal = StatusJournal::default();
    let root = t.relay("center");
    let spec = watch(root, &space);
    let (first, since, epoch) = start(&spec, root, &mut journal, None).unwrap();
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
    t.apply(&WEB.replace("replicas: 2", "replicas: 3"));
    t.advance(Duration::from_secs(2));
    let root = t.relay("center");
    journal.refresh(root, &space, &spec.resource);
    let (next, _, _) = spec.follow(root, &mut journal, since, epoch).unwrap();
    assert_eq!(next.len(), 1, "one event for one object: {next:?}");
    assert_eq!(next[0]["object"]["status"]["readyReplicas"], 3, "{next:?}");
}

/// Every watch of a type sends a write's event as the same bytes, rendered once
/// (as kube-apiserver's watch cache serializes an object once for all its watchers);
/// a status the journal stamps after that is rendered again, with the status now.
#[test]
fn watches_share_one_rendering_of_each_event_until_a_status_changes() {
    let mut t = Tree::builder()
        .root("center")
        .agent("pos", "center", labels! { role: pos })
        .watch_history(10_000)
        .build();
    t.apply(WEB);
    let space = Space("default".into());
    let mut journal = StatusJournal::default();
    let root = t.relay("center");
    let spec = watch(root, &space);
    let watches: Vec<(u64, u64)> = (0..3)
        .map(|_| {
            let (_, since, epoch) = start(&spec, root, &mut journal, None).unwrap();
            (since, epoch)
        })
        .collect();
    let before = journal.events().counts();

    // A write: three watches, one rendering, the same event.
    t.apply(&WEB.replace("replicas: 2", "replicas: 3"));
    let root = t.relay("center");
    let mut sent = Vec::new();
    let mut next_watches = Vec::new();
    for &(since, epoch) in &watches {
        let (next, since, epoch) = spec.follow(root, &mut journal, since, epoch).unwrap();
        assert_eq!(next.len(), 1, "{next:?}");
        sent.push(next[0].clone());
        next_watches.push((since, epoch));
    }
    assert_eq!(sent[0]["type"], "MODIFIED");
    assert_eq!(sent[0]["object"]["spec"]["replicas"], 3);
    assert!(sent.iter().all(|e| *e == sent[0]), "{sent:?}");
    let (hits, misses) = journal.events().counts();
    assert_eq!(
        (hits - before.0, misses - before.1),
        (2, 1),
        "rendered once, sent thrice"
    );

    // The cluster reports the Deployment ready: the stamped status is rendered again,
    // once, and every watch sends it.
    t.connect_all();
    t.advance(Duration::from_secs(2));
    let root = t.relay("center");
    journal.refresh(root, &space, &spec.resource);
    let (hits0, misses0) = journal.events().counts();
    for &(since, epoch) in &next_watches {
        let (next, _, _) = spec.follow(root, &mut journal, since, epoch).unwrap();
        let types: Vec<_> = next.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["MODIFIED"], "{next:?}");
        assert_eq!(next[0]["object"]["status"]["readyReplicas"], 3, "{next:?}");
    }
    let (hits, misses) = journal.events().counts();
    assert_eq!((hits - hits0, misses - misses0), (2, 1));
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
    t.apply(WEB);
    let rv = t.relay("center").log().head().0;
    t.connect_all();
    t.advance(Duration::from_secs(2));
    let root = t.relay("center");
    let space = Space("default".into());
    let mut journal = StatusJournal::default();
    let spec = watch(root, &space);
    let (first, since, epoch) = start(&spec, root, &mut journal, Some(rv)).unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["type"], "MODIFIED");
    assert_eq!(first[0]["object"]["status"]["readyReplicas"], 2);
    let (next, _, _) = spec.follow(root, &mut journal, since, epoch).unwrap();
    assert!(next.is_empty(), "{next:?}");
}

/// The Python client's e2e `test_watch`: list, then create, patch and delete; a watch
/// from the list's version replays every write in order, one event per write with the
/// object as written, never coalesced per key (the object log alone sent DELETED first).
#[test]
fn a_watch_from_a_version_replays_every_write_in_order() {
    let mut t = Tree::builder().root("center").watch_history(0).build();
    t.apply(&config_map("a", "web", "0"));
    let listed = t.relay("center").log().head().0;
    let created = t.apply(&config_map("b", "web", "1")).0;
    let patched = t.apply(&config_map("b", "web", "2")).0;
    delete_config_map(&mut t, "b");
    delete_config_map(&mut t, "a");
    let root = t.relay("center");
    let deleted = root.log().head().0;
    let spec = config_maps(root, "app=web");
    let mut journal = StatusJournal::default();
    let (first, since, _) = start(&spec, root, &mut journal, Some(listed)).unwrap();
    assert_eq!(
        summary(&first),
        [
            ("ADDED".into(), "b".into(), created.to_string(), "1".into()),
            (
                "MODIFIED".into(),
                "b".into(),
                patched.to_string(),
                "2".into()
            ),
            (
                "DELETED".into(),
                "b".into(),
                (deleted - 1).to_string(),
                "2".into()
            ),
            (
                "DELETED".into(),
                "a".into(),
                deleted.to_string(),
                "0".into()
            ),
        ]
    );
    assert_eq!(since, deleted);
    // From the last of them: nothing.
    let (first, _, _) = start(&spec, root, &mut journal, Some(deleted)).unwrap();
    assert!(first.is_empty(), "{first:?}");
}

/// Labels that start or stop matching a watch's selector: ADDED and DELETED, as
/// kube-apiserver sends them; a write it never selected is not sent.
#[test]
fn label_changes_add_and_delete_for_a_selecting_watch() {
    let mut t = Tree::builder().root("center").build();
    t.apply(&config_map("a", "db", "0"));
    let from = t.relay("center").log().head().0;
    t.apply(&config_map("a", "web", "1"));
    t.apply(&config_map("a", "web", "2"));
    t.apply(&config_map("a", "db", "3"));
    t.apply(&config_map("a", "db", "4"));
    let root = t.relay("center");
    let spec = config_maps(root, "app=web");
    let mut journal = StatusJournal::default();
    let (first, _, _) = start(&spec, root, &mut journal, Some(from)).unwrap();
    let types: Vec<(String, String)> = summary(&first)
        .into_iter()
        .map(|(t, _, _, k)| (t, k))
        .collect();
    assert_eq!(
        types,
        [
            ("ADDED".into(), "1".into()),
            ("MODIFIED".into(), "2".into()),
            // Its last state that matched.
            ("DELETED".into(), "2".into()),
        ]
    );
}

/// A watch from before the root's history (here, before this run: the history starts
/// empty) is answered 410 Expired, in kube-apiserver's words; one from the future 504.
#[test]
fn a_watch_from_before_the_history_expires() {
    let mut t = Tree::builder().root("center").build();
    t.apply(&config_map("a", "web", "0"));
    let root = t.relay("center");
    let head = root.log().head().0;
    let mut spec = config_maps(root, "");
    let mut journal = StatusJournal::default();
    assert!(start(&spec, root, &mut journal, Some(head)).is_ok());
    let (code, status) = start(&spec, root, &mut journal, Some(head + 5)).unwrap_err();
    assert_eq!(code, 504, "{status}");
    // Keep one event: the floor moves past the first writes.
    t.apply(&config_map("a", "web", "1"));
    t.apply(&config_map("a", "web", "2"));
    t.relay_mut("center").set_watch_events(1);
    let root = t.relay("center");
    let floor = root.history().floor();
    assert_eq!(floor, head + 1);
    let (code, status) = start(&spec, root, &mut journal, Some(head)).unwrap_err();
    assert_eq!(code, 410, "{status}");
    assert_eq!(status["reason"], "Expired");
    assert_eq!(
        status["message"],
        format!("too old resource version: {head} ({floor})")
    );
    let head = floor;
    spec.bookmarks = true;
    assert!(start(&spec, root, &mut journal, Some(head)).is_ok());
}

/// A streaming list (`sendInitialEvents=true`): the current objects as ADDED, sorted by
/// namespace and name, then the bookmark that ends them at the list's version, with
/// client-go's annotations; then changes.
#[test]
fn a_streaming_list_sends_sorted_objects_then_the_end_bookmark() {
    let mut t = Tree::builder().root("center").build();
    t.apply(&config_map("c", "web", "0"));
    t.apply(&config_map("a", "web", "0"));
    t.apply(&config_map("b", "db", "0"));
    let root = t.relay("center");
    let head = root.log().head().0;
    let mut spec = config_maps(root, "app=web");
    spec.initial_events = Some(true);
    spec.bookmarks = true;
    let mut journal = StatusJournal::default();
    let (first, since, epoch) = start(&spec, root, &mut journal, None).unwrap();
    let names: Vec<(String, String)> = summary(&first[..2])
        .into_iter()
        .map(|(t, n, _, _)| (t, n))
        .collect();
    assert_eq!(
        names,
        [("ADDED".into(), "a".into()), ("ADDED".into(), "c".into())]
    );
    let end = &first[2];
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["resourceVersion"],
        head.to_string()
    );
    let annotations = &end["object"]["metadata"]["annotations"];
    assert_eq!(annotations["k8s.io/initial-events-end"], "true");
    assert!(annotations["k8s.io/initial-events-list-blueprint"].is_string());
    assert_eq!(first.len(), 3);
    // Then changes.
    t.apply(&config_map("a", "web", "1"));
    let root = t.relay("center");
    let (next, _, _) = spec.follow(root, &mut journal, since, epoch).unwrap();
    assert_eq!(summary(&next)[0].0, "MODIFIED");
    // sendInitialEvents=false: changes only.
    spec.initial_events = Some(false);
    let (first, _, _) = start(&spec, root, &mut journal, None).unwrap();
    assert!(first.is_empty(), "{first:?}");
}
