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

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};
use strata_protocol::model::{Cluster, Space};
use strata_protocol::time::UnixMillis;
use strata_protocol::wire::{LinkRecord, LinkTransport, Role};

use crate::tier::core::{NodeCore, last_seen};

/// A cluster's state as the view colours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum State {
    Available,
    Behind,
    Unreachable,
}

impl State {
    fn of(reachable: bool, link: Option<&LinkRecord>) -> State {
        if !reachable {
            State::Unreachable
        } else if link.and_then(|l| l.lag).is_some_and(|lag| lag > 0) {
            State::Behind
        } else {
            State::Available
        }
    }

    fn name(self) -> &'static str {
        match self {
            State::Available => "available",
            State::Behind => "behind",
            State::Unreachable => "unreachable",
        }
    }
}

/// Counts over a subtree.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    clusters: u64,
    available: u64,
    behind: u64,
    unreachable: u64,
}

impl Counts {
    fn add(&mut self, s: State) {
        self.clusters += 1;
        match s {
            State::Available => self.available += 1,
            State::Behind => self.behind += 1,
            State::Unreachable => self.unreachable += 1,
        }
    }

    fn json(self) -> Value {
        json!({
            "clusters": self.clusters,
            "available": self.available,
            "behind": self.behind,
            "unreachable": self.unreachable,
        })
    }
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

/// The relays, their subtrees' counts and the fleet's totals (see the module's doc).
pub(super) fn tiers(core: &NodeCore, now: UnixMillis) -> Value {
    let root = core.name().to_owned();
    let links = core.all_links();
    // Relays by name: parent and link (the root has neither).
    let mut relays: BTreeMap<String, (Option<String>, Option<&LinkRecord>)> = BTreeMap::new();
    relays.insert(root.clone(), (None, None));
    for (node, l) in links.iter().filter(|(_, l)| l.role == Role::Relay) {
        relays.insert(
            node.clone(),
            (Some(parent_of(l, &root).to_owned()), Some(l)),
        );
    }
    let mut counts: BTreeMap<&str, Counts> = BTreeMap::new();
    let mut digests: BTreeMap<String, DefaultHasher> = BTreeMap::new();
    let mut own: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = Counts::default();
    for c in core.reports().clusters() {
        let (reachable, _) = last_seen(c, &links, now);
        let link = links.get(&c.name);
        let state = State::of(reachable, link);
        total.add(state);
        // Every relay on its path counts it (the path starts at the root).
        let mut on_path: BTreeSet<&str> = c.path.iter().map(String::as_str).collect();
        on_path.insert(&root);
        for r in on_path {
            counts.entry(r).or_default().add(state);
        }
        let home = home_of(c, &root).to_owned();
        *own.entry(home.clone()).or_default() += 1;
        let h = digests.entry(home).or_default();
        (&c.name, state, &c.labels, &c.properties).hash(h);
        link.map(|l| (l.lag, l.transport.is_some(), l.cert_expires.map(|t| t.0)))
            .hash(h);
    }
    let items: Vec<Value> = relays
        .iter()
        .map(|(name, (parent, link))| {
            json!({
                "name": name,
                "parent": parent,
                "link": link.map(link_json),
                "counts": counts.get(name.as_str()).copied().unwrap_or_default().json(),
                "own": own.get(name).copied().unwrap_or(0),
                "digest": digests.get(name).map(|h| format!("{:016x}", h.finish())),
            })
        })
        .collect();
    json!({
        "root": root,
        "head": core.log().head().0,
        "totals": total.json(),
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
                "state": State::of(reachable, link).name(),
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
