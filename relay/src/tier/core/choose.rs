//! At the root: choosing each placement's clusters ([`strata_protocol::choice`]) and
//! keeping the decisions every tier routes by in the log, next to the change that
//! caused them (the same revision, so no relay ever routes by one without the other).
//!
//! Moves are made before they break: when a placement's chosen clusters change, the
//! clusters it leaves stay in its decision as `retiring` until every cluster it is
//! routed to reports its objects available, or `moveTimeout` passes. Once they are,
//! the old clusters first drain (`draining`: DNS leaves them out, they keep the
//! objects) for the root's drain time (`endpoints.rs`), then are dropped.
//!
//! A placement whose choice is exactly "every cluster its selector matches" and that
//! is not moving has no decision object: relays evaluate its selector themselves.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use strata_node::objects::{ClusterSpec, Manifest, cluster_specs_in, placements_in, to_object};
use strata_protocol::choice::{Candidate, DECISION_KIND, Decision, Exclusion, Plan, Room, plan};
use strata_protocol::model::{Cluster, ObjectKey, ObjectKeyParts, ObjectMeta, Revision, Space};
use strata_protocol::placement::{MoveStrategy, Placement};
use strata_protocol::route::STRATA_GROUP;
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::Change;

use super::{NodeCore, last_seen};

/// What the root shows of a placement's choice (its `status.decisions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanStatus {
    /// The plan: chosen clusters, how many matched, who was left out and why.
    pub plan: Plan,
    /// Clusters it is moving off (make-before-break).
    pub retiring: BTreeSet<String>,
    /// The last move gave up waiting for the new clusters (`moveTimeout`).
    pub move_timed_out: bool,
}

/// The property a cluster may report its capacity in (from the topology's
/// `properties:`), when no Cluster object at the root sets `spec.capacity`.
pub const CAPACITY_PROPERTY: &str = "capacity.workloads";

impl NodeCore {
    /// What the root shows of each placement's choice, by (space, name).
    pub fn plans(&self) -> &BTreeMap<(Space, String), PlanStatus> {
        &self.plans
    }

