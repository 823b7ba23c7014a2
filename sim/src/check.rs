//! Invariant checkers: what the hierarchy must look like, computed from the root's log
//! and the topology, compared with what the agents hold and what the root summarizes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use strata_protocol::model::{Cluster, ObjectKey, ObjectMeta, Revision};
use strata_protocol::placement::Placement;
use strata_protocol::summary::Summary;
use strata_protocol::waves::pin_key;

use crate::topology::{Topology, effective_labels};

/// What the root holds, as the checkers need it.
#[derive(Debug, Clone, Default)]
pub struct RootView {
    /// Live objects that are not placements: identity, labels and revision.
    pub objects: Vec<(ObjectMeta, Revision)>,
    /// Placements.
    pub placements: Vec<Placement>,
    /// Every live object, placements included: key → revision.
    pub all: BTreeMap<ObjectKey, Revision>,
    /// The root's summaries: (placement, object, summary) for every object a placement
    /// selects.
    pub summaries: Vec<(String, ObjectKey, Summary)>,
    /// Placements whose rollout is under way or rolled back: the clusters released (the
    /// others hold the pinned previous revision).
    pub gated: BTreeMap<String, BTreeSet<String>>,
}

/// What each agent holds: object → revision.
pub type Held = BTreeMap<ObjectKey, Revision>;

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// What was seen.
    pub detail: String,
}

/// Every cluster of the topology with the labels placements see (inherited ones
/// included).
/// `relabeled` replaces some nodes' own labels.
pub fn effective_clusters(
    topology: &Topology,
    relabeled: &BTreeMap<String, strata_protocol::model::Labels>,
) -> Vec<Cluster> {
    topology
        .clusters
        .iter()
        .map(|c| Cluster {
            name: c.name.clone(),
            labels: effective_labels(topology, c, relabeled),
            properties: c.properties.clone(),
            path: vec![],
        })
        .collect()
}

/// The objects placed on each cluster at the root's latest revision; where a rollout
/// has not released a cluster (or rolled back), the pinned previous revision instead.
pub fn expected(clusters: &[Cluster], root: &RootView) -> BTreeMap<String, Held> {
    let mut out = BTreeMap::new();
    for c in clusters {
        let mut held = Held::new();
        for (meta, rev) in &root.objects {
            for p in root
                .placements
                .iter()
                .filter(|p| p.selects_object(meta) && p.selects_cluster(c))
            {
                let pin = pin_key(&meta.key);
                match (root.gated.get(&p.name), root.all.get(&pin)) {
                    (Some(released), Some(pinned)) if !released.contains(&c.name) => {
                        held.insert(pin, *pinned);
                    }
                    _ => {
                        held.insert(meta.key.clone(), *rev);
                    }
                }
            }
        }
        out.insert(c.name.clone(), held);
    }
    out
}

/// Differences between what agents hold and what they should; empty when converged.
pub fn divergence(
    expected: &BTreeMap<String, Held>,
    agents: &BTreeMap<String, Held>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, want) in expected {
        let Some(have) = agents.get(name) else {
            out.push(format!("{name}: not running"));
            continue;
        };
        for (key, rev) in want {
            match have.get(key) {
                None => out.push(format!("{name}: missing {} (rev {})", key.name, rev.0)),
                Some(r) if r != rev => out.push(format!(
                    "{name}: {} at rev {} instead of {}",
                    key.name, r.0, rev.0
                )),
                Some(_) => {}
            }
        }
        for key in have.keys().filter(|k| !want.contains_key(*k)) {
            out.push(format!(
                "{name}: holds {} which is not placed on it",
                key.name
            ));
        }
    }
    out
}

