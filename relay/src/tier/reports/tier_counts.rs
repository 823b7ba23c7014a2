//! The web view's counts per relay subtree (clusters, available, behind, unreachable),
//! kept up to date as reports arrive rather than recounted over every cluster at each
//! event: [`TierCounts`].
//!
//! A cluster's state follows from its own record (its path, whether its agent reaches
//! its API server) and from the links on its path (up or down) and its own link (lag).
//! So a cluster record that changes moves that cluster's contribution only, and a link
//! that changes moves the clusters below its child end (for a relay) or the cluster of
//! the same name (for an agent): the work of a change is the size of the subtree it
//! touches, never the fleet's.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use strata_node::store::ReportSlot;
use strata_protocol::model::Cluster;
use strata_protocol::time::UnixMillis;
use strata_protocol::wire::{LinkRecord, ReportKey, ReportValue, Role};

use crate::tier::reach::{LinkLookup, Reach, last_seen};

/// A cluster's state as the web view colours it.
///
/// Exactly one of three: `Unreachable` (some link between this node and it is down or
/// unknown, or its agent cannot reach its API server), `Behind` (reachable, but its
/// agent has not yet taken the newest revision routed to it: its link's lag is above
/// 0), or `Available` (reachable and current).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterState {
    /// Reachable and current.
    Available,
    /// Reachable, with revisions not yet acknowledged.
    Behind,
    /// Cut off, or its API server out of its agent's reach.
    Unreachable,
}

impl ClusterState {
    /// The state of a cluster that is `reachable` or not, with its own link `link`.
    pub fn of(reachable: bool, link: Option<&LinkRecord>) -> ClusterState {
        if !reachable {
            ClusterState::Unreachable
        } else if link.and_then(|l| l.lag).is_some_and(|lag| lag > 0) {
            ClusterState::Behind
        } else {
            ClusterState::Available
        }
    }

    /// The state's name in the web view's JSON.
    pub fn name(self) -> &'static str {
        match self {
            ClusterState::Available => "available",
            ClusterState::Behind => "behind",
            ClusterState::Unreachable => "unreachable",
        }
    }
}

/// Counts of clusters by state, over a subtree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Every cluster.
    pub clusters: u64,
    /// Those [`ClusterState::Available`].
    pub available: u64,
    /// Those [`ClusterState::Behind`].
    pub behind: u64,
    /// Those [`ClusterState::Unreachable`].
    pub unreachable: u64,
}

impl Counts {
    fn slot(&mut self, s: ClusterState) -> &mut u64 {
        match s {
            ClusterState::Available => &mut self.available,
            ClusterState::Behind => &mut self.behind,
            ClusterState::Unreachable => &mut self.unreachable,
        }
    }

    fn add(&mut self, s: ClusterState) {
        self.clusters += 1;
        *self.slot(s) += 1;
    }

    fn sub(&mut self, s: ClusterState) {
        self.clusters -= 1;
        *self.slot(s) -= 1;
    }

    fn is_empty(&self) -> bool {
        self.clusters == 0
    }
}

/// A stored cluster record: (reporting child, cluster name), as reports are stored.
type Slot = (String, String);

#[derive(Debug, Clone)]
struct Tallied {
    cluster: Cluster,
    state: ClusterState,
    /// What the cluster adds to its home relay's digest.
    mark: u64,
}

/// What the counts add up to: per relay, the counts of its subtree, the number of its
/// own clusters (those that report to it directly) and a digest of them; and the
/// fleet's totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Per relay named on some cluster's path: its subtree's counts.
    pub below: BTreeMap<String, Counts>,
    /// Per home relay (`None`: this node): how many clusters report to it directly.
    pub own: BTreeMap<Option<String>, u64>,
    /// Per home relay: a digest of its own clusters (names, states, labels,
    /// properties and links), which moves when any of them changes.
    pub digests: BTreeMap<Option<String>, u64>,
    /// Every cluster.
    pub total: Counts,
}

/// Per-relay counts of the clusters below, kept incrementally (see the module's doc).
///
/// Fed with every change of a stored cluster record ([`TierCounts::set_cluster`]) or
/// link record ([`TierCounts::set_reported_link`]), and with this node's own links
/// ([`TierCounts::set_own_links`]), which win over reported ones as in
/// [`NodeCore::all_links`](crate::tier::core::NodeCore::all_links). A cluster reported
/// by two children (two replicas of one relay) counts once per report, as it is stored.
#[derive(Debug, Default)]
pub struct TierCounts {
    clusters: BTreeMap<Slot, Tallied>,
    /// The slots of each cluster name (the cluster an agent's link leads to).
    by_name: BTreeMap<String, BTreeSet<String>>,
    /// The slots whose path names each relay (the clusters a relay's link leads to).
    under: BTreeMap<String, BTreeSet<Slot>>,
    /// Link records children reported, by child end, then by reporting child.
    reported: BTreeMap<String, BTreeMap<String, LinkRecord>>,
    /// This node's own links, by child end.
    own: BTreeMap<String, LinkRecord>,
    /// The relays among the links' child ends (reported or own).
    relays: BTreeSet<String>,
    tally: Tally,
}

