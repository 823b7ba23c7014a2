//! What a node tells its parent: the clusters below it, summaries of its subtree, and
//! the marker that a run has reported everything; and how it takes children's reports.

use std::collections::BTreeSet;
use std::collections::btree_map::Entry;

use strata_protocol::model::{Cluster, ObjectKey, ObjectMeta};
use strata_protocol::time::Instant;
use strata_protocol::wire::{Report, ReportKey, ReportValue};

use super::{CLUSTER_GRACE, NodeCore, SUMMARY_PROGRESS_SPACING, Selections};
use crate::tier::reports::SubtreeReports;
use strata_node::store::ReportSlot;
use strata_protocol::choice::RootView;
use strata_protocol::placement::Placement;
use strata_protocol::summary::Summary;

impl NodeCore {
    pub(super) fn accept_report(
        &mut self,
        now: Instant,
        child: &str,
        relay: bool,
        mut report: Report,
    ) {
        if !self.replica_report(now, child, &report) {
            return;
        }
        // The log's key for the object: one copy of its parts, and comparisons of
        // stored statuses with the objects being summarized compare pointers.
        if let ReportKey::Status { object, .. } | ReportKey::Summary { object, .. } =
            &mut report.key
            && let Some(o) = self.log.get(object)
        {
            *object = o.key().clone();
        }
        let mut cluster_changed = false;
        if let ReportValue::Cluster(c) = &mut report.value {
            if !relay {
                c.path.clear();
            }
            c.path.insert(0, self.name.clone());
            cluster_changed = true;
        }
        match &report.key {
            ReportKey::Status { object, .. } | ReportKey::Summary { object, .. } => {
                self.dirty.insert(object.clone());
            }
            ReportKey::Cluster { .. } => cluster_changed = true,
            ReportKey::Link { .. } | ReportKey::Upsynced { .. } | ReportKey::Endpoints { .. } => {
                return self.accept_forwarded(now, child, report);
            }
            ReportKey::Complete { .. } => return,
        }
        if self.store_report(child, &report) && cluster_changed {
            if let ReportKey::Cluster { .. } = &report.key {
                let up = match &report.value {
                    ReportValue::Cluster(c) => self.cluster_upward(c),
                    _ => report.clone(),
                };
                if let Some(link) = &mut self.parent {
                    link.push_report(now, up);
                }
            }
            self.stale_routes.insert(child.to_owned());
            self.dirty.extend(self.log.live().map(|o| o.key().clone()));
            self.link_clusters_changed(child);
            self.replan = true;
        }
    }

    /// A report kept here and forwarded upward whole: a link record from a relay child
    /// (checked to start with that child; stored with this node put first in its path),
    /// an upsynced object, or a Service's endpoints on a cluster.
    fn accept_forwarded(&mut self, now: Instant, child: &str, mut report: Report) {
        if let ReportValue::Link(l) = &mut report.value {
            l.path.insert(0, self.name.clone());
            // Reachability below changed: failover may choose again. Only then: a
            // record also changes with its lag or its certificate, and planning again
            // for every such record (a relay forwards one per child's first ack) kept
            // a root of 10,000 clusters planning at every tick of an update.
            let slot = (child.to_owned(), report.key.clone());
            let same_reach = matches!(self.reports.get(&slot),
                Some(ReportValue::Link(before)) if before.connected == l.connected && before.since == l.since);
            if !same_reach {
                self.replan = true;
            }
        }
        if self.store_report(child, &report)
            && let Some(link) = &mut self.parent
        {
            link.push_report(now, report);
        }
    }

    /// Keeps a child's report (durably, with the next batch); it is no longer stale.
    /// Returns whether it changed anything.
    fn store_report(&mut self, child: &str, report: &Report) -> bool {
        let slot = (child.to_owned(), report.key.clone());
        self.stale.remove(&slot);
        if !self.reports.accept(child, report.clone()) {
            return false;
        }
        let stored = match &report.value {
            ReportValue::Removed => None,
            value => Some(value.clone()),
        };
        self.batch.reports.push((slot, stored));
        true
    }

    /// Drops what `child` reported in earlier runs and not again in this one; its
    /// inventory records only after [`CLUSTER_GRACE`] (see there), unless reported
    /// again meanwhile.
    pub(super) fn sweep(&mut self, now: Instant, child: &str) {
        self.sweep_where(now, child, |key| !matches!(key, ReportKey::Cluster { .. }));
        if self
            .stale_of(child)
            .any(|(_, key)| matches!(key, ReportKey::Cluster { .. }))
        {
            self.cluster_sweeps
                .insert(child.to_owned(), now + CLUSTER_GRACE);
        }
    }

