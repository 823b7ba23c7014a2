//! The schemas of the OpenAPI documents (`components.schemas` of `/openapi/v3/...`,
//! `definitions` of `/openapi/v2`): what `kubectl explain` reads, and what older kubectl
//! validates manifests against.
//!
//! - Built-in types: the JSON schemas `k8s-openapi` generates (its `schemars` feature),
//!   with Kubernetes' own descriptions and names (`io.k8s.api.apps.v1.Deployment`).
//! - Our own `strata.dev/v1alpha1` kinds: written here ([`strata_schema`]).
//! - Custom resources: each served version's `openAPIV3Schema`, under the name
//!   kube-apiserver gives it (`com.example.v1.Menu`), with `apiVersion`, `kind` and
//!   `metadata` added.
//!
//! Every top-level kind carries `x-kubernetes-group-version-kind`, which is how clients
//! find a kind's schema. A document holds every schema its kinds refer to, so each one
//! stands alone. In v3, a reference with siblings (a field's description) is wrapped in
//! `allOf`, as kube-apiserver does; v2 keeps `$ref` beside them and drops what v2 cannot
//! say (see [`to_v2`]).

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use schemars::generate::{SchemaGenerator, SchemaSettings};
use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};
use strata_kube_builtins::schema_of;
use strata_protocol::model::{LogId, Space};
use strata_protocol::sync::ObjectLog;

use crate::catalog::{Catalog, ResourceType};

pub use strata_kube_builtins::SchemaFn;

pub use crate::catalog::TypeSchema;

const V3_PREFIX: &str = "#/components/schemas/";
const V2_PREFIX: &str = "#/definitions/";

fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator()
}

/// `example.com`, `v1`, `Menu` -> `com.example.v1.Menu`, kube-apiserver's name for a
/// custom resource's schema.
fn custom_name(t: &ResourceType) -> String {
    let mut parts: Vec<&str> = t.group.split('.').collect();
    parts.reverse();
    format!("{}.{}.{}", parts.join("."), t.version, t.kind)
}

fn reference(g: &mut SchemaGenerator, f: SchemaFn) -> Value {
    f(g).to_value()
}

fn object_meta(g: &mut SchemaGenerator) -> Value {
    let mut meta = reference(g, schema_of::<ObjectMeta>);
    meta["description"] = json!(
        "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
    );
    meta
}

fn type_meta(g: &mut SchemaGenerator) -> Map<String, Value> {
    let mut props = Map::new();
    props.insert(
        "apiVersion".into(),
        json!({ "type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources" }),
    );
    props.insert(
        "kind".into(),
        json!({ "type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds" }),
    );
    props.insert("metadata".into(), object_meta(g));
    props
}

