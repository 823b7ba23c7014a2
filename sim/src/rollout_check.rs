//! The rollout check (see [`crate::scenario::RolloutCheck`]): what the root's rollout
//! says, sampled after what the agents hold (so a release an agent acted on is already
//! in the root's answer), and the invariants between the two, with the figures the
//! run prints.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use strata_protocol::model::{Revision, Space};
use strata_protocol::rollout::{Phase, RolloutSpec, WaveSize};
use strata_protocol::waves::pin_key;

use crate::check::{Held, Violation, secs};
use crate::hosts::SimHierarchy;
use crate::scenario::RolloutCheck;

/// The root's rollout of the watched placement at one sample.
#[derive(Debug, Clone)]
struct RootRollout {
    /// The object's revision at the root.
    object: Revision,
    phase: Phase,
    /// The last wave released (index).
    wave: usize,
    released: BTreeSet<String>,
    /// The clusters the placement chose.
    chosen: BTreeSet<String>,
    /// The placement's rollout.
    spec: RolloutSpec,
}

/// How many clusters waves `0..=wave` may hold at most, of `n` chosen: counted here
/// from the spec, apart from the root's wave planner.
fn wave_bound(spec: &RolloutSpec, wave: usize, n: usize) -> usize {
    let mut total = 0usize;
    for (i, w) in spec.waves.iter().enumerate().take(wave + 1) {
        if i + 1 == spec.waves.len() {
            return n;
        }
        total = match w.size() {
            WaveSize::Clusters(c) => total + c as usize,
            WaveSize::Percent(p) => total.max((n * p as usize).div_ceil(100)),
            WaveSize::Selector(_) => n,
        };
    }
    total.min(n)
}

async fn root_rollout(hierarchy: &SimHierarchy, check: &RolloutCheck) -> Option<RootRollout> {
    let root = hierarchy
        .relays
        .borrow()
        .get(&hierarchy.topology.root().name)
        .cloned()?;
    let key = check.object.key();
    let placement = check.placement.clone();
    root.query(move |c| {
        let object = c.log().get(&key)?.revision;
        let state = c
            .rollouts()
            .get(&(Space::default_space(), placement.clone()))?;
        let chosen = c
            .plans()
            .get(&(Space::default_space(), placement.clone()))
            .map(|p| p.plan.chosen.clone())
            .unwrap_or_default();
        let spec = c
            .placements()
            .iter()
            .find(|p| p.space == Space::default_space() && p.name == placement)?
            .rollout
            .clone()?;
        Some(RootRollout {
            object,
            phase: state.phase,
            wave: state.wave,
            released: state.released.clone(),
            chosen,
            spec,
        })
    })
    .await
    .flatten()
}

/// What the check remembers between samples.
#[derive(Debug, Default)]
pub(crate) struct RolloutWatch {
    /// Per object revision rolled out in waves: every cluster the root released it to.
    released: BTreeMap<Revision, BTreeSet<String>>,
    /// Object revisions whose rollout completed (every cluster may hold them).
    completed: BTreeSet<Revision>,
    /// The revision rolled back and not yet gone from every cluster, since when.
    rolling_back: Option<(Revision, Duration, Duration)>,
    /// When the previous sample was taken.
    prev_t: Duration,
    /// Revisions rolled back (each watched once).
    rolled_back: BTreeSet<Revision>,
    /// The last (revision, phase, wave) seen, to note changes.
    last: Option<(Revision, Phase, usize)>,
    /// When the rollout of a revision was first seen.
    started: BTreeMap<Revision, Duration>,
    /// The cut-off relay's clusters; what they were released, and held, at the cut.
    cut: Option<(BTreeSet<String>, BTreeSet<String>)>,
    /// The last phase seen.
    pub(crate) phase: Option<Phase>,
    /// Figures and events, one line each.
    pub(crate) lines: Vec<String>,
}

impl RolloutWatch {
    /// Whether the last rollout ended in `outcome`, nothing left rolling back.
    pub(crate) fn done(&self, outcome: Phase) -> bool {
        self.phase == Some(outcome) && self.rolling_back.is_none()
    }
}

fn holds(held: &Held, key: &strata_protocol::model::ObjectKey) -> Option<Revision> {
    held.get(key).copied()
}

