//! The checks of the Kubernetes API for a `relay apply` batch (`POST /spaces/S/apply`):
//! a custom resource is checked against its CRD's schema, whether the CRD is at the
//! root or in the same batch. Unknown fields are pruned and named (kube-apiserver's
//! default, `fieldValidation=Warn`); a refused value refuses the whole batch with
//! kube-apiserver's words. A custom resource whose CRD the root does not know is
//! taken as data, as before (its CRD may live only on the clusters).

use strata_node::objects::Manifest;
use strata_protocol::model::Space;

use crate::kube::catalog::{Catalog, ResourceType, crd_types};
use crate::kube::openapi::TypeSchema;
use crate::kube::schema_check::{FieldValidation, enforce};
use crate::node::core::NodeCore;

/// Checks and prunes the custom resources of `manifests` (for `space`); the warnings
/// (`unknown field "spec.foo"`), or the message refusing the batch.
pub fn check(
    core: &NodeCore,
    space: &Space,
    manifests: &mut [Manifest],
) -> Result<Vec<String>, String> {
    let catalog = Catalog::of_space(core.log(), space);
    // The batch's own CRDs come first: they replace what the root holds.
    let batch: Vec<ResourceType> = manifests
        .iter()
        .filter(|m| {
            m.meta.key.group == "apiextensions.k8s.io"
                && m.meta.key.kind == "CustomResourceDefinition"
        })
        .flat_map(|m| crd_types(&m.value))
        .collect();
    let mut warnings = Vec::new();
    for m in manifests.iter_mut() {
        let k = &m.meta.key;
        let t = batch
            .iter()
            .find(|t| t.group == k.group && t.version == k.version && t.kind == k.kind)
            .or_else(|| catalog.by_kind(&k.group, &k.version, &k.kind));
        let Some(t) = t else { continue };
        let TypeSchema::Custom(schema) = &t.schema else {
            continue;
        };
        let name = k.to_string();
        match enforce(t, schema, &mut m.value, FieldValidation::Warn) {
            Ok(pruned) => warnings.extend(
                pruned
                    .iter()
                    .map(|f| format!("{name}: unknown field {f:?} (dropped)")),
            ),
            Err((_, status)) => {
                return Err(status["message"]
                    .as_str()
                    .map_or_else(|| status.to_string(), str::to_owned));
            }
        }
    }
    Ok(warnings)
}
