//! User manifests: multi-document YAML of any Kubernetes objects and placements, turned
//! into [`Object`]s with their routing metadata extracted once, at the root.
//!
//! Bodies are stored as JSON. Every fault names the document (from 1) and the field;
//! a request with any faulty document is refused whole.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;
use strata_protocol::choice::{Decision, Seconds, Taint, is_decision};
use strata_protocol::customize::CustomizeRule;
use strata_protocol::model::{
    ContentHash, Labels, Object, ObjectKey, ObjectKeyParts, ObjectMeta, Revision, Space,
};
use strata_protocol::overrides::{ClusterOverrides, LabelOverride, is_cluster_object};
use strata_protocol::placement::{
    ClusterSelector, DEFAULT_MOVE_TIMEOUT, MovePolicy, MoveStrategy, ObjectSelector, Placement,
    UpsyncSelector,
};
use strata_protocol::route::{PLACEMENT_KIND, STRATA_GROUP};
use strata_protocol::user_summary::SummarySpec;

/// One fault in one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The document's index in the request, from 1 (0 when the YAML itself is broken).
    pub document: usize,
    /// The field at fault, e.g. `metadata.name`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.document == 0 {
            write!(f, "{}", self.reason)
        } else {
            write!(
                f,
                "document {}: {}: {}",
                self.document, self.field, self.reason
            )
        }
    }
}

/// A parsed manifest, ready to become an [`Object`] at some revision.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Identity and labels.
    pub meta: ObjectMeta,
    /// The whole manifest.
    pub value: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlacementSpec {
    objects: Vec<ObjectSelector>,
    clusters: ClusterSelector,
    #[serde(default)]
    upsync: Vec<UpsyncSelector>,
    #[serde(default, rename = "move")]
    move_strategy: MoveStrategy,
    #[serde(default, rename = "moveTimeout")]
    move_timeout: Option<Seconds>,
    #[serde(default, rename = "moveVolumes")]
    move_volumes: Vec<strata_protocol::placement_spec::MoveVolumeSpec>,
    #[serde(default)]
    customize: Vec<CustomizeRule>,
    #[serde(default, rename = "statusSummary")]
    status_summary: Vec<SummarySpec>,
    #[serde(default)]
    rollout: Option<strata_protocol::rollout::RolloutSpec>,
}

fn fault(document: usize, field: &str, reason: impl Into<String>) -> ManifestError {
    ManifestError {
        document,
        field: field.to_owned(),
        reason: reason.into(),
    }
}

/// Parses a multi-document YAML request into manifests of `space`, or every fault.
pub fn parse_manifests(text: &str, space: &Space) -> Result<Vec<Manifest>, Vec<ManifestError>> {
    let docs: Vec<Value> = crate::yaml::from_multiple(text)
        .map_err(|e| vec![fault(0, "", format!("not valid YAML: {e}"))])?;
    // A `List` (what `kubectl get -o yaml` and `relay get -o yaml` print for several
    // objects) stands for its items.
    let docs: Vec<Value> = docs
        .into_iter()
        .flat_map(|d| match d {
            Value::Object(mut m)
                if m.get("kind").and_then(Value::as_str) == Some("List")
                    && m.get("apiVersion").and_then(Value::as_str) == Some("v1")
                    && m.get("items").is_some_and(Value::is_array) =>
            {
                match m.remove("items") {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                }
            }
            d => vec![d],
        })
        .collect();
    let mut out = Vec::new();
    let mut faults = Vec::new();
    for (i, doc) in docs.into_iter().enumerate().filter(|(_, d)| !d.is_null()) {
        match manifest(i + 1, doc, space) {
            Ok(m) => out.push(m),
            Err(mut f) => faults.append(&mut f),
        }
    }
    if faults.is_empty() {
        Ok(out)
    } else {
        Err(faults)
    }
}

/// One manifest of `space` from its JSON value (a Kubernetes API request body), or
/// every fault.
pub fn manifest_from_value(value: Value, space: &Space) -> Result<Manifest, Vec<ManifestError>> {
    manifest(1, value, space)
}

