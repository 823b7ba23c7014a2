//! One simulation of one seed: the hierarchy in turmoil, faults applied between steps,
//! the workload and the checkers in an observer task, a summary and a trace hash.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use crate::check::{Violation, secs};
use crate::hosts::{self, SimHierarchy};
use crate::record::RunRecord;
use crate::rng::hash;
use crate::scenario::{Fault, Scenario};

/// Latency of a healthy link (turmoil picks between the two).
const MIN_LATENCY: Duration = Duration::from_millis(1);
const MAX_LATENCY: Duration = Duration::from_millis(5);

/// What a run found.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // `seed` is the run's seed
pub struct Outcome {
    pub seed: u64,
    /// Simulated time when the run ended.
    pub ended: Duration,
    /// When the hierarchy converged, and how long after the last fault healed.
    pub converged: Option<(Duration, Duration)>,
    /// Bytes and datagrams per pair of hosts (both directions summed).
    pub links: BTreeMap<(String, String), (u64, u64)>,
    /// The largest revision lag seen.
    pub max_lag: u64,
    /// Root revisions applied.
    pub revisions: u64,
    /// Hash of the event trace: equal for equal seeds.
    pub trace_hash: u64,
    /// The delta check's figures: bytes sent on the link after it healed, and the bytes
    /// a full resend would have carried.
    pub resync: Option<(u64, u64)>,
    /// The available check's figures: the fewest clusters the object was available on
    /// once armed, and when it was armed.
    pub available: Option<(usize, Duration)>,
    /// The rollout check's events and figures (wave times, time to roll back).
    pub rollout: Vec<String>,
    /// The `converge_by` check's figure: when the hierarchy first converged while a
    /// fault was still in place.
    pub converged_early: Option<Duration>,
    /// Short-lived certificates: renewals and recoveries, one line each.
    pub certificates: Vec<String>,
    /// The stateful move check's events and figures, one line each.
    pub stateful: Vec<String>,
    /// The first broken invariant, with a short trace.
    pub violation: Option<(Violation, Duration, Vec<String>)>,
}

