//! Kubernetes' built-in resource types as the root serves them: each type's group,
//! version, kind, plural and scope from `k8s-openapi`, Kubernetes' own short names and
//! categories, a strict check of a manifest's fields, and its JSON schema.
//!
//! Why a crate of its own: what each entry needs is generic over the type (serde's
//! deserializer and serializer of a `Deployment` down to every nested field, and its
//! schema), so a table of 64 types is a great deal of code to compile. In the relay's
//! crate that code was optimized at the release profile's level, on the build's longest
//! path; here it compiles beside the relay's other dependencies, at the level its
//! package sets in the workspace's Cargo.toml, and the relay sees only function
//! pointers. No runtime: what is here is pure.
//!
//! Everything but [`protobuf`] needs the `types` feature (on by default): the fuzz
//! target of the protobuf decoder builds without `k8s-openapi`.

pub mod protobuf;

#[cfg(feature = "types")]
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope, Resource};
#[cfg(feature = "types")]
use schemars::generate::SchemaGenerator;
#[cfg(feature = "types")]
use serde::Serialize;
#[cfg(feature = "types")]
use serde::de::DeserializeOwned;
#[cfg(feature = "types")]
use serde_json::Value;

/// Finds the fields of a manifest its type does not know (strict validation): their
/// paths (`spec.replicass`), or the field that does not fit the type at all.
#[cfg(feature = "types")]
pub type FieldCheck = fn(&Value) -> Result<Vec<String>, Mismatch>;

/// A manifest's field whose value its type cannot hold (a list where a string goes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Mismatch {
    /// The field's path, `data.count` or `spec.containers[0].ports`; empty for the
    /// whole manifest.
    pub field: String,
    /// What does not fit, in serde's words (`invalid type: sequence, expected a
    /// string`).
    pub message: String,
}

/// Adds a built-in type's schema (and those it refers to) to a generator; returns the
/// reference to it.
#[cfg(feature = "types")]
pub type SchemaFn = fn(&mut SchemaGenerator) -> schemars::Schema;

/// One built-in resource type.
#[cfg(feature = "types")]
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// API group (`""`: core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// The resource name in paths (`deployments`).
    pub plural: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// `kubectl get deploy`.
    pub short_names: &'static [&'static str],
    /// `kubectl get all`.
    pub categories: &'static [&'static str],
    /// Strict validation of a manifest of this type.
    pub check: FieldCheck,
    /// Its schema, for the OpenAPI documents.
    pub schema: SchemaFn,
}

#[cfg(feature = "types")]
trait Scope {
    const NAMESPACED: bool;
}
#[cfg(feature = "types")]
impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
#[cfg(feature = "types")]
impl Scope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// The schema generator function of any type `k8s-openapi` describes.
#[cfg(feature = "types")]
pub fn schema_of<T: schemars::JsonSchema>(g: &mut SchemaGenerator) -> schemars::Schema {
    g.subschema_for::<T>()
}

/// The fields of `value` that do not survive a round trip through `T`: the fields `T`
/// does not know. `k8s-openapi` types ignore unknown fields when they deserialize, so
/// what they serialize back lacks exactly those.
#[cfg(feature = "types")]
pub fn unknown_fields<T: Serialize + DeserializeOwned>(
    value: &Value,
) -> Result<Vec<String>, Mismatch> {
    let typed: T = serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        let field = e.path().to_string();
        Mismatch {
            field: if field == "." { String::new() } else { field },
            message: e.into_inner().to_string(),
        }
    })?;
    let back = serde_json::to_value(&typed).map_err(|e| Mismatch {
        field: String::new(),
        message: e.to_string(),
    })?;
    let mut out = Vec::new();
    missing(value, &back, "", &mut out);
    Ok(out)
}

#[cfg(feature = "types")]
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

#[cfg(feature = "types")]
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().all(is_empty),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(feature = "types")]
fn builtin<T>(short_names: &'static [&'static str], categories: &'static [&'static str]) -> Builtin
where
    T: Resource + Serialize + DeserializeOwned + schemars::JsonSchema,
    T::Scope: Scope,
{
    Builtin {
        group: T::GROUP,
        version: T::VERSION,
        kind: T::KIND,
        plural: T::URL_PATH_SEGMENT,
        namespaced: <T::Scope as Scope>::NAMESPACED,
        short_names,
        categories,
        check: unknown_fields::<T>,
        schema: schema_of::<T>,
    }
}