impl RolloutWatch {
    /// One sample: `agents` were read just before this call asks the root.
    pub(crate) async fn sample(
        &mut self,
        hierarchy: &SimHierarchy,
        check: &RolloutCheck,
        agents: &BTreeMap<String, Held>,
        t: Duration,
    ) -> Option<Violation> {
        let root = root_rollout(hierarchy, check).await?;
        let key = check.object.key();
        let rev = root.object;
        self.phase = Some(root.phase);
        match root.phase {
            Phase::Complete => {
                self.completed.insert(rev);
            }
            Phase::Progressing | Phase::Paused | Phase::RolledBack => {
                self.released
                    .entry(rev)
                    .or_default()
                    .extend(root.released.iter().cloned());
                self.started.entry(rev).or_insert(t);
            }
        }
        // The root releases no more than the waves opened so far hold, and (its state
        // durable) never goes back to an earlier wave of the same rollout.
        let bound = wave_bound(&root.spec, root.wave, root.chosen.len());
        if root.released.len() > bound {
            return Some(Violation {
                invariant: "no cluster outside the released waves receives the new revision",
                detail: format!(
                    "the root released rev {} to {} clusters in wave {}, whose waves hold {bound}",
                    rev.0,
                    root.released.len(),
                    root.wave + 1
                ),
            });
        }
        if let Some((r, phase, wave)) = self.last
            && r == rev
            && phase == root.phase
            && root.wave < wave
        {
            return Some(Violation {
                invariant: "a rollout resumes where it was",
                detail: format!(
                    "rev {}: wave {} after wave {}",
                    rev.0,
                    root.wave + 1,
                    wave + 1
                ),
            });
        }
        self.note(&root, t);
        // No cluster outside the waves released ever holds a revision rolled out in waves.
        for (cluster, held) in agents {
            let Some(r) = holds(held, &key) else { continue };
            if self.completed.contains(&r) {
                continue;
            }
            if let Some(released) = self.released.get(&r)
                && !released.contains(cluster)
            {
                return Some(Violation {
                    invariant: "no cluster outside the released waves receives the new revision",
                    detail: format!(
                        "{cluster} holds {} at rev {} which the root released to {} clusters, not to it",
                        key.name,
                        r.0,
                        released.len()
                    ),
                });
            }
        }
        // A rolled-back revision leaves every cluster before the next rollout starts;
        // each goes back to the previous revision (its pin).
        if root.phase == Phase::RolledBack && self.rolled_back.insert(rev) {
            // The gate failed after the previous sample, by this one.
            self.rolling_back = Some((rev, self.prev_t, t));
        }
        self.prev_t = t;
        if let Some((bad, after, by)) = self.rolling_back {
            let still: Vec<&String> = agents
                .iter()
                .filter(|(_, h)| holds(h, &key) == Some(bad))
                .map(|(c, _)| c)
                .collect();
            let pin = pin_key(&key);
            let back = root
                .chosen
                .iter()
                .filter(|c| agents.get(*c).is_some_and(|h| h.contains_key(&pin)))
                .count();
            if still.is_empty() && back == root.chosen.len() {
                self.lines.push(format!(
                    "{} rev {}: every cluster ({back}) back on the previous revision, \
                     {} to {} after the gate failed (between samples at {} and {})",
                    secs(t),
                    bad.0,
                    secs(t.saturating_sub(by)),
                    secs(t.saturating_sub(after)),
                    secs(after),
                    secs(by)
                ));
                self.rolling_back = None;
            } else if rev != bad {
                return Some(Violation {
                    invariant: "after a rollback every cluster runs the previous revision",
                    detail: format!(
                        "a new rollout (rev {}) started while {} clusters still held rev {} and {} of {} were back",
                        rev.0,
                        still.len(),
                        bad.0,
                        back,
                        root.chosen.len()
                    ),
                });
            }
        }
        self.check_cut(hierarchy, check, agents, rev, t)
    }

    fn note(&mut self, root: &RootRollout, t: Duration) {
        let now = (root.object, root.phase, root.wave);
        if self.last == Some(now) {
            return;
        }
        let since = self
            .started
            .get(&root.object)
            .map(|s| secs(t.saturating_sub(*s)))
            .unwrap_or_default();
        self.lines.push(format!(
            "{} rev {} {} wave {} released {} (+{since} since the rollout started)",
            secs(t),
            root.object.0,
            root.phase,
            root.wave + 1,
            root.released.len()
        ));
        self.last = Some(now);
    }

    /// The cut-off relay: from the cut until it is back, its clusters keep what they
    /// held of the revision and receive it only if released before the cut.
    fn check_cut(
        &mut self,
        hierarchy: &SimHierarchy,
        check: &RolloutCheck,
        agents: &BTreeMap<String, Held>,
        rev: Revision,
        t: Duration,
    ) -> Option<Violation> {
        let cut = check.cut_off.as_ref()?;
        if t < cut.from || t >= cut.to {
            return None;
        }
        let key = check.object.key();
        let below = below(hierarchy, &cut.relay);
        let holding = |agents: &BTreeMap<String, Held>| -> BTreeSet<String> {
            below
                .iter()
                .filter(|c| agents.get(*c).and_then(|h| holds(h, &key)) == Some(rev))
                .cloned()
                .collect()
        };
        if self.cut.is_none() {
            let released = self.released.get(&rev).cloned().unwrap_or_default();
            let released = released.intersection(&below).cloned().collect();
            self.cut = Some((released, holding(agents)));
        }
        let (released, held) = self.cut.as_ref()?;
        let now = holding(agents);
        if let Some(c) = now.difference(released).next() {
            return Some(Violation {
                invariant: "a relay cut off receives no later wave while away",
                detail: format!(
                    "{c} below {} holds rev {} at {}, released after the cut",
                    cut.relay,
                    rev.0,
                    secs(t)
                ),
            });
        }
        if let Some(c) = held.difference(&now).next() {
            return Some(Violation {
                invariant: "a relay cut off keeps what it was released",
                detail: format!("{c} below {} lost rev {} at {}", cut.relay, rev.0, secs(t)),
            });
        }
        None
    }
}

/// The clusters below `relay` (at any depth).
fn below(hierarchy: &SimHierarchy, relay: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![relay.to_owned()];
    while let Some(node) = todo.pop() {
        for child in crate::topology::children_of(&hierarchy.topology, &node) {
            if hierarchy.topology.relay(&child).is_some() {
                todo.push(child);
            } else {
                out.insert(child);
            }
        }
    }
    out
}
