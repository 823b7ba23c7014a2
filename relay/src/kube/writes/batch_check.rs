//! The checks of the Kubernetes API for a `relay apply` batch (`POST /spaces/S/apply`):
//! a custom resource is checked against its CRD's schema, whether the CRD is at the
//! root or in the same batch. Unknown fields are pruned and named (kube-apiserver's
//! default, `fieldValidation=Warn`); a refused value refuses the whole batch with
//! kube-apiserver's words. A custom resource whose CRD the root does not know is
//! taken as data, as before (its CRD may live only on the clusters).

use strata_node::objects::Manifest;
use strata_protocol::model::Space;

use crate::kube::Answer;
use crate::kube::catalog::{Catalog, ResourceType, crd_types};
use crate::kube::openapi::TypeSchema;
use crate::kube::schema_check::{FieldValidation, enforce};
use crate::tier::core::NodeCore;

/// Checks and prunes the custom resources of `manifests` (for `space`) under
/// `validation`: for each manifest, the fields pruned from it (`spec.foo`), or the
/// `metav1.Status` refusing the batch (422 `Invalid`, 400 under `Strict`).
pub fn check(
    core: &NodeCore,
    space: &Space,
    manifests: &mut [Manifest],
    validation: FieldValidation,
) -> Result<Vec<Vec<String>>, Answer> {
    // Built only for a manifest of no built-in kind (most writes have none).
    let catalog = std::cell::OnceCell::new();
    // The batch's own CRDs come first: they replace what the root holds.
    let batch: Vec<ResourceType> = manifests
        .iter()
        .filter(|m| {
            m.meta.key.group == "apiextensions.k8s.io"
                && m.meta.key.kind == "CustomResourceDefinition"
        })
        .flat_map(|m| crd_types(&m.value))
        .collect();
    let mut pruned = Vec::with_capacity(manifests.len());
    for m in manifests.iter_mut() {
        let k = &m.meta.key;
        let t = batch
            .iter()
            .find(|t| t.group == k.group && t.version == k.version && t.kind == k.kind)
            .or_else(|| Catalog::builtin_by_kind(&k.group, &k.version, &k.kind))
            .or_else(|| {
                catalog
                    .get_or_init(|| Catalog::of_space(core.log(), space))
                    .by_kind(&k.group, &k.version, &k.kind)
            });
        match t.map(|t| (t, &t.schema)) {
            Some((t, TypeSchema::Custom(schema))) => {
                pruned.push(enforce(t, schema, &mut m.value, validation)?);
            }
            _ => pruned.push(Vec::new()),
        }
    }
    Ok(pruned)
}
