//! At the root: driving each placement's rollout ([`strata_protocol::rollout`]).
//!
//! The root keeps one `Rollout` object per placement with a `rollout` (its
//! [`RolloutState`], in the log so a restarted root resumes where it was) and, while a
//! rollout runs or may be undone, a pinned copy of every object of the previous
//! revision ([`strata_protocol::waves`]). What changes them:
//! * a user's write that changes the template (the selected objects' keys and
//!   contents) starts a rollout at wave 0, in the same revision as the write: pins of
//!   the objects as they were, and (through [`NodeCore::plan_changes`]) a decision
//!   releasing only wave 0, so no other cluster ever sees the new revision early;
//! * the placement's `strata.dev/rollout` annotation (`pause`, `resume`, `abort`,
//!   `undo`), acted on once per value;
//! * at every tick while progressing, the gate on the summarized health of the
//!   clusters released so far.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use strata_node::objects::{Manifest, to_object};
use strata_protocol::customize::CustomizeRule;
use strata_protocol::model::{Object, ObjectKey, ObjectKeyParts, ObjectMeta, Revision, Space};
use strata_protocol::placement::Placement;
use strata_protocol::rollout::{
    COMMAND_ANNOTATION, GateHealth, GateOutcome, Phase, ROLLOUT_KIND, RolloutState,
};
use strata_protocol::route::{STRATA_GROUP, is_placement, is_strata_object};
use strata_protocol::sync::ObjectLog;
use strata_protocol::time::UnixMillis;
use strata_protocol::waves::{
    PIN_CUSTOMIZE_LABEL, PIN_PLACEMENT_LABEL, WaveCandidate, assign_waves, is_pin, pin_key,
    pin_placement, release_batch, released_through,
};
use strata_protocol::wire::Change;

use super::{NodeCore, last_seen};

/// A placement's rollout objects before a write: its template and, when a new
/// rollout would pin them, its objects as they were.
pub(super) struct Before {
    objects: BTreeMap<(Space, String), (Vec<Object>, Vec<CustomizeRule>)>,
}

impl NodeCore {
    /// Each placement's rollout, by (space, name).
    pub fn rollouts(&self) -> &BTreeMap<(Space, String), RolloutState> {
        &self.rollouts
    }

    /// The health of what `placement`'s rollout released so far, as its gate sees it.
    /// A released cluster the root cannot reach now (a link on its path is down, or
    /// nobody reported one) counts as not available, whatever it reported last, and
    /// the summaries of direct children cut off are left out (stale).
    pub fn gate_health(&self, p: &Placement, state: &RolloutState) -> GateHealth {
        let released = state.released.len() as u64;
        let links = self.reachability();
        let wall = UnixMillis(state.wave_since);
        let reachable: BTreeSet<&str> = self
            .reports
            .clusters()
            .filter(|c| state.released.contains(&c.name) && last_seen(c, &links, wall).0)
            .map(|c| c.name.as_str())
            .collect();
        let unreachable = released.saturating_sub(reachable.len() as u64);
        let cut_off: BTreeSet<String> = self
            .links()
            .into_iter()
            .filter(|(_, l)| !l.connected)
            .map(|(name, _)| name)
            .collect();
        let mut health = GateHealth {
            released,
            available: released - unreachable,
            failed: 0,
            unreachable,
            pending: state.pending,
        };
        for o in self
            .log
            .live()
            .filter(|o| !is_strata_object(&o.meta) && p.selects_object(&o.meta))
        {
            let s = self.summary_without(p, o.key(), &cut_off);
            // A cluster that still reports an earlier revision has not taken this one
            // yet: what it says (a failure of the revision rolled back, say) is not
            // this revision's health. The gate waits for it (or times out).
            let current = s.min_revision.is_none_or(|r| r >= o.revision);
            let (available, failed) = if current {
                (s.health.available, s.health.failed)
            } else {
                (0, 0)
            };
            health.available = health.available.min(available);
            health.failed = health.failed.max(failed);
        }
        health
    }

    /// Before a write at the root: the objects of every placement whose rollout is
    /// complete (a change of its template pins them).
    pub(super) fn rollouts_before(&self) -> Before {
        let mut objects = BTreeMap::new();
        for p in self.placements.iter().filter(|p| p.rollout.is_some()) {
            let key = (p.space.clone(), p.name.clone());
            if self
                .rollouts
                .get(&key)
                .is_some_and(|s| s.phase == Phase::Complete)
            {
                let selected = selected(&self.log, p).cloned().collect();
                objects.insert(key, (selected, p.customize.clone()));
            }
        }
        Before { objects }
    }

