//! At the root: ReadWriteMany claims kept replicated across the clusters of a
//! placement, with a bounded lag (`spec.moveVolumes[].maxLagSeconds`).
//!
//! A placement whose `moveVolumes` are all ReadWriteMany claims (their manifests'
//! `spec.accessModes`) and that runs on more than one cluster is *replicated*: one
//! cluster holds the primary copy of each claim (the first that held its data: the one
//! it ran on before, or the first chosen by name on a first placement), and every other
//! chosen cluster a read-only replica. Across clusters one cluster writes, the primary;
//! a replica's app reads only, so there are never two writers across clusters. A
//! replica's cluster gets the placement's objects only once its first full copy is
//! done (the gate holds them, as for a move); then the runtime
//! (`crate::tier::volume_replicas`) syncs it from the primary every
//! [`sync_interval_ms`] (only the chunks whose sums differ).
//!
//! **The lag** of a replica is now minus the start of its last completed sync: every
//! write acknowledged on the primary before that start is on the replica. Within the
//! bound it is [`ReplicaState::InSync`], beyond it [`ReplicaState::Lagging`] with the
//! reason (the last sync's failure, or a sync still running).
//!
//! **A move** (the primary's cluster leaves the placement): the new cluster gets a
//! replica first while the old primary keeps writing, then at cutover the runtime
//! stops the old primary's writers, sends what changed and promotes the new copy
//! (writable), and the move goes on as any make-before-break move. A failed cutover lets
//! the old writers write again, leaves the placement where it was, says why and is
//! tried again after [`VOLUME_RETRY_MS`].
//!
//! The state is in the root's memory, like the moves': after a restart the first
//! cluster the placement runs on (by name) is taken as the primary, and replicas resume
//! from what they hold. An agent refuses a replica sync into a claim its own app writes
//! (`SimVolumes::begin_replica`), so a wrong guess overwrites no writer: the replica
//! lags, and its status says why.

use std::collections::{BTreeMap, BTreeSet};

use strata_protocol::choice::Decision;
use strata_protocol::model::Space;
use strata_protocol::placement::Placement;
use strata_protocol::placement_spec::VolumeClaim;
use strata_protocol::time::UnixMillis;

use super::NodeCore;
use super::volume_gate::VOLUME_RETRY_MS;

/// The shortest interval between two syncs of a replica.
pub const MIN_SYNC_INTERVAL_MS: u64 = 100;

/// How often a replica is synced under a bound of `max_lag_seconds`: a quarter of it,
/// so that a sync that takes up to a quarter too, and one more that fails, still leave
/// the lag within the bound.
pub fn sync_interval_ms(max_lag_seconds: u64) -> u64 {
    (max_lag_seconds.saturating_mul(1000) / 4).max(MIN_SYNC_INTERVAL_MS)
}

/// One replica of a claim, as the root knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaCopy {
    /// When the last completed sync started (none: the first full copy is not done).
    pub synced_from: Option<UnixMillis>,
    /// When it ended.
    pub synced_at: Option<UnixMillis>,
    /// Syncs completed.
    pub syncs: u64,
    /// Bytes the last completed sync sent.
    pub last_bytes: u64,
    /// The relay that ran the last completed sync (the lowest common relay).
    pub last_via: String,
    /// The last sync that failed since the last completed one: when, and why.
    pub failure: Option<(UnixMillis, String)>,
    /// A sync (or a cutover's copy) running since then.
    pub running_since: Option<UnixMillis>,
    /// The state last logged (to log changes only).
    pub(crate) logged: Option<&'static str>,
}

/// Where a replica stands against its bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaState {
    /// Its first full copy is not done: its cluster does not get the workload yet.
    Seeding(Option<String>),
    /// Its lag is within the bound.
    InSync,
    /// Its lag is beyond the bound, and why.
    Lagging(String),
}

