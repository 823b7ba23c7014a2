//! At the root: ReadWriteMany replicas kept in step with their primary (the state and
//! the rules are in `core/volume_replicas.rs`). `run_replicas` asks the core every
//! [`POLL`] for the syncs and cutovers due, runs each as its own task on the move's
//! data path (`super::volume::copy_as`: the pump at the lowest common relay, only the
//! chunks whose sums differ), and reports each outcome back.
//!
//! A cutover (the primary's cluster leaves): for each claim, a last sync while the old
//! primary writes; then its writers are stopped and what changed is copied as a move's
//! second phase, which leaves the new copy writable (promoted). Its duration is the write downtime. A failure lets the
//! old writers write again.

use std::time::Duration;

use serde_json::json;
use strata_node::driver::Input;
use strata_node::volume::claim_name;
use strata_protocol::model::Space;
use strata_protocol::placement_spec::VolumeClaim;
use strata_protocol::time::UnixMillis;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::core::volume_replicas::{CutoverJob, CutoverPhase, Replication, SyncJob};
use super::input::RelayInput;
use super::volume::{CopyKind, copy_as, next_request, query, thaw_patiently};

/// How often the root looks for syncs and cutovers due.
pub const POLL: Duration = Duration::from_millis(100);

/// Runs the root's replicas' syncs and cutovers until the node stops.
pub(crate) async fn run_replicas(inputs: mpsc::Sender<Input<RelayInput>>) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::time::sleep(POLL).await;
        while tasks.try_join_next().is_some() {}
        let Some((syncs, cutovers)) = query(&inputs, |c| {
            let now = c.wall_now();
            c.replica_work(now)
        })
        .await
        else {
            return;
        };
        for job in syncs {
            tasks.spawn(sync(inputs.clone(), job));
        }
        for job in cutovers {
            tasks.spawn(cutover(inputs.clone(), job));
        }
    }
}

/// The claim's manifest as the root holds it: a replica's cluster that lacks the claim
/// (a real cluster's agent) creates it before its mover writes it.
async fn manifest_of(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    space: &Space,
    claim: &VolumeClaim,
) -> Option<Vec<u8>> {
    let (space, claim) = (space.clone(), claim.clone());
    query(inputs, move |c| c.claim_manifest(&space, &claim))
        .await
        .flatten()
}

async fn sync(inputs: mpsc::Sender<Input<RelayInput>>, job: SyncJob) {
    let manifest = manifest_of(&inputs, &job.key.0, &job.claim).await;
    let outcome = copy_as(
        &inputs,
        next_request(),
        &job.from,
        &job.to,
        &job.claim,
        CopyKind::Replica,
        manifest.as_deref(),
    )
    .await
    .map(|r| (r.bytes, r.by));
    if let Ok((bytes, by)) = &outcome {
        tracing::debug!(claim = %claim_name(&job.claim), from = %job.from, to = %job.to, bytes, %by, "synced a replica");
    }
    let _ = query(&inputs, move |c| {
        let now = c.wall_now();
        c.replica_sync_done(&job, now, outcome);
    })
    .await;
}

async fn cutover(inputs: mpsc::Sender<Input<RelayInput>>, job: CutoverJob) {
    let request = next_request();
    // A last sync while the old primary still writes, so that little is left to send
    // with its writers stopped (a failure here stops nobody).
    for claim in &job.claims {
        let manifest = manifest_of(&inputs, &job.key.0, claim).await;
        if let Err(e) = copy_as(
            &inputs,
            request,
            &job.from,
            &job.to,
            claim,
            CopyKind::Replica,
            manifest.as_deref(),
        )
        .await
        {
            let outcome = Err(format!(
                "cutover (catching up before the writers stop): {e}"
            ));
            let _ = query(&inputs, move |c| {
                let now = c.wall_now();
                c.replica_cutover_done(&job, now, outcome);
            })
            .await;
            return;
        }
    }
    let stopped = tokio::time::Instant::now();
    let mut frozen = Vec::new();
    let mut detail = Vec::new();
    let mut failure = None;
    for claim in &job.claims {
        frozen.push(claim);
        match copy_as(
            &inputs,
            request,
            &job.from,
            &job.to,
            claim,
            CopyKind::Move { freeze: true },
            None,
        )
        .await
        {
            Ok(r) => detail.push(format!(
                "{} {}->{} via {}: {} bytes at cutover",
                claim_name(claim),
                job.from,
                job.to,
                r.by,
                r.bytes
            )),
            Err(e) => {
                failure = Some(format!("cutover (writers stopped): {e}"));
                break;
            }
        }
    }
    let downtime = u64::try_from(stopped.elapsed().as_millis()).unwrap_or(u64::MAX);
    let outcome = match failure {
        Some(why) => {
            for claim in frozen {
                thaw_patiently(&inputs, &job.from, claim).await;
            }
            Err(why)
        }
        None => Ok((downtime, detail.join("; "))),
    };
    let _ = query(&inputs, move |c| {
        let now = c.wall_now();
        c.replica_cutover_done(&job, now, outcome);
    })
    .await;
}