    /// After a write is staged: starts, restarts or ends rollouts whose template
    /// changed, acts on command annotations, and drops the records of placements gone.
    /// Returns the changes to stage at `revision`.
    pub(super) fn rollout_writes(
        &mut self,
        before: Before,
        wall: UnixMillis,
        revision: Revision,
    ) -> Vec<Change> {
        let placements = strata_node::objects::placements_in(&self.log);
        let mut changes = Vec::new();
        let mut kept = BTreeSet::new();
        for p in placements.iter().filter(|p| p.rollout.is_some()) {
            let key = (p.space.clone(), p.name.clone());
            kept.insert(key.clone());
            let template = template_hash(selected(&self.log, p), &p.customize);
            let command = command_of(&self.log, p);
            let Some(old) = self.rollouts.get(&key) else {
                let mut s = RolloutState::new(template, wall.0);
                // An annotation present before the rollout existed is not a command.
                s.command = command;
                changes.push(Change::Upsert(state_object(p, &s, revision)));
                continue;
            };
            let mut s = old.clone();
            if s.template != template {
                let previous = match before.objects.get(&key) {
                    Some((objects, rules)) => {
                        changes.extend(repin(&self.log, p, objects, rules, revision));
                        Some(template_hash(objects.iter(), rules))
                    }
                    None => s.previous,
                };
                s.handle_template(template, previous, wall.0);
                tracing::info!(space = %p.space.0, placement = %p.name, revision = s.revision, phase = %s.phase, "a new template: rollout starts");
            }
            if let Err(e) = s.handle_command(command.as_deref(), wall.0) {
                tracing::warn!(space = %p.space.0, placement = %p.name, error = %e, "ignoring a rollout command");
            }
            if s != *old {
                changes.push(Change::Upsert(state_object(p, &s, revision)));
            }
        }
        // Placements gone, or without a rollout now: their records and pins go.
        for o in self.log.live() {
            let owner = if is_rollout(&o.meta) {
                Some(o.key().name.as_str())
            } else {
                pin_placement(&o.meta)
            };
            if let Some(name) = owner
                && !kept.contains(&(o.key().space.clone(), name.to_owned()))
            {
                changes.push(Change::Delete(o.key().clone()));
            }
        }
        changes
    }

    /// At every tick: each progressing rollout's gate. Returns the records to write.
    pub(super) fn drive_gates(&mut self, wall: UnixMillis, revision: Revision) -> Vec<Change> {
        let mut changes = Vec::new();
        for p in &self.placements {
            let Some(spec) = &p.rollout else { continue };
            let key = (p.space.clone(), p.name.clone());
            let Some(old) = self.rollouts.get(&key) else {
                continue;
            };
            let mut s = old.clone();
            let health = self.gate_health(p, &s);
            match s.handle_gate(spec, health, wall.0) {
                GateOutcome::Holding => {}
                GateOutcome::NextWave => {
                    tracing::info!(space = %p.space.0, placement = %p.name, wave = %s.wave_label(spec), "gate passed: next wave");
                }
                GateOutcome::Completed => {
                    tracing::info!(space = %p.space.0, placement = %p.name, revision = s.revision, "rollout complete");
                }
                GateOutcome::Failed(why) => {
                    tracing::warn!(space = %p.space.0, placement = %p.name, reason = %why, phase = %s.phase, "rollout gate failed");
                }
            }
            if s != *old {
                changes.push(Change::Upsert(state_object(p, &s, revision)));
            }
        }
        changes
    }

    /// The clusters `p`'s rollout lets have its objects as they are now (`None`: all),
    /// among `chosen`; records a change of the released set at `revision`.
    pub(super) fn released_for(
        &mut self,
        p: &Placement,
        chosen: &BTreeSet<String>,
        revision: Revision,
        changes: &mut Vec<Change>,
    ) -> Option<BTreeSet<String>> {
        let spec = p.rollout.as_ref()?;
        let key = (p.space.clone(), p.name.clone());
        let state = self.rollouts.get(&key)?;
        match state.gated()? {
            false => Some(BTreeSet::new()),
            true => {
                let overrides = strata_node::objects::overrides_in(&self.log);
                let candidates: Vec<WaveCandidate> = self
                    .reports
                    .inventory()
                    .filter(|(_, c)| chosen.contains(&c.name))
                    .map(|(_, c)| WaveCandidate {
                        name: c.name.clone(),
                        labels: overrides.labels(&p.space, c).into_owned(),
                    })
                    .collect();
                let id = format!("{}/{}", p.space.0, p.name);
                let waves = assign_waves(spec, &id, &candidates, &state.released);
                let target = released_through(&waves, state.wave, &state.released, &candidates);
                // maxUnavailable: a batch of the wave at a time, the next once the
                // clusters released so far are available again (paused: no new batch).
                let batch =
                    RolloutState::batch_size(spec, waves.get(state.wave).map_or(0, BTreeSet::len));
                let updating = if spec.max_unavailable.is_some() {
                    let health = self.gate_health(p, state);
                    health.released.saturating_sub(health.available) as usize
                } else {
                    0
                };
                let room = match (spec.max_unavailable, state.phase) {
                    (None, _) => usize::MAX,
                    (Some(_), Phase::Progressing) => batch.saturating_sub(updating),
                    (Some(_), _) => 0,
                };
                let (released, pending) = release_batch(target, &state.released, room);
                if released != state.released || pending != state.pending {
                    let mut s = state.clone();
                    s.released = released.clone();
                    s.pending = pending;
                    changes.push(Change::Upsert(state_object(p, &s, revision)));
                    self.rollouts.insert(key, s);
                }
                Some(released)
            }
        }
    }

