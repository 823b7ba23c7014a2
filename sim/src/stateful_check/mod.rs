//! The stateful move check (`checks.stateful_move`, see
//! [`StatefulMoveCheck`]): a task beside the
//! observer is the app. Every `write_every` it writes the next record of its claim on
//! each cluster that holds its workload (what the simulated cluster acknowledges is
//! logged), then checks, at that step:
//!
//! * **never two writers**: at most one cluster holds the workload with the claim
//!   writable (the claim exists there and no move stopped its writers);
//! * **DNS names only clusters where the app is Available**: what each relay with
//!   `dns:` answers for the Service, built by the relay's own answer function
//!   (`strata_relay::dns::answer`, as its server calls it) from the relay's state, names
//!   only clusters whose simulated cluster holds the workload and the Service and
//!   reports both Available, now and for the TTL of every answer that named them (a
//!   client may use an answer that long).
//!
//! At the end (the hierarchy converged) `finish` checks that the move finished: the
//! root's volume move restored (cut and resumed when `resumed`), the app Available on
//! the new cluster with its claim, nothing of it left on the old one, and **every
//! acknowledged write present, with its bytes**, in the new cluster's claim. The
//! figures (writes, the app's longest stretch without an acknowledged write, the
//! longest DNS window with no address, the move's status) go into the outcome.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::rc::Rc;
use std::time::Duration;

use strata_agent::simulated::simulated_address;
use strata_protocol::model::{ObjectKey, Space};
use strata_protocol::placement_spec::{CLAIM_KIND, VolumeClaim};
use strata_relay::tier::core::volume_gate::{VolumeMove, VolumePhase};

use crate::check::{Violation, secs};
use crate::cluster::ClusterView;
use crate::hosts::SimHierarchy;
use crate::record::RunRecord;
use crate::rng::{SimRng, mix};
use crate::scenario::{ObjectRef, StatefulMoveCheck};

pub(crate) mod app_record;
mod dns;

pub use app_record::Write;
pub use dns::{DnsAnswer, DnsWatch};
use dns::{ask_dns, dns_relays};

fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// The bytes of write `n` of a run with `seed` (drawn from both, so that a write lost
/// and another in its place differ).
pub fn write_bytes(seed: u64, n: u64, len: usize) -> Vec<u8> {
    let mut rng = SimRng::new(mix(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The first acknowledged write missing from `claim_bytes` (the claim's whole content
/// on `cluster`, where the app ends), as a violation naming it.
pub fn lost_write(
    writes: &[Write],
    claim_bytes: &[u8],
    seed: u64,
    cluster: &str,
    claim: &VolumeClaim,
) -> Option<Violation> {
    let claim = strata_node::volume::claim_name(claim);
    for w in writes {
        let start = usize::try_from(w.offset).unwrap_or(usize::MAX);
        let held = claim_bytes.get(start..start.saturating_add(w.len));
        if held != Some(write_bytes(seed, w.n, w.len).as_slice()) {
            let what = match held {
                None => format!("the claim holds only {} bytes", claim_bytes.len()),
                Some(_) => "other bytes are there".to_owned(),
            };
            return Some(Violation {
                invariant: "no acknowledged write is lost by a move",
                detail: format!(
                    "write #{} ({} bytes at offset {}) acknowledged by {} at {} is not in \
                     claim {claim} on {cluster} at the end: {what}",
                    w.n,
                    w.len,
                    w.offset,
                    w.cluster,
                    secs(w.at)
                ),
            });
        }
    }
    None
}

/// Two or more clusters hold the workload with the claim writable at one step.
pub fn two_writers(writers: &[String], t: Duration, claim: &VolumeClaim) -> Option<Violation> {
    (writers.len() > 1).then(|| Violation {
        invariant: "never two writers for a ReadWriteOnce claim",
        detail: format!(
            "at {} clusters {} each hold the workload with claim {} writable (not \
             stopped by a move)",
            secs(t),
            writers.join(" and "),
            strata_node::volume::claim_name(claim)
        ),
    })
}

fn claim_key(claim: &VolumeClaim) -> ObjectKey {
    ObjectRef {
        group: String::new(),
        version: "v1".into(),
        kind: CLAIM_KIND.into(),
        namespace: Some(claim.namespace.clone()),
        name: claim.claim.clone(),
    }
    .key()
}

/// Whether the app is Available on a cluster: it holds the workload and the Service,
/// and reports both Available.
fn app_available(view: &ClusterView, check: &StatefulMoveCheck) -> bool {
    view.available(&check.workload.key()) && view.available(&check.service.key())
}

async fn volume_move(hierarchy: &SimHierarchy, placement: &str) -> Option<VolumeMove> {
    let root = hierarchy
        .relays
        .borrow()
        .get(&hierarchy.topology.root().name)
        .cloned()?;
    let key = (Space::default_space(), placement.to_owned());
    root.query(move |c| c.volume_moves().get(&key).cloned())
        .await
        .flatten()
}

fn phase_line(m: &VolumeMove) -> String {
    match &m.phase {
        VolumePhase::Copying => "Copying".into(),
        VolumePhase::Restored => format!(
            "Restored (write downtime {} ms)",
            m.downtime_ms.unwrap_or_default()
        ),
        VolumePhase::Failed(why) => format!("Failed: {why}"),
    }
}

/// Runs the app until the run ends: writes, then the step's checks. A violation is
/// written into the record (the observer stops at it).
pub(crate) async fn run_app(
    hierarchy: Rc<SimHierarchy>,
    check: StatefulMoveCheck,
    record: Rc<RefCell<RunRecord>>,
) {
    let relays = dns_relays(&hierarchy, &check.service);
    let addresses: BTreeMap<IpAddr, String> =
        crate::check::effective_clusters(&hierarchy.topology, &BTreeMap::new())
            .iter()
            .filter_map(|c| Some((simulated_address(c).parse().ok()?, c.name.clone())))
            .collect();
    let name = format!(
        "{}.{}",
        check.service.name,
        check.service.namespace.as_deref().unwrap_or("default")
    );
    let workload = check.workload.key();
    let seed = hierarchy.seed;
    loop {
        tokio::time::sleep(check.write_every).await;
        let t = now();
        // The app writes on every cluster that runs it.
        let clusters: Vec<(String, crate::cluster::SimCluster)> = hierarchy
            .clusters
            .borrow()
            .iter()
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        for (cluster, sim) in &clusters {
            if !sim.view.borrow().holds(&workload) {
                continue;
            }
            let n = record.borrow().app.writes.len() as u64;
            let offset = n * check.write_bytes as u64;
            let data = write_bytes(seed, n, check.write_bytes);
            match sim.volumes.write(&check.claim, offset, &data).await {
                Ok(()) => {
                    let mut rec = record.borrow_mut();
                    let app = &mut rec.app;
                    app.writes.push(Write {
                        n,
                        cluster: cluster.clone(),
                        offset,
                        len: data.len(),
                        at: t,
                    });
                    if let Some(last) = app.last_ack
                        && t - last > app.longest_pause.0
                    {
                        app.longest_pause = (t - last, t);
                    }
                    app.last_ack = Some(t);
                }
                Err(e) => {
                    let reason = match e {
                        strata_agent::sim_volumes::VolumeAccessError::Frozen(_) => "frozen",
                        strata_agent::sim_volumes::VolumeAccessError::Restoring(_) => "restoring",
                        strata_agent::sim_volumes::VolumeAccessError::NoClaim(_) => "no claim",
                        _ => "other",
                    };
                    *record
                        .borrow_mut()
                        .app
                        .refused
                        .entry(format!("{cluster}: {reason}"))
                        .or_default() += 1;
                }
            }
        }
        // Who holds the workload with the claim writable now (not stopped by a move).
        let mut writers = Vec::new();
        for (cluster, sim) in &clusters {
            if sim.view.borrow().holds(&workload)
                && sim.volumes.frozen(&check.claim).await == Ok(false)
            {
                writers.push(cluster.clone());
            }
        }
        let mut violation = two_writers(&writers, t, &check.claim);
        // What each relay's DNS answers, then where the app is Available.
        let mut answers = Vec::new();
        for r in &relays {
            answers.extend(ask_dns(&hierarchy, r).await);
        }
        let available: BTreeSet<String> = hierarchy
            .clusters
            .borrow()
            .iter()
            .filter(|(_, c)| app_available(&c.view.borrow(), &check))
            .map(|(n, _)| n.clone())
            .collect();
        {
            let mut rec = record.borrow_mut();
            if violation.is_none() {
                violation = rec
                    .app
                    .dns
                    .observe(t, &answers, &addresses, &available, &name);
            }
        }
        if let Some(m) = volume_move(&hierarchy, &check.placement).await {
            let line = phase_line(&m);
            let mut rec = record.borrow_mut();
            if rec.app.phase.as_deref() != Some(line.as_str()) {
                rec.app
                    .lines
                    .push(format!("{} volume move {}", secs(t), line));
                rec.trace.push(format!("{} volume move {}", secs(t), line));
                rec.app.phase = Some(line);
            }
        }
        let mut rec = record.borrow_mut();
        if let Some(v) = violation {
            if rec.violation.is_none() {
                rec.violation = Some((v, t));
            }
            return;
        }
        if rec.violation.is_some() || rec.converged.is_some() {
            return;
        }
    }
}

/// The highest pass count a move's detail reports (`(N passes)`).
fn most_passes(detail: &str) -> u32 {
    detail
        .split(" passes)")
        .filter_map(|part| part.rsplit('(').next()?.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

/// The end of the run (the hierarchy converged): the move finished and every
/// acknowledged write is on the new cluster. Writes the outcome's lines.
pub(crate) async fn finish(
    hierarchy: &SimHierarchy,
    check: &StatefulMoveCheck,
    record: &RefCell<RunRecord>,
    t: Duration,
) -> Option<Violation> {
    let moved = |detail: String| Violation {
        invariant: "the stateful move finishes: the app and its data on the new cluster, \
                    nothing left on the old",
        detail,
    };
    let m = volume_move(hierarchy, &check.placement).await;
    let Some(m) = m else {
        return Some(moved(format!(
            "at {} the root knows no volume move of placement {}",
            secs(t),
            check.placement
        )));
    };
    if m.phase != VolumePhase::Restored {
        return Some(moved(format!(
            "at {} placement {}'s volume move is {}",
            secs(t),
            check.placement,
            phase_line(&m)
        )));
    }
    let passes = most_passes(&m.detail);
    if check.resumed && passes < 2 {
        return Some(moved(format!(
            "the copy was never cut and resumed (at most {passes} pass): {}",
            m.detail
        )));
    }
    let views: BTreeMap<String, crate::cluster::SimCluster> = hierarchy.clusters.borrow().clone();
    let keys = [
        check.workload.key(),
        check.service.key(),
        claim_key(&check.claim),
    ];
    let Some(to) = views.get(&check.to) else {
        return Some(moved(format!("at {} {} is not running", secs(t), check.to)));
    };
    if !app_available(&to.view.borrow(), check) || !to.view.borrow().holds(&keys[2]) {
        return Some(moved(format!(
            "at {} the app is not Available with its claim on {}",
            secs(t),
            check.to
        )));
    }
    if let Some(from) = views.get(&check.from)
        && let Some(k) = keys.iter().find(|k| from.view.borrow().holds(k))
    {
        return Some(moved(format!(
            "at {} {} still holds {} {}",
            secs(t),
            check.from,
            k.kind,
            k.name
        )));
    }
    // The writes acknowledged before the claim is read (the app may still write while
    // it is): each of them is in what the read returns.
    let acknowledged = record.borrow().app.writes.len();
    let bytes = match to.volumes.read(&check.claim, 0, u64::MAX).await {
        Ok(b) => b,
        Err(e) => return Some(moved(format!("at {} on {}: {e}", secs(t), check.to))),
    };
    let mut rec = record.borrow_mut();
    let writes = &rec.app.writes[..acknowledged];
    let on = |c: &str| writes.iter().filter(|w| w.cluster == c).count();
    let (before, after) = (on(&check.from), on(&check.to));
    if before == 0 || after == 0 {
        return Some(moved(format!(
            "the app wrote {before} times on {} and {after} on {}: it must write on both",
            check.from, check.to
        )));
    }
    if let Some(v) = lost_write(writes, &bytes, hierarchy.seed, &check.to, &check.claim) {
        return Some(v);
    }
    let (pause, ended) = rec.app.longest_pause;
    let windows = rec.app.dns.windows();
    let refused: Vec<String> = rec
        .app
        .refused
        .iter()
        .map(|(why, n)| format!("{why} {n}"))
        .collect();
    let mut lines = vec![
        format!(
            "{} writes acknowledged ({before} on {}, {after} on {}), all in claim {} on {} \
             at the end; refused: {}",
            before + after,
            check.from,
            check.to,
            strata_node::volume::claim_name(&check.claim),
            check.to,
            if refused.is_empty() {
                "none".to_owned()
            } else {
                refused.join(", ")
            }
        ),
        format!(
            "the app's longest stretch without an acknowledged write: {} (ended at {})",
            secs(pause),
            secs(ended)
        ),
        format!("the move's detail: {}", m.detail),
    ];
    for (relay, (w, since)) in windows {
        let open = since.map_or(String::new(), |at| {
            format!(" (none since {}: the app left its subtree)", secs(at))
        });
        lines.push(format!(
            "DNS at {relay}: longest window with no address {}{open}",
            secs(w)
        ));
    }
    rec.app.lines.extend(lines);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> VolumeClaim {
        VolumeClaim {
            claim: "data".into(),
            namespace: "shop".into(),
        }
    }

    fn write(n: u64, cluster: &str) -> Write {
        Write {
            n,
            cluster: cluster.into(),
            offset: n * 16,
            len: 16,
            at: Duration::from_millis(100 * n),
        }
    }

    #[test]
    fn a_write_lost_or_overwritten_is_named_with_its_cluster_time_and_claim() {
        let writes: Vec<Write> = (0..4)
            .map(|n| write(n, if n < 2 { "eu-1" } else { "us-1" }))
            .collect();
        let mut bytes = vec![0u8; 128];
        for w in &writes {
            let at = w.offset as usize;
            bytes[at..at + w.len].copy_from_slice(&write_bytes(7, w.n, w.len));
        }
        assert_eq!(lost_write(&writes, &bytes, 7, "us-1", &claim()), None);
        // Another seed's bytes: every write differs.
        assert!(lost_write(&writes, &bytes, 8, "us-1", &claim()).is_some());
        // Write #1 (on eu-1, before the freeze) did not make it across.
        bytes[16..32].fill(0);
        let v = lost_write(&writes, &bytes, 7, "us-1", &claim()).unwrap();
        assert_eq!(v.invariant, "no acknowledged write is lost by a move");
        assert_eq!(
            v.detail,
            "write #1 (16 bytes at offset 16) acknowledged by eu-1 at 0.100s is not in claim \
             shop/data on us-1 at the end: other bytes are there"
        );
        bytes[16..32].copy_from_slice(&write_bytes(7, 1, 16));
        let v = lost_write(&writes, &bytes[..40], 7, "us-1", &claim()).unwrap();
        assert!(v.detail.starts_with("write #2 "), "{v:?}");
        assert!(v.detail.contains("the claim holds only 40 bytes"), "{v:?}");
    }

    #[test]
    fn two_clusters_acknowledging_writes_at_one_step_are_two_writers() {
        let t = Duration::from_millis(41_300);
        assert_eq!(two_writers(&["eu-1".into()], t, &claim()), None);
        let v = two_writers(&["eu-1".into(), "us-1".into()], t, &claim()).unwrap();
        assert_eq!(v.invariant, "never two writers for a ReadWriteOnce claim");
        assert!(
            v.detail
                .starts_with("at 41.300s clusters eu-1 and us-1 each hold the workload"),
            "{v:?}"
        );
        assert!(v.detail.contains("claim shop/data"), "{v:?}");
    }

    #[test]
    fn passes_are_read_from_the_moves_detail() {
        let d = "shop/data eu-1->us-1 via center: 4194304 bytes in phase 1 round 1 (3 passes); \
                 shop/data eu-1->us-1 via center: 1024 bytes in phase 1 round 2 (1 passes); \
                 shop/data: 512 bytes in phase 2 via center";
        assert_eq!(most_passes(d), 3);
        assert_eq!(most_passes("nothing"), 0);
    }
}
