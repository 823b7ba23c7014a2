//! What a node knows of its subtree from its children's reports: the inventory of
//! clusters below each child, per-cluster statuses, and children's summaries; and the
//! summaries this node forwards upward.

use std::collections::{BTreeMap, BTreeSet};

use strata_protocol::model::{Cluster, Labels, ObjectKey, ObjectKeyParts};
use strata_protocol::wire::{Report, ReportKey, ReportValue};

use strata_node::store::ReportSlot;

mod by_object;
mod endpoints;
mod summaries;
mod tier_counts;
pub use summaries::Selection;
use summaries::is_summary;
pub use tier_counts::{ClusterState, Counts, Tally, TierCounts};

/// Why a child's report was refused: every variant names the reporting child, the
/// cluster or node its report named, and the path it claimed for it where it gave one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // the fields are named in the type's doc
pub enum ReportRefusal {
    /// An agent reported for a cluster other than its own.
    #[error("agent {child:?} reported for cluster {cluster:?}, which is not its own")]
    NotItsCluster { child: String, cluster: String },
    /// An agent reported a link: agents have no children.
    #[error("agent {child:?} reported the link of {node:?}, but agents have no children")]
    AgentReportedLink { child: String, node: String },
    /// A relay reported a link that is not in its subtree.
    #[error(
        "relay {child:?} reported the link of {node:?} under {path:?}, which does not start with it"
    )]
    LinkOutsideSubtree {
        child: String,
        node: String,
        path: Vec<String>,
    },
    /// A relay reported a cluster whose path does not run through it.
    #[error(
        "relay {child:?} reported cluster {cluster:?} whose path {path:?} does not pass through it"
    )]
    OutsideSubtree {
        child: String,
        cluster: String,
        path: Vec<String>,
    },
}

/// A link record must come from a relay and lie in its subtree: its path starts with
/// the reporting relay (the link of one of its own children, or one it forwards).
fn check_link(
    child: &str,
    child_is_relay: bool,
    node: &str,
    report: &Report,
) -> Result<(), ReportRefusal> {
    if !child_is_relay {
        return Err(ReportRefusal::AgentReportedLink {
            child: child.to_owned(),
            node: node.to_owned(),
        });
    }
    match &report.value {
        ReportValue::Link(l) if l.path.first().map(String::as_str) != Some(child) => {
            Err(ReportRefusal::LinkOutsideSubtree {
                child: child.to_owned(),
                node: node.to_owned(),
                path: l.path.clone(),
            })
        }
        _ => Ok(()),
    }
}

/// The first slot `from` may hold in the key order: the first report key of all is a
/// status with every field empty. A child's slots are those from here on while the
/// slot's child is `from`.
pub(crate) fn first_slot(from: String) -> ReportSlot {
    (
        from,
        ReportKey::Status {
            cluster: String::new(),
            object: ObjectKey::new(ObjectKeyParts {
                space: strata_protocol::model::Space(String::new()),
                group: String::new(),
                version: String::new(),
                kind: String::new(),
                namespace: None,
                name: String::new(),
            }),
        },
    )
}

/// Reports received from children, indexed for routing and summarizing. Each child's
/// reports are kept apart: several children report summaries of the same object.
#[derive(Debug, Default)]
pub struct SubtreeReports {
    /// Every stored report, by the child that sent it and what it is about.
    stored: BTreeMap<ReportSlot, ReportValue>,
    /// The cluster records among them with their inherited labels, by (child, cluster),
    /// in the order of `stored`: kept beside it so that a summary or a plan walks the
    /// inventory without scanning every status and cloning every cluster's labels
    /// (both were most of a relay's CPU at 10,000 clusters).
    inventory: BTreeMap<(String, String), Cluster>,
    /// Moves whenever `inventory` changes: a [`Selection`] made at one generation holds
    /// while it does not move.
    inventory_generation: u64,
    /// Labels this node and its ancestors give every cluster below (a cluster's own
    /// labels win).
    labels: Labels,
    /// How many of the stored reports are summaries: none at a relay whose children are
    /// all agents, which then need not be asked for any.
    summaries: usize,
    /// The web view's counts per relay subtree, kept in step with the cluster and
    /// link records stored.
    counts: TierCounts,
    /// The endpoints reports among them, by object.
    endpoints: endpoints::EndpointIndex,
    /// The clusters' statuses among them, by object.
    statuses: by_object::StatusesByObject,
}