    /// Drops the inventory records of children's earlier runs whose grace is over.
    pub(super) fn sweep_clusters_due(&mut self, now: Instant) {
        let due: Vec<String> = self
            .cluster_sweeps
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(child, _)| child.clone())
            .collect();
        for child in due {
            self.cluster_sweeps.remove(&child);
            let gone = self
                .stale_of(&child)
                .filter(|(_, key)| matches!(key, ReportKey::Cluster { .. }))
                .count();
            if gone > 0 {
                tracing::info!(
                    child = %child,
                    clusters = gone,
                    grace = ?CLUSTER_GRACE,
                    "dropping clusters the child's new run has not reported"
                );
            }
            self.sweep_where(now, &child, |_| true);
        }
    }

    /// The stale slots of `child`, found by range: every child of a relay whose agents
    /// all restarted at once has its slots stale while it reports again, and each
    /// child's sweep scanned all of them: quadratic in the children of a storm.
    fn stale_of<'a>(&'a self, child: &'a str) -> impl Iterator<Item = &'a ReportSlot> + 'a {
        self.stale
            .range(crate::tier::reports::first_slot(child.to_owned())..)
            .take_while(move |(from, _)| from == child)
    }

    fn sweep_where(&mut self, now: Instant, child: &str, pick: impl Fn(&ReportKey) -> bool) {
        let gone: Vec<ReportSlot> = self
            .stale_of(child)
            .filter(|(_, key)| pick(key))
            .cloned()
            .collect();
        for slot in gone {
            self.stale.remove(&slot);
            if self.reports.remove(&slot) {
                let cluster = matches!(slot.1, ReportKey::Cluster { .. });
                self.forget_report(now, slot);
                if cluster {
                    self.replan = true;
                    self.stale_routes.insert(child.to_owned());
                    self.link_clusters_changed(child);
                }
            }
        }
    }

    /// Reports everything upward (clusters, summaries of every object), then the
    /// marker that says so.
    pub(super) fn report_everything(&mut self, now: Instant) {
        self.sent.clear();
        let clusters: Vec<Report> = self
            .reports
            .clusters()
            .map(|c| self.cluster_upward(c))
            .collect();
        let links: Vec<Report> = self
            .reports
            .iter()
            .filter(|((_, k), _)| {
                matches!(
                    k,
                    ReportKey::Link { .. }
                        | ReportKey::Upsynced { .. }
                        | ReportKey::Endpoints { .. }
                )
            })
            .map(|((_, key), value)| Report {
                key: key.clone(),
                value: value.clone(),
            })
            .collect();
        if let Some(link) = &mut self.parent {
            for r in clusters.into_iter().chain(links) {
                link.push_report(now, r);
            }
        }
        self.push_all_links(now);
        self.dirty.extend(self.log.live().map(|o| o.key().clone()));
        self.push_summaries(now);
        if let Some(link) = &mut self.parent {
            link.push_report(
                now,
                Report {
                    key: ReportKey::Complete { run: self.run },
                    value: ReportValue::Complete,
                },
            );
        }
    }

    pub(super) fn forget_report(&mut self, now: Instant, slot: ReportSlot) {
        self.batch.reports.push((slot.clone(), None));
        let key = slot.1;
        if let (
            Some(link),
            ReportKey::Cluster { .. }
            | ReportKey::Link { .. }
            | ReportKey::Upsynced { .. }
            | ReportKey::Endpoints { .. },
        ) = (&mut self.parent, &key)
        {
            link.push_report(
                now,
                Report {
                    key,
                    value: ReportValue::Removed,
                },
            );
        } else if let ReportKey::Status { object, .. } | ReportKey::Summary { object, .. } = &key {
            self.dirty.insert(object.clone());
        }
    }

    /// The cluster record as this node reports it upward: this node's labels added
    /// (the cluster's own win).
    pub(super) fn cluster_upward(&self, cluster: &Cluster) -> Report {
        let mut c = cluster.clone();
        for (k, v) in &self.labels {
            c.labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Report {
            key: ReportKey::Cluster {
                name: c.name.clone(),
            },
            value: ReportValue::Cluster(c),
        }
    }

    /// Recomputes the summaries of changed objects and pushes those that changed
    /// upward (relays only; the root answers queries from its reports).
    pub(super) fn push_summaries(&mut self, now: Instant) {
        self.next_summary = now + self.summary_interval;
        let Some(link) = &mut self.parent else {
            self.dirty.clear();
            self.paced.clear();
            return;
        };
        // Summaries that only progressed wait for the progress clock; news goes now.
        let progress_due = self.progress_clock.is_some_and(|at| now >= at);
        if progress_due {
            self.dirty.append(&mut self.paced);
        }
        let mut progressed = false;
        let dirty: Vec<(ObjectKey, Option<std::sync::Arc<ObjectMeta>>)> =
            std::mem::take(&mut self.dirty)
                .into_iter()
                .map(|object| {
                    let live = self.log.get(&object).map(|o| o.meta.clone());
                    (object, live)
                })
                .collect();
        let none_cut_off = BTreeSet::new();
        for placement in &self.placements {
            // Which clusters the placement selects is the same for every object (one
            // selection for current objects, one for pinned revisions): computed once
            // per placement and kept while the inventory holds still; the objects of
            // each selection are summarized together (`dirty` is sorted, so is each).
            let mut current = Vec::new();
            let mut pinned = Vec::new();
            for (object, live) in &dirty {
                // A placement summarizes objects of its own space only. A placement of
                // the same name in another space must not take back (`Removed`) the
                // summary this one sent: both are keyed by name and object.
                if object.space != placement.space {
                    continue;
                }
                if live.as_ref().is_some_and(|m| placement.places_object(m)) {
                    match strata_protocol::waves::pinned_key(object) {
                        None => current.push(object.clone()),
                        Some(_) => pinned.push(object.clone()),
                    }
                } else if self
                    .sent
                    .remove(&(placement.name.clone(), object.clone()))
                    .is_some()
                {
                    link.push_report(
                        now,
                        Report {
                            key: ReportKey::Summary {
                                placement: placement.name.clone(),
                                object: object.clone(),
                            },
                            value: ReportValue::Removed,
                        },
                    );
                }
            }
            for objects in [current, pinned] {
                let summaries = summaries_with(
                    self.selections.get_mut(),
                    &self.reports,
                    &self.root_view,
                    placement,
                    &objects,
                    &none_cut_off,
                );
                for (object, summary) in objects.into_iter().zip(summaries) {
                    let key = (placement.name.clone(), object);
                    let before = self.sent.get(&key);
                    if before != Some(&summary) {
                        if let Some(before) = before
                            && !summary.is_news_after(before)
                        {
                            if !progress_due {
                                self.paced.insert(key.1);
                                continue;
                            }
                            progressed = true;
                        }
                        self.stats.summaries_sent += 1;
                        let report_key = ReportKey::Summary {
                            placement: key.0.clone(),
                            object: key.1.clone(),
                        };
                        self.sent.insert(key, summary.clone());
                        link.push_report(
                            now,
                            Report {
                                key: report_key,
                                value: ReportValue::Summary(Box::new(summary)),
                            },
                        );
                    }
                }
            }
        }
        // A push of progress restarts the clock; a due tick with nothing to push stops
        // it; progress waiting while it stands starts it.
        if progressed {
            self.progress_clock = Some(now + SUMMARY_PROGRESS_SPACING);
        } else if progress_due {
            self.progress_clock = None;
        }
        if !self.paced.is_empty() && self.progress_clock.is_none() {
            self.progress_clock = Some(now + SUMMARY_PROGRESS_SPACING);
        }
        // The summary tick coalesced these already: waiting the outbox's flush
        // interval too would add its 100 ms at every tier on the way to the root.
        link.flush_reports();
    }
}

