//! The resource types a space serves: Kubernetes' built-in types (their group, version,
//! kind, plural and scope from `k8s-openapi`, not guessed), our own `strata.dev` kinds,
//! and the kinds of every CustomResourceDefinition applied to the space.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::Value;
use strata_protocol::model::Space;
use strata_protocol::overrides::CLUSTER_KIND;
use strata_protocol::route::{PLACEMENT_KIND, STRATA_GROUP};
use strata_protocol::sync::ObjectLog;

use strata_kube_builtins::SchemaFn;

pub use strata_kube_builtins::FieldCheck;

/// Where a resource type's schema comes from.
#[derive(Debug, Clone)]
pub enum TypeSchema {
    /// A built-in type: `k8s-openapi`'s generated schema.
    Builtin(SchemaFn),
    /// One of our own kinds: the schema `openapi` writes for each.
    Strata,
    /// A custom resource: its CRD version's `openAPIV3Schema`.
    Custom(Value),
    /// No schema is known.
    None,
}

/// The fleet's status of a namespaced object under one placement (read-only; the
/// relay's `fleet_status` makes it).
pub const FLEET_STATUS_KIND: &str = "FleetStatus";
/// The same for a cluster-scoped object.
pub const CLUSTER_FLEET_STATUS_KIND: &str = "ClusterFleetStatus";
/// Where a Service or Ingress can be reached under one placement (read-only; the
/// relay's `service_endpoints` makes it).
pub const SERVICE_ENDPOINTS_KIND: &str = "ServiceEndpoints";

/// The verbs of a type anyone may write.
pub const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of a read-only type.
pub const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

/// One resource type as discovery describes it.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group (`""`: core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// The resource name in paths (`deployments`).
    pub plural: String,
    /// `deployment`.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// `kubectl get deploy`.
    pub short_names: Vec<String>,
    /// `kubectl get all`.
    pub categories: Vec<String>,
    /// Strict validation of a manifest of this type, when its schema is known.
    pub check: Option<FieldCheck>,
    /// Its schema, for the OpenAPI documents (and, for custom resources, validation).
    pub schema: TypeSchema,
}

impl ResourceType {
    /// Whether this is our `Cluster` kind (read from the inventory, see
    /// the relay's `kube::reads::clusters`).
    pub fn is_cluster(&self) -> bool {
        self.group == STRATA_GROUP && self.kind == CLUSTER_KIND
    }

    /// Whether this is one of our kinds made from what the clusters report, read-only:
    /// the fleet status kinds and `ServiceEndpoints`.
    pub fn is_fleet_status(&self) -> bool {
        self.group == STRATA_GROUP
            && (self.kind == FLEET_STATUS_KIND
                || self.kind == CLUSTER_FLEET_STATUS_KIND
                || self.kind == SERVICE_ENDPOINTS_KIND)
    }

    /// The verbs discovery lists for it.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.is_fleet_status() {
            &READ_VERBS
        } else {
            &VERBS
        }
    }

    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// What the Kubernetes API of a space serves.
#[derive(Debug, Clone)]
pub struct Catalog {
    types: Vec<ResourceType>,
}

/// The built-in types a user applies ([`strata_kube_builtins::builtins`]).
fn builtins() -> &'static [ResourceType] {
    static TYPES: OnceLock<Vec<ResourceType>> = OnceLock::new();
    TYPES.get_or_init(|| {
        strata_kube_builtins::builtins()
            .into_iter()
            .map(|b| ResourceType {
                group: b.group.to_owned(),
                version: b.version.to_owned(),
                kind: b.kind.to_owned(),
                plural: b.plural.to_owned(),
                singular: b.kind.to_ascii_lowercase(),
                namespaced: b.namespaced,
                short_names: b.short_names.iter().map(|s| (*s).to_owned()).collect(),
                categories: b.categories.iter().map(|s| (*s).to_owned()).collect(),
                check: Some(b.check),
                schema: TypeSchema::Builtin(b.schema),
            })
            .collect()
    })
}

/// Our own kinds.
fn strata_types() -> Vec<ResourceType> {
    vec![
        ResourceType {
            group: STRATA_GROUP.to_owned(),
            version: "v1alpha1".to_owned(),
            kind: PLACEMENT_KIND.to_owned(),
            plural: "placements".to_owned(),
            singular: "placement".to_owned(),
            namespaced: false,
            short_names: vec!["pl".to_owned()],
            categories: Vec::new(),
            // The root parses placements field by field and refuses unknown ones.
            check: None,
            schema: TypeSchema::Strata,
        },
        ResourceType {
            group: STRATA_GROUP.to_owned(),
            version: "v1alpha1".to_owned(),
            kind: CLUSTER_KIND.to_owned(),
            plural: "clusters".to_owned(),
            singular: "cluster".to_owned(),
            namespaced: false,
            short_names: Vec::new(),
            categories: Vec::new(),
            check: None,
            schema: TypeSchema::Strata,
        },
        ResourceType {
            group: STRATA_GROUP.to_owned(),
            version: "v1alpha1".to_owned(),
            kind: FLEET_STATUS_KIND.to_owned(),
            plural: "fleetstatuses".to_owned(),
            singular: "fleetstatus".to_owned(),
            namespaced: true,
            short_names: vec!["fst".to_owned()],
            categories: Vec::new(),
            check: None,
            schema: TypeSchema::Strata,
        },
        ResourceType {
            group: STRATA_GROUP.to_owned(),
            version: "v1alpha1".to_owned(),
            kind: CLUSTER_FLEET_STATUS_KIND.to_owned(),
            plural: "clusterfleetstatuses".to_owned(),
            singular: "clusterfleetstatus".to_owned(),
            namespaced: false,
            short_names: vec!["cfst".to_owned()],
            categories: Vec::new(),
            check: None,
            schema: TypeSchema::Strata,
        },
        ResourceType {
            group: STRATA_GROUP.to_owned(),
            version: "v1alpha1".to_owned(),
            kind: SERVICE_ENDPOINTS_KIND.to_owned(),
            plural: "serviceendpoints".to_owned(),
            singular: "serviceendpoints".to_owned(),
            namespaced: true,
            short_names: vec!["sep".to_owned()],
            categories: Vec::new(),
            check: None,
            schema: TypeSchema::Strata,
        },
    ]
}

