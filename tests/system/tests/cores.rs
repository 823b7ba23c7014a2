//! Relay and agent cores wired in a tree in virtual time, without sockets (the fixture
//! is `tree/`): routing by placement, labels inherited from ancestors (also when they
//! arrive after the children connected), summaries and link records reaching the root,
//! an agent keeping its state while its relay is gone, a full disk acknowledging
//! nothing, compaction bounded by what children acknowledged, and a relay restarted on
//! its store resyncing only the delta and serving its subtree without its parent.

#![allow(clippy::unwrap_used)]

use crate::tree;

use std::time::Duration;

use strata_protocol::model::{ObjectKey, Space};
use strata_protocol::route::{PLACEMENT_KIND, STRATA_GROUP};
use strata_protocol::summary::Summary;
use strata_protocol::wire::{Change, ReportKey, ReportValue, Role};
use tree::{Tree, labels};

/// A deployment placed on the point-of-sale clusters of region eu.
const WEB_EU: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { replicas: 2 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: web }
spec:
  objects: [ { selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { region: eu, role: pos } } }
";

/// Two regions; eu has a point of sale and a kiosk, us a point of sale.
pub(crate) fn two_regions() -> Tree {
    Tree::builder()
        .root("center")
        .relay("eu", "center", labels! { region: eu })
        .relay("us", "center", labels! { region: us })
        .agent("eu-pos", "eu", labels! { role: pos })
        .agent("eu-kiosk", "eu", labels! { role: kiosk })
        .agent("us-pos", "us", labels! { role: pos })
        .build()
}

fn holds_web(t: &Tree, agent: &str) -> bool {
    t.held(agent)
        .keys()
        .any(|k| k.kind == "Deployment" && k.name == "web")
}

fn web_key(t: &Tree) -> ObjectKey {
    let root = t.relay("center");
    let web = root.log().live().find(|o| o.key().kind == "Deployment");
    web.unwrap().key().clone()
}

/// The root's summary of the deployment `web` under its placement `web`.
fn web_summary(t: &Tree) -> Summary {
    let root = t.relay("center");
    let placement = root.placements().iter().find(|p| p.name == "web").unwrap();
    root.reports()
        .summarize(placement, &web_key(t), root.root_view())
}

#[test]
fn objects_reach_only_the_clusters_a_placement_selects() {
    let mut t = two_regions();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    // Inventory reaches the root before anything is placed.
    assert_eq!(t.relay("center").reports().clusters().count(), 3);

    t.apply(WEB_EU);
    t.advance(Duration::from_secs(1));
    assert!(holds_web(&t, "eu-pos"));
    // Unselected clusters receive nothing, not even the placement (agents do not route).
    for other in ["eu-kiosk", "us-pos"] {
        assert!(
            t.held(other).is_empty(),
            "unselected cluster {other} received {:?}",
            t.held(other)
        );
    }
    let eu_has_placement = t
        .relay("eu")
        .log()
        .live()
        .any(|o| o.key().group == STRATA_GROUP && o.key().kind == PLACEMENT_KIND);
    assert!(eu_has_placement, "relays route with the placements");
    // The us relay is not even sent the deployment: routing, not copying.
    assert!(
        !t.relay("us")
            .log()
            .live()
            .any(|o| o.key().kind == "Deployment")
    );
}

