//! The one write path of both doors: `POST /spaces/S/apply` (`relay apply`,
//! `crate::api`) and the Kubernetes API's create, update, patch, apply and scale
//! ([`super`]) store manifests through [`write_manifests`], which admits them the same
//! way (namespaces present, custom resources checked against their CRDs) before
//! `NodeCore::apply_manifests`.

use strata_node::objects::Manifest;
use strata_protocol::model::{ObjectKey, Space};
use strata_protocol::sync::LogError;

use super::{batch_check, namespaces};
use crate::kube::Answer;
use crate::kube::schema_check::FieldValidation;
use crate::node::core::{Applied, NodeCore};

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