/// The types the CRDs applied to `space` define (every served version).
fn custom_types(log: &ObjectLog, space: &Space) -> Vec<ResourceType> {
    const GROUP: &str = "apiextensions.k8s.io";
    let mut out = Vec::new();
    // The log is ordered by space, group, version and kind: the CRDs of `space` are one
    // range, found without reading the other objects (every request builds a catalog).
    let start = strata_protocol::model::ObjectKey::new(strata_protocol::model::ObjectKeyParts {
        space: space.clone(),
        group: GROUP.to_owned(),
        version: String::new(),
        kind: String::new(),
        namespace: None,
        name: String::new(),
    });
    let crds = log
        .live_after(Some(&start))
        .take_while(|o| o.key().space == *space && o.key().group == GROUP);
    for o in crds {
        if o.key().kind != "CustomResourceDefinition" {
            continue;
        }
        let Ok(crd) = serde_json::from_slice::<Value>(&o.body) else {
            continue;
        };
        out.extend(crd_types(&crd));
    }
    out
}

/// The types one CustomResourceDefinition defines (every served version).
pub fn crd_types(crd: &Value) -> Vec<ResourceType> {
    let mut out = Vec::new();
    {
        let spec = &crd["spec"];
        let names = &spec["names"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let (group, kind, plural) = (
            text(&spec["group"]),
            text(&names["kind"]),
            text(&names["plural"]),
        );
        if group.is_empty() || kind.is_empty() || plural.is_empty() {
            return out;
        }
        let singular = match text(&names["singular"]) {
            s if s.is_empty() => kind.to_ascii_lowercase(),
            s => s,
        };
        for v in spec["versions"].as_array().into_iter().flatten() {
            if v["served"] == Value::Bool(false) {
                continue;
            }
            out.push(ResourceType {
                group: group.clone(),
                version: text(&v["name"]),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced: spec["scope"] != "Cluster",
                short_names: strings(&names["shortNames"]),
                categories: strings(&names["categories"]),
                check: None,
                schema: TypeSchema::Custom(v["schema"]["openAPIV3Schema"].clone()),
            });
        }
    }
    out
}

impl Catalog {
    /// What `space` serves, given the root's log.
    pub fn of_space(log: &ObjectLog, space: &Space) -> Catalog {
        let mut types = builtins().to_vec();
        types.extend(strata_types());
        types.extend(custom_types(log, space));
        Catalog { types }
    }

    /// The built-in type a path names, found without building a space's catalog (which
    /// clones every type and reads the space's CRDs): what most requests ask. Built-in
    /// types come first in every catalog, so a space's catalog answers the same.
    pub fn builtin_by_resource(
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<&'static ResourceType> {
        builtins()
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// The built-in type of a manifest, as [`Catalog::builtin_by_resource`].
    pub fn builtin_by_kind(
        group: &str,
        version: &str,
        kind: &str,
    ) -> Option<&'static ResourceType> {
        builtins()
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
    }

    /// Every type.
    pub fn types(&self) -> &[ResourceType] {
        &self.types
    }

    /// The type a path names.
    pub fn by_resource(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// The type of a manifest.
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<&ResourceType> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
    }

    /// Groups and their versions, in order (the core group under `""`).
    pub fn groups(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for t in &self.types {
            let versions = out.entry(t.group.as_str()).or_default();
            if !versions.contains(&t.version.as_str()) {
                versions.push(t.version.as_str());
            }
        }
        out
    }

    /// The types of one group version.
    pub fn of_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceType> + 'a {
        self.types
            .iter()
            .filter(move |t| t.group == group && t.version == version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_come_from_k8s_openapi_and_unknown_fields_are_found() {
        let log = ObjectLog::new(strata_protocol::model::LogId(1));
        let c = Catalog::of_space(&log, &Space::default_space());
        let d = c.by_resource("apps", "v1", "deployments").unwrap();
        assert_eq!(d.kind, "Deployment");
        assert!(d.namespaced);
        let ns = c.by_kind("", "v1", "Namespace").unwrap();
        assert!(!ns.namespaced);
        assert_eq!(
            c.by_kind("networking.k8s.io", "v1", "NetworkPolicy")
                .unwrap()
                .plural,
            "networkpolicies"
        );
        let manifest = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "labels": {} },
            "spec": {
                "replicas": 2, "replica": 3,
                "selector": { "matchLabels": { "app": "web" } },
                "template": { "spec": { "containers": [ { "name": "web", "image": "x", "imagePullPolice": "Always" } ] } }
            }
        });
        let unknown = (d.check.unwrap())(&manifest).unwrap();
        assert_eq!(
            unknown,
            [
                "spec.replica",
                "spec.template.spec.containers[0].imagePullPolice"
            ]
        );
    }
}
