//! The node's object log: the root's writes, what a changed key means here (its
//! summaries, and routes when it is a placement), the placements it holds, and
//! compaction bounded by what the children still need.

use strata_protocol::choice::DECISION_KIND;
use strata_protocol::model::{ObjectKey, Position, Revision};
use strata_protocol::overrides::CLUSTER_KIND;
use strata_protocol::route::{PLACEMENT_KIND, REVOCATION_KIND, STRATA_GROUP, is_revocation};
use strata_protocol::time::Instant;
use strata_protocol::wire::Change;

use super::{Applied, MAX_RETAINED, NodeCore};

impl NodeCore {
    /// Applies user changes at the root in one revision (all or nothing: they are
    /// staged together and committed at one position). Returns that position.
    ///
    /// At the root, the placements' decisions that follow from the changes (a label
    /// edit, a new count, a drain...) are written at the same revision.
    pub fn apply(
        &mut self,
        changes: Vec<Change>,
    ) -> Result<Position, strata_protocol::sync::LogError> {
        let pos = self.log.head().next();
        // Only Strata's own objects (placements, clusters) change what is chosen.
        let mut decisive = changes.iter().any(|c| {
            let k = c.key();
            k.group == STRATA_GROUP && (k.kind == PLACEMENT_KIND || k.kind == CLUSTER_KIND)
        });
        // What `reload_placements` reads (placements, rollouts, clusters, decisions,
        // revocations) is all Strata's own kinds: a batch of users' objects leaves it as
        // it is, and is not followed by reading every object of the log again.
        let mut strata = changes.iter().any(|c| c.key().group == STRATA_GROUP);
        let rollouts = strata || self.placements.iter().any(|p| p.rollout.is_some());
        let before = (self.parent.is_none() && rollouts).then(|| self.rollouts_before());
        for change in changes {
            self.note_change(&change);
            self.stage(pos, change)?;
        }
        // A changed template starts a rollout in this very revision: its pins and the
        // decision releasing its first wave travel with the change.
        if let Some(before) = before {
            let wall = self.wall(self.last_now);
            let writes = self.rollout_writes(before, wall, Revision(pos.0));
            if !writes.is_empty() {
                decisive = true;
                strata = true;
                for change in writes {
                    self.note_change(&change);
                    self.stage(pos, change)?;
                }
                self.rollouts = super::rollouts_in(&self.log);
            }
        }
        let planned = if decisive {
            self.plan_changes(self.last_now, Revision(pos.0))
        } else {
            Vec::new()
        };
        strata |= !planned.is_empty();
        for change in planned {
            self.note_change(&change);
            self.stage(pos, change)?;
        }
        self.log.commit(pos);
        self.history.commit(pos.0, self.last_now);
        if strata {
            self.reload_placements();
        }
        Ok(pos)
    }

    /// At the root, when the inventory or time may have changed a placement's choice:
    /// plans again and writes the decisions that changed at a new revision.
    pub(super) fn replan(&mut self, now: Instant) {
        self.replan = false;
        let pos = self.log.head().next();
        let gates = self.drive_gates(self.wall(now), Revision(pos.0));
        if !gates.is_empty() {
            for change in &gates {
                self.note_change(change);
                if let Err(e) = self.stage(pos, change.clone()) {
                    tracing::error!(error = %e, "cannot write a rollout");
                    return;
                }
            }
            self.rollouts = super::rollouts_in(&self.log);
        }
        let changes = self.plan_changes(now, Revision(pos.0));
        if changes.is_empty() && gates.is_empty() {
            return;
        }
        for change in changes {
            self.note_change(&change);
            if let Err(e) = self.stage(pos, change) {
                tracing::error!(error = %e, "cannot write a placement decision");
                return;
            }
        }
        self.log.commit(pos);
        self.history.commit(pos.0, now);
        self.reload_placements();
    }

