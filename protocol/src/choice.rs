//! Choosing clusters for a placement: `count`, `spreadBy`, `prefer`, taints and
//! tolerations, capacity and failover; and the [`Decision`] the root hands every relay.
//!
//! The root plans ([`plan`]); relays and the root route by the decision
//! ([`Decision::admits`]). A placement without a decision selects every cluster its
//! selector matches, as before.
//!
//! # Stability
//!
//! A choice is sticky: a cluster chosen before stays chosen while it is still eligible
//! and the count (or its spread group's share) has room for it. New clusters fill only
//! vacancies, in the order of the placement's `prefer` selectors, then clusters without
//! a `PreferNoSchedule` taint, then a rendezvous hash of placement and cluster name
//! (the same at every root, every restart, whatever the order clusters arrived in). So
//! with nothing changed, planning again changes nothing; one cluster added changes at
//! most one decision (it fills a vacancy, or nothing); one chosen cluster removed
//! changes at most one other (its replacement).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::{Cluster, Labels, ObjectMeta, Space};
use crate::overrides::ClusterOverrides;
use crate::placement_spec::{Placement, STRATA_GROUP};
pub use crate::placement_spec::{Seconds, Taint, TaintEffect, Toleration, TolerationOperator};
use crate::time::UnixMillis;

/// The kind of the root's decisions (one per placement that needs one, same name).
pub const DECISION_KIND: &str = "PlacementDecision";

/// Whether an object is a placement decision (routed to every relay, never to agents).
pub fn is_decision(meta: &ObjectMeta) -> bool {
    meta.key.group == STRATA_GROUP && meta.key.kind == DECISION_KIND
}

/// What the root decided for one placement. Relays route by it; the root keeps it in
/// its log so the choice survives restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Exactly these clusters (a `count` was given): the selector is not evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<BTreeSet<String>>,
    /// Otherwise: every cluster the selector matches but these.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub except: BTreeSet<String>,
    /// Clusters the placement is moving off: they keep its objects until the new ones
    /// are available or the move times out (make-before-break).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub retiring: BTreeSet<String>,
    /// When the clusters now retiring started to (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retiring_since: Option<u64>,
    /// Retiring clusters the move no longer needs (the new ones are available): they
    /// keep the placement's objects, but DNS at every relay leaves them out, until
    /// the drain is over ([`Decision::draining_since`] plus the root's drain time) and
    /// they are dropped. Always a subset of [`Decision::retiring`], so a relay of an
    /// older version, which ignores this field, keeps admitting them as retiring.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub draining: BTreeSet<String>,
    /// When the clusters now draining started to (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining_since: Option<u64>,
    /// During a rollout: the only clusters that get the placement's objects as they
    /// are now; every other cluster it admits gets the pinned previous revision
    /// ([`crate::waves`]). Absent: every cluster gets the objects as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released: Option<BTreeSet<String>>,
}

impl Decision {
    /// Whether the placement's objects go to `cluster`; `matches` says whether the
    /// placement's selector matches it (asked only when it matters).
    pub fn admits(&self, cluster: &str, matches: impl FnOnce() -> bool) -> bool {
        if self.retiring.contains(cluster) {
            return true;
        }
        match &self.only {
            Some(chosen) => chosen.contains(cluster),
            None => !self.except.contains(cluster) && matches(),
        }
    }

    /// Whether `cluster` is draining: admitted, but no longer named by DNS.
    pub fn drains(&self, cluster: &str) -> bool {
        self.draining.contains(cluster)
    }

    /// Whether a cluster it admits gets the objects as they are now (else: their pinned
    /// previous revision).
    pub fn current(&self, cluster: &str) -> bool {
        self.released.as_ref().is_none_or(|r| r.contains(cluster))
    }

    /// Whether it changes nothing about plain selection.
    pub fn is_plain(&self) -> bool {
        self.only.is_none()
            && self.except.is_empty()
            && self.retiring.is_empty()
            && self.released.is_none()
    }
}

/// What the root decided that every tier routes with: cluster labels changed per
/// space, and each placement's decision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RootView {
    /// Cluster labels changed at the root, per space.
    pub overrides: ClusterOverrides,
    /// Decisions by (space, placement name).
    pub decisions: BTreeMap<(Space, String), Decision>,
}

impl RootView {
    /// Whether `placement` places its objects on `cluster`.
    pub fn selects(&self, placement: &Placement, cluster: &Cluster) -> bool {
        self.for_placement(placement).selects(cluster)
    }

