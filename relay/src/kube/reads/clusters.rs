//! `strata.dev/v1alpha1` `Cluster`: the root's inventory as Kubernetes objects, with
//! labels editable at the root.
//!
//! A Cluster is every cluster some agent registered below the root, plus those a user
//! created ahead of their agent. What a client reads is made at each request:
//! `metadata.labels` are the labels the cluster reports (with those inherited from the
//! relays above it) as this space changed them, `status` is where the cluster is
//! (`path`, `reachable`, `lastSeen`, `properties`) and `status.labelOverrides` what the
//! space changed.
//!
//! A write (update, patch, server-side apply, create) stores a `Cluster` object in the
//! space's log whose `status.labelOverrides` is the difference between the labels
//! written and those the cluster reports: labels set and labels removed. That object
//! travels to every relay, so every tier routes with the same labels
//! ([`strata_protocol::overrides`]): `kubectl label cluster store-1 region=us` moves
//! the space's workloads placed by `region` at once, everywhere, even while the cluster
//! is away. A label the cluster reports later still shows unless the space changed it.
//! Deleting a Cluster drops the space's changes (the cluster stays in the inventory
//! while its agent reports it).
//!
//! Each space sees its own changes only: a tenant relabelling a cluster moves its own
//! workloads, never another space's.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use strata_node::clock::Clock;
use strata_node::objects::{Manifest, manifest_from_value};
use strata_protocol::model::{Cluster, Labels, Object, ObjectKey, ObjectKeyParts, Space};
use strata_protocol::overrides::{CLUSTER_KIND, LabelOverride, is_cluster_object};
use strata_protocol::route::STRATA_GROUP;

use crate::kube::{Answer, failure};
use crate::tier::core::{NodeCore, last_seen};

/// The API version of the kind.
pub const API_VERSION: &str = "strata.dev/v1alpha1";

/// One cluster as the space sees it: as reported (if it is in the inventory) and as
/// stored (if the space changed it).
struct Entry<'a> {
    reported: Option<Cluster>,
    stored: Option<&'a Object>,
}

/// Every cluster the space knows, by name.
fn entries<'a>(core: &'a NodeCore, space: &Space) -> BTreeMap<String, Entry<'a>> {
    let mut out: BTreeMap<String, Entry<'a>> = BTreeMap::new();
    for c in core.reports().clusters() {
        out.insert(
            c.name.clone(),
            Entry {
                reported: Some(core.reports().effective(c)),
                stored: None,
            },
        );
    }
    for o in core
        .log()
        .live()
        .filter(|o| is_cluster_object(&o.meta) && o.key().space == *space)
    {
        out.entry(o.key().name.clone())
            .or_insert(Entry {
                reported: None,
                stored: None,
            })
            .stored = Some(o);
    }
    out
}

/// The taints the space's `Cluster` objects set (`relay cordon`, `relay drain`,
/// `kubectl edit cluster`), by cluster; clusters without any are absent.
pub fn taints(core: &NodeCore, space: &Space) -> BTreeMap<String, Value> {
    core.log()
        .live()
        .filter(|o| is_cluster_object(&o.meta) && o.key().space == *space)
        .filter_map(|o| {
            let body: Value = serde_json::from_slice(&o.body).ok()?;
            let t = body.pointer("/spec/taints")?;
            (t.as_array().is_some_and(|a| !a.is_empty())).then(|| (o.key().name.clone(), t.clone()))
        })
        .collect()
}

/// The key of the space's object for `name`.
pub fn key(space: &Space, name: &str) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: space.clone(),
        group: STRATA_GROUP.to_owned(),
        version: "v1alpha1".to_owned(),
        kind: CLUSTER_KIND.to_owned(),
        namespace: None,
        name: name.to_owned(),
    })
}

fn stored_body(o: Option<&Object>) -> Value {
    o.and_then(|o| serde_json::from_slice(&o.body).ok())
        .unwrap_or_else(|| json!({}))
}

fn override_of(body: &Value) -> LabelOverride {
    body.pointer("/status/labelOverrides")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

/// The cluster `name` as a client reads it, if the space knows it.
pub fn get(core: &NodeCore, space: &Space, name: &str) -> Option<Value> {
    let all = entries(core, space);
    let entry = all.get(name)?;
    Some(render(core, name, entry))
}

/// Every cluster the space knows, as clients read them.
pub fn all(core: &NodeCore, space: &Space) -> Vec<Value> {
    entries(core, space)
        .iter()
        .map(|(name, e)| render(core, name, e))
        .collect()
}

fn render(core: &NodeCore, name: &str, entry: &Entry<'_>) -> Value {
    let body = stored_body(entry.stored);
    let change = override_of(&body);
    let base = entry
        .reported
        .as_ref()
        .map(|c| c.labels.clone())
        .unwrap_or_default();
    let labels = change.applied_to(&base);
    let mut status = json!({ "reachable": false, "labelOverrides": change });
    if let Some(c) = &entry.reported {
        let (reachable, seen) = last_seen(c, &core.all_links(), Clock::start().wall());
        status["path"] = json!(c.path);
        status["reachable"] = json!(reachable);
        if let Some(why) = crate::tier::core::backend_reason(c) {
            status["reason"] = json!(why);
        }
        status["properties"] = json!(c.properties);
        if let Some(ms) = seen {
            status["lastSeen"] = json!(strata_protocol::time::UnixMillis(ms).rfc3339());
        }
    }
    let mut metadata = json!({
        "name": name,
        "labels": labels,
        // A cluster the space never changed has no object yet: version 0.
        "resourceVersion": entry.stored.map_or(0, |o| o.revision.0).to_string(),
        "uid": crate::uid::uid(&key(&Space(String::new()), name)),
    });
    if let Some(o) = entry.stored {
        metadata["generation"] = json!(o.revision.0);
        if let Some(m) = body["metadata"]["managedFields"].as_array() {
            metadata["managedFields"] = json!(m);
        }
        if let Some(a) = body["metadata"]["annotations"].as_object() {
            metadata["annotations"] = json!(a);
        }
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": CLUSTER_KIND,
        "metadata": metadata,
        "spec": body.get("spec").cloned().unwrap_or_else(|| json!({})),
        "status": status,
    })
}

