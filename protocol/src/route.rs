//! Routing by placement: which objects a child's subtree needs.
//!
//! A parent forwards an object to a child only when some placement selects the object
//! and some cluster in the child's subtree. Placements themselves travel to every relay
//! child (relays route with them); agents receive only what is placed on their cluster,
//! and the placements selecting their cluster that ask for upsync, customize objects or
//! summarize them. The root's cluster
//! objects ([`crate::overrides`]) and revocations travel with the placements, to relays
//! only.

use std::sync::Arc;

use crate::choice::{RootView, is_decision};
use crate::codec;
use crate::model::{Cluster, ObjectMeta};
use crate::overrides::is_cluster_object;
pub use crate::placement_spec::STRATA_GROUP;
use crate::placement_spec::{Placement, pin_placement};
use crate::sync::Route;
use crate::wire::RouteId;

/// The kind of placement objects.
pub const PLACEMENT_KIND: &str = "Placement";

/// Whether an object is a placement (routed to every relay, parsed by relays).
pub fn is_placement(meta: &ObjectMeta) -> bool {
    meta.key.group == STRATA_GROUP && meta.key.kind == PLACEMENT_KIND
}

/// The kind of revocation objects: the node named by the object's name (in the space
/// `default`) is refused by every tier (`relay revoke NAME`).
pub const REVOCATION_KIND: &str = "Revocation";

/// Whether an object is a revocation (routed to every relay, never to an agent).
pub fn is_revocation(meta: &ObjectMeta) -> bool {
    meta.key.group == STRATA_GROUP && meta.key.kind == REVOCATION_KIND
}

/// Whether an object is one of Strata's own (a placement, a cluster's labels, a
/// decision, a revocation): the root and relays route with them; they are never placed
/// on clusters.
pub fn is_strata_object(meta: &ObjectMeta) -> bool {
    is_placement(meta) || is_cluster_object(meta) || is_decision(meta) || is_revocation(meta)
}

/// The route of one child: the placements that select some cluster of its subtree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementRoute {
    relay: bool,
    placements: Arc<Vec<Placement>>,
    /// Per placement (same order): whether some cluster of the subtree gets its objects
    /// as they are, and whether some gets its pinned previous revision.
    revisions: Arc<Vec<(bool, bool)>>,
    id: RouteId,
}

impl PlacementRoute {
    /// The route of a child (`relay` says whether it routes onward and so needs the
    /// placements themselves) whose subtree holds `clusters`, under `placements`, as the
    /// root decided (`root`: cluster labels changed there, placements' decisions,
    /// rollouts' released clusters).
    pub fn new(
        relay: bool,
        placements: &[Placement],
        clusters: &[Cluster],
        root: &RootView,
    ) -> Self {
        let mut relevant: Vec<(Placement, (bool, bool))> = placements
            .iter()
            .filter_map(|p| {
                let mut current = false;
                let mut pinned = false;
                for c in clusters {
                    match root.revision_for(p, c) {
                        Some(true) => current = true,
                        Some(false) => pinned = true,
                        None => {}
                    }
                }
                (current || pinned).then(|| (p.clone(), (current, pinned)))
            })
            .collect();
        relevant.sort_by(|a, b| (&a.0.space, &a.0.name).cmp(&(&b.0.space, &b.0.name)));
        let id = fingerprint(relay, &relevant);
        let (placements, revisions) = relevant.into_iter().unzip();
        PlacementRoute {
            relay,
            placements: Arc::new(placements),
            revisions: Arc::new(revisions),
            id,
        }
    }

    /// The placements that select some cluster of the subtree.
    pub fn placements(&self) -> &[Placement] {
        &self.placements
    }
}

impl Route for PlacementRoute {
    fn id(&self) -> RouteId {
        self.id
    }

    fn includes(&self, meta: &ObjectMeta) -> bool {
        if is_placement(meta) {
            // Relays route with every placement; an agent needs those that place on
            // its cluster and ask it for something: upsync (what to copy back),
            // customization (what to render) or user summaries (what to evaluate).
            return self.relay
                || self.placements.iter().any(|p| {
                    p.space == meta.key.space && p.name == meta.key.name && agent_needs(p)
                });
        }
        if is_cluster_object(meta) || is_decision(meta) || is_revocation(meta) {
            // Relays route with the root's cluster labels and decisions, and refuse
            // revoked children; agents never need them.
            return self.relay;
        }
        if let Some(owner) = pin_placement(meta) {
            // A pinned previous revision goes where its rollout has not released.
            return self
                .placements
                .iter()
                .zip(self.revisions.iter())
                .any(|(p, (_, pinned))| *pinned && p.space == meta.key.space && p.name == owner);
        }
        self.placements
            .iter()
            .zip(self.revisions.iter())
            .any(|(p, (current, _))| *current && p.selects_object(meta))
    }
}