    /// Whether `placement` places its objects on `cluster` and which revision: `None`
    /// when it does not, `Some(true)` for the objects as they are now, `Some(false)` for
    /// their pinned previous revision (a rollout has not released the cluster yet).
    pub fn revision_for(&self, placement: &Placement, cluster: &Cluster) -> Option<bool> {
        self.for_placement(placement).revision_for(cluster)
    }

    /// The answers for one placement, its decision looked up once: for loops over every
    /// cluster of a subtree.
    pub fn for_placement<'a>(&'a self, placement: &'a Placement) -> PlacementView<'a> {
        PlacementView {
            root: self,
            placement,
            decision: self
                .decisions
                .get(&(placement.space.clone(), placement.name.clone())),
        }
    }
}

impl Placement {
    /// Whether the placement places its objects on the cluster, as the root decided:
    /// with the cluster's labels as this placement's space changed them, and the
    /// placement's decision (count, taints, moves...) if it has one.
    pub fn selects_cluster_with(&self, cluster: &Cluster, root: &RootView) -> bool {
        root.selects(self, cluster)
    }
}

/// [`RootView`]'s answers about one placement (see [`RootView::for_placement`]).
#[derive(Debug, Clone, Copy)]
pub struct PlacementView<'a> {
    root: &'a RootView,
    placement: &'a Placement,
    decision: Option<&'a Decision>,
}

impl PlacementView<'_> {
    /// Whether the placement places its objects on `cluster`.
    pub fn selects(&self, cluster: &Cluster) -> bool {
        let matches = || {
            self.placement
                .clusters
                .selector
                .matches(&self.root.overrides.labels(&self.placement.space, cluster))
        };
        match self.decision {
            Some(d) => d.admits(&cluster.name, matches),
            None => matches(),
        }
    }

    /// As [`RootView::revision_for`].
    pub fn revision_for(&self, cluster: &Cluster) -> Option<bool> {
        if !self.selects(cluster) {
            return None;
        }
        Some(self.decision.is_none_or(|d| d.current(&cluster.name)))
    }
}

/// Why a cluster the selector matches was left out.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exclusion {
    /// A taint the placement does not tolerate (or no longer: `tolerationSeconds`).
    Tainted {
        /// The taint's key.
        key: String,
        /// Its effect.
        effect: TaintEffect,
    },
    /// The count was reached with clusters ranked before it.
    Count,
    /// The cluster's capacity is taken by placements admitted before this one.
    Capacity,
    /// Unreachable for longer than the placement's `failoverAfter`.
    Unreachable,
    /// It lacks the `spreadBy` label.
    NoSpreadLabel,
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exclusion::Tainted { key, effect } => write!(f, "tainted {key}:{effect:?}"),
            Exclusion::Count => f.write_str("count reached"),
            Exclusion::Capacity => f.write_str("capacity full"),
            Exclusion::Unreachable => f.write_str("unreachable longer than failoverAfter"),
            Exclusion::NoSpreadLabel => f.write_str("lacks the spreadBy label"),
        }
    }
}

impl Exclusion {
    /// A short category for counts (`tainted`, `count`, `capacity`, ...).
    pub fn category(&self) -> &'static str {
        match self {
            Exclusion::Tainted { .. } => "tainted",
            Exclusion::Count => "count",
            Exclusion::Capacity => "capacity",
            Exclusion::Unreachable => "unreachable",
            Exclusion::NoSpreadLabel => "noSpreadLabel",
        }
    }
}

/// One cluster as the planner sees it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its name.
    pub name: String,
    /// Its labels as the placement's space sees them.
    pub labels: Labels,
    /// Its taints in the placement's space.
    pub taints: Vec<Taint>,
    /// Since when it has been unreachable, if it is.
    pub unreachable_since: Option<UnixMillis>,
}

/// What [`plan`] decided for one placement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The clusters chosen.
    pub chosen: BTreeSet<String>,
    /// How many clusters the selector matched.
    pub matching: usize,
    /// Matching clusters left out, and why.
    pub excluded: BTreeMap<String, Exclusion>,
}

/// Capacity across placements: how many more placements each cluster accepts. A
/// cluster absent from the map has no bound.
pub type Room = BTreeMap<String, u32>;

