//! The wave planner: which of a placement's clusters belong to which wave of a rollout,
//! and the pinned copies of the previous revision that clusters outside the released
//! waves keep receiving. Pure: the root calls it at every planning.
//!
//! # Waves
//!
//! Clusters are ordered once per rollout: clusters already released first (so a wave
//! never takes back what it released), then a rendezvous hash of placement and cluster
//! name (the same at every root, every restart, whatever the order clusters arrived
//! in). Waves then take clusters in that order, never one an earlier wave took:
//! * `clusters: N`: the next N;
//! * `percent: P`: up to ⌈P % of all the placement's clusters⌉ in total so far (the
//!   percentages are cumulative and round up, so 1 % of 3 clusters is 1 cluster);
//! * `selector`: every cluster left that matches it;
//! * the last wave also takes every cluster no earlier wave took, so a rollout that
//!   completes has reached every cluster.
//!
//! # Pins
//!
//! A pin is a copy of one object's previous version under a key of its own
//! ([`pin_key`]), labelled with its placement. Routing sends a placement's objects to
//! the clusters its rollout released and its pins to the others; the agent applies a
//! pin as the object it copies ([`pinned_key`] names it) and reports its status under
//! the pin's key, so summaries of the new revision count released clusters only.

use std::collections::BTreeSet;

use crate::model::{Labels, ObjectKey, ObjectKeyParts, ObjectMeta};
use crate::placement_spec::{
    ClusterSelector, CustomizeRule, MovePolicy, ObjectSelector, Placement, RolloutSpec,
    STRATA_GROUP, WaveSize,
};
pub use crate::placement_spec::{
    PIN_CUSTOMIZE_LABEL, PIN_KIND, PIN_PLACEMENT_LABEL, is_pin, pin_placement,
};

/// The `customize` rules a pin was written with (`None`: a pin that carries none, from
/// before rules were part of the template: render it with the current rules).
pub fn pin_customize(meta: &ObjectMeta) -> Option<Vec<CustomizeRule>> {
    if !is_pin(meta) {
        return None;
    }
    serde_json::from_str(meta.labels.get(PIN_CUSTOMIZE_LABEL)?).ok()
}

/// `placements` as they render the pin `pin`: its placement with the rules the pin
/// carries instead of its current ones (a placement the agent no longer holds comes
/// back with those rules only). `None` when the pin carries no rules.
pub fn placements_for_pin(pin: &ObjectMeta, placements: &[Placement]) -> Option<Vec<Placement>> {
    let name = pin_placement(pin)?;
    let rules = pin_customize(pin)?;
    let space = &pin.key.space;
    let mut out: Vec<Placement> = placements
        .iter()
        .filter(|p| !(p.space == *space && p.name == name))
        .cloned()
        .collect();
    let mut own = placements
        .iter()
        .find(|p| p.space == *space && p.name == name)
        .cloned()
        .unwrap_or_else(|| Placement {
            space: space.clone(),
            name: name.to_owned(),
            // The pin's placement selected the object when it pinned it.
            objects: vec![ObjectSelector::default()],
            clusters: ClusterSelector::default(),
            upsync: vec![],
            moves: MovePolicy::default(),
            customize: vec![],
            status_summary: vec![],
            rollout: None,
        });
    own.customize = rules;
    out.push(own);
    Some(out)
}

/// The key of the pinned copy of `key`: same space and namespace, a name that encodes
/// the original's group, version, kind and name (Kubernetes names hold no `/`).
pub fn pin_key(key: &ObjectKey) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: key.space.clone(),
        group: STRATA_GROUP.to_owned(),
        version: "v1alpha1".to_owned(),
        kind: PIN_KIND.to_owned(),
        namespace: key.namespace.clone(),
        name: format!("{}/{}/{}/{}", key.group, key.version, key.kind, key.name),
    })
}

