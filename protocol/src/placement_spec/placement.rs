//! Placements: which objects of a space go to which clusters.
//!
//! A placement selects objects (*what*) and clusters (*where*). Routing asks two
//! questions of it: does it select this object, and does it select some cluster in a
//! given subtree. Both are answered from metadata alone, so relays route without
//! parsing object bodies.

use serde::{Deserialize, Serialize};

use super::{CustomizeRule, ROLLOUT_KIND, RolloutSpec, STRATA_GROUP, Seconds, Toleration};
use super::{is_pin, pin_placement};
use crate::model::{Cluster, ObjectMeta, Space};
use crate::selector::LabelSelector;

/// A placement (our EdgePlacement): objects of one space, placed on clusters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The space whose objects this placement may select; never any other.
    pub space: Space,
    /// The placement's name, unique within its space.
    pub name: String,
    /// *What*: an object is selected when any entry selects it.
    pub objects: Vec<ObjectSelector>,
    /// *Where*: the clusters that receive the selected objects.
    pub clusters: ClusterSelector,
    /// *What comes back*: objects born on the selected clusters that their agents copy
    /// to the center, where they appear under the cluster's name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upsync: Vec<UpsyncSelector>,
    /// *How it moves* when the chosen clusters change.
    #[serde(default)]
    pub moves: MovePolicy,
    /// *How*: per-cluster customization, rendered by each agent before it applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub customize: Vec<CustomizeRule>,
    /// *What comes back*: summaries of reported objects, merged at every tier.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_summary: Vec<crate::user_summary::SummarySpec>,
    /// *How a change moves*: in waves with a health gate between them, instead of to
    /// every cluster at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
}

/// Selects objects born on a leaf cluster (policy reports, events of interest...) for
/// upsync: one kind, optionally one namespace, some names, and labels.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpsyncSelector {
    /// API group (empty: the core group).
    #[serde(default)]
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `PolicyReport`.
    pub kind: String,
    /// Only this namespace; absent: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Only these names; empty: every name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Object labels; absent places no constraint on labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Selects objects by kind, namespace, name and labels. An empty list means "any"; all
/// given constraints must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectSelector {
    /// Kinds, e.g. `Deployment`; empty selects every kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// Namespaces; empty selects every namespace and cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Object names; empty selects every name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Object labels; absent places no constraint on labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Selects clusters by their labels (their own plus those inherited from relays above),
/// and how many of them to choose (see [`crate::choice`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSelector {
    /// Cluster labels; an empty selector selects every cluster.
    pub selector: LabelSelector,
    /// At most this many of the matching clusters, chosen stably.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Spread the count evenly (±1) over the values of this cluster label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_by: Option<String>,
    /// Clusters matching earlier selectors are chosen first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefer: Vec<LabelSelector>,
    /// Taints the placement tolerates (Kubernetes' semantics).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// With a `count`: a chosen cluster unreachable this long is replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_after: Option<Seconds>,
}

/// How a placement moves between clusters when its choice changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MoveStrategy {
    /// New clusters get the objects first; the old keep them until the new are
    /// available (or the move times out).
    #[default]
    MakeBeforeBreak,
    /// Old clusters lose the objects at once.
    BreakBeforeMake,
}

/// The move policy: strategy, how long a make-before-break move may wait, and the
/// claims whose data follows the move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovePolicy {
    /// Make-before-break (default) or break-before-make.
    pub strategy: MoveStrategy,
    /// How long old clusters keep the objects at most, waiting for the new ones.
    pub timeout: Seconds,
    /// The PersistentVolumeClaims whose data follows the move (`spec.moveVolumes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<super::MoveVolume>,
}

impl Default for MovePolicy {
    fn default() -> Self {
        MovePolicy {
            strategy: MoveStrategy::MakeBeforeBreak,
            timeout: DEFAULT_MOVE_TIMEOUT,
            volumes: Vec::new(),
        }
    }
}

/// `moveTimeout` when a placement gives none.
pub const DEFAULT_MOVE_TIMEOUT: Seconds = Seconds(15 * 60);