/// A label set on a regional relay selects every cluster below it, through the site
/// relays that never had it in their own configuration.
#[test]
fn labels_inherited_from_a_region_select_clusters_at_every_tier() {
    let mut t = Tree::builder()
        .root("center")
        .relay("eu", "center", labels! { region: eu })
        .relay("eu-1", "eu", labels! {})
        .relay("eu-2", "eu", labels! {})
        .agent("eu-1-a", "eu-1", labels! { role: store })
        .agent("eu-1-b", "eu-1", labels! { role: store })
        .agent("eu-2-a", "eu-2", labels! { role: store })
        .agent("eu-2-b", "eu-2", labels! { role: store })
        .relay("us", "center", labels! { region: us })
        .agent("us-a", "us", labels! { role: store })
        .build();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    assert_eq!(
        t.relay("center").reports().clusters().count(),
        5,
        "the root knows every cluster"
    );
    t.apply(
        "
apiVersion: v1
kind: ConfigMap
metadata: { name: settings, namespace: shop, labels: { app: shop } }
data: { a: b }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: shop }
spec:
  objects: [ { selector: { matchLabels: { app: shop } } } ]
  clusters: { selector: { matchLabels: { region: eu } } }
",
    );
    t.advance(Duration::from_secs(1));
    for agent in ["eu-1-a", "eu-1-b", "eu-2-a", "eu-2-b"] {
        assert_eq!(t.held(agent).len(), 1, "{agent} holds the config map");
    }
    assert!(t.held("us-a").is_empty(), "us-a is not in region eu");
}

/// Nodes started children first: each relay learns its ancestors' labels only after its
/// own children connected, and must pass them on (commit 50afc11).
#[test]
fn labels_learned_after_the_children_connected_reach_the_grandchildren() {
    let mut t = Tree::builder()
        .root("center")
        .labels(labels! { fleet: acme })
        .relay("emea", "center", labels! { continent: emea })
        .relay("fr", "emea", labels! { country: fr })
        .relay("paris", "fr", labels! { store: paris })
        .agent("paris-pos", "paris", labels! { role: pos })
        .agent("paris-kiosk", "paris", labels! { role: kiosk })
        .build();
    // Children first: the store relay welcomes its agents, the country relay its store,
    // the continent relay its country, before anyone above them is connected.
    t.connect_in(&["paris-pos", "paris-kiosk", "paris", "fr", "emea"]);
    t.apply(&WEB_EU.replace(
        "region: eu, role: pos",
        "fleet: acme, continent: emea, country: fr, role: pos",
    ));
    t.advance(Duration::from_secs(2));
    assert!(
        holds_web(&t, "paris-pos"),
        "the store relay routed with labels it learned late"
    );
    assert!(t.held("paris-kiosk").is_empty());
}

#[test]
fn summaries_and_link_records_of_the_whole_tree_reach_the_root() {
    let mut t = two_regions();
    t.connect_all();
    t.apply(&WEB_EU.replace("region: eu, role: pos", "role: pos"));
    t.advance(Duration::from_secs(2));
    let s = web_summary(&t);
    assert_eq!((s.expected, s.health.available), (2, 2), "{s:?}");
    assert_eq!(s.numbers["readyReplicas"].sum, 4, "{s:?}");
    let root = t.relay("center");

    // The root's own children's links: up, caught up, and how many clusters below.
    let own: Vec<_> = root.links();
    let record = |name: &str| own.iter().find(|(n, _)| n == name).unwrap().1.clone();
    for (relay, clusters) in [("eu", 2), ("us", 1)] {
        let r = record(relay);
        assert!(r.connected && r.role == Role::Relay, "{relay}: {r:?}");
        assert_eq!((r.lag, r.clusters), (Some(0), clusters), "{relay}: {r:?}");
    }
    // The links below, as the relays report them.
    let below: Vec<_> = root
        .reports()
        .iter()
        .filter_map(|((_, k), v)| match (k, v) {
            (ReportKey::Link { node }, ReportValue::Link(l)) => Some((node.clone(), l.clone())),
            _ => None,
        })
        .collect();
    for (agent, relay) in [("eu-pos", "eu"), ("eu-kiosk", "eu"), ("us-pos", "us")] {
        let (_, r) = below.iter().find(|(n, _)| n == agent).unwrap();
        assert!(r.connected && r.role == Role::Agent, "{agent}: {r:?}");
        // The path grows on the way up: each relay puts itself first.
        let path = ["center".to_owned(), relay.to_owned()];
        assert_eq!((r.path.as_slice(), r.clusters), (path.as_slice(), 1));
    }

    // A region cut off shows as down at the root, since when it went.
    let cut_at = t.now();
    t.cut("eu");
    t.advance(Duration::from_millis(500));
    let r = t
        .relay("center")
        .links()
        .into_iter()
        .find(|(n, _)| n == "eu")
        .unwrap()
        .1;
    assert!(!r.connected, "{r:?}");
    assert_eq!(r.since.0, cut_at.since_origin().as_millis() as u64);
}