/// The key a pin copies; `None` for any other key.
pub fn pinned_key(pin: &ObjectKey) -> Option<ObjectKey> {
    if pin.group != STRATA_GROUP || pin.kind != PIN_KIND {
        return None;
    }
    let mut parts = pin.name.splitn(4, '/');
    let (group, version, kind, name) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    Some(ObjectKey::new(ObjectKeyParts {
        space: pin.space.clone(),
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
        namespace: pin.namespace.clone(),
        name: name.to_owned(),
    }))
}

/// One cluster as the wave planner sees it.
#[derive(Debug, Clone)]
pub struct WaveCandidate {
    /// Its name.
    pub name: String,
    /// Its labels as the placement's space sees them.
    pub labels: Labels,
}

/// The clusters of each wave of `spec` (one set per wave, disjoint, their union every
/// candidate) for the placement `placement` (`space/name`, for the hash), keeping the
/// clusters in `released` in the earliest waves.
pub fn assign_waves(
    spec: &RolloutSpec,
    placement: &str,
    candidates: &[WaveCandidate],
    released: &BTreeSet<String>,
) -> Vec<BTreeSet<String>> {
    let mut order: Vec<(bool, u64, &WaveCandidate)> = candidates
        .iter()
        .map(|c| {
            (
                !released.contains(&c.name),
                crate::choice::rendezvous_score(placement, &c.name),
                c,
            )
        })
        .collect();
    order.sort_by(|a, b| (a.0, a.1, &a.2.name).cmp(&(b.0, b.1, &b.2.name)));
    let total = order.len();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::with_capacity(spec.waves.len());
    for (i, wave) in spec.waves.iter().enumerate() {
        let mut this: BTreeSet<String> = BTreeSet::new();
        let last = i + 1 == spec.waves.len();
        let want = |taken: usize| match wave.size() {
            WaveSize::Clusters(n) => n as usize,
            WaveSize::Percent(p) => percent_of(p, total).saturating_sub(taken),
            WaveSize::Selector(_) => total,
        };
        let n = if last { total } else { want(taken.len()) };
        for (_, _, c) in &order {
            if this.len() >= n {
                break;
            }
            if taken.contains(&c.name) {
                continue;
            }
            if !last
                && let WaveSize::Selector(s) = wave.size()
                && !s.matches(&c.labels)
            {
                continue;
            }
            this.insert(c.name.clone());
        }
        taken.extend(this.iter().cloned());
        out.push(this);
    }
    out
}

/// ⌈p % of `total`⌉, at most `total`.
pub fn percent_of(p: u32, total: usize) -> usize {
    let p = p.min(100) as usize;
    (p * total).div_ceil(100)
}

/// The clusters released through wave `wave` (inclusive): those of its waves, and those
/// released before that are still candidates (a release is never taken back).
pub fn released_through(
    waves: &[BTreeSet<String>],
    wave: usize,
    before: &BTreeSet<String>,
    candidates: &[WaveCandidate],
) -> BTreeSet<String> {
    let present: BTreeSet<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
    let mut out: BTreeSet<String> = before
        .iter()
        .filter(|c| present.contains(c.as_str()))
        .cloned()
        .collect();
    for w in waves.iter().take(wave.saturating_add(1)) {
        out.extend(w.iter().cloned());
    }
    out
}

/// `target` (what [`released_through`] allows) cut to at most `room` clusters more than
/// `before` (`maxUnavailable`: the others wait for a later batch), the clusters kept in
/// `before` first and new ones taken in name order. Returns the released set and how
/// many of `target` wait.
pub fn release_batch(
    target: BTreeSet<String>,
    before: &BTreeSet<String>,
    room: usize,
) -> (BTreeSet<String>, u64) {
    let (mut out, new): (BTreeSet<String>, Vec<String>) = {
        let (kept, new): (Vec<String>, Vec<String>) =
            target.into_iter().partition(|c| before.contains(c));
        (kept.into_iter().collect(), new)
    };
    let waiting = new.len().saturating_sub(room) as u64;
    out.extend(new.into_iter().take(room));
    (out, waiting)
}

#[cfg(test)]
#[path = "waves_tests.rs"]
mod tests;