    /// At the root: plans every placement against the log as it stands (staged changes
    /// included) and returns the decisions to write or drop at `revision`. Elsewhere:
    /// nothing.
    pub(super) fn plan_changes(&mut self, now: Instant, revision: Revision) -> Vec<Change> {
        if self.parent.is_some() {
            return Vec::new();
        }
        self.stats.plans += 1;
        let wall = self.wall(now);
        let placements = placements_in(&self.log);
        let specs = cluster_specs_in(&self.log);
        let overrides = strata_node::objects::overrides_in(&self.log);
        let links = self.reachability();
        let inventory: Vec<&Cluster> = self.reports.inventory().map(|(_, c)| c).collect();
        let names: BTreeSet<&str> = inventory.iter().map(|c| c.name.as_str()).collect();

        // What each placement is routed to now, and what it chose (without retiring).
        let routed_now = |p: &Placement| -> BTreeSet<String> {
            let old = self
                .placements
                .iter()
                .find(|o| o.space == p.space && o.name == p.name);
            match old {
                Some(old) => inventory
                    .iter()
                    .filter(|c| self.root_view.selects(old, c))
                    .map(|c| c.name.clone())
                    .collect(),
                None => BTreeSet::new(),
            }
        };
        let mut previous: BTreeMap<(Space, String), (BTreeSet<String>, Decision)> = BTreeMap::new();
        for p in &placements {
            let key = (p.space.clone(), p.name.clone());
            let decided = self
                .root_view
                .decisions
                .get(&key)
                .cloned()
                .unwrap_or_default();
            previous.insert(key, (routed_now(p), decided));
        }

        // Capacity: what every cluster accepts, less the placements holding it already
        // (first admitted, first kept).
        let mut room: Room = BTreeMap::new();
        for c in &inventory {
            if let Some(cap) = capacity(c, &specs) {
                room.insert(c.name.clone(), cap);
            }
        }
        for (routed, decided) in previous.values() {
            for name in routed.difference(&decided.retiring) {
                if let Some(left) = room.get_mut(name) {
                    *left = left.saturating_sub(1);
                }
            }
        }

        let mut changes = Vec::new();
        let mut plans = BTreeMap::new();
        let mut timed = false;
        let mut staged = Vec::with_capacity(placements.len());
        for p in &placements {
            let key = (p.space.clone(), p.name.clone());
            let (routed, decided) = &previous[&key];
            let chosen_before: BTreeSet<String> =
                routed.difference(&decided.retiring).cloned().collect();
            let candidates: Vec<Candidate> = inventory
                .iter()
                .map(|c| {
                    let (reachable, seen) = last_seen(c, &links, wall);
                    Candidate {
                        name: c.name.clone(),
                        labels: overrides.labels(&p.space, c).into_owned(),
                        taints: specs
                            .get(&(p.space.clone(), c.name.clone()))
                            .map(|s| s.taints.clone())
                            .unwrap_or_default(),
                        unreachable_since: (!reachable).then_some(seen).flatten().map(UnixMillis),
                    }
                })
                .collect();
            let planned = plan(p, &candidates, &chosen_before, wall, &mut room);
            timed |= has_timers(p, &candidates, &planned);
            let (decision, timed_out) = self.moving(p, routed, decided, &planned, &names, wall);
            staged.push((key, planned, decision, timed_out, chosen_before));
        }
        // The inventory is borrowed, not copied, up to here: what follows writes.
        for (p, (key, planned, mut decision, timed_out, before)) in placements.iter().zip(staged) {
            // Volumes (issue 50): a move waits for its data (`volume_gate.rs`).
            timed |= self.gate_volumes(p, &before, &planned.chosen, &mut decision, wall);
            decision.released = self.released_for(p, &planned.chosen, revision, &mut changes);
            timed |= !decision.retiring.is_empty();
            plans.insert(
                key.clone(),
                PlanStatus {
                    retiring: decision.retiring.clone(),
                    plan: planned,
                    move_timed_out: timed_out,
                },
            );
            let stored = self.log.get(&decision_key(&p.space, &p.name));
            let stored_decision = self.root_view.decisions.get(&key);
            if decision.is_plain() {
                if let Some(o) = stored {
                    changes.push(Change::Delete(o.key().clone()));
                }
            } else if stored.is_none() || stored_decision != Some(&decision) {
                changes.push(Change::Upsert(decision_object(
                    &p.space, &p.name, &decision, revision,
                )));
            }
        }
        // Decisions of placements that are gone.
        let gone: Vec<ObjectKey> = self
            .log
            .live()
            .filter(|o| strata_protocol::choice::is_decision(&o.meta))
            .filter(|o| !plans.contains_key(&(o.key().space.clone(), o.key().name.clone())))
            .map(|o| o.key().clone())
            .collect();
        changes.extend(gone.into_iter().map(Change::Delete));
        // Replicas of placements that are gone are synced no more.
        self.replications.retain(|k, _| plans.contains_key(k));
        self.plans = plans;
        self.replan_on_tick = timed || self.rollouts_progressing();
        changes
    }