/// Chooses clusters for `placement` among `candidates`. `previous` is what it chose
/// before (kept where still eligible); `room` is each cluster's capacity left, already
/// net of `previous` choices (the caller counts those first, so earlier admissions keep
/// their place), and is taken from for new choices.
pub fn plan(
    placement: &Placement,
    candidates: &[Candidate],
    previous: &BTreeSet<String>,
    now: UnixMillis,
    room: &mut Room,
) -> Plan {
    let spec = &placement.clusters;
    let mut out = Plan::default();
    let mut eligible: Vec<(&Candidate, Rank)> = Vec::new();
    for c in candidates {
        if !spec.selector.matches(&c.labels) {
            continue;
        }
        out.matching += 1;
        let kept = previous.contains(&c.name);
        if let Some(why) = untolerated(placement, c, kept, now) {
            out.excluded.insert(c.name.clone(), why);
            continue;
        }
        if spec.count.is_some()
            && let (Some(after), Some(since)) = (spec.failover_after, c.unreachable_since)
            && now.0 >= since.0.saturating_add(after.millis())
        {
            out.excluded.insert(c.name.clone(), Exclusion::Unreachable);
            continue;
        }
        if let Some(key) = &spec.spread_by
            && !c.labels.contains_key(key)
        {
            out.excluded
                .insert(c.name.clone(), Exclusion::NoSpreadLabel);
            continue;
        }
        eligible.push((c, rank(placement, c)));
    }
    eligible.sort_by(|a, b| a.1.cmp(&b.1));
    let picked: Vec<&Candidate> = match (spec.count, &spec.spread_by) {
        (None, _) => eligible.iter().map(|(c, _)| *c).collect(),
        (Some(n), None) => pick(&eligible, previous, n as usize, room),
        (Some(n), Some(key)) => spread(&eligible, previous, n as usize, key, room),
    };
    // A set, not a scan of `picked` per cluster: with every one of 10,000 clusters
    // eligible and picked, that scan was the root's hottest code.
    let picked_names: BTreeSet<&str> = picked.iter().map(|p| p.name.as_str()).collect();
    for (c, _) in &eligible {
        if picked_names.contains(c.name.as_str()) {
            continue;
        }
        let why = if has_room(room, &c.name, previous) {
            Exclusion::Count
        } else {
            Exclusion::Capacity
        };
        out.excluded.insert(c.name.clone(), why);
    }
    for c in picked {
        if spec.count.is_none() && !take_room(room, &c.name, previous) {
            out.excluded.insert(c.name.clone(), Exclusion::Capacity);
            continue;
        }
        out.chosen.insert(c.name.clone());
    }
    out
}

/// Why `c` may not be chosen for its taints, if so. A `NoSchedule` taint keeps a
/// cluster already chosen (`kept`); `NoExecute` moves the placement off once its
/// toleration (if any) runs out.
fn untolerated(
    placement: &Placement,
    c: &Candidate,
    kept: bool,
    now: UnixMillis,
) -> Option<Exclusion> {
    let tolerations = &placement.clusters.tolerations;
    for t in &c.taints {
        let tolerated: Vec<&Toleration> = tolerations.iter().filter(|x| x.tolerates(t)).collect();
        let out = || Exclusion::Tainted {
            key: t.key.clone(),
            effect: t.effect,
        };
        match t.effect {
            TaintEffect::PreferNoSchedule => {}
            TaintEffect::NoSchedule if tolerated.is_empty() && !kept => return Some(out()),
            TaintEffect::NoSchedule => {}
            TaintEffect::NoExecute if tolerated.is_empty() => return Some(out()),
            TaintEffect::NoExecute => {
                // The shortest limited toleration decides; an unlimited one keeps it.
                let unlimited = tolerated.iter().any(|x| x.toleration_seconds.is_none());
                let limit = tolerated.iter().filter_map(|x| x.toleration_seconds).min();
                if !unlimited && let Some(secs) = limit {
                    let added = t.time_added.unwrap_or(0);
                    let until =
                        added.saturating_add(u64::try_from(secs.max(0)).unwrap_or(0) * 1000);
                    if now.0 >= until {
                        return Some(out());
                    }
                }
            }
        }
    }
    None
}

/// Ordering of candidates: earlier `prefer` entries first, then clusters without a
/// `PreferNoSchedule` taint the placement does not tolerate, then the rendezvous hash.
type Rank = (usize, bool, u64, String);