/// The schema of one of our own kinds, `None` for a kind we do not describe. Written
/// by hand from the shapes the root parses (`Placement`) or shows (`Cluster`); `spec`
/// keeps unknown fields so that an older client does not refuse a field added since:
/// the root's own parser refuses what it does not know.
pub fn strata_schema(kind: &str, g: &mut SchemaGenerator) -> Option<Value> {
    let selector = |g: &mut SchemaGenerator, what: &str| {
        let mut s = reference(g, schema_of::<LabelSelector>);
        s["description"] = json!(what);
        s
    };
    let strings =
        |what: &str| json!({ "type": "array", "description": what, "items": { "type": "string" } });
    let mut props = type_meta(g);
    match kind {
        "Placement" => {
            let objects = json!({
                "type": "array",
                "description": "What: the objects of the space this placement sends. An object is selected when any entry selects it.",
                "items": {
                    "type": "object",
                    "description": "Selects objects by kind, namespace, name and labels; every given constraint must hold, an empty list means any.",
                    "properties": {
                        "kinds": strings("Kinds, e.g. Deployment; empty selects every kind."),
                        "namespaces": strings("Namespaces; empty selects every namespace and cluster-scoped objects."),
                        "names": strings("Object names; empty selects every name."),
                        "selector": selector(g, "Object labels; absent places no constraint on labels."),
                    },
                },
            });
            let duration = |what: &str| json!({ "x-kubernetes-int-or-string": true, "description": format!("{what} Seconds, or a duration such as 90s, 10m, 1h.") });
            let mut toleration = reference(g, schema_of::<Toleration>);
            toleration["description"] = json!("A taint tolerated, with Kubernetes' semantics.");
            let prefer = reference(g, schema_of::<LabelSelector>);
            let clusters = json!({
                "type": "object",
                "description": "Where: the clusters that receive the selected objects, and how many of them are chosen.",
                "properties": {
                    "selector": selector(g, "Cluster labels (their own plus those inherited from the relays above them); an empty selector selects every cluster."),
                    "count": { "type": "integer", "format": "int32", "description": "At most this many of the matching clusters, chosen stably." },
                    "spreadBy": { "type": "string", "description": "Spread the count evenly (within one) over the values of this cluster label." },
                    "prefer": { "type": "array", "description": "Clusters matching earlier selectors are chosen first.", "items": prefer },
                    "tolerations": { "type": "array", "description": "Taints the placement tolerates.", "items": toleration },
                    "failoverAfter": duration("With a count: a chosen cluster unreachable this long is replaced."),
                },
            });
            let upsync = json!({
                "type": "array",
                "description": "What comes back: objects born on the selected clusters that their agents copy to the center.",
                "items": {
                    "type": "object",
                    "required": ["version", "kind"],
                    "properties": {
                        "group": { "type": "string", "description": "API group (empty: the core group)." },
                        "version": { "type": "string", "description": "API version, e.g. v1." },
                        "kind": { "type": "string", "description": "Kind, e.g. PolicyReport." },
                        "namespace": { "type": "string", "description": "Only this namespace; absent: every namespace." },
                        "names": strings("Only these names; empty: every name."),
                        "selector": selector(g, "Object labels; absent places no constraint on labels."),
                    },
                },
            });
            props.insert(
                "spec".into(),
                json!({
                    "type": "object",
                    "description": "What this placement sends, where, and what comes back.",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "objects": objects, "clusters": clusters, "upsync": upsync,
                        "move": { "type": "string", "enum": ["makeBeforeBreak", "breakBeforeMake"], "description": "How the objects move when the chosen clusters change: the new clusters get them first and the old keep them until the new are available (makeBeforeBreak, the default), or the old lose them at once." },
                        "moveTimeout": duration("How long old clusters keep the objects at most, waiting for the new ones (default 15m)."),
                        "moveVolumes": {
                            "type": "array",
                            "description": "The PersistentVolumeClaims whose data follows a move (the placement must deliver the claims too): ReadWriteOnce in two phases, copied through the lowest common relay; ReadWriteMany replicated from one primary cluster to the others, with a bounded lag.",
                            "items": {
                                "type": "object",
                                "required": ["claim", "namespace"],
                                "properties": {
                                    "claim": { "type": "string", "description": "The claim's name." },
                                    "namespace": { "type": "string", "description": "The claim's namespace." },
                                    "maxLagSeconds": { "type": "integer", "minimum": 1, "description": "ReadWriteMany: a replica holds every write acknowledged on the primary at most this many seconds ago (default 30)." },
                                },
                            },
                        },
                    },
                }),
            );
            props.insert(
                "status".into(),
                json!({ "type": "object", "description": "Written by the root: where the placement runs and how its objects fare.", "x-kubernetes-preserve-unknown-fields": true }),
            );
            Some(json!({
                "type": "object",
                "description": "Placement sends the objects of a space it selects (what) to the clusters it selects (where), and says what comes back.",
                "properties": props,
            }))
        }
        "Cluster" => {
            let mut taint = reference(g, schema_of::<Taint>);
            taint["description"] = json!(
                "A taint, as on a Kubernetes node: placements without a matching toleration avoid the cluster."
            );
            props.insert(
                "spec".into(),
                json!({
                    "type": "object",
                    "description": "What users set on a cluster at the root (its labels are metadata.labels).",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "taints": { "type": "array", "description": "Taints (relay drain and cordon set these).", "items": taint },
                        "capacity": {
                            "type": "object",
                            "description": "How much the cluster takes.",
                            "properties": { "workloads": { "type": "integer", "format": "int64", "description": "At most this many placed workloads." } },
                        },
                    },
                }),
            );
            props.insert(
                "status".into(),
                json!({
                    "type": "object",
                    "description": "What the hierarchy reports about the cluster.",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "path": strings("The relays from the root down to the cluster."),
                        "reachable": { "type": "boolean", "description": "Whether the cluster's agent is connected." },
                        "lastSeen": { "type": "string", "format": "date-time", "description": "When the cluster last reported." },
                        "properties": { "type": "object", "description": "Properties the agent reports (kubernetesVersion, ...).", "additionalProperties": { "type": "string" } },
                        "labelOverrides": { "type": "object", "description": "The labels this space set and removed over those the cluster reports (computed by the root when the object is written).", "x-kubernetes-preserve-unknown-fields": true },
                    },
                }),
            );
            Some(json!({
                "type": "object",
                "description": "Cluster is a leaf cluster of the hierarchy, registered by its agent: its labels select it for placements.",
                "properties": props,
            }))
        }
        "FleetStatus" | "ClusterFleetStatus" => {
            let int =
                |what: &str| json!({ "type": "integer", "format": "int64", "description": what });
            let counts = |what: &str, extra: Value| {
                let mut p = json!({
                    "expected": int("Clusters the placement selects."),
                    "reporting": int("Clusters that reported a status."),
                    "applied": int("Clusters where it is applied, nothing more known."),
                    "available": int("Clusters where it is available."),
                    "progressing": int("Clusters where it is progressing."),
                    "degraded": int("Clusters where it runs below what was asked."),
                    "failed": int("Clusters where it failed."),
                    "observedRevision": int("The lowest root revision of the object a cluster reported."),
                    "newestRevision": int("The highest root revision of the object a cluster reported."),
                });
                if let (Some(p), Value::Object(extra)) = (p.as_object_mut(), extra) {
                    p.extend(extra);
                }
                json!({ "type": "object", "description": what, "properties": p })
            };
            let condition = reference(g, schema_of::<Condition>);
            let part = |what: &str| {
                json!({
                    "type": "array",
                    "description": what,
                    "items": counts("One part of the fleet.", json!({
                        "name": { "type": "string", "description": "The child relay or the cluster." },
                        "health": { "type": "string", "description": "A cluster's health: Applied, Progressing, Available, Degraded, Failed or Unknown (not reported)." },
                        "message": { "type": "string", "description": "What a cluster said about it." },
                        "conditions": { "type": "array", "description": "A cluster's own conditions of the object.", "items": condition.clone() },
                    })),
                })
            };
            props.insert(
                "object".into(),
                json!({
                    "type": "object",
                    "description": "The object this status is of.",
                    "properties": {
                        "apiVersion": { "type": "string" },
                        "group": { "type": "string", "description": "API group (empty: core)." },
                        "kind": { "type": "string" },
                        "namespace": { "type": "string" },
                        "name": { "type": "string" },
                        "revision": int("The root's revision of the object."),
                        "generation": int("The object's metadata.generation."),
                    },
                }),
            );
            props.insert(
                "placement".into(),
                json!({ "type": "string", "description": "The placement that selects the object." }),
            );
            props.insert(
                "summary".into(),
                counts(
                    "The object over every cluster the placement selects.",
                    json!({
                        "silent": int("Clusters selected that have not reported."),
                        "fields": { "type": "object", "description": "The numeric status fields over the clusters: sum, min and max of each.", "x-kubernetes-preserve-unknown-fields": true },
                        "observedGeneration": int("The object's generation once every selected cluster observed it; lower until then."),
                        "errors": { "type": "array", "description": "Recent failures, by cluster.", "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } },
                    }),
                ),
            );
            props.insert(
                "conditions".into(),
                json!({ "type": "array", "description": "The object's conditions over the placement's clusters.", "items": condition }),
            );
            props.insert(
                "tiers".into(),
                part("Per child relay: its subtree's summary."),
            );
            props.insert(
                "clusters".into(),
                part("Per cluster reporting to the root directly."),
            );
            Some(json!({
                "type": "object",
                "description": "FleetStatus is what the clusters a placement selects report of one object, summarized (read-only; one per object and placement, named KIND.NAME.PLACEMENT).",
                "properties": props,
            }))
        }
        "ServiceEndpoints" => Some(json!({
            "type": "object",
            "description": "ServiceEndpoints is where a Service or Ingress can be reached under one placement: the clusters that report its addresses, nearest tier first (read-only; named KIND.NAME.PLACEMENT).",
            "properties": {
                "object": { "type": "object", "description": "The Service or Ingress.", "x-kubernetes-preserve-unknown-fields": true },
                "placement": { "type": "string", "description": "The placement." },
                "summary": { "type": "object", "description": "How many clusters report, and how many DNS names.", "x-kubernetes-preserve-unknown-fields": true },
                "clusters": { "type": "array", "description": "Per cluster: name, path, available, reachable, draining, served (named by DNS), addresses with their ports.", "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } },
                "leaving": { "type": "array", "description": "Clusters that still hold it although no placement places it there any more (name, addresses).", "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } },
            },
        })),
        _ => None,
    }
}

/// A CRD version's schema as served: the user's `openAPIV3Schema` with `apiVersion`,
/// `kind` and `metadata` added.
fn custom_schema(schema: &Value, g: &mut SchemaGenerator) -> Value {
    let mut out = if schema.is_object() {
        schema.clone()
    } else {
        json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
    };
    let mut props = out["properties"].as_object().cloned().unwrap_or_default();
    for (name, v) in type_meta(g) {
        // The user's own description of a field wins; metadata is always ObjectMeta.
        if name == "metadata" || !props.contains_key(&name) {
            props.insert(name, v);
        }
    }
    out["properties"] = Value::Object(props);
    out
}

fn gvk(t: &ResourceType) -> Value {
    json!([ { "group": t.group, "version": t.version, "kind": t.kind } ])
}

/// The schemas of `types` and everything they refer to, with refs under
/// `#/components/schemas/` and no v3-specific rewriting yet.
fn definitions<'a>(types: impl Iterator<Item = &'a ResourceType>) -> Map<String, Value> {
    let mut g = generator();
    let mut kinds: Vec<(String, &ResourceType)> = Vec::new();
    let mut own: Vec<(String, Value)> = Vec::new();
    for t in types {
        match &t.schema {
            TypeSchema::Builtin(f) => {
                let r = reference(&mut g, *f);
                if let Some(name) = r["$ref"].as_str().and_then(|r| r.strip_prefix(V3_PREFIX)) {
                    kinds.push((name.to_owned(), t));
                }
            }
            TypeSchema::Strata => {
                if let Some(s) = strata_schema(&t.kind, &mut g) {
                    let name = format!("dev.strata.{}.{}", t.version, t.kind);
                    own.push((name.clone(), s));
                    kinds.push((name, t));
                }
            }
            TypeSchema::Custom(s) => {
                let name = custom_name(t);
                own.push((name.clone(), custom_schema(s, &mut g)));
                kinds.push((name, t));
            }
            TypeSchema::None => {}
        }
    }
    let mut defs = g.take_definitions(false);
    defs.extend(own);
    for (name, t) in kinds {
        if let Some(d) = defs.get_mut(&name).and_then(Value::as_object_mut) {
            d.insert("x-kubernetes-group-version-kind".into(), gvk(t));
        }
    }
    defs
}

