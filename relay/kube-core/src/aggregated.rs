//! Aggregated discovery: `/api` and `/apis` answered with one `APIGroupDiscoveryList`
//! (`apidiscovery.k8s.io`, v2 or v2beta1) when the client's `Accept` asks for it, as
//! kubectl since 1.30 does first; every group, version and resource of the space in one
//! document, instead of one request per group version.

use serde_json::{Value, json};

use crate::catalog::{Catalog, ResourceType};
use crate::openapi::TypeSchema;

/// The aggregated discovery form a client accepts, if any: `v2` or `v2beta1`, in the
/// client's order of preference. Only the JSON forms are served.
pub fn wanted(accept: &str) -> Option<&'static str> {
    accept.split(',').find_map(|entry| {
        let params: Vec<&str> = entry.split(';').map(str::trim).collect();
        let media = params.first().copied().unwrap_or_default();
        let has = |p: &str| params.contains(&p);
        if media != "application/json"
            || !has("g=apidiscovery.k8s.io")
            || !has("as=APIGroupDiscoveryList")
        {
            return None;
        }
        if has("v=v2") {
            Some("v2")
        } else if has("v=v2beta1") {
            Some("v2beta1")
        } else {
            None
        }
    })
}

/// The `Content-Type` of an answer in `version`.
pub fn content_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

/// The built-in kinds with a `status` subresource.
const WITH_STATUS: [&str; 18] = [
    "CronJob",
    "CustomResourceDefinition",
    "DaemonSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "Ingress",
    "Job",
    "Namespace",
    "NetworkPolicy",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodDisruptionBudget",
    "ReplicaSet",
    "ReplicationController",
    "ResourceQuota",
    "Service",
    "StatefulSet",
];

fn has_status(t: &ResourceType) -> bool {
    match &t.schema {
        TypeSchema::Builtin(_) => WITH_STATUS.contains(&t.kind.as_str()),
        TypeSchema::Custom(s) => s["properties"]["status"].is_object(),
        TypeSchema::Strata | TypeSchema::None => false,
    }
}

fn resource(t: &ResourceType) -> Value {
    let kind = json!({ "group": t.group, "version": t.version, "kind": t.kind });
    let mut subresources = Vec::new();
    let builtin = matches!(t.schema, TypeSchema::Builtin(_));
    if builtin && crate::SCALABLE.contains(&t.kind.as_str()) {
        subresources.push(json!({
            "subresource": "scale",
            "responseKind": { "group": "autoscaling", "version": "v1", "kind": "Scale" },
            "verbs": ["get", "patch", "update"],
        }));
    }
    if has_status(t) {
        subresources.push(json!({
            "subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"],
        }));
    }
    let mut r = json!({
        "resource": t.plural,
        "responseKind": kind,
        "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": t.singular,
        "verbs": t.verbs(),
    });
    if !t.short_names.is_empty() {
        r["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        r["categories"] = json!(t.categories);
    }
    if !subresources.is_empty() {
        r["subresources"] = json!(subresources);
    }
    r
}

/// `GET /api` (`core`) or `GET /apis` as an `APIGroupDiscoveryList` in `version`.
pub fn list(catalog: &Catalog, core: bool, version: &str) -> Value {
    let items: Vec<Value> = catalog
        .groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> =
                        catalog.of_group_version(g, v).map(resource).collect();
                    json!({ "version": v, "resources": resources, "freshness": "Current" })
                })
                .collect();
            json!({ "metadata": { "name": g, "creationTimestamp": null }, "versions": versions })
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_protocol::model::Space;
    use strata_protocol::sync::ObjectLog;

    #[test]
    fn the_accept_header_chooses_the_form() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wanted(kubectl), Some("v2"));
        assert_eq!(
            wanted(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList, application/json"
            ),
            Some("v2beta1")
        );
        assert_eq!(
            wanted(
                "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
            ),
            None
        );
        assert_eq!(wanted("application/json, */*"), None);
    }

    #[test]
    fn every_resource_is_listed_with_its_scope_names_and_subresources() {
        let log = ObjectLog::new(strata_protocol::model::LogId(1));
        let c = Catalog::of_space(&log, &Space::default_space());
        let core = list(&c, true, "v2");
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert_eq!(core["items"][0]["metadata"]["name"], "");
        let apis = list(&c, false, "v2");
        let apps = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "apps")
            .unwrap();
        let deploy = apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        assert_eq!(deploy["scope"], "Namespaced");
        assert_eq!(deploy["shortNames"], json!(["deploy"]));
        assert_eq!(deploy["categories"], json!(["all"]));
        assert_eq!(deploy["subresources"][0]["subresource"], "scale");
        assert_eq!(deploy["subresources"][1]["subresource"], "status");
    }
}
