//! The hierarchy a scenario simulates: a Topology document (the format of
//! `deploy/examples/*.yaml`), compiled by [`strata_topology`]. A scenario names the file
//! relative to itself (`topology: ../../deploy/examples/demo.yaml`) or embeds the document
//! under `topology:`. What the simulation needs beyond the compiled [`Topology`] (children,
//! inherited labels, which agents share a host) is derived here from it.
//!
//! Addresses (`listen`, `address`, `api`, `metrics`) are checked by the compiler but not
//! used: every simulated relay listens on its own simulated host. `joining` entries are
//! accepted and simulate nothing (no unlisted agent joins in a scenario).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use strata_protocol::model::Labels;
use strata_topology::raw::RawTopology;

pub use strata_topology::{Cluster, Relay, Topology};

/// Where a scenario's topology comes from.
#[derive(Debug)]
pub enum TopologySource {
    /// A topology file, relative to the scenario file.
    File(PathBuf),
    /// The document itself, embedded in the scenario.
    Inline(Box<RawTopology>),
}

impl<'de> Deserialize<'de> for TopologySource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TopologySource;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a topology file's path, or a Topology document")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TopologySource, E> {
                Ok(TopologySource::File(PathBuf::from(v)))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TopologySource, A::Error> {
                let raw = RawTopology::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(TopologySource::Inline(Box::new(raw)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A cluster by name.
pub fn cluster<'a>(topology: &'a Topology, name: &str) -> Option<&'a Cluster> {
    topology.clusters.iter().find(|c| c.name == name)
}

/// Children (relays, then clusters, in file order) of `relay`.
pub fn children_of(topology: &Topology, relay: &str) -> Vec<String> {
    topology
        .relay(relay)
        .map(|r| r.relays.iter().chain(&r.clusters).cloned().collect())
        .unwrap_or_default()
}

/// A cluster's labels as placements see them: its own, then each relay's above it,
/// nearest first, never overriding a closer one. `relabeled` holds the labels workload
/// steps gave nodes (clusters or relays) instead of the topology's.
pub fn effective_labels(
    topology: &Topology,
    cluster: &Cluster,
    relabeled: &BTreeMap<String, Labels>,
) -> Labels {
    let mut labels = relabeled
        .get(&cluster.name)
        .unwrap_or(&cluster.labels)
        .clone();
    let mut at = Some(cluster.parent.as_str());
    // The compiler checked that parents form a tree; the bound only guards the loop.
    for _ in 0..topology.relays.len() {
        let Some(relay) = at.and_then(|name| topology.relay(name)) else {
            break;
        };
        for (k, v) in relabeled.get(&relay.name).unwrap_or(&relay.labels) {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        at = relay.parent.as_deref();
    }
    labels
}
