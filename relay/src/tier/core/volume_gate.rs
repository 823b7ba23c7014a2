//! At the root: a move of a placement that names volumes (`spec.moveVolumes`) waits
//! for its data. While the claims are copied to the new clusters, the placement's
//! decision keeps exactly the clusters it ran on (`only`), so the new clusters get no
//! object of it (no workload starts on a claim not yet restored) and the old keep
//! running; once the runtime (`crate::tier::volume`) reports the data restored, the
//! move goes on as any make-before-break move. A copy that fails leaves the placement
//! where it was, and its status says why.
//!
//! The moves' state is in memory: after a restart of the root the copy starts again,
//! and resumes from what the new clusters hold already.

use std::collections::{BTreeMap, BTreeSet};

use strata_protocol::choice::Decision;
use strata_protocol::model::Space;
use strata_protocol::placement::Placement;
use strata_protocol::placement_spec::{CLAIM_KIND, VolumeClaim};
use strata_protocol::time::UnixMillis;
use strata_protocol::volume::{AccessMode, access_mode_of};

use super::NodeCore;

/// Where a placement's volume move stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumePhase {
    /// The data is being copied; the placement stays where it was.
    Copying,
    /// The data is on the new clusters; the move goes on.
    Restored,
    /// The copy failed; the placement stays where it was.
    Failed(String),
}

/// One placement's volume move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMove {
    /// Old cluster → new cluster, paired by name.
    pub pairs: Vec<(String, String)>,
    /// The claims, with their access modes (from the claims' manifests).
    pub claims: Vec<(VolumeClaim, AccessMode)>,
    /// Where it stands.
    pub phase: VolumePhase,
    /// When it started.
    pub started: UnixMillis,
    /// How long the old copy's writers were stopped (phase 2), once restored.
    pub downtime_ms: Option<u64>,
    /// Bytes copied, the relay that copied, passes: for the status.
    pub detail: String,
    /// A failed copy: when it is tried again.
    pub retry_at: Option<UnixMillis>,
}

/// How long after a failed copy the root tries again, while the placement still asks
/// for the move (the old cluster may have been out of reach: its data cannot be copied,
/// so the placement stays, and moves once it can).
pub const VOLUME_RETRY_MS: u64 = 30_000;

/// The volume moves of every placement, by (space, name).
pub type VolumeMoves = BTreeMap<(Space, String), VolumeMove>;

impl NodeCore {
    /// The volume moves, by placement.
    pub fn volume_moves(&self) -> &VolumeMoves {
        &self.volume_moves
    }

    /// The runtime's report on a move's copy: restored (with the write downtime) or
    /// failed. Ignored if the placement has moved on since (other clusters, or the move
    /// was given up): returns whether it was taken.
    pub fn volume_move_done(
        &mut self,
        key: &(Space, String),
        pairs: &[(String, String)],
        outcome: Result<(u64, String), String>,
    ) -> bool {
        let Some(m) = self.volume_moves.get_mut(key) else {
            return false;
        };
        if m.pairs != pairs || m.phase != VolumePhase::Copying {
            return false;
        }
        match outcome {
            Ok((downtime, detail)) => {
                tracing::info!(space = %key.0.0, placement = %key.1, pairs = ?pairs, downtime_ms = downtime, %detail, "volume move: the data is restored on the new clusters; the move goes on");
                m.phase = VolumePhase::Restored;
                m.downtime_ms = Some(downtime);
                m.detail = detail;
            }
            Err(why) => {
                tracing::warn!(space = %key.0.0, placement = %key.1, pairs = ?pairs, reason = %why, "volume move failed: the placement stays where it was");
                m.phase = VolumePhase::Failed(why);
            }
        }
        self.replan_on_tick = true;
        true
    }