/// Rewrites a `$ref` that has siblings into `allOf: [{$ref}]` (OpenAPI 3.0 ignores a
/// reference's siblings; kube-apiserver's documents wrap them the same way).
fn wrap_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.len() > 1
                && let Some(r) = m.remove("$ref")
            {
                m.insert("allOf".into(), json!([ { "$ref": r } ]));
            }
            m.values_mut().for_each(wrap_refs);
        }
        Value::Array(a) => a.iter_mut().for_each(wrap_refs),
        _ => {}
    }
}

/// Whether a type's schema is the same in every space (built-in and our own kinds).
fn fixed(t: &&ResourceType) -> bool {
    matches!(t.schema, TypeSchema::Builtin(_) | TypeSchema::Strata)
}

/// The schemas of the fixed types, generated once: per group version for v3, and all of
/// them for v2. Generating them costs tens of milliseconds; a CRD's costs little.
struct Fixed {
    v3: BTreeMap<(String, String), Map<String, Value>>,
    v2: Map<String, Value>,
}

fn fixed_schemas() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| {
        let catalog = Catalog::of_space(&ObjectLog::new(LogId(0)), &Space::default_space());
        let mut v3 = BTreeMap::new();
        for (g, versions) in catalog.groups() {
            for v in versions {
                let mut defs =
                    Value::Object(definitions(catalog.of_group_version(g, v).filter(fixed)));
                wrap_refs(&mut defs);
                if let Value::Object(defs) = defs {
                    v3.insert((g.to_owned(), v.to_owned()), defs);
                }
            }
        }
        let mut v2 = Value::Object(definitions(catalog.types().iter().filter(fixed)));
        to_v2(&mut v2);
        let v2 = match v2 {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        Fixed { v3, v2 }
    })
}