impl SubtreeReports {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds from what the store kept.
    pub fn restore(stored: impl IntoIterator<Item = (ReportSlot, ReportValue)>) -> Self {
        let stored: BTreeMap<ReportSlot, ReportValue> = stored.into_iter().collect();
        let mut reports = SubtreeReports {
            summaries: stored.keys().filter(|(_, k)| is_summary(k)).count(),
            stored,
            inventory: BTreeMap::new(),
            inventory_generation: 0,
            labels: Labels::new(),
            counts: TierCounts::default(),
            endpoints: endpoints::EndpointIndex::default(),
            statuses: by_object::StatusesByObject::default(),
        };
        reports.index_all();
        let slots: Vec<ReportSlot> = reports.stored.keys().cloned().collect();
        for slot in &slots {
            reports.count(slot);
            reports.index_by_object(slot);
        }
        reports
    }

    /// Sets the labels every cluster below inherits.
    pub fn set_labels(&mut self, labels: Labels) {
        if labels != self.labels {
            self.labels = labels;
            self.index_all();
        }
    }

    /// Builds the inventory index afresh from what is stored.
    fn index_all(&mut self) {
        self.inventory_generation += 1;
        self.inventory = self
            .stored
            .iter()
            .filter_map(|((from, _), v)| match v {
                ReportValue::Cluster(c) => {
                    Some(((from.clone(), c.name.clone()), self.effective(c)))
                }
                _ => None,
            })
            .collect();
    }

    /// Keeps the inventory index in step with `slot`, which was just stored or dropped.
    fn index(&mut self, slot: &ReportSlot) {
        self.index_by_object(slot);
        let (from, ReportKey::Cluster { name }) = slot else {
            return;
        };
        let key = (from.clone(), name.clone());
        match self.stored.get(slot) {
            Some(ReportValue::Cluster(c)) => {
                let effective = self.effective(c);
                // A cluster reported again unchanged (every reconnect) moves nothing.
                if self.inventory.get(&key) != Some(&effective) {
                    self.inventory.insert(key, effective);
                    self.inventory_generation += 1;
                }
            }
            _ => {
                if self.inventory.remove(&key).is_some() {
                    self.inventory_generation += 1;
                }
            }
        }
    }

    /// Keeps the indexes by object (endpoints, statuses) in step with `slot`.
    fn index_by_object(&mut self, slot: &ReportSlot) {
        self.endpoints.index(slot, self.stored.contains_key(slot));
        self.statuses.index(slot, self.stored.get(slot));
    }

