//! What a node knows of its subtree from its children's reports: the inventory of
//! clusters below each child, per-cluster statuses, and children's summaries; and the
//! summaries this node forwards upward.

use std::collections::{BTreeMap, BTreeSet};

use strata_protocol::model::{Cluster, ObjectKey, Status};
use strata_protocol::placement::Placement;
use strata_protocol::summary::Summary;
use strata_protocol::wire::{Report, ReportKey, ReportValue};

/// Why a child's report was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportRefusal {
    /// An agent reported for a cluster other than its own.
    #[error("agent {child:?} reported for cluster {cluster:?}, which is not its own")]
    NotItsCluster {
        /// The reporting child.
        child: String,
        /// The cluster it named.
        cluster: String,
    },
    /// A relay reported a cluster whose path does not run through it.
    #[error(
        "relay {child:?} reported cluster {cluster:?} whose path {path:?} does not pass through it"
    )]
    OutsideSubtree {
        /// The reporting child.
        child: String,
        /// The cluster.
        cluster: String,
        /// The cluster's claimed path.
        path: Vec<String>,
    },
}

/// Reports received from children, indexed for routing and summarizing.
#[derive(Debug, Default)]
pub struct SubtreeReports {
    /// Every stored report and the child it came from.
    stored: BTreeMap<ReportKey, (String, ReportValue)>,
}

impl SubtreeReports {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds from what the store kept.
    pub fn restore(stored: impl IntoIterator<Item = (ReportKey, (String, ReportValue))>) -> Self {
        SubtreeReports {
            stored: stored.into_iter().collect(),
        }
    }

    /// Checks that `child` may report this: an agent only its own cluster, a relay only
    /// clusters whose path starts with it.
    pub fn check(
        &self,
        child: &str,
        child_is_relay: bool,
        report: &Report,
    ) -> Result<(), ReportRefusal> {
        let cluster = match &report.key {
            ReportKey::Status { cluster, .. } | ReportKey::Cluster { name: cluster } => cluster,
            ReportKey::Summary { .. } => return Ok(()),
        };
        if !child_is_relay {
            if cluster != child {
                return Err(ReportRefusal::NotItsCluster {
                    child: child.to_owned(),
                    cluster: cluster.clone(),
                });
            }
            return Ok(());
        }
        if let ReportValue::Cluster(c) = &report.value {
            // Paths grow on the way up: each relay prepends itself, so what a relay
            // child reports must start with that child.
            if c.path.first().map(String::as_str) != Some(child) {
                return Err(ReportRefusal::OutsideSubtree {
                    child: child.to_owned(),
                    cluster: cluster.clone(),
                    path: c.path.clone(),
                });
            }
        }
        Ok(())
    }

    /// Stores a report from `child`. Returns whether anything changed.
    pub fn accept(&mut self, child: &str, report: Report) -> bool {
        match report.value {
            ReportValue::Removed => self.stored.remove(&report.key).is_some(),
            value => {
                let new = (child.to_owned(), value);
                let changed = self.stored.get(&report.key) != Some(&new);
                self.stored.insert(report.key, new);
                changed
            }
        }
    }

    /// Forgets everything `child` reported (it restarted and will report again).
    /// Returns the keys removed.
    pub fn forget(&mut self, child: &str) -> Vec<ReportKey> {
        let gone: Vec<ReportKey> = self
            .stored
            .iter()
            .filter(|(_, (from, _))| from == child)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.stored.remove(k);
        }
        gone
    }

    /// The stored value of a report.
    pub fn get(&self, key: &ReportKey) -> Option<&(String, ReportValue)> {
        self.stored.get(key)
    }

    /// Every stored report.
    pub fn iter(&self) -> impl Iterator<Item = (&ReportKey, &(String, ReportValue))> {
        self.stored.iter()
    }

    /// The clusters below `child`.
    pub fn clusters_below(&self, child: &str) -> Vec<Cluster> {
        self.stored
            .values()
            .filter(|(from, _)| from == child)
            .filter_map(|(_, v)| match v {
                ReportValue::Cluster(c) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every cluster in the subtree.
    pub fn clusters(&self) -> impl Iterator<Item = &Cluster> {
        self.stored.values().filter_map(|(_, v)| match v {
            ReportValue::Cluster(c) => Some(c),
            _ => None,
        })
    }

    /// The summary of `object` under `placement` for this node's whole subtree: the
    /// merge of children's summaries, of direct clusters' statuses, and of the clusters
    /// expected (selected by the placement) in the subtree.
    pub fn summarize(&self, placement: &Placement, object: &ObjectKey) -> Summary {
        let mut s = Summary::default();
        let clusters: BTreeMap<&str, &Cluster> =
            self.clusters().map(|c| (c.name.as_str(), c)).collect();
        let selected: BTreeSet<&str> = clusters
            .values()
            .filter(|c| placement.selects_cluster(c))
            .map(|c| c.name.as_str())
            .collect();
        // Clusters that report through a relay child are covered by its summary; count
        // expected ones only for directly reporting clusters.
        let mut via_summary: BTreeSet<&str> = BTreeSet::new();
        for (key, (from, value)) in &self.stored {
            match (key, value) {
                (
                    ReportKey::Summary {
                        placement: p,
                        object: o,
                    },
                    ReportValue::Summary(sum),
                ) if p == &placement.name && o == object => {
                    s.merge(sum);
                    via_summary.insert(from.as_str());
                }
                (ReportKey::Status { cluster, object: o }, ReportValue::Status(status))
                    if o == object && selected.contains(cluster.as_str()) =>
                {
                    s.merge(&Summary::of_status(cluster, status));
                }
                _ => {}
            }
        }
        let reported_directly: BTreeSet<&str> = self
            .stored
            .keys()
            .filter_map(|k| match k {
                ReportKey::Status { cluster, object: o } if o == object => Some(cluster.as_str()),
                _ => None,
            })
            .collect();
        let silent_direct = self
            .stored
            .values()
            .filter_map(|(from, v)| match v {
                ReportValue::Cluster(c) if !via_summary.contains(from.as_str()) => Some(c),
                _ => None,
            })
            .filter(|c| selected.contains(c.name.as_str()))
            .filter(|c| !reported_directly.contains(c.name.as_str()))
            .count();
        s.merge(&Summary::expected(silent_direct as u64));
        s
    }

    /// The exact status of `object` on `cluster`, if a direct child reported it.
    pub fn status(&self, cluster: &str, object: &ObjectKey) -> Option<&Status> {
        match self.stored.get(&ReportKey::Status {
            cluster: cluster.to_owned(),
            object: object.clone(),
        }) {
            Some((_, ReportValue::Status(s))) => Some(s),
            _ => None,
        }
    }
}