/// The built-in types a user applies (objects, not reviews or subresources). Short
/// names and categories are Kubernetes' own (`kubectl api-resources`); `k8s-openapi`
/// does not carry them.
#[cfg(feature = "types")]
pub fn builtins() -> Vec<Builtin> {
    use k8s_openapi::api::{
        admissionregistration, apps, autoscaling, batch, certificates, coordination, core,
        discovery, events, flowcontrol, networking, node, policy, rbac, resource, scheduling,
        storage, storagemigration,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;
    const ALL: &[&str] = &["all"];
    vec![
        builtin::<core::v1::ComponentStatus>(&["cs"], &[]),
        builtin::<core::v1::ConfigMap>(&["cm"], &[]),
        builtin::<core::v1::Endpoints>(&["ep"], &[]),
        builtin::<core::v1::Event>(&["ev"], &[]),
        builtin::<core::v1::LimitRange>(&["limits"], &[]),
        builtin::<core::v1::Namespace>(&["ns"], &[]),
        builtin::<core::v1::Node>(&["no"], &[]),
        builtin::<core::v1::PersistentVolume>(&["pv"], &[]),
        builtin::<core::v1::PersistentVolumeClaim>(&["pvc"], &[]),
        builtin::<core::v1::Pod>(&["po"], ALL),
        builtin::<core::v1::PodTemplate>(&[], &[]),
        builtin::<core::v1::ReplicationController>(&["rc"], ALL),
        builtin::<core::v1::ResourceQuota>(&["quota"], &[]),
        builtin::<core::v1::Secret>(&[], &[]),
        builtin::<core::v1::Service>(&["svc"], ALL),
        builtin::<core::v1::ServiceAccount>(&["sa"], &[]),
        builtin::<admissionregistration::v1::MutatingAdmissionPolicy>(&[], &[]),
        builtin::<admissionregistration::v1::MutatingAdmissionPolicyBinding>(&[], &[]),
        builtin::<admissionregistration::v1::MutatingWebhookConfiguration>(&[], &[]),
        builtin::<admissionregistration::v1::ValidatingAdmissionPolicy>(&[], &[]),
        builtin::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(&[], &[]),
        builtin::<admissionregistration::v1::ValidatingWebhookConfiguration>(&[], &[]),
        builtin::<apiregistration::APIService>(&[], &[]),
        builtin::<apps::v1::ControllerRevision>(&[], &[]),
        builtin::<apps::v1::DaemonSet>(&["ds"], ALL),
        builtin::<apps::v1::Deployment>(&["deploy"], ALL),
        builtin::<apps::v1::ReplicaSet>(&["rs"], ALL),
        builtin::<apps::v1::StatefulSet>(&["sts"], ALL),
        builtin::<autoscaling::v2::HorizontalPodAutoscaler>(&["hpa"], ALL),
        builtin::<batch::v1::CronJob>(&["cj"], ALL),
        builtin::<batch::v1::Job>(&[], ALL),
        builtin::<certificates::v1::CertificateSigningRequest>(&["csr"], &[]),
        builtin::<certificates::v1::ClusterTrustBundle>(&[], &[]),
        builtin::<certificates::v1::PodCertificateRequest>(&[], &[]),
        builtin::<coordination::v1::Lease>(&[], &[]),
        builtin::<discovery::v1::EndpointSlice>(&[], &[]),
        builtin::<events::v1::Event>(&["ev"], &[]),
        builtin::<flowcontrol::v1::FlowSchema>(&[], &[]),
        builtin::<flowcontrol::v1::PriorityLevelConfiguration>(&[], &[]),
        builtin::<networking::v1::IPAddress>(&[], &[]),
        builtin::<networking::v1::Ingress>(&["ing"], &[]),
        builtin::<networking::v1::IngressClass>(&[], &[]),
        builtin::<networking::v1::NetworkPolicy>(&["netpol"], &[]),
        builtin::<networking::v1::ServiceCIDR>(&[], &[]),
        builtin::<node::v1::RuntimeClass>(&[], &[]),
        builtin::<policy::v1::PodDisruptionBudget>(&["pdb"], &[]),
        builtin::<rbac::v1::ClusterRole>(&[], &[]),
        builtin::<rbac::v1::ClusterRoleBinding>(&[], &[]),
        builtin::<rbac::v1::Role>(&[], &[]),
        builtin::<rbac::v1::RoleBinding>(&[], &[]),
        builtin::<resource::v1::DeviceClass>(&[], &[]),
        builtin::<resource::v1::DeviceTaintRule>(&[], &[]),
        builtin::<resource::v1::ResourceClaim>(&[], &[]),
        builtin::<resource::v1::ResourceClaimTemplate>(&[], &[]),
        builtin::<resource::v1::ResourceSlice>(&[], &[]),
        builtin::<scheduling::v1::PriorityClass>(&["pc"], &[]),
        builtin::<storage::v1::CSIDriver>(&[], &[]),
        builtin::<storage::v1::CSINode>(&[], &[]),
        builtin::<storage::v1::CSIStorageCapacity>(&[], &[]),
        builtin::<storage::v1::StorageClass>(&["sc"], &[]),
        builtin::<storage::v1::VolumeAttachment>(&[], &[]),
        builtin::<storage::v1::VolumeAttributesClass>(&[], &[]),
        builtin::<storagemigration::v1::StorageVersionMigration>(&[], &[]),
        builtin::<apiextensions::CustomResourceDefinition>(&["crd", "crds"], &[]),
    ]
}

#[cfg(all(test, feature = "types"))]
mod tests {
    use super::*;

    #[test]
    fn a_misspelled_field_is_named_and_a_known_one_is_not() {
        let deployment = builtins()
            .into_iter()
            .find(|b| b.kind == "Deployment")
            .expect("Deployment is built in");
        assert_eq!(
            (deployment.group, deployment.plural),
            ("apps", "deployments")
        );
        assert!(deployment.namespaced);
        let manifest = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web" },
            "spec": { "replicass": 2, "replicas": 1, "selector": { "matchLabels": { "app": "web" } } },
        });
        assert_eq!(
            (deployment.check)(&manifest),
            Ok(vec!["spec.replicass".to_owned()])
        );
        let wrong = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "web" },
            "spec": { "selector": {}, "template": { "spec": { "containers": [ { "name": 7 } ] } } },
        });
        let mismatch = (deployment.check)(&wrong).expect_err("a number is not a name");
        assert_eq!(mismatch.field, "spec.template.spec.containers[0].name");
        assert!(mismatch.message.contains("expected a string"), "{mismatch}");
    }

    #[test]
    fn every_type_has_a_schema_under_kubernetes_name() {
        let mut g = schemars::generate::SchemaSettings::draft2020_12().into_generator();
        for b in builtins() {
            let reference = (b.schema)(&mut g);
            let text = serde_json::to_string(&reference).expect("a schema serializes");
            assert!(text.contains("io.k8s."), "{}: {text}", b.kind);
        }
    }
}