    /// A cluster as placements see it here: with the inherited labels (and before any
    /// change of its labels at the root).
    pub fn effective(&self, cluster: &Cluster) -> Cluster {
        let mut c = cluster.clone();
        for (k, v) in &self.labels {
            c.labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        c
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
            ReportKey::Upsynced { cluster, .. } | ReportKey::Endpoints { cluster, .. }
                if child_is_relay =>
            {
                // A relay forwards upsynced objects and endpoints of the clusters below
                // it only.
                let slot = (
                    child.to_owned(),
                    ReportKey::Cluster {
                        name: cluster.clone(),
                    },
                );
                if self.stored.contains_key(&slot) {
                    return Ok(());
                }
                return Err(ReportRefusal::OutsideSubtree {
                    child: child.to_owned(),
                    cluster: cluster.clone(),
                    path: Vec::new(),
                });
            }
            ReportKey::Upsynced { cluster, .. } | ReportKey::Endpoints { cluster, .. } => cluster,
            ReportKey::Link { node } => return check_link(child, child_is_relay, node, report),
            ReportKey::Summary { .. } | ReportKey::Complete { .. } => return Ok(()),
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
        let slot = (child.to_owned(), report.key);
        let changed = match report.value {
            ReportValue::Removed => return self.remove(&slot),
            value => {
                let changed = self.stored.get(&slot) != Some(&value);
                if changed && self.stored.insert(slot.clone(), value).is_none() {
                    self.summaries += usize::from(is_summary(&slot.1));
                }
                changed
            }
        };
        if changed {
            self.index(&slot);
            self.count(&slot);
        }
        changed
    }

    /// Every slot `child` reported.
    pub fn slots_of(&self, child: &str) -> Vec<ReportSlot> {
        self.of_node(crate::tier::session_key::node_of(child))
            .map(|(slot, _)| slot)
            .filter(|(from, _)| from == child)
            .cloned()
            .collect()
    }

    /// The reports of every session of node `node` (its own, `node#replica`'s), and
    /// none other, found by range rather than by scanning everything stored: a relay
    /// child's route is looked up at every change of a cluster below it, and a scan of
    /// the root's reports each time (10,000 clusters) was quadratic in a storm.
    fn of_node(&self, node: &str) -> impl Iterator<Item = (&ReportSlot, &ReportValue)> {
        // Node names are DNS labels, so after `node` in the key order come only its
        // replicas (`node#...`) before `node$`.
        self.stored
            .range(first_slot(node.to_owned())..first_slot(format!("{node}$")))
    }

    /// Drops one stored report. Returns whether it was there.
    pub fn remove(&mut self, slot: &ReportSlot) -> bool {
        let removed = self.stored.remove(slot).is_some();
        if removed {
            self.summaries -= usize::from(is_summary(&slot.1));
            self.index(slot);
            self.count(slot);
        }
        removed
    }

    /// Every stored report.
    pub fn iter(&self) -> impl Iterator<Item = (&ReportSlot, &ReportValue)> {
        self.stored.iter()
    }

    /// How many clusters `child` reported (without copying them: a relay child's link
    /// record carries the count, and is made at every change of that link).
    pub fn cluster_count_below(&self, child: &str) -> usize {
        self.inventory_of(crate::tier::session_key::node_of(child))
            .filter(|(from, _)| *from == child)
            .count()
    }

    /// The clusters below every session of node `node` (all its replicas), with their
    /// inherited labels; a cluster two replicas both report counts once.
    pub fn clusters_below_node(&self, node: &str) -> Vec<Cluster> {
        let mut seen = BTreeSet::new();
        self.inventory_of(node)
            .filter(|(from, _)| crate::tier::session_key::node_of(from) == node)
            .filter(|(_, c)| seen.insert(c.name.as_str()))
            .map(|(_, c)| c.clone())
            .collect()
    }

    /// The inventory of every session of node `node` (as [`SubtreeReports::of_node`]
    /// finds its reports: by range, with its replicas and no neighbour).
    fn inventory_of(&self, node: &str) -> impl Iterator<Item = (&str, &Cluster)> {
        self.inventory
            .range((node.to_owned(), String::new())..(format!("{node}$"), String::new()))
            .map(|((from, _), c)| (from.as_str(), c))
    }

    /// The cluster `from` reported as `name`, with its inherited labels.
    pub fn cluster(&self, from: &str, name: &str) -> Option<&Cluster> {
        self.inventory.get(&(from.to_owned(), name.to_owned()))
    }

    /// One stored report.
    pub fn get(&self, slot: &ReportSlot) -> Option<&ReportValue> {
        self.stored.get(slot)
    }

    /// Every cluster in the subtree, as reported (without inherited labels).
    pub fn clusters(&self) -> impl Iterator<Item = &Cluster> {
        self.stored.values().filter_map(|v| match v {
            ReportValue::Cluster(c) => Some(c),
            _ => None,
        })
    }

    /// The Services and Ingresses with endpoints reported below.
    pub fn endpoint_objects(&self) -> impl Iterator<Item = &ObjectKey> {
        self.endpoints.objects()
    }

    /// The endpoints reported for `object`, by cluster (with the child that reported
    /// them), in cluster order.
    pub fn endpoints_of(
        &self,
        object: &ObjectKey,
    ) -> impl Iterator<Item = (String, String, &strata_protocol::wire::ServiceEndpoints)> {
        self.endpoints.of(object).filter_map(|slot| {
            let Some(ReportValue::Endpoints(e)) = self.stored.get(&slot) else {
                return None;
            };
            let (from, ReportKey::Endpoints { cluster, .. }) = slot else {
                return None;
            };
            Some((from, cluster, e))
        })
    }

    /// Every cluster in the subtree with its inherited labels ([`SubtreeReports::effective`]),
    /// in the order of [`SubtreeReports::clusters`], by the child that reported it.
    pub fn inventory(&self) -> impl Iterator<Item = (&str, &Cluster)> {
        self.inventory
            .iter()
            .map(|((from, _), c)| (from.as_str(), c))
    }
}

#[cfg(test)]
mod tests {
    use strata_protocol::choice::RootView;
    use strata_protocol::model::{Health, Status};
    use strata_protocol::summary::Summary;