impl LinkLookup for TierCounts {
    fn reach(&self, end: &str) -> Option<Reach> {
        self.link(end).map(|l| Reach {
            connected: l.connected,
            since: l.since,
        })
    }
}

/// The part of a cluster's own link that its home relay's digest follows.
fn link_mark(link: Option<&LinkRecord>) -> impl Hash {
    link.map(|l| {
        (
            l.lag,
            l.transport.is_some(),
            l.via.map(|v| v.name()),
            l.cert_expires.map(|t| t.0),
        )
    })
}

impl TierCounts {
    /// The sums (see [`Tally`]).
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// The link whose child end is `end`: this node's own, else the one the last
    /// reporting child (in name order) reported.
    pub fn link(&self, end: &str) -> Option<&LinkRecord> {
        self.own
            .get(end)
            .or_else(|| self.reported.get(end)?.values().next_back())
    }

    /// The links whose child end is a relay, by child end.
    pub fn relay_links(&self) -> impl Iterator<Item = (&str, &LinkRecord)> {
        self.relays
            .iter()
            .filter_map(|r| Some((r.as_str(), self.link(r)?)))
            .filter(|(_, l)| l.role == Role::Relay)
    }

    /// The cluster record `from` reported about `name` was stored (`Some`) or dropped.
    pub fn set_cluster(&mut self, from: &str, name: &str, cluster: Option<&Cluster>) {
        let slot = (from.to_owned(), name.to_owned());
        if let Some(old) = self.clusters.remove(&slot) {
            self.unmark(&old);
            for r in old.cluster.path.iter() {
                if let Some(s) = self.under.get_mut(r) {
                    s.remove(&slot);
                    if s.is_empty() {
                        self.under.remove(r);
                    }
                }
            }
            if let Some(s) = self.by_name.get_mut(name) {
                s.remove(from);
                if s.is_empty() {
                    self.by_name.remove(name);
                }
            }
        }
        let Some(c) = cluster else {
            return;
        };
        for r in &c.path {
            self.under
                .entry(r.clone())
                .or_default()
                .insert(slot.clone());
        }
        self.by_name
            .entry(name.to_owned())
            .or_default()
            .insert(from.to_owned());
        let (state, mark) = self.assess(c);
        let t = Tallied {
            cluster: c.clone(),
            state,
            mark,
        };
        self.add_mark(&t);
        self.clusters.insert(slot, t);
    }

    /// The link record `from` reported about `node` was stored (`Some`) or dropped.
    pub fn set_reported_link(&mut self, from: &str, node: &str, link: Option<&LinkRecord>) {
        let before = self.link(node).cloned();
        match link {
            Some(l) => {
                self.reported
                    .entry(node.to_owned())
                    .or_default()
                    .insert(from.to_owned(), l.clone());
            }
            None => {
                if let Some(m) = self.reported.get_mut(node) {
                    m.remove(from);
                    if m.is_empty() {
                        self.reported.remove(node);
                    }
                }
            }
        }
        self.link_moved(node, before);
    }

    /// This node's own links are `links` now (a link not among them is gone).
    pub fn set_own_links(&mut self, links: Vec<(String, LinkRecord)>) {
        let new: BTreeMap<String, LinkRecord> = links.into_iter().collect();
        let gone: Vec<String> = self
            .own
            .keys()
            .filter(|n| !new.contains_key(*n))
            .cloned()
            .collect();
        for node in gone {
            let before = self.link(&node).cloned();
            self.own.remove(&node);
            self.link_moved(&node, before);
        }
        for (node, l) in new {
            if self.own.get(&node) == Some(&l) {
                continue;
            }
            let before = self.link(&node).cloned();
            self.own.insert(node.clone(), l);
            self.link_moved(&node, before);
        }
    }

