//! Where an app can be reached, in virtual time (cores wired in a `tree/`): agents
//! report a LoadBalancer Service's address, every relay holds its subtree's, the root
//! serves them per placement, and DNS (the relay's `dns_targets`) follows a
//! make-before-break move: the new cluster's address once it is Available, the old one
//! left out while it drains and before its copy goes.

#![allow(clippy::unwrap_used)]

use crate::tree;

use std::net::IpAddr;
use std::time::Duration;

use crate::cores::{no_execute, two_regions};
use strata_agent::simulated::simulated_address;
use strata_protocol::model::ObjectKey;
use tree::Tree;

/// A Service of type LoadBalancer with its Deployment on one point-of-sale cluster.
const SHOP: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { replicas: 2 }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { type: LoadBalancer, ports: [ { name: http, port: 80 } ] }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: web }
spec:
  objects: [ { selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { role: pos } }, count: 1 }
";

fn service(t: &Tree) -> ObjectKey {
    let root = t.relay("center");
    let svc = root.log().live().find(|o| o.key().kind == "Service");
    svc.unwrap().key().clone()
}

fn holds_service(t: &Tree, agent: &str) -> bool {
    t.held(agent)
        .keys()
        .any(|k| k.kind == "Service" && k.name == "web")
}

/// The address a cluster's simulated load balancer has.
fn address(t: &Tree, cluster: &str) -> IpAddr {
    let root = t.relay("center");
    let (_, c) = root
        .reports()
        .inventory()
        .find(|(_, c)| c.name == cluster)
        .unwrap();
    simulated_address(c).parse().unwrap()
}

/// A tree with the shop placed and available: the cluster that holds it, the other.
fn placed(drain: Duration) -> (Tree, &'static str, &'static str) {
    let mut t = two_regions();
    t.relay_mut("center").set_drain(drain);
    t.connect_all();
    t.advance(Duration::from_millis(500));
    t.apply(SHOP);
    t.advance(Duration::from_secs(2));
    if holds_service(&t, "eu-pos") {
        (t, "eu-pos", "us-pos")
    } else {
        (t, "us-pos", "eu-pos")
    }
}

fn dns(t: &Tree, relay: &str) -> Vec<IpAddr> {
    let key = service(t);
    t.relay(relay).dns_targets(&key).addresses
}

#[test]
fn the_root_and_the_relays_know_where_the_service_is_reached() {
    let (t, holder, _) = placed(Duration::ZERO);
    let (region, other) = if holder == "eu-pos" {
        ("eu", "us")
    } else {
        ("us", "eu")
    };
    let key = service(&t);
    let root = t.relay("center");
    let per_placement = root.service_endpoints(&key);
    assert_eq!(per_placement.len(), 1, "{per_placement:?}");
    let (placement, clusters) = &per_placement[0];
    assert_eq!(placement, "web");
    assert_eq!(clusters.len(), 1, "{clusters:?}");
    let c = &clusters[0];
    assert_eq!(c.cluster, holder);
    assert_eq!(c.path, ["center", region]);
    assert!(c.serves(), "{c:?}");
    assert_eq!(c.endpoints.addresses[0].ports[0].port, 80);
    let want = vec![address(&t, holder)];
    assert_eq!(dns(&t, "center"), want);
    assert_eq!(dns(&t, region), want, "the holder's region answers too");
    let elsewhere = t.relay(other).dns_targets(&key);
    assert!(
        elsewhere.addresses.is_empty() && !elsewhere.known,
        "a relay knows its own subtree only: {elsewhere:?}"
    );
}

/// Moves the app (a `NoExecute` taint on its cluster) and samples DNS at the root
/// every 10 ms of virtual time. Returns the longest window with no address (ms), the
/// longest window in which the answer named a cluster whose copy was already gone
/// (ms), and whether the old address left before its copy did (and by how much, ms).
fn move_and_sample(drain: Duration) -> (u64, u64, Option<u64>) {
    let (mut t, old, new) = placed(drain);
    let (old_ip, new_ip) = (address(&t, old), address(&t, new));
    assert_eq!(dns(&t, "center"), [old_ip]);
    t.apply(&no_execute(old));
    let step = 10;
    let (mut empty, mut longest_empty) = (0, 0);
    let (mut stale, mut longest_stale) = (0, 0);
    let mut old_left_at = None;
    let mut copy_left_at = None;
    for i in 0..1500u64 {
        t.advance(Duration::from_millis(step));
        let answer = dns(&t, "center");
        empty = if answer.is_empty() { empty + step } else { 0 };
        longest_empty = longest_empty.max(empty);
        let named_gone = answer.iter().any(|ip| {
            (*ip == old_ip && !holds_service(&t, old)) || (*ip == new_ip && !holds_service(&t, new))
        });
        stale = if named_gone { stale + step } else { 0 };
        longest_stale = longest_stale.max(stale);
        if old_left_at.is_none() && !answer.contains(&old_ip) {
            old_left_at = Some(i * step);
        }
        if copy_left_at.is_none() && !holds_service(&t, old) {
            copy_left_at = Some(i * step);
        }
    }
    assert_eq!(dns(&t, "center"), [new_ip], "the answer follows the app");
    assert!(!holds_service(&t, old), "the old copy went in the end");
    let ahead = match (old_left_at, copy_left_at) {
        (Some(a), Some(c)) if a <= c => Some(c - a),
        _ => None,
    };
    (longest_empty, longest_stale, ahead)
}

#[test]
fn dns_follows_a_move_and_leaves_the_old_address_out_before_its_copy_goes() {
    let (empty, stale, ahead) = move_and_sample(Duration::from_secs(2));
    println!(
        "drain 2 s: longest window with no address {empty} ms, with a stale one {stale} ms, old address out {ahead:?} ms before its copy"
    );
    assert_eq!(empty, 0, "never an empty answer during the move");
    assert_eq!(stale, 0, "never an address whose copy is gone");
    assert!(
        ahead.is_some_and(|ms| ms >= 2000),
        "the old address leaves at least the drain before its copy: {ahead:?}"
    );
    // Without a drain the copy goes as the answer changes: what the drain buys.
    let (_, _, ahead) = move_and_sample(Duration::ZERO);
    assert!(ahead.is_none_or(|ms| ms < 2000), "{ahead:?}");
}

/// Nearest tier first: a cluster two tiers below the root comes before one three
/// tiers below, whatever their names; a relay answers for its own subtree only.
#[test]
fn dns_names_the_nearest_clusters_first() {
    let mut t = Tree::builder()
        .root("center")
        .relay("eu", "center", tree::labels! { region: eu })
        .relay("eu-site", "eu", tree::labels! { site: s1 })
        .relay("us", "center", tree::labels! { region: us })
        .agent("a-deep", "eu-site", tree::labels! { role: pos })
        .agent("z-near", "us", tree::labels! { role: pos })
        .build();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    t.apply(&SHOP.replace(", count: 1 }", " }"));
    t.advance(Duration::from_secs(2));
    let (deep, near) = (address(&t, "a-deep"), address(&t, "z-near"));
    assert_eq!(dns(&t, "center"), [near, deep]);
    assert_eq!(dns(&t, "eu"), [deep]);
    assert_eq!(dns(&t, "eu-site"), [deep]);
    assert_eq!(dns(&t, "us"), [near]);
    let (_, clusters) = &t.relay("center").service_endpoints(&service(&t))[0];
    let paths: Vec<&[String]> = clusters.iter().map(|c| c.path.as_slice()).collect();
    assert_eq!(
        paths,
        [&["center", "us"][..], &["center", "eu", "eu-site"][..]]
    );
}
