//! Objects as the Kubernetes API shows them: the stored manifest with the metadata the
//! root assigns (`resourceVersion` is the object's revision, a stable `uid`), and a
//! `.status` written from what the selected clusters report, in the kind's own shape
//! ([`crate::fleet_status::object_status`]; the fleet's per-placement view is the
//! `FleetStatus` kind), `metadata.generation` as stamped at the write
//! ([`crate::generation`]); lists, and tables for `kubectl get`.

use serde_json::{Map, Value, json};
use strata_protocol::model::{Object, Space};
use strata_protocol::overrides::is_cluster_object;
use strata_protocol::route::{is_placement, is_strata_object};
use strata_protocol::summary::Summary;

use crate::tier::core::{NodeCore, excluded_counts};

/// Metadata the root assigns, and `.status`, which the root writes: dropped from what
/// clients send before it is stored.
pub fn strip_assigned(value: &mut Value) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            meta.remove(field);
        }
    }
    if let Some(obj) = value.as_object_mut() {
        obj.remove("status");
    }
}

pub(crate) use crate::uid::uid;

/// The summaries of `object` under every placement that selects it.
pub fn summaries(core: &NodeCore, object: &Object) -> Vec<(String, Summary)> {
    if is_strata_object(&object.meta) {
        return Vec::new();
    }
    core.placements()
        .iter()
        .filter(|p| p.selects_object(&object.meta))
        .map(|p| (p.name.clone(), core.summary(p, object.key())))
        .collect()
}

/// The object as a client reads it.
pub fn object(core: &NodeCore, object: &Object) -> Value {
    if is_cluster_object(&object.meta)
        && let Some(v) = super::clusters::get(core, &object.key().space, &object.key().name)
    {
        return v;
    }
    let mut v: Value = serde_json::from_slice(&object.body).unwrap_or_else(|_| json!({}));
    if !v["metadata"].is_object() {
        v["metadata"] = json!({});
    }
    v["metadata"]["resourceVersion"] = json!(object.revision.0.to_string());
    v["metadata"]["uid"] = json!(uid(object.key()));
    if is_strata_object(&object.meta) {
        // Strata's own kinds: their revision.
        v["metadata"]["generation"] = json!(object.revision.0);
    } else {
        // Stamped at the write, moved by spec changes only (`crate::generation`):
        // clients compare it with `status.observedGeneration`.
        let (generation, at) = crate::generation::of_body(&v);
        crate::generation::hide(&mut v);
        v["metadata"]["generation"] = json!(generation);
        let k = object.key();
        if let Some(status) = crate::fleet_status::object_status(
            &k.group,
            &k.kind,
            (generation, at),
            &summaries(core, object),
        ) {
            v["status"] = status;
        }
        if k.group == "apiextensions.k8s.io" && k.kind == "CustomResourceDefinition" {
            crd_status(&mut v);
        }
    }
    if is_placement(&object.meta)
        && let Some(d) = decisions(core, &object.key().space, &object.key().name)
    {
        v["status"]["decisions"] = d;
    }
    if is_placement(&object.meta)
        && let Some((rollout, conditions)) =
            rollout_status(core, &object.key().space, &object.key().name)
    {
        v["status"]["rollout"] = rollout;
        v["status"]["conditions"] = conditions;
    }
    user_summary(core, object, &mut v);
    // A Namespace shows its phase (`Terminating` once deleted) and finalizer, as
    // kube-apiserver's do.
    if crate::kube::namespaces::is_namespace(object.key()) {
        strata_kube_core::deletion::namespace_view(&mut v);
    }
    v
}