    /// The effective link of `node` may have changed from `before`: the clusters it
    /// leads to are assessed again.
    fn link_moved(&mut self, node: &str, before: Option<LinkRecord>) {
        let after = self.link(node);
        if after == before.as_ref() {
            return;
        }
        if after.is_some_and(|l| l.role == Role::Relay) {
            self.relays.insert(node.to_owned());
        } else {
            self.relays.remove(node);
        }
        let mut slots: Vec<Slot> = self
            .by_name
            .get(node)
            .into_iter()
            .flatten()
            .map(|from| (from.clone(), node.to_owned()))
            .collect();
        slots.extend(self.under.get(node).into_iter().flatten().cloned());
        for slot in slots {
            self.reassess(&slot);
        }
    }

    fn reassess(&mut self, slot: &Slot) {
        let Some(t) = self.clusters.get(slot) else {
            return;
        };
        let (state, mark) = self.assess(&t.cluster);
        if (state, mark) == (t.state, t.mark) {
            return;
        }
        let Some(mut t) = self.clusters.remove(slot) else {
            return;
        };
        self.unmark(&t);
        t.state = state;
        t.mark = mark;
        self.add_mark(&t);
        self.clusters.insert(slot.clone(), t);
    }

    /// A cluster's state and digest mark under the links known now.
    fn assess(&self, c: &Cluster) -> (ClusterState, u64) {
        let (reachable, _) = last_seen(c, self, UnixMillis(0));
        let link = self.link(&c.name);
        let state = ClusterState::of(reachable, link);
        let mut h = DefaultHasher::new();
        (&c.name, state, &c.labels, &c.properties).hash(&mut h);
        link_mark(link).hash(&mut h);
        (state, h.finish())
    }

    fn add_mark(&mut self, t: &Tallied) {
        let c = &t.cluster;
        self.tally.total.add(t.state);
        let on_path: BTreeSet<&String> = c.path.iter().collect();
        for r in on_path {
            self.tally.below.entry(r.clone()).or_default().add(t.state);
        }
        let home = c.path.last().cloned();
        *self.tally.own.entry(home.clone()).or_default() += 1;
        let d = self.tally.digests.entry(home).or_default();
        *d = d.wrapping_add(t.mark);
    }

    fn unmark(&mut self, t: &Tallied) {
        let c = &t.cluster;
        self.tally.total.sub(t.state);
        let on_path: BTreeSet<&String> = c.path.iter().collect();
        for r in on_path {
            if let Some(n) = self.tally.below.get_mut(r) {
                n.sub(t.state);
                if n.is_empty() {
                    self.tally.below.remove(r);
                }
            }
        }
        let home = c.path.last().cloned();
        if let Some(n) = self.tally.own.get_mut(&home) {
            *n -= 1;
            if *n == 0 {
                self.tally.own.remove(&home);
                self.tally.digests.remove(&home);
                return;
            }
        }
        if let Some(d) = self.tally.digests.get_mut(&home) {
            *d = d.wrapping_sub(t.mark);
        }
    }

    /// The same sums computed afresh over every cluster, as the web view once did at
    /// each event: what the incremental [`TierCounts::tally`] must always equal.
    pub fn recount(&self) -> Tally {
        let mut tally = Tally::default();
        for t in self.clusters.values() {
            let c = &t.cluster;
            let (state, mark) = self.assess(c);
            tally.total.add(state);
            for r in c.path.iter().collect::<BTreeSet<_>>() {
                tally.below.entry(r.clone()).or_default().add(state);
            }
            let home = c.path.last().cloned();
            *tally.own.entry(home.clone()).or_default() += 1;
            let d = tally.digests.entry(home).or_default();
            *d = d.wrapping_add(mark);
        }
        tally
    }
}

/// The counts fed from the reports as they are stored.
impl super::SubtreeReports {
    /// Keeps the tiers' counts in step with `slot`, which was just stored or dropped.
    pub(super) fn count(&mut self, slot: &ReportSlot) {
        let (from, key) = slot;
        match key {
            ReportKey::Cluster { name } => {
                let c = match self.stored.get(slot) {
                    Some(ReportValue::Cluster(c)) => Some(c),
                    _ => None,
                };
                self.counts.set_cluster(from, name, c);
            }
            ReportKey::Link { node } => {
                let l = match self.stored.get(slot) {
                    Some(ReportValue::Link(l)) => Some(l),
                    _ => None,
                };
                self.counts.set_reported_link(from, node, l);
            }
            _ => {}
        }
    }

    /// The tiers' counts with this node's own child links `own` (which win over any
    /// reported link of the same child).
    pub fn tier_counts(&mut self, own: Vec<(String, LinkRecord)>) -> &TierCounts {
        self.counts.set_own_links(own);
        &self.counts
    }
}

#[cfg(test)]
#[path = "tier_counts_tests.rs"]
mod tests;
