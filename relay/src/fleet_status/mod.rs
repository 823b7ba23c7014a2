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

use serde_json::{Map, Value, json};
use strata_protocol::model::{Health, Space};
use strata_protocol::route::{STRATA_GROUP, is_strata_object};
use strata_protocol::summary::Summary;
use strata_protocol::user_summary::is_user_entry;

use crate::tier::core::NodeCore;

pub mod entry;
mod object_status;
pub use entry::{API_VERSION, Entry, KIND_LABEL, NAME_LABEL, PLACEMENT_LABEL, VERSION, name_of};
pub(crate) use entry::{name_part, row, table_of};
pub use object_status::{builtin_has_status, conditions, object_status, observed_generation};

/// The kind of a namespaced object's fleet status.
pub const KIND: &str = strata_kube_core::catalog::FLEET_STATUS_KIND;
/// Its plural.
pub const PLURAL: &str = "fleetstatuses";
/// The kind of a cluster-scoped object's fleet status.
pub const CLUSTER_KIND: &str = strata_kube_core::catalog::CLUSTER_FLEET_STATUS_KIND;
/// Its plural.
pub const CLUSTER_PLURAL: &str = "clusterfleetstatuses";

/// Whether `(group, kind)` is one of the fleet status kinds.
pub fn is_fleet_status(group: &str, kind: &str) -> bool {
    group == STRATA_GROUP && (kind == KIND || kind == CLUSTER_KIND)
}

/// The objects of `space` of one kind made from reports (`kind`: [`KIND`],
/// [`CLUSTER_KIND`] or `ServiceEndpoints`, [`crate::service_endpoints`]); in `namespace`
/// only when given. Ordered by key.
pub fn entries(core: &NodeCore, space: &Space, kind: &str, namespace: Option<&str>) -> Vec<Entry> {
    if kind == crate::service_endpoints::KIND {
        return crate::service_endpoints::entries(core, space, namespace);
    }
    fleet_entries(core, space, kind == KIND, namespace)
}

/// The fleet statuses of `space`: of its namespaced objects (`namespaced`), or of its
/// cluster-scoped ones; in `namespace` only when given. Ordered by key.
fn fleet_entries(
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
            out.push(Entry::new(
                if namespaced { KIND } else { CLUSTER_KIND },
                k,
                &p.name,
            ));
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// The object of `kind` named `name` (in `namespace`), if the space has it.
pub fn find(
    core: &NodeCore,
    space: &Space,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Option<Entry> {
    entries(core, space, kind, namespace)
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
    if e.key.kind == crate::service_endpoints::KIND {
        return crate::service_endpoints::render(core, e, head);
    }
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
        "uid": crate::uid::uid(&e.key),
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
    if items
        .first()
        .is_some_and(|v| v["kind"] == crate::service_endpoints::KIND)
    {
        return crate::service_endpoints::table(items, head);
    }
    let columns = [
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
    ];
    let rows: Vec<Value> = items
        .iter()
        .map(|v| {
            let s = &v["summary"];
            let n = |f: &str| s[f].as_u64().unwrap_or(0);
            let observed = s["observedRevision"]
                .as_u64()
                .map_or("-".to_owned(), |r| r.to_string());
            row(
                v,
                json!([
                    v["metadata"]["name"],
                    v["object"]["kind"],
                    v["object"]["name"],
                    v["placement"],
                    n("expected").to_string(),
                    format!("{}/{}", n("available"), n("expected")),
                    n("progressing").to_string(),
                    (n("failed") + n("degraded")).to_string(),
                    format!("{observed}/{}", v["object"]["revision"]),
                ]),
            )
        })
        .collect();
    table_of(&columns, rows, head)
}
