//! The inventory and the tier tree: what `relay clusters` and `relay status` show.
//!
//! The root sees its own children's links directly and every deeper link through the
//! link records its relay children report (see [`strata_protocol::wire::LinkRecord`]).

use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use strata_protocol::model::Space;
use strata_protocol::wire::{LinkPath, LinkRecord, LinkTransport, ReportKey, ReportValue, Role};

use super::{ApiState, error, reply};
use crate::tier::core::NodeCore;
use crate::tier::core::{backend_reason, last_seen};
use strata_node::clock::Clock;

fn link_json(node: &str, l: &LinkRecord) -> Value {
    json!({
        "node": node,
        "parent": l.path.last(),
        "path": l.path,
        "role": match l.role { Role::Relay => "relay", Role::Agent => "agent" },
        "connected": l.connected,
        "since": l.since.0,
        "lastHeard": l.last_heard.0,
        "lag": l.lag,
        "clusters": l.clusters,
        "certExpires": l.cert_expires.map(|t| t.0),
        "transport": l.transport.map(|t| match t {
            LinkTransport::Quic => "quic",
            LinkTransport::Tcp => "tcp",
        }),
        "via": l.via.map(LinkPath::name),
    })
}

/// The inventory; with `space` (one the grant may read), each cluster's taints in
/// that space too (`relay cordon` and `relay drain` set them per space).
pub(super) async fn clusters(state: &ApiState, space: Option<Space>) -> Response<super::Body> {
    let now = Clock::start().wall();
    let items = state
        .node
        .query(move |core: &mut NodeCore| {
            let links = core.all_links();
            let taints = space
                .map(|s| crate::kube::clusters::taints(core, &s))
                .unwrap_or_default();
            core.reports()
                .clusters()
                .map(|c| {
                    let (reachable, seen) = last_seen(c, &links, now);
                    json!({
                        "name": c.name, "path": c.path, "labels": c.labels,
                        "properties": c.properties,
                        "reachable": reachable, "lastSeen": seen,
                        "reason": backend_reason(c),
                        "taints": taints.get(&c.name).cloned().unwrap_or(json!([])),
                    })
                })
                .collect::<Vec<_>>()
        })
        .await;
    match items {
        Some(items) => reply(StatusCode::OK, json!({ "items": items, "now": now.0 })),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
    }
}

/// Objects born on clusters and copied to the center by a placement's `upsync`, under
/// their cluster's name; `cluster` narrows to one cluster.
pub(super) async fn upsynced(state: &ApiState, cluster: Option<String>) -> Response<super::Body> {
    let items = state
        .node
        .query(move |core: &mut NodeCore| {
            core.reports()
                .iter()
                .filter_map(|((_, key), value)| match (key, value) {
                    (ReportKey::Upsynced { cluster: c, object }, ReportValue::Upsynced(body))
                        if cluster.as_ref().is_none_or(|want| want == c) =>
                    {
                        Some(json!({
                            "cluster": c,
                            "key": {
                                "space": object.space.0, "group": object.group,
                                "version": object.version, "kind": object.kind,
                                "namespace": object.namespace, "name": object.name,
                            },
                            "manifest": serde_json::from_slice::<Value>(body).unwrap_or(Value::Null),
                        }))
                    }
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .await;
    match items {
        Some(items) => reply(StatusCode::OK, json!({ "items": items })),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
    }
}

pub(super) async fn status(state: &ApiState) -> Response<super::Body> {
    let now = Clock::start().wall();
    let s = state
        .node
        .query(move |core: &mut NodeCore| {
            let head = core.log().head().0;
            let links: Vec<Value> = core
                .all_links()
                .iter()
                .map(|(node, l)| link_json(node, l))
                .collect();
            json!({ "node": core.name(), "head": head, "now": now.0, "links": links })
        })
        .await;
    match s {
        Some(v) => reply(StatusCode::OK, v),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
    }
}