/// Why a run could not start or was cut short.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // `at` is the simulated time, `detail` turmoil's error
pub enum RunError {
    /// Building the hierarchy failed.
    #[error(transparent)]
    Build(#[from] crate::certs::BuildError),
    /// turmoil stopped (a host failed or the time limit passed).
    #[error("the simulation stopped at {at}: {detail}")]
    Sim { at: String, detail: String },
}

#[derive(Debug, Clone)]
enum Action {
    Partition(String, String),
    PartitionOneway(String, String),
    Repair(String, String),
    Hold(String, String),
    Release(String, String),
    Crash { target: String, keep_disk: bool },
    Restart(String),
    Condition(Fault),
    EndCondition(Fault),
}

fn actions(faults: &[Fault]) -> Vec<(Duration, Action)> {
    let mut out = Vec::new();
    for f in faults {
        let at = f.at.unwrap_or_default();
        type LinkAction = fn(String, String) -> Action;
        let links: [(&Option<[String; 2]>, LinkAction); 5] = [
            (&f.partition, Action::Partition),
            (&f.partition_oneway, Action::PartitionOneway),
            (&f.repair, Action::Repair),
            (&f.hold, Action::Hold),
            (&f.release, Action::Release),
        ];
        let link = links
            .into_iter()
            .find_map(|(p, make)| p.as_ref().map(|[a, b]| make(a.clone(), b.clone())));
        if let Some(action) = link {
            out.push((at, action));
        } else if let Some(target) = &f.crash {
            out.push((
                at,
                Action::Crash {
                    target: target.clone(),
                    keep_disk: f.keep_disk.unwrap_or(true),
                },
            ));
            if let Some(after) = f.restart_after {
                out.push((at + after, Action::Restart(target.clone())));
            }
        } else if let (Some(from), Some(to)) = (f.from, f.to) {
            out.push((from, Action::Condition(f.clone())));
            out.push((to, Action::EndCondition(f.clone())));
        }
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// Simulates `scenario` with `seed`.
pub fn run(scenario: &Scenario, seed: u64) -> Result<Outcome, RunError> {
    let hierarchy = SimHierarchy::new(
        scenario.topology.clone(),
        seed,
        scenario.start.within,
        scenario.certificates.as_ref(),
    )?;
    hierarchy.set_transport(scenario.transport);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(scenario.duration + Duration::from_secs(60))
        .tick_duration(scenario.tick)
        .min_message_latency(MIN_LATENCY)
        .max_message_latency(MAX_LATENCY)
        .udp_capacity(1 << 16)
        .build();
    hosts::register(&mut sim, &hierarchy);
    let record = Rc::new(RefCell::new(RunRecord::default()));
    {
        let (s, e, sc) = (hierarchy.clone(), record.clone(), scenario.clone());
        sim.client("observer", crate::observe::observe(s, e, sc));
    }
    let mut pending: VecDeque<(Duration, Action)> = actions(&scenario.faults).into();
    let all_hosts = hierarchy.hosts();
    let progress = std::env::var_os("SIM_PROGRESS").is_some();
    let mut next_report = Duration::ZERO;
    loop {
        if progress && sim.elapsed() >= next_report {
            eprintln!("simulated {}", secs(sim.elapsed()));
            next_report += Duration::from_secs(1);
        }
        while pending.front().is_some_and(|(t, _)| *t <= sim.elapsed()) {
            let Some((_, action)) = pending.pop_front() else {
                break;
            };
            let line = format!("{} fault {action:?}", secs(sim.elapsed()));
            apply_fault(&mut sim, &hierarchy, &all_hosts, action, &record);
            record.borrow_mut().trace.push(line);
        }
        let restarts = std::mem::take(&mut record.borrow_mut().restarts);
        for host in restarts {
            record.borrow_mut().trace.push(format!(
                "{} restart {host} (relabeled)",
                secs(sim.elapsed())
            ));
            sim.bounce(host.as_str());
        }
        // The delta check counts from the very step the link heals.
        if let Some(d) = &scenario.checks.delta
            && record.borrow().delta_start.is_none()
            && sim.elapsed() >= d.after
        {
            let bytes = hierarchy.link_bytes(&d.link, |h| sim.lookup(h));
            record.borrow_mut().delta_start = Some(bytes);
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                return Err(RunError::Sim {
                    at: secs(sim.elapsed()),
                    detail: e.to_string(),
                });
            }
        }
    }
    let ended = sim.elapsed();
    let mut certificates = Vec::new();
    if let Some(files) = &hierarchy.cert_files {
        let recoveries = hierarchy.recoveries.borrow();
        let (lines, violation) =
            crate::certs::check_end(&hierarchy.topology, &recoveries, files, ended);
        drop(recoveries);
        let mut rec = record.borrow_mut();
        rec.trace.extend(lines.iter().cloned());
        if rec.violation.is_none() {
            rec.violation = violation.map(|v| (v, ended));
        }
        certificates = lines;
    }
    let names: BTreeMap<std::net::IpAddr, String> = all_hosts
        .iter()
        .map(|h| (sim.lookup(h.as_str()), h.clone()))
        .collect();
    let mut links: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for ((from, to), t) in hierarchy.network.traffic() {
        let (Some(a), Some(b)) = (names.get(&from), names.get(&to)) else {
            continue;
        };
        let key = if a < b {
            (a.clone(), b.clone())
        } else {
            (b.clone(), a.clone())
        };
        let slot = links.entry(key).or_default();
        slot.0 += t.bytes;
        slot.1 += t.datagrams;
    }
    let rec = record.borrow();
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for line in &rec.trace {
        h = (h ^ hash(line)).wrapping_mul(0x0100_0000_01B3);
    }
    for ((a, b), (bytes, dgrams)) in &links {
        h = (h ^ hash(&format!("{a} {b} {bytes} {dgrams}"))).wrapping_mul(0x0100_0000_01B3);
    }
    let tail: Vec<String> = rec.trace.iter().rev().take(12).rev().cloned().collect();
    Ok(Outcome {
        seed,
        ended,
        converged: rec.converged,
        links,
        max_lag: rec.max_lag,
        revisions: rec.revisions,
        trace_hash: h,
        resync: rec.resync,
        available: rec.available,
        rollout: rec.rollout.clone(),
        converged_early: rec.converged_early,
        certificates,
        stateful: rec.app.lines.clone(),
        violation: rec.violation.clone().map(|(v, at)| (v, at, tail)),
    })
}

fn hosts_of(hierarchy: &SimHierarchy, all: &[String], name: &str) -> Vec<String> {
    match name {
        "agents" => hierarchy.agent_hosts(),
        "*" => all.to_vec(),
        n => vec![hierarchy.host_of(n)],
    }
}

fn nodes_on(hierarchy: &SimHierarchy, host: &str) -> Vec<String> {
    let mut out: Vec<String> = hierarchy
        .topology
        .clusters
        .iter()
        .filter(|c| hosts::agents_host(&c.parent) == host)
        .map(|c| c.name.clone())
        .collect();
    if out.is_empty() {
        out.push(host.to_owned());
    }
    out
}

fn apply_fault(
    sim: &mut turmoil::Sim<'_>,
    hierarchy: &SimHierarchy,
    all: &[String],
    action: Action,
    record: &RefCell<RunRecord>,
) {
    let pairs = |a: &str, b: &str| {
        let (xs, ys) = (hosts_of(hierarchy, all, a), hosts_of(hierarchy, all, b));
        let mut out = Vec::new();
        for x in &xs {
            for y in &ys {
                if x != y {
                    out.push((x.clone(), y.clone()));
                }
            }
        }
        out
    };
    type LinkOp = fn(&turmoil::Sim<'_>, &str, &str);
    let link: Option<(&str, &str, LinkOp)> = match &action {
        Action::Partition(a, b) => Some((a, b, |s, x, y| s.partition(x, y))),
        Action::PartitionOneway(a, b) => Some((a, b, |s, x, y| s.partition_oneway(x, y))),
        Action::Repair(a, b) => Some((a, b, |s, x, y| s.repair(x, y))),
        Action::Hold(a, b) => Some((a, b, |s, x, y| s.hold(x, y))),
        Action::Release(a, b) => Some((a, b, |s, x, y| s.release(x, y))),
        _ => None,
    };
    if let Some((a, b, op)) = link {
        for (x, y) in pairs(a, b) {
            op(sim, &x, &y);
        }
        return;
    }
    match action {
        Action::Partition(..)
        | Action::PartitionOneway(..)
        | Action::Repair(..)
        | Action::Hold(..)
        | Action::Release(..) => {}
        Action::Crash { target, keep_disk } => {
            for host in hosts_of(hierarchy, all, &target) {
                sim.crash(host.as_str());
                if !keep_disk {
                    for node in nodes_on(hierarchy, &host) {
                        hierarchy.lose_disk(&node);
                        record.borrow_mut().lost_disks.push(node);
                    }
                }
            }
        }
        Action::Restart(target) => {
            for host in hosts_of(hierarchy, all, &target) {
                sim.bounce(host.as_str());
            }
        }
        Action::Condition(f) | Action::EndCondition(f) => {
            let start = f.from.is_some_and(|from| from <= sim.elapsed())
                && f.to.is_some_and(|to| to > sim.elapsed());
            let links = match &f.link {
                Some([a, b]) => pairs(a, b),
                None => pairs("*", "*"),
            };
            if let Some(loss) = f.loss {
                let rate = start.then_some(loss);
                match &f.link {
                    None => hierarchy.network.set_loss(rate.unwrap_or(0.0)),
                    Some(_) => {
                        for (x, y) in &links {
                            hierarchy.network.set_link_loss(
                                sim.lookup(x.as_str()),
                                sim.lookup(y.as_str()),
                                rate,
                            );
                        }
                    }
                }
            }
            if f.block_udp == Some(true) {
                for (x, y) in &links {
                    hierarchy.network.set_udp_blocked(
                        sim.lookup(x.as_str()),
                        sim.lookup(y.as_str()),
                        start,
                    );
                }
            }
            if let Some(latency) = f.latency {
                let (min, max) = if start {
                    (latency, latency + f.jitter.unwrap_or_default())
                } else {
                    (MIN_LATENCY, MAX_LATENCY)
                };
                for (x, y) in &links {
                    sim.set_link_latency(x.as_str(), y.as_str(), min);
                    sim.set_link_max_message_latency(x.as_str(), y.as_str(), max);
                }
            }
        }
    }
}