impl ReplicaState {
    /// The state's name, as the status shows it.
    pub fn name(&self) -> &'static str {
        match self {
            ReplicaState::Seeding(_) => "Seeding",
            ReplicaState::InSync => "InSync",
            ReplicaState::Lagging(_) => "Lagging",
        }
    }

    /// Why (a lagging replica, or a first copy that failed).
    pub fn reason(&self) -> Option<&str> {
        match self {
            ReplicaState::Seeding(why) => why.as_deref(),
            ReplicaState::InSync => None,
            ReplicaState::Lagging(why) => Some(why),
        }
    }
}

impl ReplicaCopy {
    /// The lag at `now` in milliseconds: since the start of the last completed sync.
    pub fn lag_ms(&self, now: UnixMillis) -> Option<u64> {
        self.synced_from.map(|s| now.0.saturating_sub(s.0))
    }

    /// Where the replica stands at `now` under a bound of `max_lag_ms`.
    pub fn state(&self, now: UnixMillis, max_lag_ms: u64) -> ReplicaState {
        let failure = self.failure.as_ref().map(|(_, why)| why.clone());
        let Some(lag) = self.lag_ms(now) else {
            return ReplicaState::Seeding(failure.map(|w| format!("the first copy failed: {w}")));
        };
        if lag <= max_lag_ms {
            return ReplicaState::InSync;
        }
        let why = match (failure, self.running_since) {
            (Some(w), _) => format!("the last sync failed: {w}"),
            (None, Some(since)) => format!(
                "a sync has been running for {} ms",
                now.0.saturating_sub(since.0)
            ),
            (None, None) => "no sync has completed since".to_owned(),
        };
        ReplicaState::Lagging(format!(
            "{} ms behind the primary, over the bound of {} ms: {why}",
            lag, max_lag_ms
        ))
    }

    /// Whether a sync is due at `now` (none running, and the interval passed since the
    /// last attempt).
    fn due(&self, now: UnixMillis, interval_ms: u64) -> bool {
        if self.running_since.is_some() {
            return false;
        }
        let last = self
            .synced_from
            .max(self.failure.as_ref().map(|(at, _)| *at));
        last.is_none_or(|at| now.0 >= at.0.saturating_add(interval_ms))
    }
}

/// One claim's replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimReplication {
    /// The cluster that holds the primary copy (the one writer across clusters).
    pub primary: String,
    /// The bound on the replicas' lag.
    pub max_lag_seconds: u64,
    /// The replicas, by cluster.
    pub replicas: BTreeMap<String, ReplicaCopy>,
}

/// Where a move of a replicated placement stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CutoverPhase {
    /// The new cluster's replica is being made (the old primary keeps writing).
    Seeding,
    /// The old writers are stopped, what changed is sent, the new copy promoted.
    CuttingOver,
    /// Done: the new cluster holds the primary copy.
    Done,
    /// The cutover failed: the placement stays where it was.
    Failed(String),
}

/// A move of a replicated placement: its primary's cluster leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaMove {
    /// The old primary's cluster.
    pub from: String,
    /// The new primary's.
    pub to: String,
    /// Where it stands.
    pub phase: CutoverPhase,
    /// When it started.
    pub started: UnixMillis,
    /// How long the old primary's writers were stopped, once done.
    pub downtime_ms: Option<u64>,
    /// What was copied at cutover.
    pub detail: String,
    /// A failed cutover: when it is tried again.
    pub retry_at: Option<UnixMillis>,
}

/// One placement's replicated claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// By claim.
    pub claims: BTreeMap<VolumeClaim, ClaimReplication>,
    /// A move of the primary, if one was asked.
    pub moving: Option<ReplicaMove>,
}

impl Replication {
    /// The primary's cluster (every claim has the same).
    pub fn primary(&self) -> Option<&str> {
        self.claims.values().next().map(|c| c.primary.as_str())
    }

    /// Whether every claim's replica at `cluster` has its first full copy.
    fn seeded(&self, cluster: &str) -> bool {
        self.claims.values().all(|c| {
            c.replicas
                .get(cluster)
                .is_some_and(|r| r.synced_from.is_some())
        })
    }
}

/// The replications, by placement.
pub type Replications = BTreeMap<(Space, String), Replication>;

