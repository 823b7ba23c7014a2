//! The resource types a space serves: Kubernetes' built-in types (their group, version,
//! kind, plural and scope from `k8s-openapi`, not guessed), our own `strata.dev` kinds,
//! and the kinds of every CustomResourceDefinition applied to the space.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use strata_protocol::model::Space;
use strata_protocol::overrides::CLUSTER_KIND;
use strata_protocol::route::{PLACEMENT_KIND, STRATA_GROUP};
use strata_protocol::sync::ObjectLog;

use super::openapi::{TypeSchema, builtin_schema};

/// Finds the fields of a manifest its type does not know (strict validation).
pub type FieldCheck = fn(&Value) -> Result<Vec<String>, String>;

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
    /// [`super::clusters`]).
    pub fn is_cluster(&self) -> bool {
        self.group == STRATA_GROUP && self.kind == CLUSTER_KIND
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

trait Scope {
    const NAMESPACED: bool;
}
impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
impl Scope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// The fields of `value` that do not survive a round trip through `T`: the fields `T`
/// does not know. `k8s-openapi` types ignore unknown fields when they deserialize, so
/// what they serialize back lacks exactly those.
fn unknown_fields<T: Serialize + DeserializeOwned>(value: &Value) -> Result<Vec<String>, String> {
    let typed: T = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    missing(value, &back, "", &mut out);
    Ok(out)
}

fn missing(given: &Value, known: &Value, path: &str, out: &mut Vec<String>) {
    match (given, known) {
        (Value::Object(g), Value::Object(k)) => {
            for (name, v) in g {
                let here = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                match k.get(name) {
                    Some(kv) => missing(v, kv, &here, out),
                    // Nulls and empty values are dropped on the way back, known or not.
                    None if is_empty(v) => {}
                    None => out.push(here),
                }
            }
        }
        (Value::Array(g), Value::Array(k)) => {
            for (i, (gv, kv)) in g.iter().zip(k).enumerate() {
                missing(gv, kv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().all(is_empty),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn builtin<T>(short: &[&str], categories: &[&str]) -> ResourceType
where
    T: Resource + Serialize + DeserializeOwned + schemars::JsonSchema,
    T::Scope: Scope,
{
    ResourceType {
        group: T::GROUP.to_owned(),
        version: T::VERSION.to_owned(),
        kind: T::KIND.to_owned(),
        plural: T::URL_PATH_SEGMENT.to_owned(),
        singular: T::KIND.to_ascii_lowercase(),
        namespaced: <T::Scope as Scope>::NAMESPACED,
        short_names: short.iter().map(|s| (*s).to_owned()).collect(),
        categories: categories.iter().map(|s| (*s).to_owned()).collect(),
        check: Some(unknown_fields::<T>),
        schema: TypeSchema::Builtin(builtin_schema::<T>),
    }
}

/// The built-in types a user applies (objects, not reviews or subresources). Short
/// names and categories are Kubernetes' own (`kubectl api-resources`); `k8s-openapi`
/// does not carry them.
fn builtins() -> &'static [ResourceType] {
    static TYPES: OnceLock<Vec<ResourceType>> = OnceLock::new();
    TYPES.get_or_init(|| {
        use k8s_openapi::api::{
            apps, autoscaling, batch, coordination, core, discovery, networking, policy, rbac,
            scheduling, storage,
        };
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
        let all = &["all"];
        vec![
            builtin::<core::v1::ConfigMap>(&["cm"], &[]),
            builtin::<core::v1::Endpoints>(&["ep"], &[]),
            builtin::<core::v1::LimitRange>(&["limits"], &[]),
            builtin::<core::v1::Namespace>(&["ns"], &[]),
            builtin::<core::v1::PersistentVolume>(&["pv"], &[]),
            builtin::<core::v1::PersistentVolumeClaim>(&["pvc"], &[]),
            builtin::<core::v1::Pod>(&["po"], all),
            builtin::<core::v1::PodTemplate>(&[], &[]),
            builtin::<core::v1::ReplicationController>(&["rc"], all),
            builtin::<core::v1::ResourceQuota>(&["quota"], &[]),
            builtin::<core::v1::Secret>(&[], &[]),
            builtin::<core::v1::Service>(&["svc"], all),
            builtin::<core::v1::ServiceAccount>(&["sa"], &[]),
            builtin::<apps::v1::ControllerRevision>(&[], &[]),
            builtin::<apps::v1::DaemonSet>(&["ds"], all),
            builtin::<apps::v1::Deployment>(&["deploy"], all),
            builtin::<apps::v1::ReplicaSet>(&["rs"], all),
            builtin::<apps::v1::StatefulSet>(&["sts"], all),
            builtin::<autoscaling::v2::HorizontalPodAutoscaler>(&["hpa"], all),
            builtin::<batch::v1::CronJob>(&["cj"], all),
            builtin::<batch::v1::Job>(&[], all),
            builtin::<coordination::v1::Lease>(&[], &[]),
            builtin::<discovery::v1::EndpointSlice>(&[], &[]),
            builtin::<networking::v1::Ingress>(&["ing"], &[]),
            builtin::<networking::v1::IngressClass>(&[], &[]),
            builtin::<networking::v1::NetworkPolicy>(&["netpol"], &[]),
            builtin::<policy::v1::PodDisruptionBudget>(&["pdb"], &[]),
            builtin::<rbac::v1::ClusterRole>(&[], &[]),
            builtin::<rbac::v1::ClusterRoleBinding>(&[], &[]),
            builtin::<rbac::v1::Role>(&[], &[]),
            builtin::<rbac::v1::RoleBinding>(&[], &[]),
            builtin::<scheduling::v1::PriorityClass>(&["pc"], &[]),
            builtin::<storage::v1::CSIDriver>(&[], &[]),
            builtin::<storage::v1::StorageClass>(&["sc"], &[]),
            builtin::<apiextensions::CustomResourceDefinition>(&["crd", "crds"], &[]),
        ]
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
    ]
}

/// The types the CRDs applied to `space` define (every served version).
fn custom_types(log: &ObjectLog, space: &Space) -> Vec<ResourceType> {
    let mut out = Vec::new();
    for o in log.live() {
        let k = o.key();
        if k.space != *space
            || k.group != "apiextensions.k8s.io"
            || k.kind != "CustomResourceDefinition"
        {
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
