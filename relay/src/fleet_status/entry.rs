//! What every kind made from reports shares (the fleet statuses of this module and
//! `ServiceEndpoints`, [`crate::service_endpoints`]): the group's version, the labels,
//! the names, one entry, and the Table a client reads them in. Below both, so that the
//! fleet status module can hand a `ServiceEndpoints` read to its own module without
//! either importing the other.

use serde_json::{Value, json};
use strata_protocol::model::{ObjectKey, ObjectKeyParts};
use strata_protocol::route::STRATA_GROUP;

/// The version of the kinds made from reports.
pub const VERSION: &str = "v1alpha1";
/// Their API version (group `strata.dev`).
pub const API_VERSION: &str = "strata.dev/v1alpha1";
/// The label naming the placement.
pub const PLACEMENT_LABEL: &str = "strata.dev/placement";
/// The label naming the object's kind (lower case).
pub const KIND_LABEL: &str = "strata.dev/kind";
/// The label naming the object.
pub const NAME_LABEL: &str = "strata.dev/name";

/// A name part as a Kubernetes name can hold it: lower case, `[a-z0-9.-]`.
pub(crate) fn name_part(s: &str) -> String {
    s.chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect()
}

/// The name of the fleet status of `object` under `placement`.
pub fn name_of(object: &ObjectKey, placement: &str) -> String {
    format!(
        "{}.{}.{}",
        name_part(&object.kind),
        name_part(&object.name),
        name_part(placement)
    )
}

/// One fleet status: which it is, of what, under which placement.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its own key (group `strata.dev`, kind `FleetStatus`, `ClusterFleetStatus` or
    /// `ServiceEndpoints`).
    pub key: ObjectKey,
    /// The object it reports on.
    pub object: ObjectKey,
    /// The placement's name.
    pub placement: String,
}

impl Entry {
    /// The entry of `kind` about `object` under `placement` (in the object's space and
    /// namespace, named by [`name_of`]).
    pub fn new(kind: &str, object: &ObjectKey, placement: &str) -> Entry {
        Entry {
            key: ObjectKey::new(ObjectKeyParts {
                space: object.space.clone(),
                group: STRATA_GROUP.to_owned(),
                version: VERSION.to_owned(),
                kind: kind.to_owned(),
                namespace: object.namespace.clone(),
                name: name_of(object, placement),
            }),
            object: object.clone(),
            placement: placement.to_owned(),
        }
    }
}

/// One row of a `meta.k8s.io/v1` Table: its cells, and the object's metadata.
pub(crate) fn row(v: &Value, cells: Value) -> Value {
    json!({
        "cells": cells,
        "object": {
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": v["metadata"],
        },
    })
}

/// A `meta.k8s.io/v1` Table of string columns (name, format, description) and rows.
pub(crate) fn table_of(columns: &[(&str, &str, &str)], rows: Vec<Value>, head: u64) -> Value {
    let columns: Vec<Value> = columns
        .iter()
        .map(|(n, f, d)| json!({ "name": n, "type": "string", "format": f, "description": d }))
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": head.to_string() },
        "columnDefinitions": columns, "rows": rows,
    })
}