/// One sync for the runtime to run: `claim` from the primary `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncJob {
    /// The placement.
    pub key: (Space, String),
    /// The claim.
    pub claim: VolumeClaim,
    /// The primary's cluster.
    pub from: String,
    /// The replica's.
    pub to: String,
    /// When it started (the lag counts from here once it completes).
    pub started: UnixMillis,
}

/// A cutover for the runtime to run: every claim from `from` (writers stopped) to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutoverJob {
    /// The placement.
    pub key: (Space, String),
    /// The old primary.
    pub from: String,
    /// The new primary.
    pub to: String,
    /// The claims.
    pub claims: Vec<VolumeClaim>,
}

impl NodeCore {
    /// The replicated placements.
    pub fn replications(&self) -> &Replications {
        &self.replications
    }

    /// The syncs and cutovers due at `now`, marked running; logs replicas whose state
    /// changed since it was last logged.
    pub fn replica_work(&mut self, now: UnixMillis) -> (Vec<SyncJob>, Vec<CutoverJob>) {
        let mut syncs = Vec::new();
        let mut cutovers = Vec::new();
        for (key, r) in &mut self.replications {
            let cutting = r
                .moving
                .as_ref()
                .filter(|m| m.phase == CutoverPhase::CuttingOver)
                .map(|m| m.to.clone());
            for (claim, c) in &mut r.claims {
                let bound = c.max_lag_seconds.saturating_mul(1000);
                let interval = sync_interval_ms(c.max_lag_seconds);
                for (cluster, copy) in &mut c.replicas {
                    let state = copy.state(now, bound);
                    if copy.logged != Some(state.name()) {
                        let why = state.reason().unwrap_or_default();
                        match state {
                            ReplicaState::Lagging(_) => {
                                tracing::warn!(space = %key.0.0, placement = %key.1, claim = %claim_name(claim), primary = %c.primary, replica = %cluster, reason = %why, "volume replica: Lagging")
                            }
                            _ => {
                                tracing::info!(space = %key.0.0, placement = %key.1, claim = %claim_name(claim), primary = %c.primary, replica = %cluster, state = state.name(), lag_ms = ?copy.lag_ms(now), "volume replica state")
                            }
                        }
                        copy.logged = Some(state.name());
                    }
                    if cutting.as_deref() != Some(cluster.as_str()) && copy.due(now, interval) {
                        copy.running_since = Some(now);
                        syncs.push(SyncJob {
                            key: key.clone(),
                            claim: claim.clone(),
                            from: c.primary.clone(),
                            to: cluster.clone(),
                            started: now,
                        });
                    }
                }
            }
            // A cutover once the new cluster's replicas are all made and none is syncing.
            let ready = r.moving.as_ref().is_some_and(|m| {
                m.phase == CutoverPhase::Seeding
                    && r.seeded(&m.to)
                    && r.claims.values().all(|c| {
                        c.replicas
                            .get(&m.to)
                            .is_some_and(|x| x.running_since.is_none())
                    })
            });
            if ready && let Some(m) = r.moving.as_mut() {
                m.phase = CutoverPhase::CuttingOver;
                for c in r.claims.values_mut() {
                    if let Some(x) = c.replicas.get_mut(&m.to) {
                        x.running_since = Some(now);
                    }
                }
                tracing::info!(space = %key.0.0, placement = %key.1, from = %m.from, to = %m.to, "volume replicas: cutover, the old primary's writers stop");
                cutovers.push(CutoverJob {
                    key: key.clone(),
                    from: m.from.clone(),
                    to: m.to.clone(),
                    claims: r.claims.keys().cloned().collect(),
                });
            }
        }
        (syncs, cutovers)
    }

