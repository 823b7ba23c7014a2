//! Discovery (`/version`, `/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`) and
//! the OpenAPI v3 index and group-version documents, built from a space's [`Catalog`].
//! (Aggregated discovery is [`crate::aggregated`]; OpenAPI v2 is [`crate::openapi_v2`].)
//!
//! The OpenAPI documents list every path and its operations with the
//! `x-kubernetes-group-version-kind` extension, and the `fieldValidation` parameter on
//! every write: that is how kubectl learns that the server validates strictly, so it
//! sends `fieldValidation=Strict` instead of validating against schemas itself. Their
//! `components.schemas` hold the schema of every kind of the group version and of
//! everything it refers to ([`crate::openapi`]), which `kubectl explain` reads. PATCH
//! does not list strategic merge patch, so kubectl computes its patches from the types
//! it was built with.

use serde_json::{Map, Value, json};

use crate::catalog::{Catalog, ResourceType};

/// The Kubernetes version whose types are served (`k8s-openapi`'s newest).
pub const KUBE_MINOR: &str = "37";

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0-strata.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [ { "clientCIDR": "0.0.0.0/0", "serverAddress": "" } ],
    })
}

/// `GET /apis`.
pub fn groups(catalog: &Catalog) -> Value {
    let groups: Vec<Value> = catalog
        .groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| json!({ "groupVersion": format!("{g}/{v}"), "version": v }))
                .collect();
            json!({ "name": g, "versions": vs, "preferredVersion": vs[0] })
        })
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `GET /apis/{group}`.
pub fn group(catalog: &Catalog, group: &str) -> Option<Value> {
    let versions = catalog.groups().remove(group)?;
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({ "groupVersion": format!("{group}/{v}"), "version": v }))
        .collect();
    Some(json!({
        "kind": "APIGroup", "apiVersion": "v1", "name": group,
        "versions": vs, "preferredVersion": vs[0],
    }))
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`; `None` for an unknown one.
pub fn resources(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    let types: Vec<&ResourceType> = catalog.of_group_version(group, version).collect();
    if types.is_empty() {
        return None;
    }
    let resources: Vec<Value> = types
        .iter()
        .map(|t| {
            json!({
                "name": t.plural,
                "singularName": t.singular,
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": t.verbs(),
                "shortNames": t.short_names,
                "categories": t.categories,
            })
        })
        .collect();
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": types[0].api_version(),
        "resources": resources,
    }))
}

/// The path of a group version in OpenAPI v3's index: `api/v1`, `apis/apps/v1`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `GET /openapi/v3`: one entry per group version, each with its document's URL
/// (`prefix` is the space's path prefix: clients fetch the URL as given).
pub fn openapi_index(catalog: &Catalog, prefix: &str, hash: u64) -> Value {
    let mut paths = Map::new();
    for (g, versions) in catalog.groups() {
        for v in versions {
            let p = gv_path(g, v);
            paths.insert(
                p.clone(),
                json!({ "serverRelativeURL": format!("{prefix}/openapi/v3/{p}?hash={hash:016X}") }),
            );
        }
    }
    json!({ "paths": paths })
}

fn operation(t: &ResourceType, action: &str, writes: bool) -> Value {
    let mut op = json!({
        "operationId": format!("{action}{}", t.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": t.group, "version": t.version, "kind": t.kind,
        },
        "responses": { "200": { "description": "OK" } },
    });
    if writes {
        op["parameters"] = json!([
            { "name": "dryRun", "in": "query", "schema": { "type": "string" } },
            { "name": "fieldManager", "in": "query", "schema": { "type": "string" } },
            { "name": "fieldValidation", "in": "query", "schema": { "type": "string" } },
        ]);
    }
    op
}

/// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`.
pub fn openapi_document(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    let types: Vec<&ResourceType> = catalog.of_group_version(group, version).collect();
    if types.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let base = format!("/{}", gv_path(group, version));
    for t in types {
        let scope = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", t.plural)
        } else {
            format!("{base}/{}", t.plural)
        };
        let mut patch = operation(t, "patch", true);
        patch["requestBody"] = json!({ "content": {
            "application/json-patch+json": {},
            "application/merge-patch+json": {},
        } });
        paths.insert(
            format!("{scope}/{{name}}"),
            json!({
                "get": operation(t, "get", false),
                "put": operation(t, "put", true),
                "patch": patch,
                "delete": operation(t, "delete", false),
            }),
        );
        paths.insert(
            scope,
            json!({
                "get": operation(t, "list", false),
                "post": operation(t, "post", true),
                "delete": operation(t, "deletecollection", false),
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": "Strata", "version": format!("v1.{KUBE_MINOR}") },
        "paths": paths,
        "components": { "schemas": crate::openapi::components(catalog, group, version) },
    }))
}