/// A placement of one name in two spaces, each selecting other clusters of one region:
/// the region's relay summarizes each over its own clusters (it keeps a selection per
/// space and placement across its ticks), and neither placement takes back the summary
/// the other sent (they were keyed by name alone, and the second sent `Removed` for
/// the first's object).
#[test]
fn placements_of_one_name_in_two_spaces_are_summarized_apart() {
    let mut t = two_regions();
    t.connect_all();
    let other = Space("other".into());
    t.apply(&WEB_EU.replace("region: eu, role: pos", "role: pos"));
    t.apply_in(
        &other,
        &WEB_EU.replace("region: eu, role: pos", "role: kiosk"),
    );
    t.advance(Duration::from_secs(2));
    let root = t.relay("center");
    for (space, expected) in [(Space::default_space(), 2), (other, 1)] {
        let placement = root
            .placements()
            .iter()
            .find(|p| p.name == "web" && p.space == space)
            .unwrap();
        let web = root
            .log()
            .live()
            .find(|o| o.key().kind == "Deployment" && o.key().space == space)
            .unwrap()
            .key()
            .clone();
        let s = root.reports().summarize(placement, &web, root.root_view());
        assert_eq!(
            (s.expected, s.health.available),
            (expected, expected),
            "{}: {s:?}",
            space.0
        );
    }
}

/// The relay above an agent goes away: the agent keeps its cluster as it was, and
/// takes up where it was once the relay is back.
#[test]
fn an_agent_keeps_its_desired_state_while_its_relay_is_gone() {
    let mut t = two_regions();
    t.connect_all();
    t.apply(WEB_EU);
    t.advance(Duration::from_secs(1));
    let held = t.held("eu-pos");
    assert_eq!(held.len(), 1);
    t.crash("eu");
    t.advance(Duration::from_secs(3));
    assert!(!t.agent("eu-pos").connected());
    assert_eq!(
        t.held("eu-pos"),
        held,
        "the agent dropped its desired state when its parent left"
    );
    t.restart("eu");
    t.advance(Duration::from_secs(1));
    assert!(t.agent("eu-pos").connected());
    assert_eq!(t.held("eu-pos"), held);
}

/// An agent serves no child, so it keeps no tombstone and no visibility history: an
/// object placed on it and taken off again and again leaves nothing behind, in its log
/// or in its store.
#[test]
fn an_agent_keeps_no_tombstone_and_no_history() {
    let mut t = two_regions();
    t.connect_all();
    let retired = WEB_EU.replace("labels: { app: web } }", "labels: { app: retired } }");
    assert_ne!(retired, WEB_EU);
    for _ in 0..5 {
        t.apply(WEB_EU);
        t.advance(Duration::from_secs(1));
        assert!(holds_web(&t, "eu-pos"));
        t.apply(&retired);
        t.advance(Duration::from_secs(1));
        assert!(!holds_web(&t, "eu-pos"), "the retired deployment stayed");
    }
    let log = t.agent("eu-pos").log();
    assert_eq!(log.floor(), log.head(), "the agent compacted nothing");
    let dead: Vec<_> = log
        .entries()
        .filter(|(_, e)| e.object().is_none())
        .collect();
    assert!(dead.is_empty(), "tombstones kept in memory: {dead:?}");
    let stored = strata_node::store::Store::load(t.store("eu-pos")).unwrap();
    assert_eq!(
        stored.entries.len(),
        log.live_len(),
        "the store holds what the log holds"
    );
    let dead: Vec<_> = stored
        .entries
        .iter()
        .filter(|(_, e)| e.object().is_none())
        .collect();
    assert!(dead.is_empty(), "tombstones kept in the store: {dead:?}");
}