    /// The runtime's report on a sync: its bytes sent and the relay that ran it, or why
    /// it failed. Ignored if
    /// the replica is gone or the primary changed since it started.
    pub fn replica_sync_done(
        &mut self,
        job: &SyncJob,
        now: UnixMillis,
        outcome: Result<(u64, String), String>,
    ) {
        let Some(c) = self
            .replications
            .get_mut(&job.key)
            .and_then(|r| r.claims.get_mut(&job.claim))
        else {
            return;
        };
        let same_primary = c.primary == job.from;
        let Some(copy) = c.replicas.get_mut(&job.to) else {
            return;
        };
        copy.running_since = None;
        match outcome {
            Ok((bytes, via)) if same_primary => {
                if copy.synced_from.is_none() {
                    tracing::info!(space = %job.key.0.0, placement = %job.key.1, claim = %claim_name(&job.claim), replica = %job.to, bytes, "volume replica: first full copy done; its cluster gets the placement");
                    self.replan_on_tick = true;
                }
                copy.synced_from = copy.synced_from.max(Some(job.started));
                copy.synced_at = Some(now);
                copy.syncs += 1;
                copy.last_bytes = bytes;
                copy.last_via = via;
                copy.failure = None;
            }
            Ok(_) => {}
            Err(why) => {
                tracing::warn!(space = %job.key.0.0, placement = %job.key.1, claim = %claim_name(&job.claim), primary = %job.from, replica = %job.to, reason = %why, "volume replica: a sync failed");
                copy.failure = Some((now, why));
            }
        }
    }

    /// The runtime's report on a cutover: the write downtime and what was copied, or
    /// why it failed (the old writers write again).
    pub fn replica_cutover_done(
        &mut self,
        job: &CutoverJob,
        now: UnixMillis,
        outcome: Result<(u64, String), String>,
    ) {
        let Some(r) = self.replications.get_mut(&job.key) else {
            return;
        };
        let Some(m) = r.moving.as_mut().filter(|m| m.to == job.to) else {
            return;
        };
        for c in r.claims.values_mut() {
            if let Some(x) = c.replicas.get_mut(&job.to) {
                x.running_since = None;
            }
        }
        match outcome {
            Ok((downtime, detail)) => {
                tracing::info!(space = %job.key.0.0, placement = %job.key.1, from = %job.from, to = %job.to, downtime_ms = downtime, %detail, "volume replicas: the new cluster holds the primary copy; the move goes on");
                m.phase = CutoverPhase::Done;
                m.downtime_ms = Some(downtime);
                m.detail = detail;
                for c in r.claims.values_mut() {
                    c.primary = job.to.clone();
                    c.replicas.remove(&job.to);
                }
            }
            Err(why) => {
                tracing::warn!(space = %job.key.0.0, placement = %job.key.1, from = %job.from, to = %job.to, reason = %why, "volume replicas: the cutover failed; the placement stays where it was");
                m.phase = CutoverPhase::Failed(why);
                m.retry_at = Some(UnixMillis(now.0.saturating_add(VOLUME_RETRY_MS)));
            }
        }
        self.replan_on_tick = true;
    }