impl NodeCore {
    /// The summary of `object` under `placement` over this node's subtree, as
    /// [`SubtreeReports::summarize`] makes it, with the clusters the placement selects
    /// kept across calls while the inventory holds: at 10,000 clusters making that
    /// selection is most of a summary's cost, and every status a user or the bench asks
    /// the root for made it again.
    pub fn summary(&self, placement: &Placement, object: &ObjectKey) -> Summary {
        self.summary_without(placement, object, &BTreeSet::new())
    }

    /// The summary of `object` under the placement named `placement` that this relay
    /// last pushed to its parent: what its parent has of it, or is about to have (none
    /// at the root, and none before the first push). A lookup, where
    /// [`NodeCore::summary`] computes over every cluster below.
    pub fn pushed_summary(&self, placement: &str, object: &ObjectKey) -> Option<&Summary> {
        self.sent.get(&(placement.to_owned(), object.clone()))
    }

    /// Where [`NodeCore::summary`] comes from, child by child: each child relay's
    /// summary of its subtree (a tier, `false`), and each selected cluster reporting
    /// directly here (`true`) with its status as a one-cluster summary (or expected and
    /// silent). Children with nothing selected are left out.
    pub fn summary_parts(
        &self,
        placement: &Placement,
        object: &ObjectKey,
    ) -> Vec<(String, bool, Summary)> {
        let mut out: Vec<(String, bool, Summary)> = Vec::new();
        let mut summarized: BTreeSet<&str> = BTreeSet::new();
        for ((from, key), value) in self.reports.iter() {
            if let (
                ReportKey::Summary {
                    placement: p,
                    object: o,
                },
                ReportValue::Summary(sum),
            ) = (key, value)
                && *p == placement.name
                && o == object
                && sum.expected > 0
            {
                summarized.insert(from.as_str());
                out.push((from.clone(), false, (**sum).clone()));
            }
        }
        let view = self.root_view.for_placement(placement);
        for (from, cluster) in self.reports.inventory() {
            if summarized.contains(from) || view.revision_for(cluster).is_none() {
                continue;
            }
            let slot: ReportSlot = (
                from.to_owned(),
                ReportKey::Status {
                    cluster: cluster.name.clone(),
                    object: object.clone(),
                },
            );
            let summary = match self.reports.get(&slot) {
                Some(ReportValue::Status(status)) => Summary::of_status(&cluster.name, status),
                _ => Summary::expected(1),
            };
            out.push((cluster.name.clone(), true, summary));
        }
        out
    }

