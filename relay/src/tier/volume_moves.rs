//! At the root: each placement's volume move in two phases ([`run_move`]), started
//! by `run_moves` for every move the core's volume gate holds, and the move's status
//! ([`move_status`]). The copies themselves are `super::volume`'s.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use serde_json::json;
use strata_node::driver::Input;
use strata_node::volume::claim_name;
use strata_protocol::model::Space;
use strata_protocol::placement_spec::VolumeClaim;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::core::volume_gate::{VolumeMove, VolumePhase};
use super::input::RelayInput;
use super::volume::{
    CopyKind, MOVE_POLL, PRECOPY_ENOUGH, PRECOPY_ROUNDS, REQUESTS, copy_as, query, thaw,
    thaw_patiently,
};

/// One placement's move of its volumes, both phases; gives the write downtime in
/// milliseconds and what was copied, or why it failed (the old writers write again).
pub async fn run_move(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    key: &(Space, String),
    m: &VolumeMove,
) -> Result<(u64, String), String> {
    let request = REQUESTS.fetch_add(1, Ordering::Relaxed);
    tracing::info!(placement = %key.1, pairs = ?m.pairs, "volume move: phase 1");
    // The claims' manifests, for new clusters that must create a claim to write it.
    let (space, claims) = (key.0.clone(), m.claims.clone());
    let manifests: Vec<Option<Vec<u8>>> = query(inputs, move |c| {
        claims
            .iter()
            .map(|(claim, _)| c.claim_manifest(&space, claim))
            .collect()
    })
    .await
    .ok_or("the relay is stopping")?;
    let copy = |from: &str, to: &str, i: usize, freeze: bool| {
        let (from, to, claim) = (from.to_owned(), to.to_owned(), m.claims[i].0.clone());
        let manifest = manifests.get(i).cloned().flatten();
        async move {
            let kind = CopyKind::Move { freeze };
            copy_as(
                inputs,
                request,
                &from,
                &to,
                &claim,
                kind,
                manifest.as_deref(),
            )
            .await
        }
    };
    let mut detail = Vec::new();
    // Phase 1: copy while the old copy runs; then again, what changed meanwhile, while
    // that shrinks (pre-copy rounds, as a live migration does), so that phase 2 has
    // little left to send.
    for (from, to) in &m.pairs {
        for (i, (claim, _)) in m.claims.iter().enumerate() {
            let mut round = 0;
            let mut last = u64::MAX;
            loop {
                let r = copy(from, to, i, false)
                    .await
                    .map_err(|e| format!("phase 1 (copy while running): {e}"))?;
                detail.push(format!(
                    "{} {from}->{to} via {}: {} bytes in phase 1 round {} ({} passes)",
                    claim_name(claim),
                    r.by,
                    r.bytes,
                    round + 1,
                    r.passes
                ));
                round += 1;
                let shrinking = r.bytes.saturating_mul(2) <= last;
                last = r.bytes;
                if r.bytes <= PRECOPY_ENOUGH || round > PRECOPY_ROUNDS || !shrinking {
                    break;
                }
            }
        }
    }
    // Phase 2: stop the old writers, copy what changed.
    let stopped = tokio::time::Instant::now();
    let mut frozen: Vec<(&str, &VolumeClaim)> = Vec::new();
    let mut failure = None;
    'pairs: for (from, to) in &m.pairs {
        for (i, (claim, _)) in m.claims.iter().enumerate() {
            frozen.push((from, claim));
            match copy(from, to, i, true).await {
                Ok(r) => detail.push(format!(
                    "{}: {} bytes in phase 2 via {}",
                    claim_name(claim),
                    r.bytes,
                    r.by
                )),
                Err(e) => {
                    failure = Some(format!("phase 2 (writers stopped): {e}"));
                    break 'pairs;
                }
            }
        }
    }
    let downtime = u64::try_from(stopped.elapsed().as_millis()).unwrap_or(u64::MAX);
    if let Some(why) = failure {
        for (cluster, claim) in frozen {
            thaw_patiently(inputs, cluster, claim).await;
        }
        return Err(why);
    }
    Ok((downtime, detail.join("; ")))
}

/// At the root: starts the copy of every placement whose move waits for its volumes,
/// and reports each outcome to the core. Runs until the node stops.
pub(crate) async fn run_moves(inputs: mpsc::Sender<Input<RelayInput>>) {
    // A move is known by its placement and its pairs of clusters.
    type MoveId = ((Space, String), Vec<(String, String)>);
    let mut running: BTreeSet<MoveId> = BTreeSet::new();
    let mut tasks = JoinSet::new();
    loop {
        tokio::time::sleep(MOVE_POLL).await;
        while let Some(done) = tasks.try_join_next() {
            if let Ok(id) = done {
                running.remove(&id);
            }
        }
        let Some(waiting) = query(&inputs, |c| {
            c.volume_moves()
                .iter()
                .filter(|(_, m)| m.phase == VolumePhase::Copying)
                .map(|(k, m)| (k.clone(), m.clone()))
                .collect::<Vec<_>>()
        })
        .await
        else {
            return;
        };
        for (key, m) in waiting {
            let id = (key.clone(), m.pairs.clone());
            if !running.insert(id.clone()) {
                continue;
            }
            let inputs = inputs.clone();
            tasks.spawn(async move {
                let outcome = run_move(&inputs, &key, &m).await;
                let restored = outcome.is_ok();
                let (pairs, k) = (m.pairs.clone(), key.clone());
                let taken = query(&inputs, move |c| c.volume_move_done(&k, &pairs, outcome)).await;
                if restored && taken == Some(false) {
                    // Given up while it ran: the old writers must not stay stopped.
                    for (from, _) in &m.pairs {
                        for (claim, _) in &m.claims {
                            if let Err(e) = thaw(&inputs, from, claim).await {
                                tracing::warn!(cluster = %from, claim = %claim_name(claim), error = %e, "could not let the old writers write again");
                            }
                        }
                    }
                }
                id
            });
        }
    }
}

/// A placement's `status.decisions.volumeMove`.
pub fn move_status(m: &VolumeMove) -> serde_json::Value {
    let (phase, reason) = match &m.phase {
        VolumePhase::Copying => ("Copying", None),
        VolumePhase::Restored => ("Restored", None),
        VolumePhase::Failed(why) => ("Failed", Some(why.clone())),
    };
    let mut v = json!({
        "phase": phase,
        "from": m.pairs.iter().map(|(f, _)| f).collect::<Vec<_>>(),
        "to": m.pairs.iter().map(|(_, t)| t).collect::<Vec<_>>(),
        "claims": m.claims.iter().map(|(c, mode)| json!({
            "claim": c.claim, "namespace": c.namespace, "accessMode": format!("{mode:?}"),
        })).collect::<Vec<_>>(),
        "started": m.started.rfc3339(),
    });
    if let Some(ms) = m.downtime_ms {
        v["writeDowntimeMs"] = json!(ms);
    }
    if !m.detail.is_empty() {
        v["detail"] = json!(m.detail);
    }
    if let Some(r) = reason {
        v["reason"] = json!(r);
    }
    if let Some(at) = m.retry_at {
        v["retryAt"] = json!(at.rfc3339());
    }
    v
}
