//! What the fleet reports of an object, in two shapes.
//!
//! * The object's own `.status`, as any Kubernetes tool reads it ([`object_status`]):
//!   only fields of the kind's schema (none at all for a kind without a status, such
//!   as a ConfigMap), the standard numeric fields summed over the selected clusters,
//!   the conditions kube's controllers write for the kind (a Deployment's `Available`
//!   and `Progressing`, a Job's `Complete` or `Failed`), and `observedGeneration`,
//!   which reaches `metadata.generation` once every selected cluster has observed the
//!   write that set it ([`crate::generation`]).
//! * `strata.dev/v1alpha1` `FleetStatus` (`ClusterFleetStatus` for a cluster-scoped
//!   object): one read-only object per (object, placement), in the object's namespace,
//!   with the placement's counts (expected, reporting, available, progressing,
//!   degraded, failed), the revisions the clusters observed, the conditions, and the
//!   same per tier (each child relay's subtree) and per cluster reporting directly to
//!   the root. In the spirit of KubeStellar's `CombinedStatus`: the fleet's view stays
//!   out of the object's `.status`, where typed clients cannot take it.
//!
//! A FleetStatus is named `KIND.NAME.PLACEMENT` (the kind in lower case, each part
//! with what a Kubernetes name cannot hold replaced by `-`), e.g. `deployment.web.web`,
//! and labelled [`PLACEMENT_LABEL`], [`KIND_LABEL`] and [`NAME_LABEL`] so that
//! `kubectl get fleetstatuses -l strata.dev/name=web` finds an object's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde_json::{Map, Value, json};
use strata_protocol::model::{Health, ObjectKey, ObjectKeyParts, Revision, Space};
use strata_protocol::route::{STRATA_GROUP, is_strata_object};
use strata_protocol::summary::Summary;
use strata_protocol::user_summary::is_user_entry;

use crate::tier::core::NodeCore;

/// The kind of a namespaced object's fleet status.
pub const KIND: &str = strata_kube_core::catalog::FLEET_STATUS_KIND;
/// Its plural.
pub const PLURAL: &str = "fleetstatuses";
/// The kind of a cluster-scoped object's fleet status.
pub const CLUSTER_KIND: &str = strata_kube_core::catalog::CLUSTER_FLEET_STATUS_KIND;
/// Its plural.
pub const CLUSTER_PLURAL: &str = "clusterfleetstatuses";
/// Their version.
pub const VERSION: &str = "v1alpha1";
/// Their API version.
pub const API_VERSION: &str = "strata.dev/v1alpha1";
/// The label naming the placement.
pub const PLACEMENT_LABEL: &str = "strata.dev/placement";
/// The label naming the object's kind (lower case).
pub const KIND_LABEL: &str = "strata.dev/kind";
/// The label naming the object.
pub const NAME_LABEL: &str = "strata.dev/name";

/// Whether `(group, kind)` is one of the fleet status kinds.
pub fn is_fleet_status(group: &str, kind: &str) -> bool {
    group == STRATA_GROUP && (kind == KIND || kind == CLUSTER_KIND)
}

/// A name part as a Kubernetes name can hold it: lower case, `[a-z0-9.-]`.
fn name_part(s: &str) -> String {
    s.chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect()
}

/// The name of the fleet status of `object` under `placement`.
pub fn name_of(object: &ObjectKey, placement: &str) -> String {
    format!(
        "{}.{}.{}",
        name_part(&object.kind),
        name_part(&object.name),
        name_part(placement)
    )
}

/// One fleet status: which it is, of what, under which placement.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its own key (group `strata.dev`, kind [`KIND`] or [`CLUSTER_KIND`]).
    pub key: ObjectKey,
    /// The object it reports on.
    pub object: ObjectKey,
    /// The placement's name.
    pub placement: String,
}