    /// Whether some rollout's gate is watching (the root then plans at every tick).
    pub(super) fn rollouts_progressing(&self) -> bool {
        self.rollouts
            .values()
            .any(|s| s.phase == Phase::Progressing)
    }
}

/// The objects `p` selects, in key order.
fn selected<'a>(log: &'a ObjectLog, p: &'a Placement) -> impl Iterator<Item = &'a Object> + 'a {
    log.live()
        .filter(move |o| !is_strata_object(&o.meta) && p.selects_object(&o.meta))
}

/// The template revision of a set of objects and the placement's `customize` rules:
/// FNV-1a over the objects' keys and content hashes, in key order, then the rules (as
/// JSON; none add nothing, so a placement without rules hashes its objects alone).
pub fn template_hash<'a>(
    objects: impl Iterator<Item = &'a Object>,
    rules: &[CustomizeRule],
) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for o in objects {
        feed(o.key().to_string().as_bytes());
        feed(&[0]);
        feed(&o.hash.0);
    }
    if !rules.is_empty() {
        feed(&[1]);
        feed(serde_json::to_string(rules).unwrap_or_default().as_bytes());
    }
    hash
}

/// The pins of `p` replaced by copies of `objects` (its previous revision), each
/// carrying the `customize` rules of that revision.
fn repin(
    log: &ObjectLog,
    p: &Placement,
    objects: &[Object],
    rules: &[CustomizeRule],
    revision: Revision,
) -> Vec<Change> {
    let rules = serde_json::to_string(rules).unwrap_or_else(|_| "[]".to_owned());
    let keep: BTreeSet<ObjectKey> = objects.iter().map(|o| pin_key(o.key())).collect();
    let mut out: Vec<Change> = log
        .live()
        .filter(|o| {
            is_pin(&o.meta)
                && o.key().space == p.space
                && pin_placement(&o.meta) == Some(p.name.as_str())
                && !keep.contains(o.key())
        })
        .map(|o| Change::Delete(o.key().clone()))
        .collect();
    for o in objects {
        out.push(Change::Upsert(Object {
            meta: std::sync::Arc::new(ObjectMeta {
                key: pin_key(o.key()),
                labels: [
                    (PIN_PLACEMENT_LABEL.to_owned(), p.name.clone()),
                    (PIN_CUSTOMIZE_LABEL.to_owned(), rules.clone()),
                ]
                .into(),
            }),
            revision,
            hash: o.hash,
            body: o.body.clone(),
        }));
    }
    out
}

/// The placement's `strata.dev/rollout` annotation, if it has one.
fn command_of(log: &ObjectLog, p: &Placement) -> Option<String> {
    let o = log
        .live()
        .find(|o| is_placement(&o.meta) && o.key().space == p.space && o.key().name == p.name)?;
    let v: Value = serde_json::from_slice(&o.body).ok()?;
    v.pointer("/metadata/annotations")?
        .get(COMMAND_ANNOTATION)?
        .as_str()
        .map(str::to_owned)
}

/// Whether an object is a rollout record.
pub fn is_rollout(meta: &ObjectMeta) -> bool {
    meta.key.group == STRATA_GROUP && meta.key.kind == ROLLOUT_KIND
}

/// The key of a placement's rollout record.
pub fn rollout_key(space: &Space, placement: &str) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: space.clone(),
        group: STRATA_GROUP.to_owned(),
        version: "v1alpha1".to_owned(),
        kind: ROLLOUT_KIND.to_owned(),
        namespace: None,
        name: placement.to_owned(),
    })
}

fn state_object(p: &Placement, state: &RolloutState, revision: Revision) -> Object {
    let manifest = Manifest {
        meta: ObjectMeta {
            key: rollout_key(&p.space, &p.name),
            labels: Default::default(),
        },
        value: json!({
            "apiVersion": "strata.dev/v1alpha1",
            "kind": ROLLOUT_KIND,
            "metadata": { "name": p.name },
            "rollout": state,
        }),
    };
    to_object(&manifest, revision)
}

/// Every rollout record in `log`, by (space, placement); one that does not parse is
/// logged and left out.
pub fn rollouts_in(log: &ObjectLog) -> BTreeMap<(Space, String), RolloutState> {
    let mut all = BTreeMap::new();
    for o in log.live().filter(|o| is_rollout(&o.meta)) {
        let parsed = serde_json::from_slice::<Value>(&o.body)
            .map_err(|e| e.to_string())
            .and_then(|v| {
                serde_json::from_value::<RolloutState>(v["rollout"].clone())
                    .map_err(|e| e.to_string())
            });
        match parsed {
            Ok(s) => {
                all.insert((o.key().space.clone(), o.key().name.clone()), s);
            }
            Err(e) => {
                tracing::warn!(rollout = %o.key(), error = %e, "ignoring a rollout record that does not parse");
            }
        }
    }
    all
}
