//! The hierarchy a scenario simulates: a minimal inline form of the topology YAML
//! (`root`, `relays`, `clusters` with `name`, `parent`, `labels`, the field names of the
//! Topology spec), plus `generate` to write many clusters in one line. Kept in this one
//! module so that the topology crate's parser can replace it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use strata_protocol::model::Labels;

/// The hierarchy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The root relay.
    pub root: RootSpec,
    /// Relays below the root, any depth.
    #[serde(default)]
    pub relays: Vec<NodeSpec>,
    /// Leaf clusters, one agent each.
    #[serde(default)]
    pub clusters: Vec<NodeSpec>,
    /// Many clusters at once: `count` clusters named `prefix-0`, `prefix-1`, ...
    #[serde(default)]
    pub generate: Vec<Generate>,
}

/// The root.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootSpec {
    /// Its name.
    pub name: String,
}

/// A relay or a cluster.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Its name.
    pub name: String,
    /// Its parent relay.
    pub parent: String,
    /// Labels (a relay's are inherited by every cluster below it).
    #[serde(default)]
    pub labels: Labels,
}

/// Generated clusters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generate {
    /// Their parent relay.
    pub parent: String,
    /// How many.
    pub count: usize,
    /// Name prefix.
    pub prefix: String,
    /// Labels of every one.
    #[serde(default)]
    pub labels: Labels,
}

/// Why a topology is unusable.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// Two nodes share a name.
    #[error("topology: the name {0:?} is used twice")]
    Duplicate(String),
    /// A parent that is not a relay.
    #[error("topology: {node:?} names parent {parent:?}, which is not the root or a relay")]
    UnknownParent {
        /// The node.
        node: String,
        /// Its parent.
        parent: String,
    },
    /// Relays whose parents go round in a circle.
    #[error("topology: relay {0:?} is not below the root (a cycle)")]
    Cycle(String),
}

impl Topology {
    /// Every cluster, generated ones included, in order.
    pub fn all_clusters(&self) -> Vec<NodeSpec> {
        let mut out = self.clusters.clone();
        for g in &self.generate {
            for i in 0..g.count {
                out.push(NodeSpec {
                    name: format!("{}-{i}", g.prefix),
                    parent: g.parent.clone(),
                    labels: g.labels.clone(),
                });
            }
        }
        out
    }

    /// Checks names, parents and that every relay hangs below the root.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let mut names = BTreeSet::new();
        names.insert(self.root.name.clone());
        let relays: BTreeSet<&str> = self
            .relays
            .iter()
            .map(|r| r.name.as_str())
            .chain([self.root.name.as_str()])
            .collect();
        for n in self.relays.iter().chain(self.all_clusters().iter()) {
            if !names.insert(n.name.clone()) {
                return Err(TopologyError::Duplicate(n.name.clone()));
            }
        }
        for n in self.relays.iter().chain(self.all_clusters().iter()) {
            if !relays.contains(n.parent.as_str()) {
                return Err(TopologyError::UnknownParent {
                    node: n.name.clone(),
                    parent: n.parent.clone(),
                });
            }
        }
        for r in &self.relays {
            if self.path_to(&r.parent).is_none() {
                return Err(TopologyError::Cycle(r.name.clone()));
            }
        }
        Ok(())
    }

    /// The relays from the root down to `relay` (inclusive); `None` if it is not
    /// below the root.
    pub fn path_to(&self, relay: &str) -> Option<Vec<String>> {
        let parents: BTreeMap<&str, &str> = self
            .relays
            .iter()
            .map(|r| (r.name.as_str(), r.parent.as_str()))
            .collect();
        let mut path = vec![relay.to_owned()];
        let mut at = relay;
        for _ in 0..=self.relays.len() {
            if at == self.root.name {
                path.reverse();
                return Some(path);
            }
            at = parents.get(at)?;
            path.push(at.to_owned());
        }
        None
    }

    /// A relay's own labels.
    pub fn relay_labels(&self, relay: &str) -> Labels {
        self.relays
            .iter()
            .find(|r| r.name == relay)
            .map(|r| r.labels.clone())
            .unwrap_or_default()
    }

    /// Children (relays and clusters) of `relay`.
    pub fn children_of(&self, relay: &str) -> Vec<String> {
        self.relays
            .iter()
            .chain(self.all_clusters().iter())
            .filter(|n| n.parent == relay)
            .map(|n| n.name.clone())
            .collect()
    }

    /// A cluster's labels as placements see them: its own, then each relay's above it,
    /// nearest first, never overriding a closer one.
    pub fn effective_labels(&self, cluster: &NodeSpec) -> Labels {
        let mut labels = cluster.labels.clone();
        for relay in self
            .path_to(&cluster.parent)
            .unwrap_or_default()
            .iter()
            .rev()
        {
            for (k, v) in self.relay_labels(relay) {
                labels.entry(k).or_insert(v);
            }
        }
        labels
    }
}