    use super::*;

    use crate::tier::testing::{cluster_report as cluster, link_report};

    #[test]
    fn a_nodes_reports_are_found_by_range_with_its_replicas_and_no_neighbour() {
        let mut r = SubtreeReports::new();
        for from in ["eu", "eu#a", "eu#b", "eu-2", "e", "eu0", "ev"] {
            assert!(r.accept(from, cluster(&format!("{from}-c"), &[])));
        }
        let names = |v: Vec<Cluster>| v.into_iter().map(|c| c.name).collect::<Vec<_>>();
        assert_eq!(
            names(r.clusters_below_node("eu")),
            ["eu-c", "eu#a-c", "eu#b-c"]
        );
        assert_eq!(names(r.clusters_below_node("eu-2")), ["eu-2-c"]);
        assert_eq!(r.slots_of("eu#a").len(), 1);
        assert_eq!(r.slots_of("eu").len(), 1);
    }

    #[test]
    fn an_agent_may_report_only_its_own_cluster() {
        let r = SubtreeReports::new();
        assert!(r.check("pos-1", false, &cluster("pos-1", &[])).is_ok());
        assert_eq!(
            r.check("pos-1", false, &cluster("pos-2", &[]))
                .unwrap_err()
                .to_string(),
            "agent \"pos-1\" reported for cluster \"pos-2\", which is not its own"
        );
    }

    #[test]
    fn a_relay_may_report_only_clusters_below_it() {
        let r = SubtreeReports::new();
        assert!(r.check("eu", true, &cluster("c1", &["eu", "site"])).is_ok());
        assert!(
            r.check("eu", true, &cluster("c1", &["us", "site"]))
                .is_err()
        );
        assert!(r.check("eu", true, &cluster("c1", &[])).is_err());
    }

    fn link(node: &str, path: &[&str]) -> Report {
        let record = crate::tier::testing::link(strata_protocol::wire::Role::Relay, path, true, 1);
        link_report(node, record)
    }

    #[test]
    fn links_come_only_from_relays_and_from_their_own_subtree() {
        let r = SubtreeReports::new();
        assert!(r.check("eu", true, &link("site", &["eu"])).is_ok());
        assert!(r.check("eu", true, &link("c9", &["eu", "site"])).is_ok());
        assert_eq!(
            r.check("eu", true, &link("us-site", &["us"]))
                .unwrap_err()
                .to_string(),
            "relay \"eu\" reported the link of \"us-site\" under [\"us\"], which does not start with it"
        );
        assert_eq!(
            r.check("c1", false, &link("c2", &["c1"]))
                .unwrap_err()
                .to_string(),
            "agent \"c1\" reported the link of \"c2\", but agents have no children"
        );
    }