/// A tree with nothing changing writes nothing: heartbeats, summaries and timers go
/// on, but no node commits to its store (an edge device's flash wears with every
/// write; before, every turn rewrote the log's unchanged meta and flushed).
#[test]
fn an_idle_tree_writes_nothing() {
    let mut t = two_regions();
    t.connect_all();
    t.apply(WEB_EU);
    t.advance(Duration::from_secs(5));
    assert!(holds_web(&t, "eu-pos"));
    let nodes = ["center", "eu", "us", "eu-pos", "eu-kiosk", "us-pos"];
    let before: Vec<u64> = nodes.iter().map(|n| t.store(n).commits()).collect();
    assert!(
        before.iter().all(|&c| c > 0),
        "a node never committed: {before:?}"
    );
    t.advance(Duration::from_secs(120));
    let after: Vec<u64> = nodes.iter().map(|n| t.store(n).commits()).collect();
    let wrote: Vec<_> = nodes
        .iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (b, a))| a > b)
        .map(|(n, (b, a))| format!("{n}: {} commits", a - b))
        .collect();
    assert!(wrote.is_empty(), "idle for 2 minutes, yet {wrote:?}");
}

/// A relay whose disk is full acknowledges and forwards nothing it could not store,
/// and delivers everything once there is room again.
#[test]
fn a_full_disk_acknowledges_nothing_until_it_writes_again() {
    let mut t = two_regions();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    let acked = |t: &Tree| {
        let root = t.relay("center");
        let eu = root.children().find(|(n, _)| *n == "eu");
        eu.and_then(|(_, c)| c).unwrap().position
    };
    let before = acked(&t);
    t.disk_full("eu", true);
    let rev = t.apply(WEB_EU);
    t.advance(Duration::from_secs(2));
    let stored = strata_node::store::Store::load(t.store("eu")).unwrap();
    assert!(stored.entries.is_empty(), "the full store took entries");
    assert!(acked(&t) < rev, "eu acknowledged what it could not write");
    assert_eq!(acked(&t), before);
    assert!(
        t.held("eu-pos").is_empty(),
        "forwarded what it could not store"
    );

    t.disk_full("eu", false);
    t.advance(Duration::from_secs(1));
    assert!(acked(&t) >= rev);
    assert!(
        holds_web(&t, "eu-pos"),
        "the change reached eu-pos once eu could write"
    );
    // What could not be written then is on disk now: the failed batch was kept.
    let stored = strata_node::store::Store::load(t.store("eu")).unwrap();
    assert!(
        stored
            .entries
            .iter()
            .any(|(k, e)| k.kind == "Deployment" && e.object().is_some()),
        "the write refused by the full disk was lost"
    );
}

#[test]
fn compaction_keeps_the_history_a_cut_off_child_acknowledged() {
    let mut t = two_regions();
    t.connect_all();
    t.apply(WEB_EU);
    t.advance(Duration::from_secs(1));
    // Everyone acknowledged everything: nothing below the head is kept for them.
    let root = t.relay("center");
    assert_eq!(root.log().floor(), root.log().head(), "nothing compacted");

    t.cut("us");
    let stored = strata_node::store::Store::load(t.store("center")).unwrap();
    let us_acked = stored.child_acks["us"].position;
    for i in 0..20 {
        t.apply(&WEB_EU.replace("replicas: 2", &format!("replicas: {}", 3 + i)));
        t.advance(Duration::from_millis(100));
    }
    let root = t.relay("center");
    assert!(root.log().head() > us_acked);
    assert_eq!(
        root.log().floor(),
        us_acked,
        "compaction is bounded by what the cut-off child acknowledged"
    );

    t.restore("us");
    t.advance(Duration::from_secs(2));
    assert!(t.held("us-pos").is_empty());
    let root = t.relay("center");
    let us = root
        .children()
        .find(|(n, _)| *n == "us")
        .and_then(|(_, c)| c);
    assert_eq!(
        us.map(|c| c.position),
        Some(root.log().head()),
        "us caught up after the cut and acknowledged it"
    );
    assert_eq!(
        root.log().floor(),
        root.log().head(),
        "and the history went"
    );
}