    /// [`NodeCore::summary`] leaving out the summaries of the children in `cut_off`, as
    /// [`SubtreeReports::summarize_without`] does (a rollout's gate, for children whose
    /// links are down).
    pub(super) fn summary_without(
        &self,
        placement: &Placement,
        object: &ObjectKey,
        cut_off: &BTreeSet<String>,
    ) -> Summary {
        summaries_with(
            &mut self.selections.borrow_mut(),
            &self.reports,
            &self.root_view,
            placement,
            std::slice::from_ref(object),
            cut_off,
        )
        .pop()
        .unwrap_or_default()
    }
}

/// The summaries of `objects` (sorted; all current keys or all pinned revisions' keys)
/// over the cached selection of their placement, made (again) when missing or made at
/// another inventory generation.
fn summaries_with(
    selections: &mut Selections,
    reports: &SubtreeReports,
    root: &RootView,
    placement: &Placement,
    objects: &[ObjectKey],
    cut_off: &BTreeSet<String>,
) -> Vec<Summary> {
    let Some(first) = objects.first() else {
        return Vec::new();
    };
    let current = strata_protocol::waves::pinned_key(first).is_none();
    let at = (placement.space.clone(), placement.name.clone(), current);
    let generation = reports.inventory_generation();
    let selection = match selections.entry(at) {
        Entry::Occupied(e) if e.get().made_at(generation) => e.into_mut(),
        Entry::Occupied(mut e) => {
            e.insert(reports.selection(placement, root, current));
            e.into_mut()
        }
        Entry::Vacant(e) => e.insert(reports.selection(placement, root, current)),
    };
    reports.summarize_many(selection, placement, objects, cut_off)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use strata_protocol::model::{Health, Revision, Status};
    use strata_protocol::wire::{ChildToParent, LinkPath, Report, ReportKey, ReportValue, Role};

    use super::*;
    use crate::tier::core::testing::{
        cluster, hello, hello_from, report, report_from, root, setup, turn,
    };

    fn complete(run: u64) -> Report {
        Report {
            key: ReportKey::Complete { run },
            value: ReportValue::Complete,
        }
    }

    fn clusters(core: &NodeCore) -> Vec<String> {
        core.reports().clusters().map(|c| c.name.clone()).collect()
    }

    /// `eu`'s run `run` on connection `conn`: its hello, its first batch of reports
    /// and "reported everything", then a turn.
    fn run(core: &mut NodeCore, now: Instant, conn: u64, run: u64, mut reports: Vec<Report>) {
        core.child_connected(now, "eu", conn).unwrap();
        core.child_message(now, "eu", conn, hello(run, None));
        reports.push(complete(run));
        report(core, now, conn, 0, reports);
        let _ = turn(core, now);
    }

    /// A relay that restarted without its disk says at once that it has reported
    /// everything, before any of its children is back: their clusters (and so the
    /// objects routed to it) stay for the grace, and only those it has not reported
    /// again by then go.
    #[test]
    fn a_new_runs_clusters_outlive_its_first_complete_for_the_grace() {
        let mut core = root();
        let t0 = Instant::ZERO;
        run(&mut core, t0, 1, 10, vec![cluster("c1"), cluster("c2")]);
        assert_eq!(clusters(&core), ["c1", "c2"]);

        // The new run, knowing nothing yet.
        let t1 = t0 + Duration::from_secs(5);
        run(&mut core, t1, 2, 11, vec![]);
        assert_eq!(clusters(&core), ["c1", "c2"], "kept through the grace");
        let due = t1 + CLUSTER_GRACE;
        assert!(
            core.poll_timeout().is_some_and(|t| t <= due),
            "the core wakes up for the sweep"
        );

        // c1's agent is back below it; c2's is not.
        let t2 = t1 + Duration::from_secs(10);
        report(&mut core, t2, 2, 1, vec![cluster("c1")]);
        let _ = turn(&mut core, t2);
        let _ = turn(&mut core, t1 + (CLUSTER_GRACE - Duration::from_millis(1)));
        assert_eq!(
            clusters(&core),
            ["c1", "c2"],
            "not before the grace is over"
        );
        let _ = turn(&mut core, due);
        assert_eq!(clusters(&core), ["c1"], "what was not reported again went");
    }

    /// A child's sweep drops its own stale reports only, not those of a child whose
    /// name begins with its own, stale too (both restarted).
    #[test]
    fn a_sweep_leaves_a_neighbours_stale_reports() {
        let t0 = Instant::ZERO;
        let mut core = NodeCore::new(
            t0,
            crate::tier::core::CoreSetup {
                log: crate::tier::core::new_log(1, true),
                ..setup("center", &["eu", "eu-2"], None)
            },
        );
        let eu2 = |core: &mut NodeCore, conn: u64, run: u64, items: Vec<Report>| {
            core.child_connected(t0, "eu-2", conn).unwrap();
            core.child_message(t0, "eu-2", conn, hello_from("eu-2", Role::Relay, run));
            report_from(core, t0, "eu-2", conn, 0, items);
            let _ = turn(core, t0);
        };
        let d1 = crate::tier::testing::cluster_report("d1", &["eu-2"]);
        eu2(&mut core, 7, 1, vec![d1, complete(1)]);
        run(&mut core, t0, 1, 10, vec![cluster("c1")]);
        assert_eq!(clusters(&core), ["c1", "d1"]);
        // Both restart; eu reports everything again (nothing), eu-2 not yet.
        eu2(&mut core, 8, 2, vec![]);
        run(&mut core, t0, 2, 11, vec![]);
        let _ = turn(&mut core, t0 + CLUSTER_GRACE);
        assert_eq!(clusters(&core), ["d1"], "eu's went, eu-2's stays");
    }

    /// A run that ends before its grace is over does not get its sweep: the next
    /// run's own "reported everything" starts a new grace.
    #[test]
    fn a_newer_run_cancels_the_pending_sweep() {
        let mut core = root();
        let t0 = Instant::ZERO;
        run(&mut core, t0, 1, 10, vec![cluster("c1")]);
        run(&mut core, t0, 2, 11, vec![]);
        let t1 = t0 + CLUSTER_GRACE / 2;
        core.child_connected(t1, "eu", 3).unwrap();
        core.child_message(t1, "eu", 3, hello(12, None));
        let t2 = t0 + CLUSTER_GRACE;
        let _ = turn(&mut core, t2);
        assert_eq!(
            clusters(&core),
            ["c1"],
            "no sweep before run 12 is complete"
        );
        report(&mut core, t2, 3, 0, vec![complete(12)]);
        let _ = turn(&mut core, t2);
        assert_eq!(clusters(&core), ["c1"], "run 12's grace begins");
        let _ = turn(&mut core, t2 + CLUSTER_GRACE);
        assert!(clusters(&core).is_empty(), "run 12's grace is over");
    }

    /// The relay `eu` below [`root`], with agents `c1`, `c2` and `c3`, driven in memory.
    struct Region {
        root: NodeCore,
        eu: NodeCore,
        /// Every summary `eu` pushed, in order.
        pushed: Vec<Summary>,
        /// The keys of every batch of reports `eu` sent up, in order.
        batches: Vec<Vec<ReportKey>>,
        /// The keys of the reports `eu` sent in the same transmit as each ack, in order.
        with_ack: Vec<Vec<ReportKey>>,
    }

    impl Region {
        fn new(t0: Instant) -> Self {
            let mut region = Region::empty(t0, &["c1", "c2", "c3"]);
            for (conn, name) in [(11, "c1"), (12, "c2"), (13, "c3")] {
                region.connect(t0, name, conn, Role::Agent);
                let mut cluster = crate::tier::testing::cluster(name, &[]);
                cluster.labels.insert("tier".into(), "store".into());
                region.agent_reports(
                    t0,
                    name,
                    0,
                    vec![Report {
                        key: ReportKey::Cluster { name: name.into() },
                        value: ReportValue::Cluster(cluster),
                    }],
                );
            }
            region.pump(t0);
            region
        }

        /// `eu` connected to the root, which has the placement `shop` and its object;
        /// `children` may connect to `eu`.
        fn empty(t0: Instant, children: &[&str]) -> Self {
            use strata_protocol::model::Cursor;
            use strata_protocol::sync::{LinkConfig, ParentLink};

            let parent = ParentLink::new(
                t0,
                LinkConfig::new("eu", Role::Relay),
                Cursor::default(),
                None,
            );
            let eu = NodeCore::new(t0, setup("eu", children, Some(parent)));
            let mut region = Region {
                root: root(),
                eu,
                pushed: Vec::new(),
                batches: Vec::new(),
                with_ack: Vec::new(),
            };
            region.root.child_connected(t0, "eu", 1).unwrap();
            region.eu.parent_connected(t0, LinkPath::Direct);
            let text = "apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: shop }
spec:
  objects: [ { selector: { matchLabels: { app: shop } } } ]
  clusters: { selector: { matchLabels: { tier: store } } }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: shop, namespace: retail, labels: { app: shop } }
data: { greeting: hello }
";
            region.apply(text);
            region
        }

        /// Applies the manifests `text` at the root.
        fn apply(&mut self, text: &str) {
            let manifests = strata_node::objects::parse_manifests(
                text,
                &strata_protocol::model::Space::default_space(),
            )
            .unwrap();
            self.root.apply_manifests(&manifests).unwrap();
        }

        /// `name` (an agent or a relay) connects to `eu` on `conn` and says hello.
        fn connect(&mut self, now: Instant, name: &str, conn: u64, role: Role) {
            self.eu.child_connected(now, name, conn).unwrap();
            self.eu
                .child_message(now, name, conn, hello_from(name, role, 1));
        }

        fn object(&self) -> ObjectKey {
            let object = self.eu.log().live().find(|o| o.key().name == "shop");
            object.expect("the object reached eu").key().clone()
        }

        fn agent_reports(&mut self, now: Instant, agent: &str, seq: u64, items: Vec<Report>) {
            let conn = match agent {
                "c1" => 11,
                "c2" => 12,
                _ => 13,
            };
            self.eu.child_message(
                now,
                agent,
                conn,
                ChildToParent::Reports(strata_protocol::wire::Reports {
                    epoch: 0,
                    epoch_start: 0,
                    seq,
                    items,
                }),
            );
        }

        /// Agent `agent`'s `seq`th batch: its status of the object.
        fn status(&mut self, now: Instant, agent: &str, seq: u64, health: Health, rev: u64) {
            let object = self.object();
            let status = Status {
                health,
                revision: Revision(rev),
                observed_generation: None,
                message: None,
                numbers: std::collections::BTreeMap::new(),
                status: Vec::new(),
                observed_at: strata_protocol::time::UnixMillis(rev),
            };
            let report = Report {
                key: ReportKey::Status {
                    cluster: agent.into(),
                    object,
                },
                value: ReportValue::Status(status),
            };
            self.agent_reports(now, agent, seq, vec![report]);
            self.pump(now);
        }

        /// Runs both nodes at `now` and passes their messages until both are quiet.
        fn pump(&mut self, now: Instant) {
            for _ in 0..20 {
                let _ = self.eu.process(now);
                let up = self.eu.transmit(now).to_parent;
                if up.iter().any(|m| matches!(m, ChildToParent::Ack { .. })) {
                    self.with_ack.push(
                        up.iter()
                            .filter_map(|m| match m {
                                ChildToParent::Reports(b) => Some(b.items.iter()),
                                _ => None,
                            })
                            .flatten()
                            .map(|i| i.key.clone())
                            .collect(),
                    );
                }
                for msg in &up {
                    if let ChildToParent::Reports(batch) = msg {
                        self.batches
                            .push(batch.items.iter().map(|i| i.key.clone()).collect());
                        for item in &batch.items {
                            if let ReportValue::Summary(s) = &item.value {
                                self.pushed.push((**s).clone());
                            }
                        }
                    }
                }
                let quiet = up.is_empty();
                for msg in up {
                    self.root.child_message(now, "eu", 1, msg);
                }
                let _ = self.root.process(now);
                let down = self.root.transmit(now).to_children;
                if quiet && down.is_empty() {
                    return;
                }
                for (_, _, msg) in down {
                    self.eu.parent_message(now, msg);
                }
            }
            panic!("the nodes kept talking");
        }

        /// Runs `eu`'s timers at `now`; returns the summaries it pushed since the last
        /// call (a status arriving when the summary tick is due is summarized at once).
        fn tick(&mut self, now: Instant) -> Vec<Summary> {
            self.eu.handle_timeout(now);
            self.pump(now);
            std::mem::take(&mut self.pushed)
        }
    }

    /// The children whose link records are among `keys`, in order.
    fn link_names(keys: &[ReportKey]) -> Vec<String> {
        keys.iter()
            .filter_map(|k| match k {
                ReportKey::Link { node } => Some(node.clone()),
                _ => None,
            })
            .collect()
    }

    /// A relay's relay children's link records are refreshed upward every LINK_REFRESH,
    /// all in one batch once the first is due: not each on its own clock, a packet (and
    /// an ACK back) apiece.
    #[test]
    fn relay_childrens_links_are_refreshed_together_once_the_first_is_due() {
        use crate::tier::core::LINK_REFRESH;
        let ms = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        let links_in = |batches: &[Vec<ReportKey>]| -> Vec<Vec<String>> {
            batches
                .iter()
                .map(|b| link_names(b))
                .filter(|l| !l.is_empty())
                .collect()
        };
        let mut r = Region::empty(ms(0), &["s1", "s2", "c9"]);
        r.connect(ms(0), "s1", 21, Role::Relay);
        r.pump(ms(0));
        let _ = r.tick(ms(100));
        r.connect(ms(2000), "s2", 22, Role::Relay);
        r.connect(ms(2000), "c9", 23, Role::Agent);
        r.pump(ms(2000));
        let _ = r.tick(ms(2100));
        let up = links_in(&r.batches);
        assert!(
            up.iter().flatten().any(|n| n == "s1") && up.iter().flatten().any(|n| n == "s2"),
            "each link went up when it came up: {up:?}"
        );
        r.batches.clear();
        // Nothing is due before s1's refresh.
        let due = u64::try_from(LINK_REFRESH.as_millis()).unwrap();
        let mut t = 2100;
        while t + 100 < due {
            t += 100;
            let _ = r.tick(ms(t));
        }
        assert_eq!(links_in(&r.batches), Vec::<Vec<String>>::new());
        // s1's refresh is due: s2's goes with it, in the same batch; the agent's link
        // is not refreshed.
        let _ = r.tick(ms(due + 100));
        assert_eq!(links_in(&r.batches), [["s1", "s2"]]);
        r.batches.clear();
        // Not again when s2's own refresh would have been due.
        let mut t = due + 100;
        while t < 2000 + due + 200 {
            t += 100;
            let _ = r.tick(ms(t));
        }
        assert_eq!(links_in(&r.batches), Vec::<Vec<String>>::new());
    }

    /// A change from the parent is acknowledged at once; relay children's link records
    /// half due or more ride in the ack's packet, and none is refreshed on its own
    /// clock within half a refresh after (an update's window at the parent: each
    /// packet up draws a QUIC ACK down).
    #[test]
    fn relay_childrens_links_ride_with_the_ack_of_a_change() {
        use crate::tier::core::LINK_REFRESH;
        let ms = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        let change = |r: &mut Region, greeting: &str| {
            r.apply(&format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: shop, namespace: retail, labels: {{ app: shop }} }}\ndata: {{ greeting: {greeting} }}\n"
            ));
        };
        let mut r = Region::empty(ms(0), &["s1", "s2", "c1"]);
        r.connect(ms(0), "s1", 21, Role::Relay);
        r.connect(ms(0), "s2", 22, Role::Relay);
        r.connect(ms(0), "c1", 11, Role::Agent);
        let mut cluster = crate::tier::testing::cluster("c1", &[]);
        cluster.labels.insert("tier".into(), "store".into());
        r.agent_reports(
            ms(0),
            "c1",
            0,
            vec![Report {
                key: ReportKey::Cluster { name: "c1".into() },
                value: ReportValue::Cluster(cluster),
            }],
        );
        let refresh = u64::try_from(LINK_REFRESH.as_millis()).unwrap();
        let mut t = 0;
        while t < refresh + 100 {
            t += 100;
            let _ = r.tick(ms(t));
        }
        let refreshed: Vec<String> = r.batches.iter().flat_map(|b| link_names(b)).collect();
        assert!(
            refreshed.ends_with(&["s1".to_owned(), "s2".to_owned()]),
            "{refreshed:?}"
        );
        r.batches.clear();
        r.with_ack.clear();
        // A change within half a refresh: acknowledged alone.
        change(&mut r, "hi");
        t += 900;
        r.pump(ms(t));
        assert!(
            r.eu.log().live().any(|o| o.revision.0 > 1),
            "the change reached eu"
        );
        assert_eq!(r.with_ack.len(), 1, "one ack for the change");
        assert!(link_names(&r.with_ack[0]).is_empty(), "{:?}", r.with_ack);
        // Half a refresh on: the records go with the ack.
        t += refresh / 2;
        let _ = r.tick(ms(t));
        change(&mut r, "hello");
        r.pump(ms(t));
        assert_eq!(r.with_ack.len(), 2, "one ack for each change");
        assert_eq!(link_names(&r.with_ack[1]), ["s1", "s2"]);
        // And none goes up on its own within half a refresh after.
        let with_ack = t;
        r.batches.clear();
        while t < with_ack + refresh / 2 {
            t += 100;
            let _ = r.tick(ms(t));
        }
        let alone: Vec<String> = r.batches.iter().flat_map(|b| link_names(b)).collect();
        assert!(alone.is_empty(), "{alone:?}");
    }

    /// Through a rollout a relay pushes its summary's progress at most every
    /// SUMMARY_PROGRESS_SPACING, what waited included, the first progress after a quiet
    /// spacing waiting one too, and news (settled, worse) at the next tick.
    #[test]
    fn a_relay_paces_a_rollouts_progress_and_pushes_news_at_once() {
        use strata_protocol::model::Health::{Applied, Available, Failed, Progressing};
        let ms = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        let mut r = Region::new(ms(0));
        r.status(ms(0), "c1", 1, Available, 1);
        r.status(ms(0), "c2", 1, Available, 1);
        r.status(ms(0), "c3", 1, Available, 1);
        let settled = r.tick(ms(100));
        assert!(
            settled
                .last()
                .is_some_and(|s| s.is_settled() && s.expected == 3),
            "{settled:?}"
        );
        // Leaving the settled state is progress: nothing progressed for a second, so
        // it starts the clock and waits for it.
        r.status(ms(1000), "c1", 2, Applied, 2);
        assert!(r.tick(ms(1100)).is_empty(), "the rollout's start waits");
        r.status(ms(1150), "c2", 2, Progressing, 2);
        assert!(r.tick(ms(1200)).is_empty(), "progress waits with it");
        r.status(ms(1250), "c3", 2, Applied, 2);
        assert!(
            r.tick(ms(1700)).is_empty(),
            "and waits without anything new"
        );
        let waited = r.tick(ms(1100) + SUMMARY_PROGRESS_SPACING);
        assert_eq!(waited.len(), 1, "what waited goes once the second is over");
        assert_eq!(waited[0].health.applied, 2, "{waited:?}");
        // Bad news does not wait.
        r.status(ms(2300), "c2", 3, Failed, 2);
        let failed = r.tick(ms(2300));
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].health.failed, 1);
        // Nor does the end of the rollout, within the progress spacing.
        r.status(ms(2350), "c1", 3, Available, 2);
        r.status(ms(2350), "c2", 4, Available, 2);
        r.status(ms(2350), "c3", 3, Available, 2);
        let done = r.tick(ms(2400));
        assert!(
            done.last()
                .is_some_and(|s| s.is_settled() && s.health.available == 3),
            "{done:?}"
        );
        // An update that settles within the spacing costs the parent one push, the
        // settled summary, after the clock has stopped.
        let mut pushed = Vec::new();
        for t in (2500..5000).step_by(100) {
            pushed.extend(r.tick(ms(t)));
        }
        assert!(pushed.is_empty(), "{pushed:?}");
        r.status(ms(5000), "c1", 4, Available, 3);
        r.status(ms(5150), "c2", 5, Available, 3);
        for t in (5000..5300).step_by(100) {
            pushed.extend(r.tick(ms(t)));
        }
        assert!(
            pushed.is_empty(),
            "the update's start and progress wait: {pushed:?}"
        );
        r.status(ms(5300), "c3", 4, Available, 3);
        for t in (5300..7500).step_by(100) {
            pushed.extend(r.tick(ms(t)));
        }
        assert_eq!(pushed.len(), 1, "{pushed:?}");
        assert!(
            pushed[0].is_settled() && pushed[0].min_revision == Some(Revision(3)),
            "{pushed:?}"
        );
    }
}