fn manifest(doc: usize, value: Value, space: &Space) -> Result<Manifest, Vec<ManifestError>> {
    let mut faults = Vec::new();
    let text = |field: &str, v: Option<&Value>, faults: &mut Vec<ManifestError>| match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => {
            faults.push(fault(doc, field, "must be a non-empty string"));
            None
        }
        None => {
            faults.push(fault(doc, field, "is required"));
            None
        }
    };
    if !value.is_object() {
        return Err(vec![fault(doc, "", "a manifest must be a mapping")]);
    }
    let api_version = text("apiVersion", value.get("apiVersion"), &mut faults);
    let kind = text("kind", value.get("kind"), &mut faults);
    let metadata = value.get("metadata");
    let name = text(
        "metadata.name",
        metadata.and_then(|m| m.get("name")),
        &mut faults,
    );
    if let Some(n) = &name
        && !valid_name(n)
    {
        faults.push(fault(doc, "metadata.name", format!("{n:?} is not a valid object name (lowercase alphanumerics, '-' and '.', at most 253 characters)")));
    }
    let namespace = match metadata.and_then(|m| m.get("namespace")) {
        None | Some(Value::Null) => None,
        Some(Value::String(ns)) if valid_name(ns) => Some(ns.clone()),
        Some(_) => {
            faults.push(fault(
                doc,
                "metadata.namespace",
                "must be a valid namespace name",
            ));
            None
        }
    };
    let mut labels = Labels::new();
    match metadata.and_then(|m| m.get("labels")) {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (k, v) in map {
                match v {
                    Value::String(s) => {
                        labels.insert(k.clone(), s.clone());
                    }
                    _ => faults.push(fault(
                        doc,
                        &format!("metadata.labels.{k}"),
                        "label values must be strings",
                    )),
                }
            }
        }
        Some(_) => faults.push(fault(
            doc,
            "metadata.labels",
            "must be a mapping of strings",
        )),
    }
    let (group, version) = match api_version.as_deref().map(|v| v.rsplit_once('/')) {
        Some(Some((g, v))) => (g.to_owned(), v.to_owned()),
        Some(None) => (String::new(), api_version.clone().unwrap_or_default()),
        None => (String::new(), String::new()),
    };
    let (Some(kind), Some(name)) = (kind, name) else {
        return Err(faults);
    };
    let meta = ObjectMeta {
        key: ObjectKey::new(ObjectKeyParts {
            space: space.clone(),
            group,
            version,
            kind,
            namespace,
            name,
        }),
        labels,
    };
    if meta.key.group == STRATA_GROUP
        && meta.key.kind == PLACEMENT_KIND
        && let Err(e) = placement_from(&meta.key, &value)
    {
        faults.push(ManifestError { document: doc, ..e });
    }
    if is_cluster_object(&meta) {
        if meta.key.namespace.is_some() {
            faults.push(fault(
                doc,
                "metadata.namespace",
                "a Cluster is not namespaced",
            ));
        }
        if let Err(e) = override_from(&value) {
            faults.push(ManifestError { document: doc, ..e });
        }
        if let Err(e) = cluster_spec(&value) {
            faults.push(ManifestError { document: doc, ..e });
        }
    }
    if faults.is_empty() {
        Ok(Manifest { meta, value })
    } else {
        Err(faults)
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && n.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && n.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

fn placement_from(key: &ObjectKey, value: &Value) -> Result<Placement, ManifestError> {
    let spec = value
        .get("spec")
        .ok_or_else(|| fault(0, "spec", "is required for a Placement"))?;
    let spec: PlacementSpec =
        serde_json::from_value(spec.clone()).map_err(|e| fault(0, "spec", e.to_string()))?;
    if let Err(errors) = spec.clusters.selector.validate() {
        let e = &errors[0];
        return Err(fault(
            0,
            &format!("spec.clusters.selector.{}", e.field),
            e.reason.clone(),
        ));
    }
    for (i, s) in spec.clusters.prefer.iter().enumerate() {
        if let Err(errors) = s.validate() {
            let e = &errors[0];
            return Err(fault(
                0,
                &format!("spec.clusters.prefer[{i}].{}", e.field),
                e.reason.clone(),
            ));
        }
    }
    for (i, t) in spec.clusters.tolerations.iter().enumerate() {
        if let Err(why) = t.validate() {
            return Err(fault(
                0,
                &format!("spec.clusters.tolerations[{i}]"),
                why.to_string(),
            ));
        }
    }
    if spec.clusters.count == Some(0) {
        return Err(fault(
            0,
            "spec.clusters.count",
            "must be at least 1 (or absent: every matching cluster)",
        ));
    }
    for (field, given) in [
        ("spreadBy", spec.clusters.spread_by.is_some()),
        ("failoverAfter", spec.clusters.failover_after.is_some()),
    ] {
        if given && spec.clusters.count.is_none() {
            return Err(fault(
                0,
                &format!("spec.clusters.{field}"),
                "needs spec.clusters.count",
            ));
        }
    }
    for (i, o) in spec.objects.iter().enumerate() {
        if let Some(Err(errors)) = o.selector.as_ref().map(|s| s.validate()) {
            let e = &errors[0];
            return Err(fault(
                0,
                &format!("spec.objects[{i}].selector.{}", e.field),
                e.reason.clone(),
            ));
        }
    }
    for (i, u) in spec.upsync.iter().enumerate() {
        if u.kind.is_empty() || u.version.is_empty() {
            return Err(fault(
                0,
                &format!("spec.upsync[{i}]"),
                "kind and version are required",
            ));
        }
        if let Some(Err(errors)) = u.selector.as_ref().map(|s| s.validate()) {
            let e = &errors[0];
            return Err(fault(
                0,
                &format!("spec.upsync[{i}].selector.{}", e.field),
                e.reason.clone(),
            ));
        }
    }
    check_customize_and_summaries(&spec.customize, &spec.status_summary)?;
    let move_volumes =
        strata_protocol::placement_spec::validate_volumes(&spec.move_volumes, &spec.objects)
            .map_err(|(field, why)| fault(0, &format!("spec.moveVolumes{field}"), why))?;
    if let Some(Err((field, why))) = spec.rollout.as_ref().map(|r| r.validate()) {
        return Err(fault(0, &format!("spec.rollout.{field}"), why));
    }
    Ok(Placement {
        space: key.space.clone(),
        name: key.name.clone(),
        objects: spec.objects,
        clusters: spec.clusters,
        upsync: spec.upsync,
        moves: MovePolicy {
            strategy: spec.move_strategy,
            timeout: spec.move_timeout.unwrap_or(DEFAULT_MOVE_TIMEOUT),
            volumes: move_volumes,
        },
        customize: spec.customize,
        status_summary: spec.status_summary,
        rollout: spec.rollout,
    })
}

/// `spec.customize` and `spec.statusSummary`: what can be checked before any cluster.
fn check_customize_and_summaries(
    rules: &[CustomizeRule],
    summaries: &[SummarySpec],
) -> Result<(), ManifestError> {
    for (i, rule) in rules.iter().enumerate() {
        if let Some(Err(errors)) = rule.clusters.as_ref().map(|s| s.validate()) {
            let e = &errors[0];
            let field = format!("spec.customize[{i}].clusters.{}", e.field);
            return Err(fault(0, &field, e.reason.clone()));
        }
        if let Err((field, reason)) = rule.validate() {
            let field = format!("spec.customize[{i}].{field}");
            return Err(fault(0, field.trim_end_matches('.'), reason));
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, s) in summaries.iter().enumerate() {
        if let Err((field, reason)) = s.validate() {
            return Err(fault(
                0,
                &format!("spec.statusSummary[{i}].{field}"),
                reason,
            ));
        }
        if !names.insert(s.name.as_str()) {
            let reason = format!("{:?} is used by an earlier entry", s.name);
            return Err(fault(0, &format!("spec.statusSummary[{i}].name"), reason));
        }
    }
    Ok(())
}

/// The object a manifest becomes at `revision`: JSON body and its SHA-256.
pub fn to_object(manifest: &Manifest, revision: Revision) -> Object {
    let body = serde_json::to_vec(&manifest.value).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &body);
    let mut hash = [0u8; 32];
    hash.copy_from_slice(digest.as_ref());
    Object {
        meta: manifest.meta.clone().into(),
        revision,
        hash: ContentHash(hash),
        body: body.into(),
    }
}

/// Every placement in `log` that parses; one that does not is logged and left out
/// (the root refuses such placements; this guards against a log written by another
/// build).
pub fn placements_in(log: &strata_protocol::sync::ObjectLog) -> Vec<Placement> {
    log.live()
        .filter(|o| strata_protocol::route::is_placement(&o.meta))
        .filter_map(|o| match parse_placement(o) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(placement = %o.key(), error = %e, "ignoring a placement that does not parse");
                None
            }
        })
        .collect()
}