    /// Part of planning, for a placement whose claims are all ReadWriteMany: holds
    /// the chosen clusters whose replicas are not made yet, and the move of the
    /// primary until its cutover. Returns whether the root must replan on its tick.
    pub(super) fn gate_replicated(
        &mut self,
        p: &Placement,
        before: &BTreeSet<String>,
        chosen: &BTreeSet<String>,
        decision: &mut Decision,
        wall: UnixMillis,
    ) -> bool {
        let key = (p.space.clone(), p.name.clone());
        let Some(first) = before.iter().chain(chosen).next().cloned() else {
            return false;
        };
        let r = self
            .replications
            .entry(key.clone())
            .or_insert_with(|| Replication {
                claims: BTreeMap::new(),
                moving: None,
            });
        let primary = r.primary().unwrap_or(&first).to_owned();
        // The claims named now, each with the bound it is given.
        r.claims
            .retain(|c, _| p.moves.volumes.iter().any(|v| v.claim == *c));
        for v in &p.moves.volumes {
            let c = r
                .claims
                .entry(v.claim.clone())
                .or_insert_with(|| ClaimReplication {
                    primary: primary.clone(),
                    max_lag_seconds: v.max_lag_seconds,
                    replicas: BTreeMap::new(),
                });
            c.max_lag_seconds = v.max_lag_seconds;
            c.replicas.retain(|cluster, _| chosen.contains(cluster));
            for cluster in chosen.iter().filter(|c| **c != primary) {
                c.replicas.entry(cluster.clone()).or_default();
            }
        }
        // A move of the primary.
        if chosen.contains(&primary) || chosen.is_empty() {
            if r.moving
                .as_ref()
                .is_some_and(|m| m.phase != CutoverPhase::Done)
            {
                tracing::info!(space = %p.space.0, placement = %p.name, "volume replicas: move given up, the placement asks for its primary's cluster again");
                r.moving = None;
            }
        } else {
            let to = chosen
                .iter()
                .find(|c| r.seeded(c))
                .or_else(|| chosen.difference(before).next())
                .or_else(|| chosen.iter().next())
                .cloned()
                .unwrap_or_default();
            let current = r
                .moving
                .as_ref()
                .is_some_and(|m| m.from == primary && chosen.contains(&m.to));
            if !current {
                tracing::info!(space = %p.space.0, placement = %p.name, from = %primary, %to, "volume replicas: the primary's cluster leaves; a replica on the new cluster first, then a cutover");
                r.moving = Some(ReplicaMove {
                    from: primary.clone(),
                    to,
                    phase: CutoverPhase::Seeding,
                    started: wall,
                    downtime_ms: None,
                    detail: String::new(),
                    retry_at: None,
                });
            }
            if let Some(m) = r.moving.as_mut()
                && matches!(m.phase, CutoverPhase::Failed(_))
                && m.retry_at.is_some_and(|at| wall >= at)
            {
                tracing::info!(space = %p.space.0, placement = %p.name, from = %m.from, to = %m.to, "volume replicas: trying the cutover again");
                m.phase = CutoverPhase::Seeding;
                m.retry_at = None;
            }
        }
        let moving = !chosen.contains(&primary) && !chosen.is_empty();
        // Where the placement may run now: its primary, and the replicas made (a move's
        // new cluster only once it holds the primary copy).
        let move_to = r.moving.as_ref().map(|m| m.to.clone());
        let allowed: BTreeSet<String> = chosen
            .iter()
            .filter(|c| {
                **c == primary || (r.seeded(c) && !(moving && move_to.as_deref() == Some(c)))
            })
            .cloned()
            .chain(moving.then(|| primary.clone()))
            .collect();
        let seeding = r
            .claims
            .values()
            .any(|c| c.replicas.values().any(|x| x.synced_from.is_none()));
        if allowed == *chosen {
            return seeding;
        }
        if moving {
            // Held exactly where it may run, nothing retiring, as a move with volumes.
            decision.retiring.clear();
            decision.retiring_since = None;
        }
        decision.only = Some(allowed.union(&decision.retiring).cloned().collect());
        decision.except.clear();
        true
    }
}

fn claim_name(c: &VolumeClaim) -> String {
    format!("{}/{}", c.namespace, c.claim)
}

#[cfg(test)]
mod tests {
    use strata_protocol::placement_spec::{ClusterSelector, MovePolicy, MoveVolume};

    use super::super::testing::root;
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn shop() -> Placement {
        Placement {
            space: Space::default_space(),
            name: "shop".into(),
            objects: vec![],
            clusters: ClusterSelector::default(),
            upsync: vec![],
            moves: MovePolicy {
                volumes: vec![MoveVolume {
                    claim: VolumeClaim {
                        claim: "data".into(),
                        namespace: "shop".into(),
                    },
                    max_lag_seconds: 2,
                }],
                ..MovePolicy::default()
            },
            customize: vec![],
            status_summary: vec![],
            rollout: None,
        }
    }

    /// Gates `shop` from `before` to `chosen`: the clusters it may run on (`None`: all
    /// chosen) and whether the root replans on its tick.
    fn gate(
        core: &mut NodeCore,
        before: &[&str],
        chosen: &[&str],
        at: u64,
    ) -> (Option<BTreeSet<String>>, bool) {
        let mut d = Decision::default();
        let wait =
            core.gate_replicated(&shop(), &set(before), &set(chosen), &mut d, UnixMillis(at));
        (d.only, wait)
    }

