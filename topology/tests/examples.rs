//! The example topologies of `deploy/examples/` compile without errors or warnings and
//! have the shapes their comments promise.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::path::PathBuf;

use strata_topology::{Topology, load};

fn example(name: &str) -> Topology {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/examples")
        .join(name);
    let checked = load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(checked.warnings, Vec::<String>::new(), "{name}");
    checked.topology
}

/// The relays above a cluster, root first.
fn tiers(t: &Topology, cluster: &str) -> Vec<String> {
    let mut at = t
        .clusters
        .iter()
        .find(|c| c.name == cluster)
        .map(|c| c.parent.clone());
    let mut path = Vec::new();
    while let Some(name) = at {
        at = t.relay(&name).unwrap().parent.clone();
        path.insert(0, name);
    }
    path
}

#[test]
fn demo_is_a_root_two_regions_three_sites_each_four_clusters_per_site() {
    let t = example("demo.yaml");
    assert_eq!(t.relays.len(), 1 + 2 + 6);
    assert_eq!(t.clusters.len(), 24);
    assert_eq!(tiers(&t, "us-site-2-c3"), ["center", "us", "us-site-2"]);
}

#[test]
fn telco_has_four_tiers_of_relays_above_its_clusters() {
    let t = example("telco.yaml");
    assert_eq!(
        tiers(&t, "par-cell-2-ran"),
        ["core", "west", "par", "par-cell-2"]
    );
    assert!(t.clusters.iter().all(|c| tiers(&t, &c.name).len() == 4));
    assert_eq!(t.relay("par").unwrap().join_tokens, 20);
}

#[test]
fn retail_has_a_relay_per_country_and_thousands_of_stores() {
    let t = example("retail.yaml");
    assert_eq!(t.root().relays.len(), 6);
    assert_eq!(t.clusters.len(), 3000);
    assert_eq!(tiers(&t, "fr-store-0042"), ["center", "fr"]);
    assert_eq!(t.relay("de").unwrap().join_tokens, 50);
}