/// A placement's `status.decisions.volumeReplication` at `now`: per claim its primary
/// and each replica's state, lag and last sync; a move of the primary if one was asked.
pub fn replication_status(r: &Replication, now: UnixMillis) -> serde_json::Value {
    let claims: Vec<serde_json::Value> = r
        .claims
        .iter()
        .map(|(claim, c)| {
            let bound = c.max_lag_seconds.saturating_mul(1000);
            let replicas: Vec<serde_json::Value> = c
                .replicas
                .iter()
                .map(|(cluster, x)| {
                    let state = x.state(now, bound);
                    let mut v =
                        json!({ "cluster": cluster, "state": state.name(), "syncs": x.syncs });
                    if let Some(lag) = x.lag_ms(now) {
                        // Whole seconds: the status changes at most once a second.
                        v["lagSeconds"] = json!(lag / 1000);
                    }
                    if let Some(at) = x.synced_at {
                        v["lastSync"] = json!(at.rfc3339());
                        v["lastSyncBytes"] = json!(x.last_bytes);
                        v["via"] = json!(x.last_via);
                    }
                    if let Some(why) = state.reason() {
                        v["reason"] = json!(why);
                    }
                    v
                })
                .collect();
            json!({
                "claim": claim.claim,
                "namespace": claim.namespace,
                "primary": c.primary,
                "maxLagSeconds": c.max_lag_seconds,
                "replicas": replicas,
            })
        })
        .collect();
    let mut v = json!({ "claims": claims });
    if let Some(m) = &r.moving {
        let (phase, reason) = match &m.phase {
            CutoverPhase::Seeding => ("Seeding", None),
            CutoverPhase::CuttingOver => ("CuttingOver", None),
            CutoverPhase::Done => ("Done", None),
            CutoverPhase::Failed(why) => ("Failed", Some(why)),
        };
        let mut mv =
            json!({ "from": m.from, "to": m.to, "phase": phase, "started": m.started.rfc3339() });
        if let Some(ms) = m.downtime_ms {
            mv["writeDowntimeMs"] = json!(ms);
        }
        if !m.detail.is_empty() {
            mv["detail"] = json!(m.detail);
        }
        if let Some(why) = reason {
            mv["reason"] = json!(why);
        }
        if let Some(at) = m.retry_at {
            mv["retryAt"] = json!(at.rfc3339());
        }
        v["move"] = mv;
    }
    v
}

/// Each replica's lag in seconds at `now` (for the root's metrics): placement, claim,
/// replica cluster, lag.
pub fn replica_lags(
    all: &super::core::volume_replicas::Replications,
    now: UnixMillis,
) -> Vec<(String, String, String, f64)> {
    let mut out = Vec::new();
    for ((_, placement), r) in all {
        for (claim, c) in &r.claims {
            for (cluster, x) in &c.replicas {
                if let Some(lag) = x.lag_ms(now) {
                    out.push((
                        placement.clone(),
                        claim_name(claim),
                        cluster.clone(),
                        lag as f64 / 1000.0,
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use strata_protocol::placement_spec::VolumeClaim;

    use super::*;
    use crate::tier::core::volume_replicas::{ClaimReplication, ReplicaCopy};

    #[test]
    fn the_status_shows_the_primary_and_each_replicas_lag_and_state() {
        let claim = VolumeClaim {
            claim: "data".into(),
            namespace: "shop".into(),
        };
        let synced = ReplicaCopy {
            synced_from: Some(UnixMillis(10_000)),
            synced_at: Some(UnixMillis(10_400)),
            syncs: 3,
            ..ReplicaCopy::default()
        };
        let mut cut = synced.clone();
        cut.failure = Some((UnixMillis(14_000), "to eu-1: eu is not connected".into()));
        let r = Replication {
            claims: BTreeMap::from([(
                claim,
                ClaimReplication {
                    primary: "eu-1".into(),
                    max_lag_seconds: 4,
                    replicas: BTreeMap::from([("us-1".into(), synced), ("us-2".into(), cut)]),
                },
            )]),
            moving: None,
        };
        let v = replication_status(&r, UnixMillis(13_000));
        let c = &v["claims"][0];
        assert_eq!(c["primary"], "eu-1");
        assert_eq!(c["maxLagSeconds"], 4);
        assert_eq!(c["replicas"][0]["state"], "InSync");
        assert_eq!(c["replicas"][0]["lagSeconds"], 3);
        assert!(c["replicas"][0].get("reason").is_none());
        let v = replication_status(&r, UnixMillis(15_000));
        let lagging = &v["claims"][0]["replicas"][1];
        assert_eq!(lagging["state"], "Lagging");
        assert!(
            lagging["reason"]
                .as_str()
                .unwrap()
                .ends_with("the last sync failed: to eu-1: eu is not connected"),
            "{lagging}"
        );
        assert!(v.get("move").is_none());
        let lags = replica_lags(
            &BTreeMap::from([(
                (
                    strata_protocol::model::Space::default_space(),
                    "shop".into(),
                ),
                r,
            )]),
            UnixMillis(15_000),
        );
        assert_eq!(
            lags[0],
            ("shop".into(), "shop/data".into(), "us-1".into(), 5.0)
        );
    }
}