    #[test]
    fn a_replica_gets_the_workload_after_its_first_copy_and_a_move_cuts_over() {
        let mut core = root();
        // First placement on two clusters: eu-1 (first by name) is the primary, us-1
        // is held until its replica is made.
        assert_eq!(
            gate(&mut core, &[], &["eu-1", "us-1"], 0),
            (Some(set(&["eu-1"])), true)
        );
        let (syncs, cutovers) = core.replica_work(UnixMillis(0));
        assert_eq!((syncs.len(), cutovers.len()), (1, 0));
        assert_eq!(
            (syncs[0].from.as_str(), syncs[0].to.as_str()),
            ("eu-1", "us-1")
        );
        assert!(
            core.replica_work(UnixMillis(10)).0.is_empty(),
            "one sync at a time"
        );
        // A failed first copy holds it still.
        core.replica_sync_done(&syncs[0], UnixMillis(20), Err("cut".into()));
        assert_eq!(
            gate(&mut core, &["eu-1"], &["eu-1", "us-1"], 20).0,
            Some(set(&["eu-1"]))
        );
        let syncs = core.replica_work(UnixMillis(600)).0;
        core.replica_sync_done(&syncs[0], UnixMillis(700), Ok((4096, "center".into())));
        assert_eq!(
            gate(&mut core, &["eu-1"], &["eu-1", "us-1"], 700),
            (None, false)
        );
        let r = &core.replications()[&(Space::default_space(), "shop".to_owned())];
        let copy = &r.claims.values().next().unwrap().replicas["us-1"];
        assert_eq!(copy.synced_from, Some(UnixMillis(600)));
        assert_eq!(copy.state(UnixMillis(2_600), 2_000), ReplicaState::InSync);
        // The primary's cluster leaves for us-2: held on eu-1 (us-1 is released) until
        // us-2's replica is made and the cutover done.
        let held = Some(set(&["eu-1"]));
        assert_eq!(
            gate(&mut core, &["eu-1", "us-1"], &["us-2"], 800),
            (held.clone(), true)
        );
        let (syncs, cutovers) = core.replica_work(UnixMillis(800));
        assert_eq!(
            (syncs.len(), syncs[0].to.as_str(), cutovers.len()),
            (1, "us-2", 0)
        );
        core.replica_sync_done(&syncs[0], UnixMillis(900), Ok((1, "center".into())));
        assert_eq!(gate(&mut core, &["eu-1"], &["us-2"], 900).0, held);
        let cutovers = core.replica_work(UnixMillis(950)).1;
        assert_eq!(cutovers.len(), 1);
        assert_eq!(
            (cutovers[0].from.as_str(), cutovers[0].to.as_str()),
            ("eu-1", "us-2")
        );
        assert!(
            core.replica_work(UnixMillis(2_000)).0.is_empty(),
            "no sync into a cutover"
        );
        // A failed cutover stays where it was, says why, and is tried again later.
        core.replica_cutover_done(
            &cutovers[0],
            UnixMillis(1_000),
            Err("cutover: refused".into()),
        );
        assert_eq!(gate(&mut core, &["eu-1"], &["us-2"], 1_000).0, held);
        let m = core.replications()[&(Space::default_space(), "shop".to_owned())]
            .moving
            .clone()
            .unwrap();
        assert_eq!(m.phase, CutoverPhase::Failed("cutover: refused".into()));
        assert!(core.replica_work(UnixMillis(1_100)).1.is_empty());
        let retry = 1_000 + VOLUME_RETRY_MS;
        gate(&mut core, &["eu-1"], &["us-2"], retry);
        // The replica, out of date by now, is synced first; then the cutover.
        let (syncs, cutovers) = core.replica_work(UnixMillis(retry));
        assert_eq!((syncs.len(), cutovers.len()), (1, 0));
        core.replica_sync_done(&syncs[0], UnixMillis(retry + 50), Ok((1, "center".into())));
        let cutovers = core.replica_work(UnixMillis(retry + 100)).1;
        assert_eq!(cutovers.len(), 1);
        core.replica_cutover_done(&cutovers[0], UnixMillis(40_000), Ok((60, "ok".into())));
        // us-2 holds the primary copy: the move goes on.
        assert_eq!(gate(&mut core, &["eu-1"], &["us-2"], 40_000), (None, false));
        let r = &core.replications()[&(Space::default_space(), "shop".to_owned())];
        assert_eq!(r.primary(), Some("us-2"));
        assert_eq!(r.moving.as_ref().unwrap().downtime_ms, Some(60));
    }

