//! The inventory and the tier tree: what `relay clusters` and `relay status` show.
//!
//! The root sees its own children's links directly and every deeper link through the
//! link records its relay children report (see [`strata_protocol::wire::LinkRecord`]).

use std::collections::BTreeMap;

use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use strata_protocol::model::Cluster;
use strata_protocol::time::UnixMillis;
use strata_protocol::wire::{LinkRecord, ReportKey, ReportValue, Role};

use super::{ApiState, error, reply};
use crate::node::core::NodeCore;
use strata_node::clock::Clock;

/// Every link the node knows of, by its child end: its own children's, then those its
/// children reported (a child's own record of a link wins over nothing; the node's own
/// view of its direct children wins over anything reported).
pub(crate) fn all_links(core: &NodeCore) -> BTreeMap<String, LinkRecord> {
    let mut links: BTreeMap<String, LinkRecord> = core
        .reports()
        .iter()
        .filter_map(|((_, key), value)| match (key, value) {
            (ReportKey::Link { node }, ReportValue::Link(l)) => Some((node.clone(), l.clone())),
            _ => None,
        })
        .collect();
    links.extend(core.links());
    links
}

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
    })
}

/// Whether a cluster is reachable from this node, and when it was last seen: now when
/// every link on its path is up, else when the first link on its path went down.
pub(crate) fn last_seen(
    cluster: &Cluster,
    links: &BTreeMap<String, LinkRecord>,
    now: UnixMillis,
) -> (bool, Option<u64>) {
    // The cluster's path starts with this node; the links are named by their child end.
    let ends = cluster
        .path
        .iter()
        .skip(1)
        .chain(std::iter::once(&cluster.name));
    let mut seen = Some(now.0);
    let mut reachable = true;
    for end in ends {
        match links.get(end) {
            Some(l) if l.connected => {}
            Some(l) => {
                reachable = false;
                seen = Some(seen.map_or(l.since.0, |s| s.min(l.since.0)));
            }
            None => {
                // A link nobody reported (an older relay below): unknown.
                reachable = false;
                seen = None;
                break;
            }
        }
    }
    (reachable, seen)
}

pub(super) async fn clusters(state: &ApiState) -> Response<super::Body> {
    let now = Clock::start().wall();
    let items = state
        .node
        .query(move |core: &mut NodeCore| {
            let links = all_links(core);
            core.reports()
                .clusters()
                .map(|c| {
                    let (reachable, seen) = last_seen(c, &links, now);
                    json!({
                        "name": c.name, "path": c.path, "labels": c.labels,
                        "properties": c.properties,
                        "reachable": reachable, "lastSeen": seen,
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
            let links: Vec<Value> = all_links(core)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn link(path: &[&str], connected: bool, since: u64) -> LinkRecord {
        LinkRecord {
            path: path.iter().map(|p| (*p).to_owned()).collect(),
            role: Role::Relay,
            connected,
            since: UnixMillis(since),
            last_heard: UnixMillis(since),
            lag: Some(0),
            clusters: 1,
        }
    }

    fn cluster(name: &str, path: &[&str]) -> Cluster {
        Cluster {
            name: name.into(),
            labels: BTreeMap::new(),
            properties: BTreeMap::new(),
            path: path.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    #[test]
    fn a_cluster_behind_a_down_relay_was_last_seen_when_that_link_went_down() {
        let mut links = BTreeMap::new();
        links.insert("eu".to_owned(), link(&["root"], false, 1_000));
        links.insert("site".to_owned(), link(&["root", "eu"], true, 500));
        links.insert("c1".to_owned(), link(&["root", "eu", "site"], true, 600));
        let c = cluster("c1", &["root", "eu", "site"]);
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (false, Some(1_000))
        );
        links.insert("eu".to_owned(), link(&["root"], true, 2_000));
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (true, Some(9_000))
        );
        links.insert("c1".to_owned(), link(&["root", "eu", "site"], false, 7_000));
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (false, Some(7_000))
        );
        links.remove("site");
        assert_eq!(last_seen(&c, &links, UnixMillis(9_000)), (false, None));
    }
}
