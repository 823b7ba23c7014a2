//! Summaries of what a subtree reported, per placement and object: which clusters a
//! placement selects here (a [`Selection`], kept until the inventory changes), and the
//! counts over them, skipping what a child already summarized for its own subtree.

use std::collections::BTreeSet;

use strata_protocol::choice::RootView;
use strata_protocol::model::ObjectKey;
use strata_protocol::placement::Placement;
use strata_protocol::summary::Summary;
use strata_protocol::wire::{ReportKey, ReportValue};

use strata_node::store::ReportSlot;

use super::SubtreeReports;

impl SubtreeReports {
    /// The summary of `object` under `placement` for this node's whole subtree: the
    /// merge of children's summaries, of direct clusters' statuses, and of the clusters
    /// expected (selected by the placement) that have not reported. During a rollout,
    /// an object counts the clusters released and its pinned revision the others.
    pub fn summarize(&self, placement: &Placement, object: &ObjectKey, root: &RootView) -> Summary {
        self.summarize_without(placement, object, root, &BTreeSet::new())
    }

    /// [`SubtreeReports::summarize`] leaving out the summaries of the children in `cut_off`
    /// (their links are down: what they summarized last is stale); their clusters count
    /// as expected and silent.
    pub fn summarize_without(
        &self,
        placement: &Placement,
        object: &ObjectKey,
        root: &RootView,
        cut_off: &BTreeSet<String>,
    ) -> Summary {
        let current = strata_protocol::waves::pinned_key(object).is_none();
        let selection = self.selection(placement, root, current);
        self.summarize_in(&selection, placement, object, cut_off)
    }

    /// Moves whenever the inventory changes (see [`Selection`]).
    pub fn inventory_generation(&self) -> u64 {
        self.inventory_generation
    }

    /// Which clusters of the subtree `placement` sends its objects to, at their current
    /// revision (`current`) or at their pinned previous one: the part of a summary that
    /// does not depend on the object, so that many objects' summaries share it.
    pub fn selection(&self, placement: &Placement, root: &RootView, current: bool) -> Selection {
        let view = root.for_placement(placement);
        // One pass over the inventory index (inherited labels already applied);
        // statuses and summaries are then looked up by key, not found by scanning every
        // report of the subtree.
        let names: BTreeSet<&str> = self
            .inventory()
            .filter(|(_, c)| view.revision_for(c) == Some(current))
            .map(|(_, c)| c.name.as_str())
            .collect();
        // A cluster another child also reports (it moved) counts as selected under both.
        let records: Vec<(String, String)> = self
            .inventory()
            .filter(|(_, c)| names.contains(c.name.as_str()))
            .map(|(from, c)| (from.to_owned(), c.name.clone()))
            .collect();
        // A child's summary counts only while some cluster it reported is selected here:
        // what a child cut off before a placement (or a cluster's labels) moved away
        // summarized is stale, not the fleet.
        let selecting_children: BTreeSet<String> =
            records.iter().map(|(from, _)| from.clone()).collect();
        Selection {
            generation: self.inventory_generation,
            unique_names: names.len() == records.len(),
            records,
            selecting_children,
        }
    }

    /// The summary of `object` over a [`SubtreeReports::selection`] made for its
    /// placement (and for whether `object` is a pinned revision's key).
    pub fn summarize_in(
        &self,
        selection: &Selection,
        placement: &Placement,
        object: &ObjectKey,
        cut_off: &BTreeSet<String>,
    ) -> Summary {
        let mut one =
            self.summarize_many(selection, placement, std::slice::from_ref(object), cut_off);
        one.pop().unwrap_or_default()
    }