/// Root summaries that differ from those computed from the agents' clusters: every
/// selected cluster holds the object at the root's revision and its simulated cluster
/// reports it available (no scenario object is labelled to fail). Placements whose
/// rollout is under way or rolled back are left out (the rollout check watches them).
pub fn summary_mismatches(
    clusters: &[Cluster],
    root: &RootView,
    agents: &BTreeMap<String, Held>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (placement, key, s) in &root.summaries {
        let Some(p) = root.placements.iter().find(|p| &p.name == placement) else {
            continue;
        };
        if root.gated.contains_key(placement) {
            continue;
        }
        let Some(rev) = root
            .objects
            .iter()
            .find(|(m, _)| &m.key == key)
            .map(|(_, r)| *r)
        else {
            continue;
        };
        let mut selected = 0u64;
        let mut available = 0u64;
        for c in clusters {
            if p.selects_cluster(c) {
                selected += 1;
                if agents.get(&c.name).and_then(|h| h.get(key)) == Some(&rev) {
                    available += 1;
                }
            }
        }
        let revs_ok = selected == 0 || (s.min_revision == Some(rev) && s.max_revision == Some(rev));
        if s.expected != selected || s.health.available != available || !revs_ok {
            out.push(format!(
                "{placement}/{}: root says expected {} available {} revisions {:?}..{:?}; \
                 agents say expected {selected} available {available} at rev {}",
                key.name,
                s.expected,
                s.health.available,
                s.min_revision.map(|r| r.0),
                s.max_revision.map(|r| r.0),
                rev.0
            ));
        }
    }
    out
}

/// Running checks across samples: revisions never go back; the largest revision lag.
#[derive(Debug, Default)]
pub struct Monotonic {
    seen: BTreeMap<(String, ObjectKey), Revision>,
    /// The largest gap seen between the root's revision of an object and the revision
    /// an agent it is placed on held (0 when missing counts as revision 0).
    pub max_lag: u64,
}

impl Monotonic {
    /// Records one sample; returns a violation if an agent went back.
    pub fn observe(
        &mut self,
        agents: &BTreeMap<String, Held>,
        expected: &BTreeMap<String, Held>,
    ) -> Option<Violation> {
        for (name, held) in agents {
            for (key, rev) in held {
                let slot = self.seen.entry((name.clone(), key.clone())).or_insert(*rev);
                if rev < slot {
                    return Some(Violation {
                        invariant: "no agent goes back to an older revision",
                        detail: format!(
                            "{name} held {} at rev {}, now rev {}",
                            key.name, slot.0, rev.0
                        ),
                    });
                }
                *slot = *rev;
            }
            if let Some(want) = expected.get(name) {
                for (key, rev) in want {
                    let have = held.get(key).map(|r| r.0).unwrap_or(0);
                    self.max_lag = self.max_lag.max(rev.0.saturating_sub(have));
                }
            }
        }
        None
    }

    /// Forgets an agent's history (its disk was lost: starting over is allowed).
    pub fn forget(&mut self, agent: &str) {
        self.seen.retain(|(name, _), _| name != agent);
    }
}

/// Removals from agents' clusters that nothing asked for: the cluster held the object
/// at the very revision the root placed on it at the previous sample and still places
/// on it now (a delete at the root, or a placement moving away, changes one or the
/// other). `removed` is what each cluster removed since the previous sample.
pub fn unasked_removal(
    removed: &BTreeMap<String, Vec<(ObjectKey, Revision)>>,
    before: &BTreeMap<String, Held>,
    now: &BTreeMap<String, Held>,
) -> Option<Violation> {
    for (name, gone) in removed {
        for (key, rev) in gone {
            let placed =
                |at: &BTreeMap<String, Held>| at.get(name).and_then(|h| h.get(key)) == Some(rev);
            if placed(before) && placed(now) {
                return Some(Violation {
                    invariant: "no cluster loses an object the root still places on it",
                    detail: format!(
                        "{name} removed {} at rev {}, which the root placed on it at that \
                         revision before and after",
                        key.name, rev.0
                    ),
                });
            }
        }
    }
    None
}

/// A simulated duration as seconds with milliseconds.
pub fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}
