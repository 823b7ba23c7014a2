//! Namespaces as Kubernetes has them: a namespaced object may be written only into a
//! namespace that exists in its space (else 404 `namespaces "x" not found`, as
//! kube-apiserver answers), and deleting a Namespace makes it `Terminating`: what is in
//! it is deleted, and the Namespace goes once nothing of it remains at the root or on
//! the clusters ([`super::deletion`]). Nothing new may be created in a terminating
//! namespace. `relay delete` of a Namespace still deletes it and what is in it at once
//! ([`with_contents`]).
//!
//! `default`, `kube-system`, `kube-public` and `kube-node-lease` always exist, as in
//! every Kubernetes cluster. The Kubernetes API and `relay apply` check this; a batch of
//! `relay apply` may hold the Namespace together with what goes in it. Writes that do
//! not come from users (the simulation's workloads, tests driving the core) do not.

use std::collections::BTreeSet;

use serde_json::json;
use strata_protocol::model::{ObjectKey, ObjectKeyParts, Space};

use crate::kube::{Answer, failure};
use crate::tier::core::NodeCore;

/// The namespaces every space has without anyone creating them.
pub const BUILT_IN: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The key of the Namespace `name` in `space`.
pub fn key(space: &Space, name: &str) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: space.clone(),
        group: String::new(),
        version: "v1".to_owned(),
        kind: "Namespace".to_owned(),
        namespace: None,
        name: name.to_owned(),
    })
}

/// Whether `key` names a Namespace.
pub fn is_namespace(key: &ObjectKey) -> bool {
    key.group.is_empty() && key.kind == "Namespace" && key.namespace.is_none()
}

/// Whether the namespace `name` exists in `space`.
pub fn exists(core: &NodeCore, space: &Space, name: &str) -> bool {
    BUILT_IN.contains(&name) || core.log().get(&key(space, name)).is_some()
}

/// Whether the namespace `name` of `space` is being deleted (`Terminating`): nothing
/// new may be created in it.
pub fn terminating(core: &NodeCore, space: &Space, name: &str) -> bool {
    core.log().get(&key(space, name)).is_some_and(|o| {
        memchr::memmem::find(&o.body, b"deletionTimestamp").is_some()
            && serde_json::from_slice::<serde_json::Value>(&o.body)
                .is_ok_and(|v| strata_kube_core::deletion::is_deleting(&v))
    })
}

/// The refusal kube-apiserver gives for an object in a missing namespace.
pub fn not_found(name: &str) -> Answer {
    failure(
        404,
        "NotFound",
        format!("namespaces {name:?} not found"),
        Some(json!({ "name": name, "kind": "namespaces" })),
    )
}

/// The namespaces `keys` are in that neither exist in their space nor are created by
/// `keys` themselves (a batch may hold the Namespace and its contents), sorted.
pub fn missing<'a>(
    core: &NodeCore,
    keys: impl Iterator<Item = &'a ObjectKey> + Clone,
) -> Vec<String> {
    let created: BTreeSet<(&Space, &str)> = keys
        .clone()
        .filter(|k| is_namespace(k))
        .map(|k| (&k.space, k.name.as_str()))
        .collect();
    let missing: BTreeSet<String> = keys
        .filter_map(|k| k.namespace.as_deref().map(|ns| (&k.space, ns)))
        .filter(|(space, ns)| !created.contains(&(*space, *ns)) && !exists(core, space, ns))
        .map(|(_, ns)| ns.to_owned())
        .collect();
    missing.into_iter().collect()
}

/// `keys`, plus every live object in the namespaces among them: what deleting them
/// deletes.
pub fn with_contents(core: &NodeCore, mut keys: Vec<ObjectKey>) -> Vec<ObjectKey> {
    let doomed: BTreeSet<(Space, String)> = keys
        .iter()
        .filter(|k| is_namespace(k))
        .map(|k| (k.space.clone(), k.name.clone()))
        .collect();
    if doomed.is_empty() {
        return keys;
    }
    let already: BTreeSet<ObjectKey> = keys.iter().cloned().collect();
    keys.extend(
        core.log()
            .live()
            .map(|o| o.key())
            .filter(|k| {
                k.namespace
                    .as_ref()
                    .is_some_and(|ns| doomed.contains(&(k.space.clone(), ns.clone())))
                    && !already.contains(*k)
            })
            .cloned(),
    );
    keys
}

/// Whether the object `key` names was deleted with its namespace: once the Namespace
/// was marked `Terminating` (or, by `relay delete`, in the same revision as it).
/// Kubernetes deletes a namespace's contents after the Namespace, while it is
/// `Terminating`, so `kubectl delete -f` of a file that lists the Namespace first still
/// finds the objects after it; the root deletes them at once, and answers such a late
/// delete as done.
pub fn went_with_namespace(core: &NodeCore, key: &ObjectKey) -> bool {
    let Some(ns) = &key.namespace else {
        return false;
    };
    match (
        core.log().entry(key),
        core.log().entry(&self::key(&key.space, ns)),
    ) {
        (Some(object), Some(namespace)) if object.object().is_none() => match namespace.object() {
            None => object.position() == namespace.position(),
            Some(_) => {
                terminating(core, &key.space, ns) && object.position() >= namespace.position()
            }
        },
        _ => false,
    }
}