/// The root keeps a window of history for watches whatever its children acknowledged:
/// a delete inside the window keeps its tombstone (a watch from before it sees it go),
/// and only what lies below the window is compacted; a relay keeps no such window.
#[test]
fn the_root_keeps_a_window_of_history_for_watches() {
    let mut t = Tree::builder()
        .root("center")
        .watch_history(5)
        .relay("eu", "center", labels! { region: eu })
        .agent("eu-pos", "eu", labels! { role: pos })
        .build();
    t.connect_all();
    for i in 0..20 {
        t.apply(&WEB_EU.replace("replicas: 2", &format!("replicas: {}", 3 + i)));
        t.advance(Duration::from_millis(100));
    }
    let web = web_key(&t);
    t.relay_mut("center")
        .apply(vec![Change::Delete(web.clone())])
        .unwrap();
    t.advance(Duration::from_secs(1));
    let root = t.relay("center");
    let head = root.log().head();
    assert_eq!(
        t.relay("eu").log().floor(),
        t.relay("eu").log().head(),
        "everyone acknowledged everything"
    );
    assert_eq!(root.log().floor().0, head.0 - 5, "five positions kept");
    assert!(
        root.log().entry(&web).is_some_and(|e| e.object().is_none()),
        "the tombstone of the delete inside the window is kept"
    );
}

/// A site relay that restarts from its store is sent only what changed while it was
/// away, not a relist; and while the root is unreachable it keeps serving its subtree
/// from its cache, even to a cluster that joins with nothing.
#[test]
fn a_restarted_relay_resyncs_only_the_delta_and_serves_from_cache_without_its_parent() {
    let mut t = Tree::builder()
        .root("center")
        .relay("site-1", "center", labels! {})
        .agent("pos-1", "site-1", labels! { role: pos })
        .agent("pos-2", "site-1", labels! { role: pos })
        .build();
    t.connect_in(&["site-1", "pos-1"]);
    // Forty objects of 8 KiB each.
    let many = |version: u32, only: Option<u32>| {
        let mut text = String::from(
            "apiVersion: strata.dev/v1alpha1\nkind: Placement\nmetadata: { name: bulk }\nspec:\n  objects: [ { selector: { matchLabels: { app: bulk } } } ]\n  clusters: { selector: { matchLabels: { role: pos } } }\n",
        );
        for i in 0..40u32 {
            let v = if only.is_none_or(|o| o == i) {
                version
            } else {
                1
            };
            text.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: cm-{i}, namespace: bulk, labels: {{ app: bulk }} }}\ndata: {{ v: \"{v}\", blob: \"{}\" }}\n",
                "x".repeat(8192)
            ));
        }
        text
    };
    t.apply(&many(1, None));
    t.advance(Duration::from_secs(1));
    assert_eq!(t.held("pos-1").len(), 40, "pos-1 holds the forty objects");
    let full = t.bytes_down("site-1");

    // The site goes away; one object changes; the site comes back on its store.
    t.crash("site-1");
    let rev = t.apply(&many(2, Some(7)));
    t.restart("site-1");
    t.advance(Duration::from_secs(1));
    let cm7 = t
        .relay("site-1")
        .log()
        .live()
        .find(|o| o.key().name == "cm-7");
    assert_eq!(cm7.map(|o| o.revision.0), Some(rev.0), "the site caught up");
    let resync = t.bytes_down("site-1") - full;
    assert!(
        resync < full / 4,
        "the resync sent {resync} bytes; the first sync of everything took {full}"
    );

    // The root becomes unreachable; a new cluster joins the site with nothing and is
    // served from the site's cache.
    t.crash("center");
    t.connect("pos-2");
    t.advance(Duration::from_secs(1));
    assert_eq!(
        t.held("pos-2").len(),
        40,
        "pos-2 got all forty objects from the site alone"
    );
}