fn rank(placement: &Placement, c: &Candidate) -> Rank {
    let prefer = &placement.clusters.prefer;
    let preferred = prefer
        .iter()
        .position(|s| s.matches(&c.labels))
        .unwrap_or(prefer.len());
    let avoided = c.taints.iter().any(|t| {
        t.effect == TaintEffect::PreferNoSchedule
            && !placement
                .clusters
                .tolerations
                .iter()
                .any(|x| x.tolerates(t))
    });
    let score = rendezvous(
        &format!("{}/{}", placement.space.0, placement.name),
        &c.name,
    );
    (preferred, avoided, score, c.name.clone())
}

/// The rendezvous score of `cluster` for `placement` (`space/name`): lower ranks first.
/// The same at every root and every restart.
pub fn rendezvous_score(placement: &str, cluster: &str) -> u64 {
    rendezvous(placement, cluster)
}

/// A 64-bit hash of (placement, cluster), well mixed: FNV-1a, then splitmix64's
/// finalizer. Lower is better.
fn rendezvous(placement: &str, cluster: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in placement.bytes().chain([0]).chain(cluster.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

fn has_room(room: &Room, cluster: &str, previous: &BTreeSet<String>) -> bool {
    previous.contains(cluster) || room.get(cluster).is_none_or(|left| *left > 0)
}

/// Takes one place on `cluster` for a new choice; previous choices hold theirs.
fn take_room(room: &mut Room, cluster: &str, previous: &BTreeSet<String>) -> bool {
    if previous.contains(cluster) {
        return true;
    }
    match room.get_mut(cluster) {
        None => true,
        Some(0) => false,
        Some(left) => {
            *left -= 1;
            true
        }
    }
}

/// Up to `n` of `ranked`: those chosen before first (best ranked first when the count
/// shrank), then the best ranked with room.
fn pick<'a>(
    ranked: &[(&'a Candidate, Rank)],
    previous: &BTreeSet<String>,
    n: usize,
    room: &mut Room,
) -> Vec<&'a Candidate> {
    let mut out: Vec<&Candidate> = ranked
        .iter()
        .filter(|(c, _)| previous.contains(&c.name))
        .map(|(c, _)| *c)
        .take(n)
        .collect();
    for (c, _) in ranked {
        if out.len() >= n {
            break;
        }
        if previous.contains(&c.name) || !take_room(room, &c.name, previous) {
            continue;
        }
        out.push(c);
    }
    out
}

/// Up to `n` of `ranked` spread evenly (±1) over the values of label `key`: shares go
/// round by round to the groups with the fewest so far (a group whose earlier choices
/// still stand first, then in value order), each capped by the group's size.
fn spread<'a>(
    ranked: &[(&'a Candidate, Rank)],
    previous: &BTreeSet<String>,
    n: usize,
    key: &str,
    room: &mut Room,
) -> Vec<&'a Candidate> {
    let mut groups: BTreeMap<&str, Vec<(&'a Candidate, Rank)>> = BTreeMap::new();
    for (c, r) in ranked {
        let value = c.labels.get(key).map_or("", String::as_str);
        groups.entry(value).or_default().push((c, r.clone()));
    }
    let kept: BTreeMap<&str, usize> = groups
        .iter()
        .map(|(g, cs)| {
            (
                *g,
                cs.iter()
                    .filter(|(c, _)| previous.contains(&c.name))
                    .count(),
            )
        })
        .collect();
    let mut share: BTreeMap<&str, usize> = groups.keys().map(|g| (*g, 0)).collect();
    for _ in 0..n {
        let next = groups
            .iter()
            .filter(|(g, cs)| share[*g] < cs.len())
            .min_by_key(|(g, _)| (share[*g], std::cmp::Reverse(kept[*g] > share[*g]), **g))
            .map(|(g, _)| *g);
        match next {
            Some(g) => *share.entry(g).or_default() += 1,
            None => break,
        }
    }
    let mut out = Vec::new();
    for (g, cs) in &groups {
        out.extend(pick(cs, previous, share[g], room));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_users_write_them() {
        assert_eq!(Seconds::parse("90s"), Ok(Seconds(90)));
        assert_eq!(Seconds::parse("10m"), Ok(Seconds(600)));
        assert_eq!(Seconds::parse("1h30m"), Ok(Seconds(5400)));
        assert_eq!(Seconds::parse("600"), Ok(Seconds(600)));
        assert!(Seconds::parse("10x").is_err());
        assert!(Seconds::parse("m").is_err());
        assert!(Seconds::parse("").is_err());
        assert!(Seconds::parse("10m5").is_err());
    }
}