/// A CRD's own status at the root, which serves its custom resources as soon as it is
/// stored: its names accepted, `Established`, the storage version stored; what kstatus
/// (`helm install --wait`) and `kubectl wait --for=condition=Established` read.
fn crd_status(v: &mut Value) {
    let storage: Vec<Value> = v["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|ver| ver["storage"] == true)
        .map(|ver| ver["name"].clone())
        .collect();
    let condition = |kind: &str, reason: &str, message: &str| json!({ "type": kind, "status": "True", "reason": reason, "message": message });
    v["status"]["acceptedNames"] = v["spec"]["names"].clone();
    v["status"]["storedVersions"] = json!(storage);
    v["status"]["conditions"] = json!([
        condition("NamesAccepted", "NoConflicts", "no conflicts found"),
        condition(
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted"
        ),
    ]);
}

/// A placement's rollout as its status shows it: `status.rollout` (revision, wave,
/// phase, health of what was released) and `status.conditions` (`Progressing`,
/// `Paused`, `RolledBack`, `Complete`, each `True` or `False`, for `kubectl wait`).
pub fn rollout_status(core: &NodeCore, space: &Space, name: &str) -> Option<(Value, Value)> {
    use strata_protocol::rollout::Phase;
    let key = (space.clone(), name.to_owned());
    let state = core.rollouts().get(&key)?;
    let p = core
        .placements()
        .iter()
        .find(|p| p.space == *space && p.name == name)?;
    let spec = p.rollout.as_ref()?;
    let health = core.gate_health(p, state);
    let rollout = json!({
        "revision": state.revision,
        "phase": state.phase.to_string(),
        "wave": state.wave_label(spec),
        "waveIndex": state.wave + 1,
        "waves": spec.waves.len(),
        "released": state.released.len(),
        "available": format!("{}/{}", health.available, health.released),
        "failed": health.failed,
        "unreachable": health.unreachable,
        "pending": health.pending,
        "message": state.message,
    });
    let reason = state.message.clone().unwrap_or_default();
    let conditions: Vec<Value> = [
        (Phase::Progressing, "Progressing"),
        (Phase::Paused, "Paused"),
        (Phase::RolledBack, "RolledBack"),
        (Phase::Complete, "Complete"),
    ]
    .into_iter()
    .map(|(phase, kind)| {
        json!({
            "type": kind,
            "status": if state.phase == phase { "True" } else { "False" },
            "reason": format!("Revision{}", state.revision),
            "message": if state.phase == phase { reason.clone() } else { String::new() },
        })
    })
    .collect();
    Some((rollout, Value::Array(conditions)))
}

/// How many excluded clusters a status names one by one.
const NAMED_EXCLUSIONS: usize = 100;

/// A placement's choice as its `status.decisions` shows it: how many clusters were
/// chosen of how many matching, the chosen and retiring clusters, and why each
/// excluded matching cluster was left out (the first hundred by name, all counted).
pub fn decisions(core: &NodeCore, space: &Space, name: &str) -> Option<Value> {
    let p = core.plans().get(&(space.clone(), name.to_owned()))?;
    let excluded: Map<String, Value> = p
        .plan
        .excluded
        .iter()
        .take(NAMED_EXCLUSIONS)
        .map(|(c, why)| (c.clone(), json!(why.to_string())))
        .collect();
    let mut d = json!({
        "chosen": p.plan.chosen.len(),
        "matching": p.plan.matching,
        "excluded": excluded_counts(&p.plan),
        "clusters": p.plan.chosen,
        "excludedClusters": excluded,
    });
    if !p.retiring.is_empty() {
        d["retiring"] = json!(p.retiring);
    }
    if p.move_timed_out {
        d["moveTimedOut"] = json!(true);
    }
    if let Some(m) = core.volume_moves().get(&(space.clone(), name.to_owned())) {
        d["volumeMove"] = crate::tier::volume::move_status(m);
    }
    if let Some(r) = core.replications().get(&(space.clone(), name.to_owned())) {
        d["volumeReplication"] =
            crate::tier::volume_replicas::replication_status(r, core.wall_now());
    }
    Some(d)
}

/// A Placement's `status.summary`: its `statusSummary` values over the fleet.
fn user_summary(core: &NodeCore, object: &Object, v: &mut Value) {
    if !is_placement(&object.meta) {
        return;
    }
    let placement = core
        .placements()
        .iter()
        .find(|p| p.space == object.key().space && p.name == object.key().name);
    if let Some(summary) = placement.and_then(|p| crate::placement_summary::of_placement(core, p)) {
        if !v["status"].is_object() {
            v["status"] = json!({});
        }
        v["status"]["summary"] = summary;
    }
}

/// A digest of what `.status` is made from, to notice that it changed.
pub fn status_digest(core: &NodeCore, object: &Object) -> u64 {
    let k = object.key();
    let stamped = serde_json::from_slice::<Value>(&object.body)
        .map(|b| crate::generation::of_body(&b))
        .unwrap_or((1, strata_protocol::model::Revision(0)));
    let status =
        crate::fleet_status::object_status(&k.group, &k.kind, stamped, &summaries(core, object));
    let mut text = serde_json::to_string(&status).unwrap_or_default();
    let mut user = json!({});
    user_summary(core, object, &mut user);
    text.push_str(&user.to_string());
    // A placement's decisions and rollout are status too: a watch (`kubectl wait
    // --for=condition=Complete`) must see them change.
    if is_placement(&object.meta) {
        let (space, name) = (&object.key().space, &object.key().name);
        let decisions = decisions(core, space, name).unwrap_or_default();
        text.push_str(&decisions.to_string());
        if let Some((rollout, conditions)) = rollout_status(core, space, name) {
            text.push_str(&rollout.to_string());
            text.push_str(&conditions.to_string());
        }
    }
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(b)
}

/// A list of `kind`.
pub fn list(
    api_version: &str,
    kind: &str,
    head: u64,
    items: Vec<Value>,
    next: Option<String>,
) -> Value {
    let mut meta = json!({ "resourceVersion": head.to_string() });
    if let Some(c) = next {
        meta["continue"] = json!(c);
    }
    json!({
        "apiVersion": api_version,
        "kind": format!("{kind}List"),
        "metadata": meta,
        "items": items,
    })
}

/// A one-row table for an object that is gone (a watch's `DELETED` event).
pub fn deleted_table(metadata: &Value) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": [],
        "rows": [ {
            "cells": [metadata["name"].clone(), "", "", "", ""],
            "object": { "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata },
        } ],
    })
}