/// A regional relay that lost its disk comes back knowing none of its subtree and
/// says at once that it has reported everything; its agents come back after it. The
/// root keeps the region's clusters meanwhile, so the relay's rebuilt log holds every
/// object placed below it and no agent removes a workload from its cluster.
#[test]
fn a_relay_that_lost_its_disk_rebuilds_without_its_agents_removing_anything() {
    let mut t = two_regions();
    t.connect_in(&["eu", "us", "eu-pos", "eu-kiosk", "us-pos"]);
    t.apply(WEB_EU);
    t.advance(Duration::from_secs(1));
    assert!(holds_web(&t, "eu-pos"));
    let deletes = t.agent("eu-pos").stats().deletes;

    t.crash("eu");
    t.cut("eu-pos");
    t.cut("eu-kiosk");
    t.lose_disk("eu");
    t.restart("eu");
    // The relay has caught up with the root and reported everything it knows
    // (nothing) before its agents reconnect.
    t.advance(Duration::from_secs(1));
    assert!(
        t.relay("eu").log().live().any(|o| o.key().name == "web"),
        "the rebuilt log holds what is placed below eu"
    );
    t.restore("eu-pos");
    t.restore("eu-kiosk");
    t.advance(Duration::from_secs(1));
    assert!(t.connected("eu-pos") && t.connected("eu-kiosk"));
    assert!(holds_web(&t, "eu-pos"));
    assert_eq!(
        t.agent("eu-pos").stats().deletes,
        deletes,
        "eu-pos removed nothing from its cluster"
    );
    let root = t.relay("center");
    let clusters: Vec<&str> = root.reports().clusters().map(|c| c.name.as_str()).collect();
    assert_eq!(clusters, ["eu-kiosk", "eu-pos", "us-pos"]);
}

/// Two changes of an agent's desired state that the network delivers together: the
/// first takes the app away (its placement stops selecting the cluster), the second
/// brings it back at the same revision. The agent's one batch deletes and re-applies
/// it; the cluster keeps the app, and so must the root's count of where it is
/// available (a `Removed` for its status, with no new status after the no-op
/// re-apply, left it one cluster short for good).
#[test]
fn a_removal_undone_within_one_batch_keeps_the_clusters_status() {
    let mut t = two_regions();
    t.connect_all();
    t.apply(WEB_EU);
    t.advance(Duration::from_secs(2));
    let available = |t: &Tree| {
        let s = web_summary(t);
        (s.expected, s.health.available)
    };
    assert_eq!(available(&t), (1, 1));

    // eu-pos's link holds everything back while the app goes and comes back.
    t.set_latency("eu-pos", Duration::from_secs(3600));
    t.apply(&WEB_EU.replace("region: eu, role: pos", "region: eu, role: none"));
    t.advance(Duration::from_secs(1));
    t.apply(WEB_EU);
    t.advance(Duration::from_secs(1));
    t.set_latency("eu-pos", Duration::ZERO);
    let deletes = t.agent("eu-pos").stats().deletes;
    let snapshots = t.agent("eu-pos").snapshots_received();
    t.deliver_together("eu-pos");
    t.advance(Duration::from_secs(2));
    assert_eq!(
        t.agent("eu-pos").snapshots_received(),
        snapshots + 2,
        "both changes (each a new route, so a snapshot) reached eu-pos together"
    );
    assert!(holds_web(&t, "eu-pos"));
    assert_eq!(
        t.agent("eu-pos").stats().deletes,
        deletes,
        "nothing was removed"
    );
    assert_eq!(available(&t), (1, 1), "the root still counts eu-pos");
}