impl ObjectSelector {
    /// Whether this entry selects the object.
    pub fn selects(&self, meta: &ObjectMeta) -> bool {
        let key = &meta.key;
        (self.kinds.is_empty() || self.kinds.contains(&key.kind))
            && (self.namespaces.is_empty()
                || key
                    .namespace
                    .as_ref()
                    .is_some_and(|ns| self.namespaces.contains(ns)))
            && (self.names.is_empty() || self.names.contains(&key.name))
            && self
                .selector
                .as_ref()
                .is_none_or(|s| s.matches(&meta.labels))
    }
}

impl Placement {
    /// Whether the placement selects the object: same space, and some object entry
    /// selects it. Pinned revisions and rollout records are never selected (a pin
    /// belongs to the placement its label names: [`Placement::places_object`]).
    pub fn selects_object(&self, meta: &ObjectMeta) -> bool {
        meta.key.space == self.space
            && !is_pin(meta)
            && !(meta.key.group == STRATA_GROUP && meta.key.kind == ROLLOUT_KIND)
            && self.objects.iter().any(|o| o.selects(meta))
    }

    /// Whether the object goes where this placement places: an object it selects, or
    /// one of its pinned revisions.
    pub fn places_object(&self, meta: &ObjectMeta) -> bool {
        self.selects_object(meta)
            || (meta.key.space == self.space && pin_placement(meta) == Some(self.name.as_str()))
    }

    /// Whether the placement selects the cluster, with its labels as reported.
    pub fn selects_cluster(&self, cluster: &Cluster) -> bool {
        self.clusters.selector.matches(&cluster.labels)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{ObjectKey, ObjectKeyParts};

    fn meta(space: &str, kind: &str, ns: Option<&str>, name: &str, app: &str) -> ObjectMeta {
        ObjectMeta {
            key: ObjectKey::new(ObjectKeyParts {
                space: Space(space.to_owned()),
                group: "apps".to_owned(),
                version: "v1".to_owned(),
                kind: kind.to_owned(),
                namespace: ns.map(str::to_owned),
                name: name.to_owned(),
            }),
            labels: [("app".to_owned(), app.to_owned())].into(),
        }
    }

    fn placement() -> Placement {
        Placement {
            space: Space("default".to_owned()),
            name: "pos-app".to_owned(),
            objects: vec![ObjectSelector {
                kinds: vec!["Deployment".to_owned()],
                namespaces: vec!["pos".to_owned()],
                names: vec![],
                selector: Some(LabelSelector {
                    match_labels: [("app".to_owned(), "pos".to_owned())].into(),
                    match_expressions: vec![],
                }),
            }],
            clusters: ClusterSelector {
                selector: LabelSelector {
                    match_labels: [("role".to_owned(), "pos".to_owned())].into(),
                    match_expressions: vec![],
                },
                ..ClusterSelector::default()
            },
            upsync: vec![],
            moves: MovePolicy::default(),
            customize: vec![],
            status_summary: vec![],
            rollout: None,
        }
    }

    #[test]
    fn selects_objects_by_every_constraint() {
        let p = placement();
        assert!(p.selects_object(&meta("default", "Deployment", Some("pos"), "a", "pos")));
        assert!(!p.selects_object(&meta("default", "Service", Some("pos"), "a", "pos")));
        assert!(!p.selects_object(&meta("default", "Deployment", Some("web"), "a", "pos")));
        assert!(!p.selects_object(&meta("default", "Deployment", None, "a", "pos")));
        assert!(!p.selects_object(&meta("default", "Deployment", Some("pos"), "a", "web")));
    }

    #[test]
    fn never_selects_another_space() {
        let p = placement();
        assert!(!p.selects_object(&meta("other", "Deployment", Some("pos"), "a", "pos")));
    }

    #[test]
    fn selects_clusters_by_labels() {
        let p = placement();
        let mut c = Cluster {
            name: "store-1".to_owned(),
            labels: [("role".to_owned(), "pos".to_owned())].into(),
            properties: BTreeMap::new(),
            path: vec!["center".to_owned()],
        };
        assert!(p.selects_cluster(&c));
        c.labels.insert("role".to_owned(), "kiosk".to_owned());
        assert!(!p.selects_cluster(&c));
    }
}
