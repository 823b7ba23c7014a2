//! `strata.dev/v1alpha1` `ServiceEndpoints`: where an app can be reached, at the root.
//! One read-only object per (Service or Ingress, placement), in the object's
//! namespace, named `KIND.NAME.PLACEMENT` like a `FleetStatus` (e.g.
//! `service.web.shop-eu`), listing the clusters the placement places it on that
//! report endpoints, nearest tier first, each with its addresses and ports and
//! whether it is Available (and whether DNS names it: not while a move drains it);
//! and, under `leaving`, the clusters that still report it although no placement
//! places it there any more (their copies are being taken away).
//! Made from the endpoints the agents report (`NodeCore::service_endpoints`), served
//! and watched like the fleet status kinds (`crate::fleet_status`).

use serde_json::{Value, json};
use strata_protocol::model::Space;

use crate::fleet_status::entry::{
    API_VERSION, Entry, NAME_LABEL, PLACEMENT_LABEL, name_part, row, table_of,
};
use crate::tier::core::NodeCore;

/// The kind.
pub const KIND: &str = strata_kube_core::catalog::SERVICE_ENDPOINTS_KIND;

/// The `ServiceEndpoints` of `space`, in `namespace` only when given. Ordered by key.
pub fn entries(core: &NodeCore, space: &Space, namespace: Option<&str>) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for object in core.reports().endpoint_objects() {
        if object.space != *space
            || namespace.is_some_and(|ns| object.namespace.as_deref() != Some(ns))
            || object.namespace.is_none()
        {
            continue;
        }
        let Some(o) = core.log().get(object) else {
            continue;
        };
        for p in core
            .placements()
            .iter()
            .filter(|p| p.space == *space && p.selects_object(&o.meta))
        {
            out.push(Entry::new(KIND, object, &p.name));
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// The object as a client reads it; `head` is its `resourceVersion`.
pub fn render(core: &NodeCore, e: &Entry, head: u64) -> Option<Value> {
    let (_, clusters) = core
        .service_endpoints(&e.object)
        .into_iter()
        .find(|(p, _)| *p == e.placement)?;
    let k = &e.object;
    let clusters: Vec<Value> = clusters
        .iter()
        .map(|c| {
            let addresses = addresses_json(&c.endpoints);
            json!({
                "name": c.cluster,
                "path": c.path,
                "available": c.endpoints.available,
                "reachable": c.reachable,
                "draining": c.draining,
                "served": c.serves(),
                "addresses": addresses,
            })
        })
        .collect();
    let served = clusters
        .iter()
        .filter(|c| c["served"] == json!(true))
        .count();
    let leaving: Vec<Value> = core
        .endpoints_leaving(k)
        .into_iter()
        .map(|(name, e)| json!({ "name": name, "addresses": addresses_json(&e) }))
        .collect();
    Some(json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": e.key.name,
            "namespace": k.namespace,
            "resourceVersion": head.to_string(),
            "uid": crate::uid::uid(&e.key),
            "generation": 1,
            "labels": {
                PLACEMENT_LABEL: label(&e.placement),
                NAME_LABEL: label(&k.name),
            },
        },
        "object": {
            "apiVersion": if k.group.is_empty() { k.version.clone() } else { format!("{}/{}", k.group, k.version) },
            "kind": k.kind,
            "namespace": k.namespace,
            "name": k.name,
        },
        "placement": e.placement,
        "summary": { "clusters": clusters.len(), "served": served },
        "clusters": clusters,
        "leaving": leaving,
    }))
}

/// A cluster's addresses with their ports, as the object lists them.
fn addresses_json(e: &strata_protocol::wire::ServiceEndpoints) -> Vec<Value> {
    e.addresses
        .iter()
        .map(|a| {
            let ports: Vec<Value> = a
                .ports
                .iter()
                .map(|p| json!({ "name": p.name, "port": p.port, "protocol": p.protocol }))
                .collect();
            json!({ "kind": a.kind.name(), "address": a.address, "ports": ports })
        })
        .collect()
}

fn label(s: &str) -> String {
    let l: String = name_part(s).chars().take(63).collect();
    l.trim_matches('.').to_owned()
}

/// A `meta.k8s.io/v1` Table of them, for `kubectl get serviceendpoints`.
pub fn table(items: &[Value], head: u64) -> Value {
    let columns = [
        ("Name", "name", "metadata.name"),
        ("Object", "", "the Service or Ingress"),
        ("Placement", "", "the placement"),
        (
            "Served",
            "",
            "clusters DNS names (Available, reachable, not draining) of those reporting",
        ),
        (
            "Addresses",
            "",
            "the served clusters' addresses, nearest first",
        ),
        ("Clusters", "", "the clusters reporting, nearest first"),
    ];
    let rows: Vec<Value> = items
        .iter()
        .map(|v| {
            let clusters = v["clusters"].as_array().cloned().unwrap_or_default();
            let served: Vec<&Value> = clusters
                .iter()
                .filter(|c| c["served"] == json!(true))
                .collect();
            let addresses: Vec<String> = served
                .iter()
                .flat_map(|c| c["addresses"].as_array().cloned().unwrap_or_default())
                .filter_map(|a| a["address"].as_str().map(str::to_owned))
                .collect();
            let names: Vec<&str> = clusters.iter().filter_map(|c| c["name"].as_str()).collect();
            let dash = |s: String| if s.is_empty() { "-".to_owned() } else { s };
            row(
                v,
                json!([
                    v["metadata"]["name"],
                    format!(
                        "{}/{}",
                        v["object"]["kind"]
                            .as_str()
                            .unwrap_or_default()
                            .to_ascii_lowercase(),
                        v["object"]["name"].as_str().unwrap_or_default()
                    ),
                    v["placement"],
                    format!("{}/{}", served.len(), clusters.len()),
                    dash(addresses.join(",")),
                    dash(names.join(",")),
                ]),
            )
        })
        .collect();
    table_of(&columns, rows, head)
}