    /// The summaries of `objects` (sorted, without repeats; all current keys or all
    /// pinned revisions' keys) over one [`SubtreeReports::selection`], in their order.
    ///
    /// The same as [`SubtreeReports::summarize_in`] of each, for a fraction of the cost:
    /// a child's summaries are neighbours in the reports' order (by child, then
    /// object), so each summarizing child is one seek and a walk over its entries for
    /// `objects`; an object's statuses are one map in the index by object, in the
    /// records' order, so each object's are one merge with the records. Looking up
    /// every object of every cluster by its whole key was most of a relay's CPU in a
    /// reconnect storm, and walking every selected cluster's statuses between the
    /// first and last object a third of it while many objects settled.
    pub fn summarize_many(
        &self,
        selection: &Selection,
        placement: &Placement,
        objects: &[ObjectKey],
        cut_off: &BTreeSet<String>,
    ) -> Vec<Summary> {
        let Selection {
            records,
            selecting_children,
            unique_names,
            ..
        } = selection;
        let mut out = vec![Summary::default(); objects.len()];
        let (Some(first), Some(last)) = (objects.first(), objects.last()) else {
            return out;
        };
        // Children that summarized an object cover their whole subtree for it; count
        // the clusters of other children one by one.
        let mut via_summary: BTreeSet<(usize, &str)> = BTreeSet::new();
        let summary_of = |from: &str, object: &ObjectKey| -> ReportSlot {
            (
                from.to_owned(),
                ReportKey::Summary {
                    placement: placement.name.clone(),
                    object: object.clone(),
                },
            )
        };
        // Children whose summaries cover every object: their clusters' records need no
        // look at all (at the root, every child; a look per cluster of the fleet was
        // most of a summary query there).
        let mut covered_all: BTreeSet<&str> = BTreeSet::new();
        let (mut lo, mut hi) = (summary_of("", first), summary_of("", last));
        let children = if self.summaries == 0 {
            None
        } else {
            Some(selecting_children)
        };
        for from in children.into_iter().flatten() {
            let from = from.as_str();
            if cut_off.contains(from) {
                continue;
            }
            from.clone_into(&mut lo.0);
            from.clone_into(&mut hi.0);
            let mut summarized = 0;
            for (i, value) in among(objects, self.between(&lo, &hi)) {
                if let ReportValue::Summary(sum) = value {
                    out[i].merge(sum);
                    if via_summary.insert((i, from)) {
                        summarized += 1;
                    }
                }
            }
            if summarized == objects.len() {
                covered_all.insert(from);
            }
        }
        // A cluster's status is kept under the child that reported the cluster; those
        // of a child whose summary counted are in that summary already. A cluster two
        // children report (it moved) counts once as reported: with such names the
        // reported ones are collected by name, else counting suffices.
        let mut silent = vec![0u64; objects.len()];
        // Whether a record's child summarized every object (looked up once per record).
        let covered: Vec<bool> = records
            .iter()
            .map(|(from, _)| covered_all.contains(from.as_str()))
            .collect();
        // The record whose status made an object's exact status, if any: the index
        // keeps statuses without their `.status`, which is then looked up.
        let mut exact_from: Vec<Option<usize>> = vec![None; objects.len()];
        for (i, object) in objects.iter().enumerate() {
            let counted = |from: &str| via_summary.is_empty() || !via_summary.contains(&(i, from));
            let mut reported: BTreeSet<&str> = BTreeSet::new();
            // Both in (child, cluster) order: one merge.
            let mut statuses = self.statuses.of(object).peekable();
            for (r, (from, name)) in records.iter().enumerate() {
                let (from, name) = (from.as_str(), name.as_str());
                let mut status = None;
                while let Some((f, c, s)) = statuses.peek() {
                    match (*f, *c).cmp(&(from, name)) {
                        std::cmp::Ordering::Less => {
                            statuses.next();
                        }
                        std::cmp::Ordering::Equal => {
                            status = Some(*s);
                            statuses.next();
                            break;
                        }
                        std::cmp::Ordering::Greater => break,
                    }
                }
                if covered[r] || !counted(from) {
                    continue;
                }
                match status {
                    Some(status) => {
                        if out[i].expected == 0 {
                            exact_from[i] = Some(r);
                        }
                        out[i].add_status(name, status);
                        if !*unique_names {
                            reported.insert(name);
                        }
                    }
                    None if *unique_names => silent[i] += 1,
                    None => {}
                }
            }
            if !*unique_names {
                for (from, name) in records {
                    if counted(from) && !reported.contains(name.as_str()) {
                        silent[i] += 1;
                    }
                }
            }
        }
        for (s, silent) in out.iter_mut().zip(silent) {
            s.merge(&Summary::expected(silent));
        }
        // A summary of one cluster carries its status whole.
        for ((s, object), r) in out.iter_mut().zip(objects).zip(exact_from) {
            if let (Some(exact), Some(r)) = (&mut s.exact, r) {
                let (from, name) = &records[r];
                let slot = (
                    from.clone(),
                    ReportKey::Status {
                        cluster: name.clone(),
                        object: object.clone(),
                    },
                );
                if let Some(ReportValue::Status(whole)) = self.stored.get(&slot) {
                    exact.status = whole.clone();
                }
            }
        }
        out
    }

    /// The stored reports from `lo` to `hi`, both included. One descent of the tree for
    /// `lo` and a walk that stops at the first key past `hi`: `range(lo..=hi)` descends
    /// for both bounds, comparing long composite keys at every level twice, and seeks
    /// like these (a child's summaries of a few objects) were most of a summary's cost.
    fn between<'a>(
        &'a self,
        lo: &ReportSlot,
        hi: &'a ReportSlot,
    ) -> impl Iterator<Item = (&'a ReportSlot, &'a ReportValue)> {
        self.stored
            .range(lo..)
            .take_while(move |(key, _)| *key <= hi)
    }
}