/// Whether an agent on a cluster the placement selects needs the placement itself.
fn agent_needs(p: &Placement) -> bool {
    !p.upsync.is_empty() || !p.customize.is_empty() || !p.status_summary.is_empty()
}

/// FNV-1a over the encoded route: equal routes, equal ids, on every platform.
fn fingerprint(relay: bool, placements: &[(Placement, (bool, bool))]) -> RouteId {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    feed(&[u8::from(relay)]);
    for (p, (current, pinned)) in placements {
        feed(&[u8::from(*current), u8::from(*pinned)]);
        // Encoding our own plain data cannot fail; should it ever, the placement's name
        // still distinguishes most routes and a spurious snapshot is the only cost.
        match codec::encode_value(p) {
            Ok(bytes) => feed(&bytes),
            Err(_) => feed(p.name.as_bytes()),
        }
    }
    RouteId(hash)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{ObjectKey, ObjectKeyParts, Space};
    use crate::placement::{ClusterSelector, ObjectSelector};
    use crate::selector::LabelSelector;

    fn none() -> RootView {
        RootView::default()
    }

    fn cluster(name: &str, region: &str) -> Cluster {
        Cluster {
            name: name.into(),
            labels: [("region".to_owned(), region.to_owned())].into(),
            properties: BTreeMap::new(),
            path: vec![],
        }
    }

    fn placement(name: &str, region: &str, app: &str) -> Placement {
        Placement {
            space: Space::default_space(),
            name: name.into(),
            objects: vec![ObjectSelector {
                selector: Some(LabelSelector {
                    match_labels: [("app".to_owned(), app.to_owned())].into(),
                    match_expressions: vec![],
                }),
                ..ObjectSelector::default()
            }],
            clusters: ClusterSelector {
                selector: LabelSelector {
                    match_labels: [("region".to_owned(), region.to_owned())].into(),
                    match_expressions: vec![],
                },
                ..ClusterSelector::default()
            },
            upsync: vec![],
            moves: crate::placement::MovePolicy::default(),
            customize: vec![],
            status_summary: vec![],
            rollout: None,
        }
    }

    fn meta(group: &str, kind: &str, app: &str) -> ObjectMeta {
        ObjectMeta {
            key: ObjectKey::new(ObjectKeyParts {
                space: Space::default_space(),
                group: group.into(),
                version: "v1".into(),
                kind: kind.into(),
                namespace: Some("shop".into()),
                name: "x".into(),
            }),
            labels: [("app".to_owned(), app.to_owned())].into(),
        }
    }

    #[test]
    fn objects_go_only_where_a_placement_selects_a_cluster() {
        let placements = [
            placement("web-eu", "eu", "web"),
            placement("db-us", "us", "db"),
        ];
        let eu = PlacementRoute::new(true, &placements, &[cluster("a", "eu")], &none());
        assert!(eu.includes(&meta("apps", "Deployment", "web")));
        assert!(!eu.includes(&meta("apps", "Deployment", "db")));
        assert!(
            eu.includes(&meta(STRATA_GROUP, PLACEMENT_KIND, "")),
            "relays get placements"
        );
        let agent = PlacementRoute::new(false, &placements, &[cluster("a", "eu")], &none());
        assert!(!agent.includes(&meta(STRATA_GROUP, PLACEMENT_KIND, "")));
        let empty = PlacementRoute::new(true, &placements, &[], &none());
        assert!(!empty.includes(&meta("apps", "Deployment", "web")));
        assert!(
            eu.includes(&meta(STRATA_GROUP, "Cluster", "")),
            "relays get clusters"
        );
        assert!(!agent.includes(&meta(STRATA_GROUP, "Cluster", "")));
    }

    #[test]
    fn agents_get_the_placements_that_customize_or_summarize_for_them() {
        let mut customizing = placement("web-eu", "eu", "web");
        customizing.customize = vec![crate::customize::CustomizeRule {
            merge_patch: Some(serde_json::json!({ "metadata": { "labels": { "a": "b" } } })),
            ..Default::default()
        }];
        let mut summarizing = placement("db-eu", "eu", "db");
        summarizing.status_summary = vec![crate::user_summary::SummarySpec {
            name: "ready".into(),
            path: ".status.readyReplicas".into(),
            op: crate::user_summary::SummaryOp::Sum,
            top: None,
            group_by: None,
        }];
        let plain = placement("cache-eu", "eu", "cache");
        let elsewhere = {
            let mut p = placement("web-us", "us", "web");
            p.customize = customizing.customize.clone();
            p
        };
        let all = [customizing, summarizing, plain, elsewhere];
        let agent = PlacementRoute::new(false, &all, &[cluster("a", "eu")], &none());
        let named = |name: &str| {
            let mut m = meta(STRATA_GROUP, PLACEMENT_KIND, "");
            m.key.parts_mut().name = name.into();
            m
        };
        assert!(agent.includes(&named("web-eu")));
        assert!(agent.includes(&named("db-eu")));
        assert!(
            !agent.includes(&named("cache-eu")),
            "asks nothing of the agent"
        );
        assert!(
            !agent.includes(&named("web-us")),
            "does not select the cluster"
        );
    }

    #[test]
    fn labels_changed_at_the_root_move_objects_between_subtrees() {
        let placements = [placement("web-us", "us", "web")];
        let a = [cluster("a", "eu")];
        assert!(
            !PlacementRoute::new(true, &placements, &a, &none()).includes(&meta(
                "apps",
                "Deployment",
                "web"
            ))
        );
        let mut moved = none();
        moved.overrides.insert(
            Space::default_space(),
            "a".into(),
            crate::overrides::LabelOverride {
                set: [("region".to_owned(), "us".to_owned())].into(),
                remove: Default::default(),
            },
        );
        assert!(
            PlacementRoute::new(true, &placements, &a, &moved).includes(&meta(
                "apps",
                "Deployment",
                "web"
            ))
        );
        let mut elsewhere = none();
        elsewhere.overrides.insert(
            Space("other".into()),
            "a".into(),
            crate::overrides::LabelOverride {
                set: [("region".to_owned(), "us".to_owned())].into(),
                remove: Default::default(),
            },
        );
        assert!(
            !PlacementRoute::new(true, &placements, &a, &elsewhere).includes(&meta(
                "apps",
                "Deployment",
                "web"
            ))
        );
    }

    #[test]
    fn a_rollout_routes_objects_to_released_clusters_and_pins_to_the_others() {
        let placements = [placement("web-eu", "eu", "web")];
        let mut root = none();
        root.decisions.insert(
            (Space::default_space(), "web-eu".into()),
            crate::choice::Decision {
                released: Some(["a".to_owned()].into()),
                ..Default::default()
            },
        );
        let object = meta("apps", "Deployment", "web");
        let pin = ObjectMeta {
            key: crate::waves::pin_key(&object.key),
            labels: [(
                crate::waves::PIN_PLACEMENT_LABEL.to_owned(),
                "web-eu".to_owned(),
            )]
            .into(),
        };
        let released = PlacementRoute::new(false, &placements, &[cluster("a", "eu")], &root);
        assert!(released.includes(&object) && !released.includes(&pin));
        let held_back = PlacementRoute::new(false, &placements, &[cluster("b", "eu")], &root);
        assert!(!held_back.includes(&object) && held_back.includes(&pin));
        let both = PlacementRoute::new(
            true,
            &placements,
            &[cluster("a", "eu"), cluster("b", "eu")],
            &root,
        );
        assert!(both.includes(&object) && both.includes(&pin));
        assert_ne!(released.id(), held_back.id());
        // Without a rollout, pins go nowhere.
        let plain = PlacementRoute::new(true, &placements, &[cluster("b", "eu")], &none());
        assert!(plain.includes(&object) && !plain.includes(&pin));
    }

    #[test]
    fn ids_change_exactly_when_the_relevant_placements_change() {
        let a = [
            placement("web-eu", "eu", "web"),
            placement("db-us", "us", "db"),
        ];
        let b = [
            placement("db-us", "us", "other"),
            placement("web-eu", "eu", "web"),
        ];
        let eu = [cluster("a", "eu")];
        // A placement elsewhere changing does not change eu's route.
        assert_eq!(
            PlacementRoute::new(true, &a, &eu, &none()).id(),
            PlacementRoute::new(true, &b, &eu, &none()).id()
        );
        let us = [cluster("b", "us")];
        assert_ne!(
            PlacementRoute::new(true, &a, &us, &none()).id(),
            PlacementRoute::new(true, &b, &us, &none()).id()
        );
        assert_ne!(
            PlacementRoute::new(true, &a, &eu, &none()).id(),
            PlacementRoute::new(false, &a, &eu, &none()).id()
        );
    }
}