/// Placements' own columns: what each chose (of how many matching clusters, and what
/// it is moving off) and how many objects it places, not the columns of a placed object.
fn placement_table(core: &NodeCore, objects: &[&Object], head: u64) -> Value {
    let columns = [
        ("Clusters", "clusters chosen"),
        ("Matching", "clusters its selector matches"),
        ("Retiring", "clusters it is moving off (make-before-break)"),
        ("Objects", "objects it places"),
        ("Revision", "the root's revision of the placement"),
    ];
    object_table(objects, head, &columns, |o| {
        let key = o.key();
        let plan = core.plans().get(&(key.space.clone(), key.name.clone()));
        let placed = core
            .placements()
            .iter()
            .find(|p| p.space == key.space && p.name == key.name)
            .map_or(0, |p| {
                core.log()
                    .live()
                    .filter(|x| x.key().space == p.space && p.places_object(&x.meta))
                    .count()
            });
        vec![
            plan.map_or(0, |p| p.plan.chosen.len()).to_string(),
            plan.map_or(0, |p| p.plan.matching).to_string(),
            plan.map_or(0, |p| p.retiring.len()).to_string(),
            placed.to_string(),
            o.revision.0.to_string(),
        ]
    })
}

/// A `meta.k8s.io/v1` Table of `objects`: a Name column, then `columns` (name,
/// description) with the cells `cells` gives each object; each row carries the object's
/// metadata (kubectl adds the namespace column itself for `-A`, from it).
fn object_table(
    objects: &[&Object],
    head: u64,
    columns: &[(&str, &str)],
    cells: impl Fn(&Object) -> Vec<String>,
) -> Value {
    let mut definitions = vec![
        json!({ "name": "Name", "type": "string", "format": "name", "description": "metadata.name" }),
    ];
    for (name, what) in columns {
        definitions.push(json!({ "name": name, "type": "string", "description": what }));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let key = o.key();
            let mut row = vec![json!(key.name)];
            row.extend(cells(o).into_iter().map(Value::String));
            let mut meta = json!({ "name": key.name, "resourceVersion": o.revision.0.to_string(), "uid": uid(key) });
            if let Some(ns) = &key.namespace {
                meta["namespace"] = json!(ns);
            }
            json!({
                "cells": row,
                "object": { "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": head.to_string() },
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// A `meta.k8s.io/v1` Table: name, where it runs, and its revision; placements get
/// their own columns.
pub fn table(core: &NodeCore, objects: &[&Object], head: u64) -> Value {
    if !objects.is_empty() && objects.iter().all(|o| is_placement(&o.meta)) {
        return placement_table(core, objects, head);
    }
    let columns = [
        ("Clusters", "clusters the placements select"),
        ("Available", "clusters where it is available"),
        ("Failed", "clusters where it failed or is degraded"),
        ("Revision", "the root's revision of the object"),
    ];
    object_table(objects, head, &columns, |o| {
        let sums = summaries(core, o);
        let expected: u64 = sums.iter().map(|(_, s)| s.expected).sum();
        let available: u64 = sums.iter().map(|(_, s)| s.health.available).sum();
        let failed: u64 = sums
            .iter()
            .map(|(_, s)| s.health.failed + s.health.degraded)
            .sum();
        vec![
            expected.to_string(),
            format!("{available}/{expected}"),
            failed.to_string(),
            o.revision.0.to_string(),
        ]
    })
}