pub(super) fn is_summary(key: &ReportKey) -> bool {
    matches!(key, ReportKey::Summary { .. })
}

/// The summaries in `range` (one child's, in the order of their objects) whose object
/// is among `objects` (sorted), with its index there: a merge of two sorted lists.
fn among<'a>(
    objects: &[ObjectKey],
    range: impl Iterator<Item = (&'a ReportSlot, &'a ReportValue)>,
) -> impl Iterator<Item = (usize, &'a ReportValue)> {
    let mut next = 0;
    range.filter_map(move |((_, key), value)| {
        let ReportKey::Summary { object, .. } = key else {
            return None;
        };
        while let Some(wanted) = objects.get(next) {
            match wanted.cmp(object) {
                std::cmp::Ordering::Less => next += 1,
                std::cmp::Ordering::Equal => return Some((next, value)),
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    })
}

/// The clusters a placement sends its objects to in a subtree (see
/// [`SubtreeReports::selection`]). It holds while the inventory's generation, the
/// placement and the root's view do not change: a relay keeps it across summary ticks.
#[derive(Debug)]
pub struct Selection {
    /// [`SubtreeReports::inventory_generation`] when it was made.
    generation: u64,
    /// The selected clusters' records: (the child that reported it, the cluster's name),
    /// in the inventory's order.
    records: Vec<(String, String)>,
    /// The children that reported a selected cluster.
    selecting_children: BTreeSet<String>,
    /// Whether no cluster is in `records` twice (under two children: it moved).
    pub(super) unique_names: bool,
}

impl Selection {
    /// Whether it was made at this inventory generation.
    pub fn made_at(&self, generation: u64) -> bool {
        self.generation == generation
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use strata_protocol::model::{Health, ObjectKeyParts, Revision, Space, Status};
    use strata_protocol::time::UnixMillis;
    use strata_protocol::wire::Report;

    use super::*;
    use crate::tier::testing::cluster_report;

    /// A summary made the plain way, each record's status looked up by its whole key:
    /// what [`SubtreeReports::summarize_many`] must agree with.
    fn plainly(
        r: &SubtreeReports,
        selection: &Selection,
        placement: &Placement,
        object: &ObjectKey,
        cut_off: &BTreeSet<String>,
    ) -> Summary {
        let mut out = Summary::default();
        let mut summarized: BTreeSet<&str> = BTreeSet::new();
        for from in &selection.selecting_children {
            let slot = (
                from.clone(),
                ReportKey::Summary {
                    placement: placement.name.clone(),
                    object: object.clone(),
                },
            );
            if let (false, Some(ReportValue::Summary(s))) = (cut_off.contains(from), r.get(&slot)) {
                out.merge(s);
                summarized.insert(from);
            }
        }
        let mut reported: BTreeSet<&str> = BTreeSet::new();
        let mut silent = 0;
        for (from, name) in &selection.records {
            if summarized.contains(from.as_str()) {
                continue;
            }
            let slot = (
                from.clone(),
                ReportKey::Status {
                    cluster: name.clone(),
                    object: object.clone(),
                },
            );
            match r.get(&slot) {
                Some(ReportValue::Status(s)) => {
                    out.add_status(name, s);
                    reported.insert(name);
                }
                _ if selection.unique_names => silent += 1,
                _ => {}
            }
        }
        if !selection.unique_names {
            silent += selection
                .records
                .iter()
                .filter(|(from, name)| {
                    !summarized.contains(from.as_str()) && !reported.contains(name.as_str())
                })
                .count() as u64;
        }
        out.merge(&Summary::expected(silent));
        out
    }

    fn key(i: u8) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
            space: Space::default_space(),
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("pos".into()),
            name: format!("o{i}"),
        })
    }

    /// What a child may say: `Some` a status or summary, `None` taking it back.
    #[derive(Debug, Clone)]
    enum Said {
        /// Agent `a{agent}` reports its cluster's status of object `object`.
        Status {
            agent: u8,
            object: u8,
            health: u8,
            revision: u64,
            removed: bool,
        },
        /// The relay `eu` (clusters e0 to e2) summarizes object `object` for
        /// placement `p` (or another one's).
        Summary {
            object: u8,
            reporting: u64,
            ours: bool,
            removed: bool,
        },
        /// Cluster `a{agent}` also reported under the relay `us` (it moved), with a
        /// status of `object`.
        Moved { agent: u8, object: u8 },
    }

    impl Said {
        /// The same, moving one of the first `agents` agents (the others have no
        /// cluster record: their statuses are of clusters no placement selects).
        fn among(&self, agents: u8) -> Said {
            let mut s = self.clone();
            if let Said::Moved { agent, .. } = &mut s {
                *agent %= agents;
            }
            s
        }
    }

    fn said() -> impl Strategy<Value = Said> {
        prop_oneof![
            4 => (0u8..5, 0u8..6, 0u8..5, 1u64..4, prop::bool::weighted(0.15)).prop_map(
                |(agent, object, health, revision, removed)| Said::Status {
                    agent,
                    object,
                    health,
                    revision,
                    removed,
                }
            ),
            1 => (0u8..6, 0u64..4, any::<bool>(), prop::bool::weighted(0.2)).prop_map(
                |(object, reporting, ours, removed)| Said::Summary {
                    object,
                    reporting,
                    ours,
                    removed,
                }
            ),
            1 => (0u8..5, 0u8..6).prop_map(|(agent, object)| Said::Moved { agent, object }),
        ]
    }

    fn status_report(cluster: &str, object: u8, health: u8, revision: u64) -> Report {
        let health = Health::ALL[usize::from(health) % Health::ALL.len()];
        Report {
            key: ReportKey::Status {
                cluster: cluster.into(),
                object: key(object),
            },
            value: ReportValue::Status(Status {
                health,
                revision: Revision(revision),
                observed_generation: None,
                message: matches!(health, Health::Failed | Health::Degraded)
                    .then(|| format!("{cluster} at {revision}")),
                numbers: [("ready".to_owned(), revision as i64)].into(),
                status: format!("{{\"at\":{revision}}}").into_bytes(),
                observed_at: UnixMillis(revision * 10 + u64::from(object)),
            }),
        }
    }

    fn apply(r: &mut SubtreeReports, said: &Said) {
        match *said {
            Said::Status {
                agent,
                object,
                health,
                revision,
                removed,
            } => {
                let name = format!("a{agent}");
                let mut report = status_report(&name, object, health, revision);
                if removed {
                    report.value = ReportValue::Removed;
                }
                r.accept(&name, report);
            }
            Said::Summary {
                object,
                reporting,
                ours,
                removed,
            } => {
                let mut s = Summary::expected(3 - reporting.min(3));
                for c in 0..reporting.min(3) {
                    if let ReportValue::Status(st) = status_report("e", object, 2, 1).value {
                        s.add_status(&format!("e{c}"), &st);
                    }
                }
                r.accept(
                    "eu",
                    Report {
                        key: ReportKey::Summary {
                            placement: if ours { "p" } else { "q" }.into(),
                            object: key(object),
                        },
                        value: if removed {
                            ReportValue::Removed
                        } else {
                            ReportValue::Summary(Box::new(s))
                        },
                    },
                );
            }
            Said::Moved { agent, object } => {
                let name = format!("a{agent}");
                r.accept("us", cluster_report(&name, &["us"]));
                r.accept("us", status_report(&name, object, 2, 2));
            }
        }
    }

    proptest! {
        /// Whatever the children said, the summaries of any set of objects made at once
        /// over the statuses by object are those made plainly, exact statuses included.
        #[test]
        fn summaries_by_object_agree_with_the_plain_ones(
            said in prop::collection::vec(said(), 0..40),
            wanted in prop::collection::btree_set(0u8..6, 1..6),
            cut in any::<bool>(),
            agents in 1u8..6,
            relay in any::<bool>(),
        ) {
            let placement = crate::tier::testing::placement("p");
            let mut r = SubtreeReports::new();
            // One agent and no relay: a summary of a single cluster, with its exact status.
            for agent in 0..agents {
                let name = format!("a{agent}");
                r.accept(&name, cluster_report(&name, &[]));
            }
            if relay {
                for c in 0..3 {
                    r.accept("eu", cluster_report(&format!("e{c}"), &["eu"]));
                }
            }
            for s in &said {
                apply(&mut r, &s.among(agents));
            }
            let objects: Vec<ObjectKey> = wanted.iter().map(|&i| key(i)).collect();
            let cut_off: BTreeSet<String> = if cut { ["eu".to_owned()].into() } else { BTreeSet::new() };
            let root = RootView::default();
            let selection = r.selection(&placement, &root, true);
            let many = r.summarize_many(&selection, &placement, &objects, &cut_off);
            let plain: Vec<Summary> = objects
                .iter()
                .map(|o| plainly(&r, &selection, &placement, o, &cut_off))
                .collect();
            prop_assert_eq!(&many, &plain);
            // Restored from what a store kept, the index is the same.
            let restored = SubtreeReports::restore(r.iter().map(|(s, v)| (s.clone(), v.clone())));
            let again = restored.summarize_many(&selection, &placement, &objects, &cut_off);
            prop_assert_eq!(&again, &plain);
        }
    }
}