    /// Part of planning: `decision` for `p`, which ran on `before`, held where it was
    /// while its volumes are not on the new clusters. Returns whether the move waits (a
    /// copy under way, or one to try again): the root then replans on its tick. A
    /// failed copy is tried again after [`VOLUME_RETRY_MS`].
    pub(super) fn gate_volumes(
        &mut self,
        p: &Placement,
        before: &BTreeSet<String>,
        chosen: &BTreeSet<String>,
        decision: &mut Decision,
        wall: UnixMillis,
    ) -> bool {
        let key = (p.space.clone(), p.name.clone());
        if p.moves.volumes.is_empty() {
            self.volume_moves.remove(&key);
            self.replications.remove(&key);
            return false;
        }
        // Every claim ReadWriteMany: replicated (`volume_replicas.rs`). A placement
        // that mixes access modes moves every claim in two phases.
        if p.moves
            .volumes
            .iter()
            .all(|v| self.claim_mode(&p.space, &v.claim) == AccessMode::ReadWriteMany)
        {
            self.volume_moves.remove(&key);
            return self.gate_replicated(p, before, chosen, decision, wall);
        }
        self.replications.remove(&key);
        let old: Vec<String> = before.difference(chosen).cloned().collect();
        let new: Vec<String> = chosen.difference(before).cloned().collect();
        if old.is_empty() || new.is_empty() {
            // Not a move (a first placement, a cluster added or released): nothing
            // to copy. A finished move's record stays for the status; one not finished
            // was given up (the placement asks for where it runs again).
            if self
                .volume_moves
                .get(&key)
                .is_some_and(|m| m.phase != VolumePhase::Restored)
            {
                tracing::info!(space = %p.space.0, placement = %p.name, "volume move given up: the placement no longer asks for it");
                self.volume_moves.remove(&key);
            }
            return false;
        }
        let pairs: Vec<(String, String)> = old.iter().cloned().zip(new.iter().cloned()).collect();
        let current = self.volume_moves.get(&key);
        if current.is_none_or(|m| m.pairs != pairs) {
            let claims = p
                .moves
                .volumes
                .iter()
                .map(|v| (v.claim.clone(), self.claim_mode(&p.space, &v.claim)))
                .collect();
            let phase = if old.len() != new.len() {
                VolumePhase::Failed(format!(
                    "a move with volumes must leave as many clusters as it takes: it leaves {old:?} and takes {new:?}"
                ))
            } else {
                VolumePhase::Copying
            };
            tracing::info!(space = %p.space.0, placement = %p.name, pairs = ?pairs, "volume move: copying the claims before the new clusters get the placement");
            self.volume_moves.insert(
                key.clone(),
                VolumeMove {
                    pairs,
                    claims,
                    phase,
                    started: wall,
                    downtime_ms: None,
                    detail: String::new(),
                    retry_at: None,
                },
            );
        }
        if let Some(m) = self.volume_moves.get_mut(&key)
            && matches!(m.phase, VolumePhase::Failed(_))
            && old.len() == new.len()
        {
            match m.retry_at {
                None => m.retry_at = Some(UnixMillis(wall.0 + VOLUME_RETRY_MS)),
                Some(at) if wall >= at => {
                    tracing::info!(space = %p.space.0, placement = %p.name, pairs = ?m.pairs, "volume move: trying the copy again");
                    m.phase = VolumePhase::Copying;
                    m.started = wall;
                    m.retry_at = None;
                }
                Some(_) => {}
            }
        }
        let phase = self.volume_moves.get(&key).map(|m| m.phase.clone());
        if phase == Some(VolumePhase::Restored) {
            return false;
        }
        // Held: exactly where it ran, nothing retiring.
        decision.only = Some(before.clone());
        decision.except.clear();
        decision.retiring.clear();
        decision.retiring_since = None;
        // Copying, or failed and tried again later: the root replans on its tick.
        true
    }

    /// The claim's manifest as the root holds it (JSON), if it does: a copy carries it
    /// to a new cluster that must create the claim to write it.
    pub fn claim_manifest(&self, space: &Space, claim: &VolumeClaim) -> Option<Vec<u8>> {
        self.claim_body(space, claim).map(<[u8]>::to_vec)
    }

    /// The body of the claim's manifest in the root's log, if it holds one.
    fn claim_body(&self, space: &Space, claim: &VolumeClaim) -> Option<&[u8]> {
        self.log
            .live()
            .find(|o| {
                let k = o.key();
                k.space == *space
                    && k.kind == CLAIM_KIND
                    && k.group.is_empty()
                    && k.name == claim.claim
                    && k.namespace.as_deref() == Some(claim.namespace.as_str())
            })
            .map(|o| &o.body[..])
    }

    /// The access mode of the claim as the root holds its manifest (ReadWriteOnce when
    /// it holds none).
    fn claim_mode(&self, space: &Space, claim: &VolumeClaim) -> AccessMode {
        self.claim_body(space, claim)
            .and_then(|body| serde_json::from_slice::<serde_json::Value>(body).ok())
            .map_or(AccessMode::ReadWriteOnce, |v| access_mode_of(&v))
    }
}

#[cfg(test)]
mod tests {
    use strata_protocol::time::Instant;
    use strata_protocol::volume::VOLUME_VERSION;
    use strata_protocol::wire::{ChildToParent, Hello, Role};

    use super::super::testing::{root, turn};

    /// The version gate's input: what each child negotiated. A relay of version 5 is
    /// never sent a volume stream (`crate::tier::volume::route` refuses it).
    #[test]
    fn a_child_of_an_older_version_is_known_as_such() {
        for (max, volumes) in [(5, false), (VOLUME_VERSION, true)] {
            let mut core = root();
            let now = Instant::ZERO;
            assert_eq!(core.child_version("eu"), None);
            core.child_connected(now, "eu", 1).unwrap();
            core.child_message(
                now,
                "eu",
                1,
                ChildToParent::Hello(Hello {
                    min_version: 1,
                    max_version: max,
                    node: "eu".into(),
                    role: Role::Relay,
                    run: 3,
                }),
            );
            let _ = turn(&mut core, now);
            let v = core.child_version("eu").unwrap();
            assert_eq!(v, max);
            assert_eq!(v >= VOLUME_VERSION, volumes);
        }
    }
}