/// The fleet statuses of `space`: of its namespaced objects (`namespaced`), or of its
/// cluster-scoped ones; in `namespace` only when given. Ordered by key.
pub fn entries(
    core: &NodeCore,
    space: &Space,
    namespaced: bool,
    namespace: Option<&str>,
) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for o in core.log().live() {
        let k = o.key();
        if k.space != *space
            || k.namespace.is_some() != namespaced
            || namespace.is_some_and(|ns| k.namespace.as_deref() != Some(ns))
            || is_strata_object(&o.meta)
        {
            continue;
        }
        for p in core
            .placements()
            .iter()
            .filter(|p| p.selects_object(&o.meta))
        {
            out.push(Entry {
                key: ObjectKey::new(ObjectKeyParts {
                    space: space.clone(),
                    group: STRATA_GROUP.to_owned(),
                    version: VERSION.to_owned(),
                    kind: if namespaced { KIND } else { CLUSTER_KIND }.to_owned(),
                    namespace: k.namespace.clone(),
                    name: name_of(k, &p.name),
                }),
                object: k.clone(),
                placement: p.name.clone(),
            });
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// The fleet status `name` (in `namespace`), if the space has it.
pub fn find(
    core: &NodeCore,
    space: &Space,
    namespaced: bool,
    namespace: Option<&str>,
    name: &str,
) -> Option<Entry> {
    entries(core, space, namespaced, namespace)
        .into_iter()
        .find(|e| e.key.name == name)
}

/// The counts of a summary, as the fleet status shows them.
fn counts(s: &Summary) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("expected".into(), json!(s.expected));
    m.insert("reporting".into(), json!(s.reporting));
    m.insert("applied".into(), json!(s.health.applied));
    m.insert("available".into(), json!(s.health.available));
    m.insert("progressing".into(), json!(s.health.progressing));
    m.insert("degraded".into(), json!(s.health.degraded));
    m.insert("failed".into(), json!(s.health.failed));
    if let Some(r) = s.min_revision {
        m.insert("observedRevision".into(), json!(r.0));
    }
    if let Some(r) = s.max_revision {
        m.insert("newestRevision".into(), json!(r.0));
    }
    m
}

/// The health of a one-cluster summary.
fn health_of(s: &Summary) -> &'static str {
    match Health::ALL.iter().find(|h| s.health.get(**h) > 0) {
        Some(Health::Applied) => "Applied",
        Some(Health::Progressing) => "Progressing",
        Some(Health::Available) => "Available",
        Some(Health::Degraded) => "Degraded",
        Some(Health::Failed) => "Failed",
        None => "Unknown",
    }
}

/// The fleet status as a client reads it; `head` is its `resourceVersion` (the
/// root's revision when it was read: a fleet status changes without a write).
pub fn render(core: &NodeCore, e: &Entry, head: u64) -> Option<Value> {
    let object = core.log().get(&e.object)?;
    let placement = core
        .placements()
        .iter()
        .find(|p| p.space == e.object.space && p.name == e.placement)?;
    let summary = core.summary(placement, &e.object);
    let body: Value = serde_json::from_slice(&object.body).unwrap_or_else(|_| json!({}));
    let (generation, at) = crate::generation::of_body(&body);
    let sums = [(e.placement.clone(), summary.clone())];
    let k = &e.object;
    let mut labels = Map::new();
    for (label, value) in [
        (PLACEMENT_LABEL, name_part(&e.placement)),
        (KIND_LABEL, k.kind.to_ascii_lowercase()),
        (NAME_LABEL, name_part(&k.name)),
    ] {
        if value.len() <= 63 {
            labels.insert(label.into(), json!(value.trim_matches('.')));
        }
    }
    let mut metadata = json!({
        "name": e.key.name,
        "resourceVersion": head.to_string(),
        "uid": uid(&e.key),
        "generation": 1,
        "labels": labels,
    });
    if let Some(ns) = &k.namespace {
        metadata["namespace"] = json!(ns);
    }
    let mut total = counts(&summary);
    total.insert("silent".into(), json!(summary.silent()));
    let totals: Map<String, Value> = summary
        .numbers
        .iter()
        .filter(|(f, _)| !is_user_entry(f))
        .map(|(f, n)| {
            (
                f.clone(),
                json!({ "sum": i64::try_from(n.sum).unwrap_or(i64::MAX), "min": n.min, "max": n.max }),
            )
        })
        .collect();
    if !totals.is_empty() {
        total.insert("fields".into(), Value::Object(totals));
    }
    if let Some(g) = observed_generation(generation, at, &sums) {
        total.insert("observedGeneration".into(), json!(g));
    }
    let errors: Vec<Value> = summary
        .error_samples
        .iter()
        .map(|s| json!({ "cluster": s.cluster, "health": format!("{:?}", s.health), "message": s.message }))
        .collect();
    if !errors.is_empty() {
        total.insert("errors".into(), json!(errors));
    }
    let (mut tiers, mut clusters) = (Vec::new(), Vec::new());
    for (name, is_cluster, s) in core.summary_parts(placement, &e.object) {
        let mut part = counts(&s);
        part.insert("name".into(), json!(name));
        if is_cluster {
            part.insert("health".into(), json!(health_of(&s)));
            if let Some(exact) = &s.exact {
                if let Some(m) = &exact.status.message {
                    part.insert("message".into(), json!(m));
                }
                let status: Value =
                    serde_json::from_slice(&exact.status.status).unwrap_or(Value::Null);
                if let Some(c) = status.get("conditions").filter(|c| c.is_array()) {
                    part.insert("conditions".into(), c.clone());
                }
            }
            clusters.push(Value::Object(part));
        } else {
            tiers.push(Value::Object(part));
        }
    }
    let mut v = json!({
        "apiVersion": API_VERSION,
        "kind": if k.namespace.is_some() { KIND } else { CLUSTER_KIND },
        "metadata": metadata,
        "object": {
            "apiVersion": if k.group.is_empty() { k.version.clone() } else { format!("{}/{}", k.group, k.version) },
            "group": k.group,
            "kind": k.kind,
            "name": k.name,
            "revision": object.revision.0,
            "generation": generation,
        },
        "placement": e.placement,
        "summary": total,
        "conditions": conditions(&k.group, &k.kind, &sums, generation),
        "tiers": tiers,
        "clusters": clusters,
    });
    if let Some(ns) = &k.namespace {
        v["object"]["namespace"] = json!(ns);
    }
    Some(v)
}