/// The fixture itself: a tree that does not settle within the bound fails, naming
/// what kept going.
#[test]
#[should_panic(
    expected = "did not settle within 3 steps: at 15ms, busiest [\"eu -> x3\", \"center x2\", \"eu x2\""
)]
fn a_tree_that_does_not_settle_fails_naming_what_kept_going() {
    let mut t = two_regions();
    t.connect("eu");
    t.drive_bounded(3);
}

/// A `Cluster` object at the root (what `kubectl label cluster` stores) changes the
/// labels every tier routes with: the app leaves the relabelled cluster's region and
/// reaches a cluster of the other region, whose relay never saw its own labels change.
/// The change takes effect at the root while the cluster's region is cut off, and the
/// cluster object never reaches an agent.
#[test]
fn cluster_labels_changed_at_the_root_move_workloads_at_every_tier() {
    let mut t = two_regions();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    t.apply(WEB_EU);
    t.advance(Duration::from_secs(1));
    assert!(holds_web(&t, "eu-pos"));
    assert!(!holds_web(&t, "us-pos"));

    // us-pos joins region eu in this space; eu-pos leaves it.
    t.apply(
        "
apiVersion: strata.dev/v1alpha1
kind: Cluster
metadata: { name: us-pos }
status: { labelOverrides: { set: { region: eu } } }
---
apiVersion: strata.dev/v1alpha1
kind: Cluster
metadata: { name: eu-pos }
status: { labelOverrides: { remove: [region] } }
",
    );
    t.advance(Duration::from_secs(1));
    assert!(
        holds_web(&t, "us-pos"),
        "the relabelled cluster gets the app"
    );
    assert!(
        !holds_web(&t, "eu-pos"),
        "the cluster relabelled away loses it"
    );
    for agent in ["eu-pos", "eu-kiosk", "us-pos"] {
        assert!(
            !t.held(agent).keys().any(|k| k.kind == "Cluster"),
            "{agent} was sent a cluster object"
        );
    }
    // The relays hold the cluster objects: they route with them.
    assert!(
        t.relay("us")
            .log()
            .live()
            .any(|o| o.key().kind == "Cluster")
    );

    // While us is cut off, dropping the change moves the app back at once at the root
    // (us's route no longer includes it), and us follows when it returns.
    t.cut("us");
    t.apply(
        "
apiVersion: strata.dev/v1alpha1
kind: Cluster
metadata: { name: us-pos }
status: { labelOverrides: {} }
",
    );
    t.advance(Duration::from_secs(1));
    let root = t.relay("center");
    let web = web_key(&t);
    let expected: u64 = root
        .placements()
        .iter()
        .map(|p| root.reports().summarize(p, &web, root.root_view()).expected)
        .sum();
    assert_eq!(expected, 0, "the root expects the app on no cluster now");
    t.restore("us");
    t.advance(Duration::from_secs(5));
    assert!(!holds_web(&t, "us-pos"));
    assert!(!holds_web(&t, "eu-pos"), "eu-pos still has no region here");
}

/// A `NoExecute` taint on `cluster` (its Cluster object at the root): what drains it.
pub(crate) fn no_execute(cluster: &str) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1\nkind: Cluster\nmetadata: {{ name: {cluster} }}\nspec: {{ taints: [ {{ key: maintenance, effect: NoExecute }} ] }}\n"
    )
}

/// A placement on one point-of-sale cluster of two.
const ONE_POS: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { replicas: 2 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: web }
spec:
  objects: [ { selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { role: pos } }, count: 1 }
";