    /// The decision for `p` given its plan: the clusters it leaves retire
    /// (make-before-break) until everything it is routed to is available, or the move
    /// times out. Returns it and whether the move timed out just now.
    fn moving(
        &self,
        p: &Placement,
        routed: &BTreeSet<String>,
        decided: &Decision,
        planned: &Plan,
        inventory: &BTreeSet<&str>,
        wall: UnixMillis,
    ) -> (Decision, bool) {
        let mut decision = Decision {
            only: p.clusters.count.map(|_| planned.chosen.clone()),
            except: if p.clusters.count.is_some() {
                BTreeSet::new()
            } else {
                planned.excluded.keys().cloned().collect()
            },
            retiring: BTreeSet::new(),
            retiring_since: None,
            draining: BTreeSet::new(),
            draining_since: None,
            released: None,
        };
        if p.moves.strategy == MoveStrategy::BreakBeforeMake {
            return (decision, false);
        }
        decision.retiring = routed
            .iter()
            .filter(|c| !planned.chosen.contains(*c) && inventory.contains(c.as_str()))
            .cloned()
            .collect();
        if decision.retiring.is_empty() {
            return (decision, false);
        }
        let unchanged = decision.retiring == decided.retiring
            && decision.only == decided.only
            && decision.except == decided.except;
        decision.retiring_since = if unchanged {
            decided.retiring_since.or(Some(wall.0))
        } else {
            Some(wall.0)
        };
        // The routes carry this very decision: release the old clusters once every
        // cluster routed to reports the placement's objects available.
        if unchanged && self.settled(p) {
            // Issue 50: DNS leaves the old clusters out for a drain before they go.
            if !self.drained(decided, &mut decision, wall) {
                return (decision, false);
            }
            tracing::info!(space = %p.space.0, placement = %p.name, released = ?decision.retiring, "move complete: the new clusters are available");
            decision.retiring.clear();
            decision.retiring_since = None;
            return (decision, false);
        }
        let since = decision.retiring_since.unwrap_or(wall.0);
        if wall.0 >= since.saturating_add(p.moves.timeout.millis()) {
            tracing::warn!(space = %p.space.0, placement = %p.name, released = ?decision.retiring, timeout = %p.moves.timeout, "move timed out: releasing the old clusters before the new ones are available");
            decision.retiring.clear();
            decision.retiring_since = None;
            return (decision, true);
        }
        (decision, false)
    }

    /// Whether every object `p` places is available on every cluster it is routed to.
    /// A relay that has not taken the decision in yet summarizes for the clusters it
    /// routed to before: its count of expected clusters differs from the root's, and
    /// the move waits.
    fn settled(&self, p: &Placement) -> bool {
        let routed = self
            .reports
            .inventory()
            .filter(|(_, c)| self.root_view.selects(p, c))
            .count() as u64;
        self.log
            .live()
            .filter(|o| {
                !strata_protocol::route::is_strata_object(&o.meta) && p.selects_object(&o.meta)
            })
            .all(|o| {
                let s = self.summary(p, o.key());
                s.expected == routed && s.health.available >= s.expected
            })
    }
}

/// Whether a plan may change with time alone: a `NoExecute` toleration running out, or
/// a chosen cluster unreachable that `failoverAfter` will replace.
fn has_timers(p: &Placement, candidates: &[Candidate], planned: &Plan) -> bool {
    let tolerating = p
        .clusters
        .tolerations
        .iter()
        .any(|t| t.toleration_seconds.is_some());
    let failing_over = p.clusters.failover_after.is_some()
        && candidates
            .iter()
            .any(|c| c.unreachable_since.is_some() && planned.chosen.contains(&c.name));
    tolerating || failing_over
}

/// A cluster's capacity: the smallest any space set at the root, else what it reports.
fn capacity(c: &Cluster, specs: &BTreeMap<(Space, String), ClusterSpec>) -> Option<u32> {
    specs
        .iter()
        .filter(|((_, name), _)| *name == c.name)
        .filter_map(|(_, s)| s.capacity)
        .min()
        .or_else(|| {
            c.properties
                .get(CAPACITY_PROPERTY)
                .and_then(|v| v.parse().ok())
        })
}

/// The key of a placement's decision.
pub fn decision_key(space: &Space, placement: &str) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: space.clone(),
        group: STRATA_GROUP.to_owned(),
        version: "v1alpha1".to_owned(),
        kind: DECISION_KIND.to_owned(),
        namespace: None,
        name: placement.to_owned(),
    })
}

fn decision_object(
    space: &Space,
    placement: &str,
    decision: &Decision,
    revision: Revision,
) -> strata_protocol::model::Object {
    let manifest = Manifest {
        meta: ObjectMeta {
            key: decision_key(space, placement),
            labels: Default::default(),
        },
        value: json!({
            "apiVersion": "strata.dev/v1alpha1",
            "kind": DECISION_KIND,
            "metadata": { "name": placement },
            "decision": decision,
        }),
    };
    to_object(&manifest, revision)
}

/// Counts of excluded clusters by reason (`{ capacity: 3, tainted: 1 }`).
pub fn excluded_counts(plan: &Plan) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for why in plan.excluded.values() {
        *out.entry(Exclusion::category(why)).or_insert(0) += 1;
    }
    out
}