/// `value` (a Cluster as a client wrote it) made ready to store: its
/// `status.labelOverrides` computed from the labels it carries against those the
/// cluster reports, anything else in `status` dropped.
pub fn prepare(core: &NodeCore, mut value: Value) -> Result<Value, Answer> {
    let Some(name) = value["metadata"]["name"].as_str().map(str::to_owned) else {
        return Err(failure(
            422,
            "Invalid",
            "Cluster is invalid: metadata.name: Required value".into(),
            None,
        ));
    };
    let mut wanted = Labels::new();
    if let Some(map) = value["metadata"]["labels"].as_object() {
        for (k, v) in map {
            let Some(v) = v.as_str() else {
                return Err(failure(
                    422,
                    "Invalid",
                    format!(
                        "Cluster {name:?} is invalid: metadata.labels.{k}: label values must be strings"
                    ),
                    None,
                ));
            };
            wanted.insert(k.clone(), v.to_owned());
        }
    }
    let reported = core
        .reports()
        .clusters()
        .find(|c| c.name == name)
        .map(|c| core.reports().effective(c).labels)
        .unwrap_or_default();
    let change = LabelOverride::between(&reported, &wanted);
    value["status"] = json!({ "labelOverrides": change });
    // `tolerationSeconds` counts from when a NoExecute taint was added: stamp new ones.
    let now = Clock::start().wall().0;
    if let Some(taints) = value
        .pointer_mut("/spec/taints")
        .and_then(Value::as_array_mut)
    {
        for t in taints {
            if t["effect"] == "NoExecute" && t["timeAdded"].is_null() {
                t["timeAdded"] = json!(now);
            }
        }
    }
    Ok(value)
}

/// Manifests applied with `relay apply -f`, Clusters among them made ready to store as
/// [`prepare`] does; the message of the first that cannot be.
pub fn prepare_manifests(
    core: &NodeCore,
    manifests: Vec<Manifest>,
) -> Result<Vec<Manifest>, String> {
    manifests
        .into_iter()
        .map(|m| {
            if !is_cluster_object(&m.meta) {
                return Ok(m);
            }
            let space = m.meta.key.space.clone();
            let mut value = m.value;
            if let Some(o) = value.as_object_mut() {
                o.remove("status");
            }
            // Applying a Cluster that names no labels (its capacity, its taints) leaves
            // its labels as they are.
            if value["metadata"]["labels"].is_null()
                && let Some(current) = get(core, &space, &m.meta.key.name)
            {
                value["metadata"]["labels"] = current["metadata"]["labels"].clone();
            }
            let value = prepare(core, value).map_err(|(_, status)| {
                status["message"]
                    .as_str()
                    .unwrap_or("invalid Cluster")
                    .to_owned()
            })?;
            manifest_from_value(value, &space).map_err(|e| {
                e.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            })
        })
        .collect()
}

/// A table for `kubectl get clusters`: name, reachable, last seen, path.
pub fn table(items: &[Value], head: u64) -> Value {
    let columns: Vec<Value> = [
        ("Name", "name", "metadata.name"),
        (
            "Reachable",
            "",
            "whether every link on its path is up and its agent reaches the cluster's API server",
        ),
        ("Last-Seen", "", "when it was last seen, if not now"),
        ("Path", "", "the relays between the root and the cluster"),
        ("Changed", "", "labels this space changed at the root"),
    ]
    .iter()
    .map(|(n, f, d)| json!({ "name": n, "type": "string", "format": f, "description": d }))
    .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|c| {
            let s = &c["status"];
            let path: Vec<&str> = s["path"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let change: LabelOverride =
                serde_json::from_value(s["labelOverrides"].clone()).unwrap_or_default();
            let mut changed: Vec<String> =
                change.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
            changed.extend(change.remove.iter().map(|k| format!("{k}-")));
            let seen = if s["reachable"] == json!(true) {
                "now".to_owned()
            } else {
                s["lastSeen"].as_str().unwrap_or("never").to_owned()
            };
            json!({
                "cells": [
                    c["metadata"]["name"],
                    s["reachable"] == json!(true),
                    seen,
                    path.join("/"),
                    if changed.is_empty() { "<none>".to_owned() } else { changed.join(",") },
                ],
                "object": {
                    "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {
                        "name": c["metadata"]["name"],
                        "resourceVersion": c["metadata"]["resourceVersion"],
                        "labels": c["metadata"]["labels"],
                    },
                },
            })
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": head.to_string() },
        "columnDefinitions": columns, "rows": rows,
    })
}
