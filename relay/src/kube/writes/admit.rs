//! The one write path of both doors: `POST /spaces/S/apply` (`relay apply`,
//! `crate::api`) and the Kubernetes API's create, update, patch, apply and scale
//! ([`super`]) store manifests through [`write_manifests`], which admits them the same
//! way (namespaces present, custom resources checked against their CRDs) before
//! `NodeCore::apply_manifests`.

use strata_node::objects::{Manifest, manifest_from_value};
use strata_protocol::model::{ObjectKey, Space};
use strata_protocol::sync::LogError;

use super::{batch_check, namespaces};
use crate::kube::Answer;
use crate::kube::schema_check::FieldValidation;
use crate::tier::core::{Applied, NodeCore};

/// How a write is admitted.
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    /// `fieldValidation`: what unknown fields of a custom resource do (`relay apply`
    /// uses `Warn`, kube-apiserver's default).
    pub validation: FieldValidation,
    /// `dryRun=All`: admit, but store nothing.
    pub dry_run: bool,
}

/// Why a write was refused; nothing was stored.
#[derive(Debug)]
pub enum WriteError {
    /// Objects in namespaces that neither exist nor are created by the write (sorted).
    NamespacesMissing(Vec<String>),
    /// A new object in a namespace being deleted (`Terminating`): its key and the
    /// namespace, refused as kube-apiserver's NamespaceLifecycle admission refuses it.
    NamespaceTerminating(ObjectKey, String),
    /// A custom resource its CRD's schema refuses: the `metav1.Status`.
    Invalid(Answer),
    /// The log refused the change.
    Store(LogError),
}

/// What a write did: what was stored (`None` for a dry run), and per manifest, the
/// unknown fields pruned from it.
#[derive(Debug)]
pub struct Written {
    /// What the apply did, unless it was a dry run.
    pub applied: Option<Applied>,
    /// For each manifest, in order, the fields its CRD's schema does not know.
    pub pruned: Vec<Vec<String>>,
}

/// Admits `manifests` (all of `space`) and stores them in one revision: every object's
/// namespace must exist or be created by the same write, and custom resources are
/// checked (and pruned, in place) against their CRDs, whether the CRD is at the root
/// or in the same write. All or nothing.
pub fn write_manifests(
    core: &mut NodeCore,
    space: &Space,
    manifests: &mut [Manifest],
    admission: Admission,
) -> Result<Written, WriteError> {
    let missing = namespaces::missing(core, manifests.iter().map(|m| &m.meta.key));
    if !missing.is_empty() {
        return Err(WriteError::NamespacesMissing(missing));
    }
    for m in manifests.iter() {
        let key = &m.meta.key;
        if let Some(ns) = &key.namespace
            && namespaces::terminating(core, &key.space, ns)
            && core.log().get(key).is_none()
        {
            return Err(WriteError::NamespaceTerminating(key.clone(), ns.clone()));
        }
    }
    let pruned = batch_check::check(core, space, manifests, admission.validation)
        .map_err(WriteError::Invalid)?;
    let applied = if admission.dry_run {
        None
    } else {
        Some(core.apply_manifests(manifests).map_err(WriteError::Store)?)
    };
    Ok(Written { applied, pruned })
}

/// Puts the namespaced objects of `manifests` that name no namespace into `default`,
/// as kubectl does before it sends them: `relay apply` of a manifest without
/// `metadata.namespace` then stores what `kubectl get -n default` finds. Kinds the
/// space does not know (a CRD applied in the same write) are left as they are.
pub fn default_namespaces(core: &NodeCore, space: &Space, manifests: &mut [Manifest]) {
    // The catalog reads every CRD of the log: built only when a manifest names no
    // namespace, not on every apply.
    if manifests.iter().all(|m| m.meta.key.namespace.is_some()) {
        return;
    }
    let catalog = crate::kube::catalog::Catalog::of_space(core.log(), space);
    for m in manifests.iter_mut() {
        let key = &m.meta.key;
        if key.namespace.is_some() {
            continue;
        }
        let namespaced = catalog
            .by_kind(&key.group, &key.version, &key.kind)
            .is_some_and(|t| t.namespaced);
        if !namespaced {
            continue;
        }
        let mut value = m.value.clone();
        value["metadata"]["namespace"] = serde_json::json!("default");
        if let Ok(defaulted) = manifest_from_value(value, space) {
            *m = defaulted;
        }
    }
}
