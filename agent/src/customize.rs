//! What the agent does with a placement's `customize` and `statusSummary` before and
//! after its cluster: render an object for this cluster just before it is applied, and
//! evaluate user summaries on the object as the cluster holds it. The rules themselves
//! are pure (`strata_protocol::customize`, `strata_protocol::user_summary`).

use std::collections::BTreeMap;

use serde_json::Value;
use strata_protocol::customize::{ClusterVars, CustomizeError, render, rules_for};
use strata_protocol::model::{Cluster, ContentHash, Labels, Object, ObjectMeta};
use strata_protocol::placement::Placement;
use strata_protocol::user_summary::is_user_entry;

/// The cluster as customization and summaries see it: its name, its labels over those
/// its ancestors give it (its own win), and its properties.
pub fn cluster_vars(cluster: &Cluster, inherited: &Labels) -> ClusterVars {
    let mut labels = inherited.clone();
    labels.extend(cluster.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    ClusterVars {
        name: cluster.name.clone(),
        labels,
        properties: cluster.properties.clone(),
    }
}

/// The object as this cluster must hold it: the root's version when no rule applies,
/// else the rendered manifest, with a content hash of its own (so that a backend that
/// skips unchanged objects sees a change of rules or of the cluster's variables).
pub fn render_object(
    object: &Object,
    placements: &[Placement],
    vars: &ClusterVars,
) -> Result<Object, CustomizeError> {
    let rules = rules_for(placements, &object.meta, &vars.labels);
    if rules.is_empty() {
        return Ok(object.clone());
    }
    let manifest: Value = serde_json::from_slice(&object.body)
        .map_err(|e| CustomizeError::Manifest(e.to_string()))?;
    let rendered = render(&manifest, &rules, vars)?;
    let body =
        serde_json::to_vec(&rendered).map_err(|e| CustomizeError::Manifest(e.to_string()))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &body);
    let mut hash = [0u8; 32];
    hash.copy_from_slice(digest.as_ref());
    Ok(Object {
        meta: object.meta.clone(),
        revision: object.revision,
        hash: ContentHash(hash),
        body: body.into(),
    })
}

/// Whether some placement asks for user summaries of this object.
pub fn summarized(placements: &[Placement], meta: &ObjectMeta) -> bool {
    placements
        .iter()
        .any(|p| !p.status_summary.is_empty() && p.selects_object(meta))
}

/// Replaces the user summary entries of `numbers` with those of every placement that
/// selects the object, evaluated on `held` (the manifest as applied) with `.status` as
/// the cluster reports it.
pub fn set_user_entries(
    numbers: &mut BTreeMap<String, i64>,
    placements: &[Placement],
    held: &Object,
    status: &[u8],
    labels: &Labels,
) {
    numbers.retain(|k, _| !is_user_entry(k));
    let specs: Vec<&Placement> = placements
        .iter()
        .filter(|p| !p.status_summary.is_empty() && p.selects_object(&held.meta))
        .collect();
    if specs.is_empty() {
        return;
    }
    let mut doc: Value = serde_json::from_slice(&held.body).unwrap_or(Value::Null);
    if let (Value::Object(m), Ok(st)) = (&mut doc, serde_json::from_slice::<Value>(status)) {
        m.insert("status".into(), st);
    }
    for p in specs {
        for spec in &p.status_summary {
            numbers.extend(spec.numbers(&p.name, &doc, labels));
        }
    }
}