    #[test]
    fn children_keep_their_own_summaries_of_one_object() {
        let mut r = SubtreeReports::new();
        let key = ReportKey::Summary {
            placement: "p".into(),
            object: ObjectKey::new(ObjectKeyParts {
                space: strata_protocol::model::Space::default_space(),
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: None,
                name: "x".into(),
            }),
        };
        for child in ["a", "b"] {
            r.accept(
                child,
                Report {
                    key: key.clone(),
                    value: ReportValue::Summary(Box::new(Summary::expected(3))),
                },
            );
        }
        assert_eq!(r.iter().count(), 2);
        let of_a = r.slots_of("a");
        assert_eq!(of_a.len(), 1);
        assert!(r.remove(&of_a[0]));
        assert_eq!(r.iter().count(), 1);
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
            space: strata_protocol::model::Space::default_space(),
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("pos".into()),
            name: name.into(),
        })
    }

    fn status(cluster: &str, object: &ObjectKey, health: Health) -> Report {
        Report {
            key: ReportKey::Status {
                cluster: cluster.into(),
                object: object.clone(),
            },
            value: ReportValue::Status(Status {
                health,
                revision: strata_protocol::model::Revision(7),
                observed_generation: None,
                message: (health == Health::Failed).then(|| format!("{cluster} broke")),
                numbers: [("ready".to_owned(), 1)].into(),
                status: Vec::new(),
                observed_at: strata_protocol::time::UnixMillis(1),
            }),
        }
    }

    fn summary_of(placement: &str, object: &ObjectKey, expected: u64) -> Report {
        Report {
            key: ReportKey::Summary {
                placement: placement.into(),
                object: object.clone(),
            },
            value: ReportValue::Summary(Box::new({
                // One cluster of the subtree reported, the others did not.
                let mut s = Summary::expected(expected - 1);
                if let ReportValue::Status(e1) = status("e1", object, Health::Available).value {
                    s.add_status("e1", &e1);
                }
                s
            })),
        }
    }

    #[test]
    fn many_objects_summarized_at_once_are_each_summarized_alone() {
        let placement = crate::tier::testing::placement("p");
        // Sorted: b, d, f are summarized; a, c, e, g only lie between them.
        let [a, b, c, d, e, f, g] = ["a", "b", "c", "d", "e", "f", "g"].map(key);
        let wanted = [b.clone(), d.clone(), f.clone()];
        let mut r = SubtreeReports::new();
        for agent in ["a1", "a2", "a3"] {
            r.accept(agent, cluster(agent, &[]));
            for o in [&a, &c, &e, &g] {
                r.accept(agent, status(agent, o, Health::Available));
            }
        }
        // a1 reports every wanted object, a2 all but d (failed on f), a3 none.
        for o in &wanted {
            r.accept("a1", status("a1", o, Health::Available));
        }
        r.accept("a2", status("a2", &b, Health::Progressing));
        r.accept("a2", status("a2", &f, Health::Failed));
        // The relay eu (clusters e1, e2) summarized b and f, and another placement's d.
        for c in ["e1", "e2"] {
            r.accept("eu", cluster(c, &["eu"]));
        }
        r.accept("eu", summary_of("p", &b, 2));
        r.accept("eu", summary_of("p", &f, 2));
        r.accept("eu", summary_of("other", &d, 2));

        let root = RootView::default();
        let check = |r: &SubtreeReports, cut_off: &BTreeSet<String>| -> Vec<Summary> {
            let selection = r.selection(&placement, &root, true);
            let many = r.summarize_many(&selection, &placement, &wanted, cut_off);
            let alone: Vec<Summary> = wanted
                .iter()
                .map(|o| r.summarize_in(&selection, &placement, o, cut_off))
                .collect();
            assert_eq!(many, alone);
            many
        };
        let none = BTreeSet::new();
        let counts = |s: &[Summary]| {
            s.iter()
                .map(|s| (s.expected, s.reporting))
                .collect::<Vec<_>>()
        };
        // b: a1, a2 report, a3 silent, eu's summary (2 expected, 1 reporting); d: a1
        // reports, a2, a3 and eu's e1, e2 silent (eu summarized d for another placement
        // only); f: as b.
        let all = check(&r, &none);
        assert_eq!(counts(&all), [(5, 3), (5, 1), (5, 3)]);
        assert_eq!(all[2].errors, 1);
        // eu summarized both b and f: its clusters are counted by its summaries alone.
        let both = [b.clone(), f.clone()];
        let selection = r.selection(&placement, &root, true);
        let covered = r.summarize_many(&selection, &placement, &both, &none);
        assert_eq!(counts(&covered), [(5, 3), (5, 3)]);
        assert_eq!(covered[1], all[2]);
        // eu cut off: its summaries do not count, its clusters are silent.
        let cut = check(&r, &["eu".to_owned()].into());
        assert_eq!(counts(&cut), [(5, 2), (5, 1), (5, 2)]);
        // a1's cluster moves to us and is reported under both: a status of it under
        // either record makes neither silent (b, f: 5 expected as before), and one
        // under each counts once per record (d).
        r.accept("us", cluster("a1", &["us"]));
        r.accept("us", status("a1", &d, Health::Available));
        let moved = check(&r, &none);
        assert_eq!(counts(&moved), [(5, 3), (6, 2), (5, 3)]);
        assert!(!r.selection(&placement, &root, true).unique_names);
        // Every summary taken back, then one sent again: counted again.
        for (placement, o) in [("p", &b), ("p", &f), ("other", &d)] {
            let mut gone = summary_of(placement, o, 2);
            gone.value = ReportValue::Removed;
            assert!(r.accept("eu", gone));
        }
        assert_eq!(r.summaries, 0);
        assert_eq!(counts(&check(&r, &none)), [(5, 2), (6, 2), (5, 2)]);
        r.accept("eu", summary_of("p", &b, 2));
        assert_eq!(counts(&check(&r, &none)), [(5, 3), (6, 2), (5, 2)]);
    }
}
