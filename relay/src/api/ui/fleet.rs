//! What the web view shows of the fleet, computed in one turn of the root's core.
//!
//! * [`tiers`]: every relay with its link and its subtree's counts, the whole fleet's
//!   totals, and per relay a digest of its own clusters. This is what the page gets
//!   first and at every change (the event stream), so its size follows the number
//!   of relays, not of clusters: 10,000 clusters under 100 relays are 100 rows.
//! * [`clusters_of`]: one relay's own clusters in full (labels, taints, capacity,
//!   link, what runs there), fetched when the page opens that relay, and again only
//!   when that relay's digest changes.
//!
//! A cluster is in exactly one of three states: `unreachable` (some link between the
//! root and it is down, or unknown), `behind` (reachable, but its agent has not yet
//! taken the newest revision routed to it: its link's lag is above 0), or
//! `available` (reachable and current).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use strata_protocol::model::{Cluster, Space};
use strata_protocol::time::UnixMillis;
use strata_protocol::wire::{LinkPath, LinkRecord, LinkTransport};

use crate::tier::core::{NodeCore, last_seen};
use crate::tier::reports::{ClusterState, Counts};

fn counts_json(c: Counts) -> Value {
    json!({
        "clusters": c.clusters,
        "available": c.available,
        "behind": c.behind,
        "unreachable": c.unreachable,
    })
}

fn link_json(l: &LinkRecord) -> Value {
    json!({
        "connected": l.connected,
        "since": l.since.0,
        "lastHeard": l.last_heard.0,
        "lag": l.lag,
        "certExpires": l.cert_expires.map(|t| t.0),
        "transport": l.transport.map(|t| match t {
            LinkTransport::Quic => "quic",
            LinkTransport::Tcp => "tcp",
        }),
        "via": l.via.map(LinkPath::name),
    })
}

/// The relay a link's child end hangs under: the last relay of its path, or the root
/// for the root's own links.
fn parent_of<'a>(l: &'a LinkRecord, root: &'a str) -> &'a str {
    l.path.last().map_or(root, String::as_str)
}

/// The relay a cluster reports to directly.
fn home_of<'a>(c: &'a Cluster, root: &'a str) -> &'a str {
    c.path.last().map_or(root, String::as_str)
}

/// The relays, their subtrees' counts and the fleet's totals (see the module's doc),
/// from the counts the core keeps as reports arrive
/// ([`NodeCore::tier_counts`]): the work follows the relays, not the clusters.
pub(super) fn tiers(core: &mut NodeCore) -> Value {
    let root = core.name().to_owned();
    let head = core.log().head().0;
    let counts = core.tier_counts();
    let tally = counts.tally();
    // Relays by name: parent and link (the root has neither).
    let mut relays: BTreeMap<&str, (Option<&str>, Option<&LinkRecord>)> = BTreeMap::new();
    relays.insert(&root, (None, None));
    for (node, l) in counts.relay_links() {
        relays.insert(node, (Some(parent_of(l, &root)), Some(l)));
    }
    // The clusters that report to a relay directly: those whose path ends with it,
    // and for the root also those with no path at all (the tally's `None`).
    let homes = |name: &str| -> Vec<Option<String>> {
        let mut h = vec![Some(name.to_owned())];
        if name == root {
            h.push(None);
        }
        h
    };
    let items: Vec<Value> = relays
        .iter()
        .map(|(name, (parent, link))| {
            // Every cluster is below the root, whether or not its path names it.
            let below = if *name == root {
                tally.total
            } else {
                tally.below.get(*name).copied().unwrap_or_default()
            };
            let own: u64 = homes(name).iter().filter_map(|h| tally.own.get(h)).sum();
            let digest = homes(name)
                .iter()
                .filter_map(|h| tally.digests.get(h).copied())
                .reduce(u64::wrapping_add);
            json!({
                "name": name,
                "parent": parent,
                "link": link.map(link_json),
                "counts": counts_json(below),
                "own": own,
                "digest": digest.map(|d| format!("{d:016x}")),
            })
        })
        .collect();
    json!({
        "root": root,
        "head": head,
        "totals": counts_json(tally.total),
        "relays": items,
    })
}

/// The placements of `space` routed to each cluster (chosen, or being moved off).
fn placements(core: &NodeCore, space: &Space) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for ((s, name), p) in core.plans() {
        if s != space {
            continue;
        }
        for c in &p.plan.chosen {
            out.entry(c.clone())
                .or_default()
                .push(json!({ "placement": name, "state": "chosen" }));
        }
        for c in &p.retiring {
            out.entry(c.clone())
                .or_default()
                .push(json!({ "placement": name, "state": "retiring" }));
        }
    }
    out
}

/// `relay`'s own clusters in full, with the space's taints and placements.
pub(super) fn clusters_of(core: &NodeCore, relay: &str, space: &Space, now: UnixMillis) -> Value {
    let root = core.name().to_owned();
    let links = core.all_links();
    let taints = crate::kube::clusters::taints(core, space);
    let routed = placements(core, space);
    let items: Vec<Value> = core
        .reports()
        .clusters()
        .filter(|c| home_of(c, &root) == relay)
        .map(|c| {
            let effective = core.reports().effective(c);
            let (reachable, seen) = last_seen(c, &links, now);
            let link = links.get(&c.name);
            json!({
                "name": c.name,
                "path": c.path,
                "state": ClusterState::of(reachable, link).name(),
                "labels": effective.labels,
                "properties": c.properties,
                "lastSeen": seen,
                "link": link.map(link_json),
                "taints": taints.get(&c.name).cloned().unwrap_or(json!([])),
                "placements": routed.get(&c.name).cloned().unwrap_or_default(),
            })
        })
        .collect();
    json!({ "relay": relay, "space": space.0, "items": items })
}
