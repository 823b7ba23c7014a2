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
    /// a child's summaries and a cluster's statuses are neighbours in the reports' order
    /// (by child, then cluster, then object), so each child and each selected cluster is
    /// one seek and a walk over its entries for `objects`, where looking up every
    /// object of every cluster by its whole key was most of a relay's CPU in a
    /// reconnect storm (every object's summary made again as each cluster came back).
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
        let mut reported: Vec<BTreeSet<&str>> = if *unique_names {
            Vec::new()
        } else {
            vec![BTreeSet::new(); objects.len()]
        };
        let mut silent = vec![0u64; objects.len()];
        // Per object, whether the record at hand reported it (with unique names).
        let mut found = vec![false; if *unique_names { objects.len() } else { 0 }];
        let status_of = |object: &ObjectKey| -> ReportSlot {
            (
                String::new(),
                ReportKey::Status {
                    cluster: String::new(),
                    object: object.clone(),
                },
            )
        };
        let (mut lo, mut hi) = (status_of(first), status_of(last));
        // Records come grouped by child: whether the child covers every object is
        // looked up once per child.
        let mut skipping: Option<(&str, bool)> = None;
        for (from, name) in records {
            let (from, name) = (from.as_str(), name.as_str());
            let skip = match skipping {
                Some((child, skip)) if child == from => skip,
                _ => {
                    let skip = covered_all.contains(from);
                    skipping = Some((from, skip));
                    skip
                }
            };
            if skip {
                // Counted in its child's summaries, for every object: nothing to add.
                continue;
            }
            let counted = |i: usize| via_summary.is_empty() || !via_summary.contains(&(i, from));
            for slot in [&mut lo, &mut hi] {
                from.clone_into(&mut slot.0);
                if let ReportKey::Status { cluster, .. } = &mut slot.1 {
                    name.clone_into(cluster);
                }
            }
            found.iter_mut().for_each(|f| *f = false);
            for (i, value) in among(objects, self.between(&lo, &hi)) {
                if let ReportValue::Status(status) = value
                    && counted(i)
                {
                    out[i].add_status(name, status);
                    match reported.get_mut(i) {
                        Some(names) => {
                            names.insert(name);
                        }
                        None => found[i] = true,
                    }
                }
            }
            if *unique_names {
                for (i, found) in found.iter().enumerate() {
                    if counted(i) && !found {
                        silent[i] += 1;
                    }
                }
            }
        }
        if !*unique_names {
            for (from, name) in records {
                for (i, names) in reported.iter().enumerate() {
                    if !via_summary.contains(&(i, from.as_str())) && !names.contains(name.as_str())
                    {
                        silent[i] += 1;
                    }
                }
            }
        }
        for (s, silent) in out.iter_mut().zip(silent) {
            s.merge(&Summary::expected(silent));
        }
        out
    }

    /// The stored reports from `lo` to `hi`, both included. One descent of the tree for
    /// `lo` and a walk that stops at the first key past `hi`: `range(lo..=hi)` descends
    /// for both bounds, comparing long composite keys at every level twice, and seeks
    /// like these (a cluster's statuses of a few objects) were most of a summary's cost.
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

/// The entries of `range` (reports of one child about one thing, in the order of their
/// objects) whose object is among `objects` (sorted), with its index there: a merge of
/// two sorted lists.
fn among<'a>(
    objects: &[ObjectKey],
    range: impl Iterator<Item = (&'a ReportSlot, &'a ReportValue)>,
) -> impl Iterator<Item = (usize, &'a ReportValue)> {
    let mut next = 0;
    range.filter_map(move |((_, key), value)| {
        let (ReportKey::Status { object, .. } | ReportKey::Summary { object, .. }) = key else {
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