/// What a `Cluster` object at the root changes in its cluster's labels: its
/// `status.labelOverrides`, which the root computes when the object is written (see the
/// relay's `kube::clusters`).
fn override_from(value: &Value) -> Result<LabelOverride, ManifestError> {
    match value.pointer("/status/labelOverrides") {
        None | Some(Value::Null) => Ok(LabelOverride::default()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| fault(0, "status.labelOverrides", e.to_string())),
    }
}

/// The cluster label changes of every `Cluster` object in `log`, per space; an object
/// that does not parse is logged and left out.
pub fn overrides_in(log: &strata_protocol::sync::ObjectLog) -> ClusterOverrides {
    let mut all = ClusterOverrides::default();
    for o in log.live().filter(|o| is_cluster_object(&o.meta)) {
        let parsed = serde_json::from_slice::<Value>(&o.body)
            .map_err(|e| fault(0, "", format!("cluster body is not JSON: {e}")))
            .and_then(|v| override_from(&v));
        match parsed {
            Ok(change) => all.insert(o.key().space.clone(), o.key().name.clone(), change),
            Err(e) => {
                tracing::warn!(cluster = %o.key(), error = %e, "ignoring a cluster object that does not parse");
            }
        }
    }
    all
}

/// What the root set on a cluster in one space: its taints and its capacity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterSpec {
    /// Taints (`spec.taints`).
    pub taints: Vec<Taint>,
    /// How many placements it accepts (`spec.capacity.workloads`).
    pub capacity: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawClusterSpec {
    #[serde(default)]
    taints: Vec<Taint>,
    #[serde(default)]
    capacity: Option<RawCapacity>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapacity {
    workloads: u32,
}

/// The `spec` of a `Cluster` object, checked.
pub fn cluster_spec(value: &Value) -> Result<ClusterSpec, ManifestError> {
    let raw: RawClusterSpec = match value.get("spec") {
        None | Some(Value::Null) => RawClusterSpec::default(),
        Some(v) => {
            serde_json::from_value(v.clone()).map_err(|e| fault(0, "spec", e.to_string()))?
        }
    };
    Ok(ClusterSpec {
        taints: raw.taints,
        capacity: raw.capacity.map(|c| c.workloads),
    })
}

/// The spec of every `Cluster` object in `log`, by (space, cluster); one that does not
/// parse is logged and left out.
pub fn cluster_specs_in(
    log: &strata_protocol::sync::ObjectLog,
) -> std::collections::BTreeMap<(Space, String), ClusterSpec> {
    let mut all = std::collections::BTreeMap::new();
    for o in log.live().filter(|o| is_cluster_object(&o.meta)) {
        let parsed = serde_json::from_slice::<Value>(&o.body)
            .map_err(|e| fault(0, "", e.to_string()))
            .and_then(|v| cluster_spec(&v));
        match parsed {
            Ok(spec) => {
                all.insert((o.key().space.clone(), o.key().name.clone()), spec);
            }
            Err(e) => {
                tracing::warn!(cluster = %o.key(), error = %e, "ignoring a cluster spec that does not parse");
            }
        }
    }
    all
}

/// The decision of every `PlacementDecision` object in `log`, by (space, placement);
/// one that does not parse is logged and left out.
pub fn decisions_in(
    log: &strata_protocol::sync::ObjectLog,
) -> std::collections::BTreeMap<(Space, String), Decision> {
    let mut all = std::collections::BTreeMap::new();
    for o in log.live().filter(|o| is_decision(&o.meta)) {
        let parsed = serde_json::from_slice::<Value>(&o.body)
            .map_err(|e| e.to_string())
            .and_then(|v| {
                serde_json::from_value::<Decision>(v["decision"].clone()).map_err(|e| e.to_string())
            });
        match parsed {
            Ok(d) => {
                all.insert((o.key().space.clone(), o.key().name.clone()), d);
            }
            Err(e) => {
                tracing::warn!(decision = %o.key(), error = %e, "ignoring a placement decision that does not parse");
            }
        }
    }
    all
}

/// The placement an object holds (relays parse placements to route).
pub fn parse_placement(object: &Object) -> Result<Placement, ManifestError> {
    let value: Value = serde_json::from_slice(&object.body)
        .map_err(|e| fault(0, "", format!("placement body is not JSON: {e}")))?;
    placement_from(object.key(), &value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: { name: pos, namespace: pos, labels: { app: pos } }
spec: { replicas: 2 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: pos-app }
spec:
  objects: [ { kinds: [Deployment], selector: { matchLabels: { app: pos } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

    #[test]
    fn move_volumes_parse_and_faults_name_the_field() {
        let doc = |volumes: &str| {
            format!(
                "apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: shop }}
spec:
  objects: [ {{ kinds: [Deployment, PersistentVolumeClaim], namespaces: [shop] }} ]
  clusters: {{ selector: {{}} }}
  moveVolumes: {volumes}
"
            )
        };
        let m = parse_manifests(
            &doc("[ { claim: data, namespace: shop } ]"),
            &Space::default_space(),
        )
        .unwrap();
        let p = parse_placement(&to_object(&m[0], Revision(1))).unwrap();
        assert_eq!(p.moves.volumes[0].claim.claim, "data");
        assert_eq!(p.moves.volumes[0].claim.namespace, "shop");
        assert_eq!(p.moves.volumes[0].max_lag_seconds, 30);
        let errors = |v: &str| {
            parse_manifests(&doc(v), &Space::default_space())
                .unwrap_err()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        let e = errors("[ { claim: data, namespace: web } ]");
        assert!(
            e[0].starts_with("document 1: spec.moveVolumes[0]: claim web/data is not among"),
            "{e:?}"
        );
        let e = errors("[ { claim: data, namespace: shop, size: 1Gi } ]");
        assert!(e[0].contains("unknown field `size`"), "{e:?}");
        let e = errors("[ { claim: Data, namespace: shop } ]");
        assert!(e[0].contains("spec.moveVolumes[0].claim"), "{e:?}");
        let e = errors("[ { claim: data, namespace: shop, maxLagSeconds: 0 } ]");
        assert!(
            e[0].starts_with("document 1: spec.moveVolumes[0].maxLagSeconds: 0 is not a bound"),
            "{e:?}"
        );
        let m = parse_manifests(
            &doc("[ { claim: data, namespace: shop, maxLagSeconds: 5 } ]"),
            &Space::default_space(),
        )
        .unwrap();
        let p = parse_placement(&to_object(&m[0], Revision(1))).unwrap();
        assert_eq!(p.moves.volumes[0].max_lag_seconds, 5);
    }

    #[test]
    fn objects_and_placements_parse() {
        let m = parse_manifests(APP, &Space::default_space()).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].meta.key.group, "apps");
        assert_eq!(m[0].meta.key.namespace.as_deref(), Some("pos"));
        assert_eq!(m[0].meta.labels["app"], "pos");
        let o = to_object(&m[1], Revision(3));
        let p = parse_placement(&o).unwrap();
        assert_eq!(p.name, "pos-app");
        assert_eq!(p.objects[0].kinds, ["Deployment"]);
    }

    #[test]
    fn a_list_stands_for_its_items() {
        let text = "apiVersion: v1\nkind: List\nmetadata: { resourceVersion: \"\" }\nitems:\n- { apiVersion: v1, kind: ConfigMap, metadata: { name: a } }\n- { apiVersion: v1, kind: ConfigMap, metadata: { name: b } }\n";
        let m = parse_manifests(text, &Space::default_space()).unwrap();
        let names: Vec<&str> = m.iter().map(|m| m.meta.key.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn customize_and_status_summary_parse_and_their_faults_are_named() {
        let good = format!(
            "{APP}  customize:\n    - {{ clusters: {{ matchLabels: {{ country: fr }} }}, jsonPatch: [ {{ op: add, path: /spec/x, value: \"${{cluster.name}}\" }} ] }}\n  statusSummary:\n    - {{ name: ready, path: .status.readyReplicas, op: sum, groupBy: region }}\n"
        );
        let m = parse_manifests(&good, &Space::default_space()).unwrap();
        let p = parse_placement(&to_object(&m[1], Revision(1))).unwrap();
        assert_eq!(p.customize.len(), 1);
        assert_eq!(p.status_summary[0].group_by.as_deref(), Some("region"));
        for (extra, fault) in [
            (
                "  customize: [ { jsonPatch: [ { op: add, path: spec, value: 1 } ] } ]\n",
                "spec.customize[0].jsonPatch[0]: \"spec\" is not a JSON pointer",
            ),
            (
                "  customize: [ { mergePatch: { a: \"${cluster.zone}\" } } ]\n",
                "spec.customize[0].mergePatch: unknown variable ${cluster.zone}",
            ),
            (
                "  customize: [ {} ]\n",
                "spec.customize[0]: a rule needs mergePatch or jsonPatch",
            ),
            (
                "  statusSummary: [ { name: a, path: status, op: sum } ]\n",
                "spec.statusSummary[0].path: \"status\": expected '.' or '['",
            ),
            (
                "  statusSummary: [ { name: a, path: .a, op: avg } ]\n",
                "spec: unknown variant `avg`",
            ),
            (
                "  statusSummary: [ { name: a, path: .a, op: sum }, { name: a, path: .b, op: max } ]\n",
                "spec.statusSummary[1].name: \"a\" is used by an earlier entry",
            ),
        ] {
            let errors =
                parse_manifests(&format!("{APP}{extra}"), &Space::default_space()).unwrap_err();
            let text = errors[0].to_string();
            assert!(text.contains(fault), "{extra}: {text}");
        }
    }

    #[test]
    fn rollout_parses_and_its_faults_are_named() {
        let good = format!(
            "{APP}  rollout:\n    waves: [ {{ name: canary, clusters: 1 }}, {{ selector: {{ matchLabels: {{ country: fr }} }} }}, {{ percent: 25 }}, {{ percent: 100 }} ]\n    gate: {{ available: 95%, maxFailed: 0, for: 60s, timeout: 15m }}\n    maxUnavailable: 10%\n    onFailure: pause\n"
        );
        let m = parse_manifests(&good, &Space::default_space()).unwrap();
        let p = parse_placement(&to_object(&m[1], Revision(1))).unwrap();
        let r = p.rollout.unwrap();
        assert_eq!(r.waves.len(), 4);
        assert_eq!(r.gate.hold, Seconds(60));
        assert_eq!(r.on_failure, strata_protocol::rollout::OnFailure::Pause);
        for (extra, fault) in [
            (
                "  rollout: { waves: [] }\n",
                "document 2: spec.rollout.waves: needs at least one wave",
            ),
            (
                "  rollout: { waves: [ { clusters: 1, percent: 5 } ] }\n",
                "document 2: spec.rollout.waves[0]: needs exactly one of clusters, percent, selector",
            ),
            (
                "  rollout: { waves: [ { percent: 101 } ] }\n",
                "document 2: spec.rollout.waves[0].percent: must be from 1 to 100",
            ),
            (
                "  rollout: { waves: [ { percent: 5 } ], gate: { available: lots } }\n",
                "\"lots\" is not a percentage (like 95%)",
            ),
            (
                "  rollout: { waves: [ { percent: 5 } ], onFailure: explode }\n",
                "unknown variant `explode`, expected `rollback` or `pause`",
            ),
        ] {
            let errors =
                parse_manifests(&format!("{APP}{extra}"), &Space::default_space()).unwrap_err();
            let text = errors[0].to_string();
            assert!(text.contains(fault), "{extra}: {text}");
        }
    }

    #[test]
    fn every_fault_names_its_document_and_field() {
        let text = "
apiVersion: v1
kind: ConfigMap
metadata: { name: Bad_Name }
---
kind: Secret
metadata: { name: ok, labels: { n: 1 } }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: p }
spec: { objects: [], clusters: { selector: { matchExpressions: [ { key: a, operator: In } ] } }, extra: 1 }
";
        let errors: Vec<String> = parse_manifests(text, &Space::default_space())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errors.len(), 4, "{errors:#?}");
        assert!(
            errors[0].starts_with("document 1: metadata.name: \"Bad_Name\""),
            "{}",
            errors[0]
        );
        assert_eq!(errors[1], "document 2: apiVersion: is required");
        assert_eq!(
            errors[2],
            "document 2: metadata.labels.n: label values must be strings"
        );
        assert!(
            errors[3].starts_with("document 3: spec: unknown field `extra`"),
            "{}",
            errors[3]
        );
    }
}