/// The fixed schemas (`cached`) plus those of the catalog's custom resources among
/// `types`, rewritten by `rewrite`.
fn with_custom<'a>(
    cached: Option<&Map<String, Value>>,
    types: impl Iterator<Item = &'a ResourceType>,
    rewrite: fn(&mut Value),
) -> Value {
    let mut out = cached.cloned().unwrap_or_default();
    let custom: Vec<&ResourceType> = types.filter(|t| !fixed(t)).collect();
    if !custom.is_empty() {
        let mut defs = Value::Object(definitions(custom.into_iter()));
        rewrite(&mut defs);
        if let Value::Object(defs) = defs {
            out.extend(defs);
        }
    }
    Value::Object(out)
}

/// `components.schemas` of the OpenAPI v3 document of one group version.
pub fn components(catalog: &Catalog, group: &str, version: &str) -> Value {
    let cached = fixed_schemas()
        .v3
        .get(&(group.to_owned(), version.to_owned()));
    with_custom(cached, catalog.of_group_version(group, version), wrap_refs)
}

/// Rewrites one schema for Swagger 2.0 as kube-apiserver publishes CRDs there: refs
/// under `#/definitions/`; no `nullable`, `oneOf`, `anyOf`, `not`; and where a value
/// may hold anything (`x-kubernetes-preserve-unknown-fields`, int-or-string, nullable),
/// no `type`, `properties` or `items`, which older kubectl would enforce.
pub fn to_v2(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix(V3_PREFIX)
            {
                *r = format!("{V2_PREFIX}{name}");
            }
            let open = [
                "x-kubernetes-preserve-unknown-fields",
                "x-kubernetes-int-or-string",
                "nullable",
            ]
            .iter()
            .any(|k| m.get(*k) == Some(&Value::Bool(true)));
            for k in ["nullable", "oneOf", "anyOf", "not"] {
                m.remove(k);
            }
            if open {
                for k in ["type", "properties", "items", "additionalProperties"] {
                    m.remove(k);
                }
            }
            m.values_mut().for_each(to_v2);
        }
        Value::Array(a) => a.iter_mut().for_each(to_v2),
        _ => {}
    }
}