/// A stable identifier for `key` (Kubernetes' `uid` shape).
fn uid(key: &ObjectKey) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, key.to_string().as_bytes());
    let h: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A digest of a rendered fleet status, to notice that it changed (its
/// `resourceVersion` left out: that moves with every write anywhere).
pub fn digest(v: &Value) -> u64 {
    let mut v = v.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    let d = ring::digest::digest(&ring::digest::SHA256, v.to_string().as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(b)
}

/// A `meta.k8s.io/v1` Table of fleet statuses, for `kubectl get fleetstatuses`.
pub fn table(items: &[Value], head: u64) -> Value {
    let columns: Vec<Value> = [
        ("Name", "name", "metadata.name"),
        ("Kind", "", "the object's kind"),
        ("Object", "", "the object's name"),
        ("Placement", "", "the placement"),
        (
            "Clusters",
            "",
            "clusters the placement selects for the object",
        ),
        ("Available", "", "clusters where it is available"),
        ("Progressing", "", "clusters where it is progressing"),
        ("Failed", "", "clusters where it failed or is degraded"),
        (
            "Revision",
            "",
            "the lowest revision the clusters observed, of the object's",
        ),
    ]
    .iter()
    .map(|(n, f, d)| json!({ "name": n, "type": "string", "format": f, "description": d }))
    .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|v| {
            let s = &v["summary"];
            let n = |f: &str| s[f].as_u64().unwrap_or(0);
            let observed = s["observedRevision"]
                .as_u64()
                .map_or("-".to_owned(), |r| r.to_string());
            json!({
                "cells": [
                    v["metadata"]["name"],
                    v["object"]["kind"],
                    v["object"]["name"],
                    v["placement"],
                    n("expected").to_string(),
                    format!("{}/{}", n("available"), n("expected")),
                    n("progressing").to_string(),
                    (n("failed") + n("degraded")).to_string(),
                    format!("{observed}/{}", v["object"]["revision"]),
                ],
                "object": {
                    "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": v["metadata"],
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

/// The fields of a built-in kind's `.status` (`Some` of an empty set when it has a
/// status without fields of its own); `None` for a kind without a status.
/// A built-in kind's `.status` from its schema: its fields, and the zero value of each
/// field the schema requires (`DaemonSetStatus.numberReady`), which typed clients refuse
/// to go without. `None`: the kind has no `.status`.
type StatusFields = Option<StatusSchema>;

#[derive(Debug, Default)]
struct StatusSchema {
    fields: BTreeSet<String>,
    required: Vec<(String, Value)>,
}

/// The zero value of a schema's type, as Go's encoder writes a field that is not a pointer.
fn zero_of(schema: &Value) -> Value {
    let ty = match &schema["type"] {
        Value::Array(types) => types.iter().find(|t| *t != "null").cloned(),
        other => Some(other.clone()),
    };
    match ty.as_ref().and_then(Value::as_str) {
        Some("integer" | "number") => json!(0),
        Some("string") => json!(""),
        Some("boolean") => json!(false),
        Some("array") => json!([]),
        _ => json!({}),
    }
}

/// The `.status` fields of every built-in kind, from its schema.
fn builtin_status_fields() -> &'static BTreeMap<(String, String), StatusFields> {
    static KINDS: OnceLock<BTreeMap<(String, String), StatusFields>> = OnceLock::new();
    KINDS.get_or_init(|| {
        let mut g = schemars::generate::SchemaSettings::draft2020_12().into_generator();
        let built: Vec<((String, String), Value)> = strata_kube_builtins::builtins()
            .into_iter()
            .map(|b| {
                let schema = (b.schema)(&mut g).to_value();
                ((b.group.to_owned(), b.kind.to_owned()), schema)
            })
            .collect();
        let definitions = g.definitions().clone();
        // A type's schema is a reference to its definition.
        let resolve = |v: &Value| -> Value {
            match v["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
                Some(name) => definitions.get(name).cloned().unwrap_or(Value::Null),
                None => v.clone(),
            }
        };
        built
            .into_iter()
            .map(|(kind, schema)| {
                let schema = resolve(&schema);
                let fields = schema["properties"].get("status").map(|status| {
                    let status = resolve(status);
                    let properties = status["properties"].as_object();
                    let required = status["required"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(|f| {
                            let field = properties.and_then(|p| p.get(f)).map(&resolve);
                            (f.to_owned(), zero_of(&field.unwrap_or(Value::Null)))
                        })
                        .collect();
                    StatusSchema {
                        fields: properties
                            .map(|p| p.keys().cloned().collect())
                            .unwrap_or_default(),
                        required,
                    }
                });
                (kind, fields)
            })
            .collect()
    })
}

/// Whether a built-in kind has a `.status` in its schema; `None` for a kind that is not
/// built in (a custom resource, or one of Strata's).
pub fn builtin_has_status(group: &str, kind: &str) -> Option<bool> {
    builtin_status_fields()
        .get(&(group.to_owned(), kind.to_owned()))
        .map(Option::is_some)
}

/// Whether a status field belongs to the kind's `.status` (any field of a kind that is
/// not built in).
fn status_field(group: &str, kind: &str, field: &str) -> bool {
    match builtin_status_fields().get(&(group.to_owned(), kind.to_owned())) {
        Some(Some(schema)) => schema.fields.contains(field),
        Some(None) => false,
        None => true,
    }
}

/// `status.observedGeneration`: `generation` once every selected cluster (of every
/// placement) reported a revision at or after `at`, the write that set it; one less
/// before (the fleet has not caught up); `None` when no placement selects a cluster.
pub fn observed_generation(
    generation: u64,
    at: Revision,
    sums: &[(String, Summary)],
) -> Option<u64> {
    let expected: u64 = sums.iter().map(|(_, s)| s.expected).sum();
    if expected == 0 {
        return None;
    }
    let everyone = sums.iter().all(|(_, s)| {
        s.expected == 0 || (s.reporting >= s.expected && s.min_revision.is_some_and(|r| r >= at))
    });
    Some(if everyone {
        generation
    } else {
        generation.saturating_sub(1)
    })
}

fn condition(kind: &str, yes: bool, reason: &str, message: String) -> Value {
    json!({
        "type": kind,
        "status": if yes { "True" } else { "False" },
        "reason": reason,
        "message": message,
    })
}

/// The conditions of an object of `(group, kind)` over `sums`, as kube's controllers
/// write them for the kind: a Deployment's `Available` and `Progressing` (reason
/// `NewReplicaSetAvailable` once available everywhere, `ProgressDeadlineExceeded`
/// when it failed somewhere); a Job's `Complete` (with `SuccessCriteriaMet`) once it
/// completed on every selected cluster, `Failed` when it failed on one; for a custom
/// resource `Ready`, `Available` and `Progressing`; none for other built-in kinds.
pub fn conditions(group: &str, kind: &str, sums: &[(String, Summary)], generation: u64) -> Value {
    let expected: u64 = sums.iter().map(|(_, s)| s.expected).sum();
    let reporting: u64 = sums.iter().map(|(_, s)| s.reporting).sum();
    let available: u64 = sums.iter().map(|(_, s)| s.health.available).sum();
    let progressing: u64 = sums.iter().map(|(_, s)| s.health.progressing).sum();
    let failed: u64 = sums.iter().map(|(_, s)| s.health.failed).sum();
    let failing: u64 = failed + sums.iter().map(|(_, s)| s.health.degraded).sum::<u64>();
    let all = expected > 0 && available == expected && reporting == expected;
    let on = format!("available on {available} of {expected} clusters");
    let out = match (group, kind) {
        ("apps", "Deployment") => vec![
            condition(
                "Available",
                all,
                if all {
                    "MinimumReplicasAvailable"
                } else {
                    "MinimumReplicasUnavailable"
                },
                on,
            ),
            if failing > 0 {
                condition(
                    "Progressing",
                    false,
                    "ProgressDeadlineExceeded",
                    format!("failed or degraded on {failing} of {expected} clusters"),
                )
            } else if all {
                condition(
                    "Progressing",
                    true,
                    "NewReplicaSetAvailable",
                    format!("rolled out on all {expected} clusters"),
                )
            } else {
                condition(
                    "Progressing",
                    true,
                    "ReplicaSetUpdated",
                    format!("{progressing} of {expected} clusters progressing"),
                )
            },
        ],
        ("batch", "Job") if failed > 0 => vec![
            condition(
                "FailureTarget",
                true,
                "BackoffLimitExceeded",
                format!("failed on {failed} of {expected} clusters"),
            ),
            condition(
                "Failed",
                true,
                "BackoffLimitExceeded",
                format!("failed on {failed} of {expected} clusters"),
            ),
        ],
        ("batch", "Job") if all => vec![
            condition(
                "SuccessCriteriaMet",
                true,
                "CompletionsReached",
                format!("completed on all {expected} clusters"),
            ),
            condition(
                "Complete",
                true,
                "CompletionsReached",
                format!("completed on all {expected} clusters"),
            ),
        ],
        _ if builtin_has_status(group, kind).is_some() => Vec::new(),
        _ => {
            let mut c = vec![
                condition(
                    "Ready",
                    all,
                    if all { "Available" } else { "NotAvailable" },
                    on.clone(),
                ),
                condition("Available", all, "StrataFleet", on),
                condition(
                    "Progressing",
                    failing == 0 && (progressing > 0 || all),
                    "StrataFleet",
                    format!("{progressing} progressing, {failing} failing"),
                ),
            ];
            for x in &mut c {
                x["observedGeneration"] = json!(generation);
            }
            c
        }
    };
    Value::Array(out)
}

/// `.status` of an object of `(group, kind)` stored at `generation` (set at revision
/// `at`) from `sums`, its summaries under the placements that select it; `None` for a
/// built-in kind without a status. One cluster's exact status when a single cluster is
/// selected; else the numeric fields summed and [`conditions`]; with
/// `observedGeneration` (see [`observed_generation`]). A kind that has a status shows
/// at least `{}`, as kube-apiserver's defaulted objects do.
pub fn object_status(
    group: &str,
    kind: &str,
    (generation, at): (u64, Revision),
    sums: &[(String, Summary)],
) -> Option<Value> {
    let builtin = builtin_has_status(group, kind);
    if builtin == Some(false) {
        return None;
    }
    let mut out = Map::new();
    let expected: u64 = sums.iter().map(|(_, s)| s.expected).sum();
    if let [(_, s)] = sums
        && expected == 1
        && let Some(exact) = &s.exact
        && let Ok(Value::Object(st)) = serde_json::from_slice::<Value>(&exact.status.status)
    {
        out = st;
    } else if expected > 0 {
        // A kind whose status counts what its spec asks per cluster (`spec.replicas`):
        // readers compare the two (kstatus: "Pending termination" when `replicas` is
        // above the spec), so the status reads as the fleet's weakest cluster does:
        // `replicas` the most any cluster runs, the other counts the fewest. Other kinds:
        // the sum over the clusters. The fleet's totals are in its FleetStatus.
        let per_cluster = matches!(
            (group, kind),
            ("apps", "Deployment" | "StatefulSet" | "ReplicaSet") | ("", "ReplicationController")
        );
        let mut merged: BTreeMap<&String, (i64, i64, i128)> = BTreeMap::new();
        for (_, s) in sums {
            // User summaries are the Placement's, not status fields.
            for (field, n) in s.numbers.iter().filter(|(f, _)| !is_user_entry(f)) {
                let m = merged.entry(field).or_insert((i64::MAX, i64::MIN, 0));
                *m = (m.0.min(n.min), m.1.max(n.max), m.2 + n.sum);
            }
        }
        for (field, (min, max, sum)) in merged {
            let value = match (per_cluster, field.as_str()) {
                (true, "replicas") => max,
                (true, _) => min,
                (false, _) => i64::try_from(sum).unwrap_or(i64::MAX),
            };
            out.insert(field.clone(), json!(value));
        }
        let c = conditions(group, kind, sums, generation);
        if c.as_array().is_some_and(|c| !c.is_empty()) {
            out.insert("conditions".into(), c);
        }
    }
    out.remove("observedGeneration");
    if let Some(g) = observed_generation(generation, at, sums)
        && status_field(group, kind, "observedGeneration")
    {
        out.insert("observedGeneration".into(), json!(g));
    }
    // Only fields of the kind's own status: typed clients refuse any other.
    out.retain(|field, _| status_field(group, kind, field));
    if group.is_empty() && kind == "Service" && !out.contains_key("loadBalancer") {
        out.insert("loadBalancer".into(), json!({}));
    }
    if let Some(Some(schema)) = builtin_status_fields().get(&(group.to_owned(), kind.to_owned())) {
        for (field, zero) in &schema.required {
            out.entry(field.clone()).or_insert_with(|| zero.clone());
        }
    }
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_without_a_status_get_none() {
        assert_eq!(builtin_has_status("", "ConfigMap"), Some(false));
        assert_eq!(builtin_has_status("apps", "Deployment"), Some(true));
        assert_eq!(builtin_has_status("example.com", "Widget"), None);
        assert!(object_status("", "ConfigMap", (1, Revision(1)), &[]).is_none());
        assert_eq!(
            object_status("apps", "Deployment", (1, Revision(1)), &[]),
            Some(json!({}))
        );
        assert_eq!(
            object_status("", "Service", (1, Revision(1)), &[]),
            Some(json!({ "loadBalancer": {} }))
        );
        // Fields the schema requires are there, zero, before any cluster reports.
        let ds = object_status("apps", "DaemonSet", (1, Revision(1)), &[]).unwrap();
        for field in [
            "currentNumberScheduled",
            "desiredNumberScheduled",
            "numberMisscheduled",
            "numberReady",
        ] {
            assert_eq!(ds[field], 0, "{ds}");
        }
        assert_eq!(
            object_status("", "ReplicationController", (1, Revision(1)), &[]),
            Some(json!({ "replicas": 0 }))
        );
    }

    #[test]
    fn observed_generation_waits_for_every_cluster() {
        let mut s = Summary::expected(3);
        s.reporting = 3;
        s.health.available = 3;
        s.min_revision = Some(Revision(4));
        let sums = [("web".to_owned(), s.clone())];
        assert_eq!(observed_generation(2, Revision(5), &sums), Some(1));
        assert_eq!(observed_generation(2, Revision(4), &sums), Some(2));
        let mut s3 = s.clone();
        s3.numbers.insert(
            "replicas".into(),
            serde_json::from_value(json!({ "min": 2, "max": 2, "sum": 6, "count": 3 })).unwrap(),
        );
        s3.numbers.insert(
            "readyReplicas".into(),
            serde_json::from_value(json!({ "min": 1, "max": 2, "sum": 5, "count": 3 })).unwrap(),
        );
        let per = object_status(
            "apps",
            "Deployment",
            (2, Revision(4)),
            &[("web".into(), s3)],
        );
        let per = per.unwrap();
        assert_eq!(per["replicas"], 2, "{per}");
        assert_eq!(per["readyReplicas"], 1, "{per}");
        let st = object_status("apps", "Deployment", (2, Revision(4)), &sums).unwrap();
        assert_eq!(st["observedGeneration"], 2);
        assert_eq!(st["conditions"][1]["reason"], "NewReplicaSetAvailable");
        assert!(st.get("strata").is_none());
        let job = conditions("batch", "Job", &sums, 1);
        let job_status = object_status("batch", "Job", (1, Revision(1)), &sums).unwrap();
        assert!(
            job_status.get("observedGeneration").is_none(),
            "{job_status}"
        );
        assert_eq!(job_status["conditions"][1]["type"], "Complete");
        assert_eq!(job[1]["type"], "Complete");
        s.health.available = 2;
        s.health.progressing = 1;
        let running = conditions("batch", "Job", &[("web".to_owned(), s)], 1);
        assert_eq!(running, json!([]));
    }
}