    fn copy(from: Option<u64>) -> ReplicaCopy {
        ReplicaCopy {
            synced_from: from.map(UnixMillis),
            ..ReplicaCopy::default()
        }
    }

    #[test]
    fn the_lag_counts_from_the_start_of_the_last_completed_sync() {
        let r = copy(Some(10_000));
        assert_eq!(r.lag_ms(UnixMillis(12_500)), Some(2_500));
        assert_eq!(r.state(UnixMillis(12_500), 3_000), ReplicaState::InSync);
        assert_eq!(r.state(UnixMillis(13_000), 3_000), ReplicaState::InSync);
        let ReplicaState::Lagging(why) = r.state(UnixMillis(13_001), 3_000) else {
            panic!("beyond the bound is Lagging");
        };
        assert!(
            why.starts_with("3001 ms behind the primary, over the bound of 3000 ms"),
            "{why}"
        );
        assert!(why.ends_with("no sync has completed since"), "{why}");
        assert_eq!(copy(None).lag_ms(UnixMillis(5)), None);
        assert_eq!(
            copy(None).state(UnixMillis(5), 1),
            ReplicaState::Seeding(None)
        );
    }

    #[test]
    fn a_lagging_replica_says_why() {
        let mut r = copy(Some(0));
        r.failure = Some((
            UnixMillis(900),
            "volume stream to eu-1: eu is not connected".into(),
        ));
        let state = r.state(UnixMillis(5_000), 1_000);
        assert_eq!(state.name(), "Lagging");
        assert!(
            state
                .reason()
                .unwrap()
                .ends_with("the last sync failed: volume stream to eu-1: eu is not connected"),
            "{state:?}"
        );
        // Within the bound, a failure alone does not make it lag.
        assert_eq!(r.state(UnixMillis(900), 1_000), ReplicaState::InSync);
        r.failure = None;
        r.running_since = Some(UnixMillis(1_000));
        assert!(
            r.state(UnixMillis(5_000), 1_000)
                .reason()
                .unwrap()
                .ends_with("a sync has been running for 4000 ms")
        );
        let mut seeding = copy(None);
        seeding.failure = Some((UnixMillis(1), "no claim".into()));
        assert_eq!(
            seeding.state(UnixMillis(2), 1_000),
            ReplicaState::Seeding(Some("the first copy failed: no claim".into()))
        );
    }

    #[test]
    fn syncs_are_due_at_an_interval_derived_from_the_bound() {
        assert_eq!(sync_interval_ms(30), 7_500);
        assert_eq!(sync_interval_ms(2), 500);
        assert_eq!(sync_interval_ms(0), MIN_SYNC_INTERVAL_MS);
        let mut r = copy(None);
        assert!(r.due(UnixMillis(0), 500), "a first copy is due at once");
        r.synced_from = Some(UnixMillis(1_000));
        assert!(!r.due(UnixMillis(1_499), 500));
        assert!(r.due(UnixMillis(1_500), 500));
        // After a failure, the next attempt waits the interval too.
        r.failure = Some((UnixMillis(1_600), "cut".into()));
        assert!(!r.due(UnixMillis(2_000), 500));
        assert!(r.due(UnixMillis(2_100), 500));
        r.running_since = Some(UnixMillis(2_100));
        assert!(!r.due(UnixMillis(9_000), 500), "one sync at a time");
    }
}