/// The `definitions` of the OpenAPI v2 document: every type of the catalog.
pub fn definitions_v2(catalog: &Catalog) -> Value {
    with_custom(Some(&fixed_schemas().v2), catalog.types().iter(), to_v2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        Catalog::of_space(
            &ObjectLog::new(strata_protocol::model::LogId(1)),
            &Space::default_space(),
        )
    }

    #[test]
    fn built_in_schemas_carry_descriptions_kinds_and_wrapped_refs() {
        let c = components(&catalog(), "apps", "v1");
        let d = &c["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            d["x-kubernetes-group-version-kind"],
            json!([{ "group": "apps", "version": "v1", "kind": "Deployment" }])
        );
        assert_eq!(
            d["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"
        );
        let replicas = &c["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["replicas"];
        assert_eq!(replicas["type"], "integer");
        assert!(
            replicas["description"]
                .as_str()
                .unwrap()
                .contains("desired pods")
        );
        // What the kinds refer to is in the same document.
        assert!(c["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
        assert!(c["io.k8s.api.core.v1.PodSpec"].is_object());
    }

    #[test]
    fn our_kinds_and_v2_definitions() {
        let c = components(&catalog(), "strata.dev", "v1alpha1");
        let p = &c["dev.strata.v1alpha1.Placement"];
        assert_eq!(p["x-kubernetes-group-version-kind"][0]["kind"], "Placement");
        assert!(p["properties"]["spec"]["properties"]["objects"].is_object());
        let cluster = strata_schema("Cluster", &mut generator()).unwrap();
        assert_eq!(
            cluster["properties"]["spec"]["properties"]["taints"]["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Taint"
        );
        assert_eq!(
            cluster["properties"]["status"]["properties"]["reachable"]["type"],
            "boolean"
        );
        assert!(strata_schema("Nothing", &mut generator()).is_none());
        let v2 = definitions_v2(&catalog());
        assert_eq!(
            v2["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"]["$ref"],
            "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
        );
        // Open values lose what older kubectl would enforce.
        assert!(v2["dev.strata.v1alpha1.Placement"]["properties"]["spec"]["properties"].is_null());
        assert!(v2["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["type"].is_null());
    }
}