/// Drains the cluster that holds the app (a `NoExecute` taint on its Cluster object)
/// and samples, every 10 ms of virtual time, on how many clusters the root's summary
/// shows the app available. Returns the cluster drained, the other one, and the
/// fewest seen.
fn drain_and_sample(strategy: &str) -> (String, String, usize) {
    let mut t = two_regions();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    t.apply(&ONE_POS.replace("count: 1 }", &format!("count: 1 }}\n  move: {strategy}")));
    t.advance(Duration::from_secs(1));
    let holders = |t: &Tree| {
        ["eu-pos", "us-pos"]
            .into_iter()
            .filter(|a| holds_web(t, a))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let before = holders(&t);
    assert_eq!(before.len(), 1, "count 1: one cluster holds it: {before:?}");
    let drained = before[0].clone();
    let other = if drained == "eu-pos" {
        "us-pos"
    } else {
        "eu-pos"
    }
    .to_owned();
    t.apply(&no_execute(&drained));
    // What users see: the root's summary of where the app is available.
    let available = |t: &Tree| {
        let root = t.relay("center");
        let web = web_key(t);
        root.placements()
            .iter()
            .map(|p| {
                root.reports()
                    .summarize(p, &web, root.root_view())
                    .health
                    .available
            })
            .sum::<u64>() as usize
    };
    let mut fewest = usize::MAX;
    for _ in 0..300 {
        t.advance(Duration::from_millis(10));
        fewest = fewest.min(available(&t));
    }
    assert_eq!(
        holders(&t),
        std::slice::from_ref(&other),
        "the app moved off {drained}"
    );
    (drained, other, fewest)
}

/// Make-before-break: while the app moves off a drained cluster, the root's summary
/// shows it available somewhere at every moment; the drained one lets go once the new
/// one is available. Break
/// before make, sampled the same way, shows the window the default avoids.
#[test]
fn a_drain_moves_the_app_make_before_break() {
    let (_, _, fewest) = drain_and_sample("makeBeforeBreak");
    assert_eq!(fewest, 1, "no moment without the app");
    let (_, _, fewest) = drain_and_sample("breakBeforeMake");
    assert_eq!(
        fewest, 0,
        "break before make leaves a window (the sampling sees it)"
    );
}

/// The placement's decision is visible at the root: chosen of matching, and why the
/// other matching cluster was left out.
#[test]
fn the_root_says_what_it_chose_and_why() {
    let mut t = two_regions();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    t.apply(ONE_POS);
    t.advance(Duration::from_secs(1));
    let root = t.relay("center");
    let plans = root.plans();
    let plan = &plans.values().next().unwrap().plan;
    assert_eq!((plan.chosen.len(), plan.matching), (1, 2));
    assert_eq!(
        plan.excluded
            .values()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["count reached"]
    );
    // The kiosk never matched: it is not "excluded".
    assert!(!plan.excluded.contains_key("eu-kiosk"));
}

/// `failoverAfter`: a chosen cluster cut off for longer is replaced by another matching
/// one (not sooner); when it comes back, the choice stays where it moved (stable) and
/// the returning cluster lets go of the app.
#[test]
fn a_cluster_unreachable_past_failover_after_is_replaced() {
    let mut t = two_regions();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    t.apply(&ONE_POS.replace("count: 1 }", "count: 1, failoverAfter: 30s }"));
    t.advance(Duration::from_secs(1));
    let holder = ["eu-pos", "us-pos"]
        .into_iter()
        .find(|a| holds_web(&t, a))
        .unwrap();
    let other = if holder == "eu-pos" {
        "us-pos"
    } else {
        "eu-pos"
    };
    t.cut(holder);
    t.advance(Duration::from_secs(20));
    assert!(
        !holds_web(&t, other),
        "replaced before failoverAfter passed"
    );
    t.advance(Duration::from_secs(20));
    assert!(
        holds_web(&t, other),
        "{other} took over after failoverAfter"
    );
    let root = t.relay("center");
    let plan = &root.plans().values().next().unwrap().plan;
    assert_eq!(plan.chosen.iter().collect::<Vec<_>>(), [other]);
    assert_eq!(
        plan.excluded
            .get(holder)
            .map(ToString::to_string)
            .as_deref(),
        Some("unreachable longer than failoverAfter")
    );
    t.restore(holder);
    t.advance(Duration::from_secs(5));
    assert!(holds_web(&t, other), "the choice stays where it moved");
    assert!(!holds_web(&t, holder), "{holder} lets go once back");
}
