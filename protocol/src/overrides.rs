//! Cluster labels changed at the root.
//!
//! A `strata.dev` `Cluster` object written in a space (`kubectl label cluster ...`)
//! records what the root changed in that cluster's labels over what the cluster reports:
//! labels it sets and labels it removes. Placements of that space see the cluster with
//! those changes; other spaces see it as reported. The objects travel to every relay
//! (like placements), so every tier routes with the same labels the root does.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::{Cluster, Labels, ObjectMeta, Space};
use crate::placement_spec::STRATA_GROUP;

/// The kind of the root's cluster objects.
pub const CLUSTER_KIND: &str = "Cluster";

/// Whether an object is a cluster object (routed to every relay, never to an agent).
pub fn is_cluster_object(meta: &ObjectMeta) -> bool {
    meta.key.group == STRATA_GROUP && meta.key.kind == CLUSTER_KIND
}

/// What the root changed in one cluster's labels.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelOverride {
    /// Labels set (added or changed) at the root.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: Labels,
    /// Label keys removed at the root.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub remove: BTreeSet<String>,
}

impl LabelOverride {
    /// The change that turns `reported` into `wanted`.
    pub fn between(reported: &Labels, wanted: &Labels) -> Self {
        LabelOverride {
            set: wanted
                .iter()
                .filter(|(k, v)| reported.get(*k) != Some(*v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            remove: reported
                .keys()
                .filter(|k| !wanted.contains_key(*k))
                .cloned()
                .collect(),
        }
    }

    /// `labels` with this change made.
    pub fn applied_to(&self, labels: &Labels) -> Labels {
        let mut out: Labels = labels
            .iter()
            .filter(|(k, _)| !self.remove.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.extend(self.set.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
}

/// Every cluster's label changes, per space.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterOverrides {
    /// By space, then cluster: a lookup borrows both names (every tier asks for every
    /// cluster of its subtree at each summary and route).
    by_space: BTreeMap<Space, BTreeMap<String, LabelOverride>>,
}

impl ClusterOverrides {
    /// Records the change of `cluster`'s labels in `space`.
    pub fn insert(&mut self, space: Space, cluster: String, change: LabelOverride) {
        self.by_space
            .entry(space)
            .or_default()
            .insert(cluster, change);
    }

    /// The change recorded for `cluster` in `space`, if any.
    pub fn get(&self, space: &Space, cluster: &str) -> Option<&LabelOverride> {
        self.by_space.get(space)?.get(cluster)
    }

    /// `cluster`'s labels as the placements of `space` see them.
    pub fn labels<'a>(&self, space: &Space, cluster: &'a Cluster) -> Cow<'a, Labels> {
        match self.get(space, &cluster.name) {
            Some(change) => Cow::Owned(change.applied_to(&cluster.labels)),
            None => Cow::Borrowed(&cluster.labels),
        }
    }

    /// Whether no cluster's labels were changed anywhere.
    pub fn is_empty(&self) -> bool {
        self.by_space.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn between_then_applied_gives_what_was_wanted() {
        let reported = labels(&[("role", "pos"), ("region", "eu"), ("tier", "gold")]);
        let wanted = labels(&[("role", "pos"), ("region", "us"), ("new", "x")]);
        let change = LabelOverride::between(&reported, &wanted);
        assert_eq!(change.set, labels(&[("region", "us"), ("new", "x")]));
        assert_eq!(change.remove, ["tier".to_owned()].into());
        assert_eq!(change.applied_to(&reported), wanted);
        assert!(LabelOverride::between(&wanted, &wanted).is_empty());
    }

    #[test]
    fn a_later_reported_label_shows_unless_the_root_changed_it() {
        let change =
            LabelOverride::between(&labels(&[("region", "eu")]), &labels(&[("region", "us")]));
        let later = labels(&[("region", "eu"), ("gpu", "true")]);
        assert_eq!(
            change.applied_to(&later),
            labels(&[("region", "us"), ("gpu", "true")])
        );
    }

    #[test]
    fn only_the_space_that_changed_the_labels_sees_the_change() {
        let mut overrides = ClusterOverrides::default();
        let a = Space("a".to_owned());
        let b = Space("b".to_owned());
        overrides.insert(
            a.clone(),
            "c1".to_owned(),
            LabelOverride {
                set: labels(&[("region", "us")]),
                remove: BTreeSet::new(),
            },
        );
        let c1 = Cluster {
            name: "c1".to_owned(),
            labels: labels(&[("region", "eu")]),
            properties: BTreeMap::new(),
            path: vec![],
        };
        assert_eq!(overrides.labels(&a, &c1)["region"], "us");
        assert_eq!(overrides.labels(&b, &c1)["region"], "eu");
    }
}