    /// Applies user manifests at the root in one revision; manifests identical to what
    /// the log holds are left alone (applying twice changes nothing).
    pub fn apply_manifests(
        &mut self,
        manifests: &[strata_node::objects::Manifest],
    ) -> Result<Applied, strata_protocol::sync::LogError> {
        let rev = strata_protocol::model::Revision(self.log.head().next().0);
        let mut changes = Vec::new();
        let mut unchanged = Vec::new();
        for m in manifests {
            // A user's object carries its generation, from the version it replaces
            // (Strata's own kinds keep theirs as they are).
            let stamped;
            let m = if strata_protocol::route::is_strata_object(&m.meta) {
                m
            } else {
                let previous = self
                    .log
                    .get(&m.meta.key)
                    .and_then(|held| serde_json::from_slice::<serde_json::Value>(&held.body).ok());
                let mut value = m.value.clone();
                crate::generation::stamp(&mut value, previous.as_ref(), rev);
                stamped = strata_node::objects::Manifest {
                    meta: m.meta.clone(),
                    value,
                };
                &stamped
            };
            let object = strata_node::objects::to_object(m, rev);
            match self.log.get(object.key()) {
                Some(held) if held.hash == object.hash => unchanged.push(object.key().clone()),
                _ => changes.push(Change::Upsert(object)),
            }
        }
        let applied: Vec<ObjectKey> = changes.iter().map(|c| c.key().clone()).collect();
        let revision = if changes.is_empty() {
            None
        } else {
            Some(self.apply(changes)?)
        };
        Ok(Applied {
            revision,
            applied,
            unchanged,
        })
    }

    /// Stages one of the root's writes in the log and, when it changed something, in
    /// the watch history (the object as written and the state it replaced).
    fn stage(
        &mut self,
        pos: Position,
        change: Change,
    ) -> Result<bool, strata_protocol::sync::LogError> {
        let key = change.key().clone();
        let prev = self.log.get(&key).cloned();
        let object = match &change {
            Change::Upsert(o) => Some(o.clone()),
            Change::Delete(_) => None,
        };
        let changed = self.log.stage(pos, change)?;
        if changed {
            self.history.record(pos.0, key, object, prev);
        }
        Ok(changed)
    }

    fn note_change(&mut self, change: &Change) {
        self.note_key(change.key().clone());
    }

    /// A key changed in the log: its summaries may change, and a placement or a
    /// cluster's labels changing changes routes.
    pub(super) fn note_key(&mut self, key: ObjectKey) {
        if key.group == STRATA_GROUP && (key.kind == CLUSTER_KIND || key.kind == DECISION_KIND) {
            // Cluster labels changed: routes, and which clusters every summary expects.
            self.routes_stale = true;
            self.dirty.extend(self.log.live().map(|o| o.key().clone()));
        }
        if key.group == STRATA_GROUP && (key.kind == PLACEMENT_KIND || key.kind == REVOCATION_KIND)
        {
            self.routes_stale = true;
        }
        self.dirty.insert(key);
    }

    pub(super) fn reload_placements(&mut self) {
        self.placements = strata_node::objects::placements_in(&self.log);
        self.rollouts = super::rollouts_in(&self.log);
        self.root_view = strata_protocol::choice::RootView {
            overrides: strata_node::objects::overrides_in(&self.log),
            decisions: strata_node::objects::decisions_in(&self.log),
        };
        self.selections.get_mut().clear();
        self.revoked = self
            .log
            .live()
            .filter(|o| is_revocation(&o.meta))
            .map(|o| o.key().name.clone())
            .collect();
    }

    /// Drops tombstones no child needs any more: below every live session's retention
    /// floor and, for a child without one, its last acknowledged position, except that a
    /// child more than [`MAX_RETAINED`] positions behind is left to a snapshot rather
    /// than holding the log's history forever. The root also keeps its last
    /// `watch_history` positions for the Kubernetes API's watches, and a replica of a
    /// replicated tier as many for children moving to it from its sibling replicas.
    pub(super) fn compact(&mut self) {
        let head = self.log.head();
        let oldest_allowed = Position(head.0.saturating_sub(MAX_RETAINED));
        let log_id = self.log.id();
        // Per known child: what its live session still needs, or else (not connected,
        // or connected but not subscribed yet) what it last acknowledged.
        let floor = self
            .allowed
            .iter()
            .filter_map(|name| {
                self.children
                    .get(name)
                    .and_then(|c| c.session.retention_floor(&self.log))
                    .or_else(|| {
                        self.acked
                            .get(name)
                            .filter(|c| c.log == log_id)
                            .map(|c| c.position.max(oldest_allowed))
                    })
            })
            .min()
            .unwrap_or(head);
        // The root keeps history for watches; a replica of a replicated tier for the
        // children of its sibling replicas, which may move here with a cursor that only
        // a delta from some way back can serve (see `ParentIndex`).
        let floor = if self.parent.is_none() || self.log.parent_index().is_enabled() {
            floor.min(Position(head.0.saturating_sub(self.watch_history)))
        } else {
            floor
        };
        if floor > self.log.floor() {
            self.log.compact(floor);
        }
    }
}
