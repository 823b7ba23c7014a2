//! One simulation of one seed: the hierarchy in turmoil, faults applied between steps,
//! the workload and the checkers in an observer task, a summary and a trace hash.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use strata_protocol::model::{ObjectKey, Space};
use strata_protocol::route::is_placement;
use strata_protocol::wire::Change;
use strata_relay::objects::parse_manifests;

use crate::check::{self, Held, Monotonic, RootView, Violation, secs};
use crate::hosts::{self, Shared};
use crate::rng::hash;
use crate::scenario::{ConfigMaps, Fault, Scenario, Workload};

/// How often the observer samples the hierarchy.
const SAMPLE: Duration = Duration::from_millis(500);
/// Latency of a healthy link (turmoil picks between the two).
const MIN_LATENCY: Duration = Duration::from_millis(1);
const MAX_LATENCY: Duration = Duration::from_millis(5);

/// What a run found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The seed.
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
    /// The first broken invariant, with a short trace.
    pub violation: Option<(Violation, Duration, Vec<String>)>,
}

/// Why a run could not start or was cut short.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Building the hierarchy failed.
    #[error(transparent)]
    Build(#[from] hosts::BuildError),
    /// turmoil stopped (a host failed or the time limit passed).
    #[error("the simulation stopped at {at}: {detail}")]
    Sim {
        /// Simulated time.
        at: String,
        /// turmoil's error.
        detail: String,
    },
}

#[derive(Debug, Default)]
struct Events {
    trace: Vec<String>,
    lost_disks: Vec<String>,
    violation: Option<(Violation, Duration)>,
    converged: Option<(Duration, Duration)>,
    max_lag: u64,
    revisions: u64,
    resync: Option<(u64, u64)>,
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
        let pair = |p: &[String; 2]| (p[0].clone(), p[1].clone());
        if let Some(p) = &f.partition {
            let (a, b) = pair(p);
            out.push((at, Action::Partition(a, b)));
        } else if let Some(p) = &f.partition_oneway {
            let (a, b) = pair(p);
            out.push((at, Action::PartitionOneway(a, b)));
        } else if let Some(p) = &f.repair {
            let (a, b) = pair(p);
            out.push((at, Action::Repair(a, b)));
        } else if let Some(p) = &f.hold {
            let (a, b) = pair(p);
            out.push((at, Action::Hold(a, b)));
        } else if let Some(p) = &f.release {
            let (a, b) = pair(p);
            out.push((at, Action::Release(a, b)));
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
    let shared = Shared::new(scenario.topology.clone(), seed)?;
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(scenario.duration + Duration::from_secs(60))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(MIN_LATENCY)
        .max_message_latency(MAX_LATENCY)
        .udp_capacity(1 << 16)
        .build();
    hosts::register(&mut sim, &shared);
    let events = Rc::new(RefCell::new(Events::default()));
    {
        let (s, e, sc) = (shared.clone(), events.clone(), scenario.clone());
        sim.client("observer", observe(s, e, sc));
    }
    let mut pending: VecDeque<(Duration, Action)> = actions(&scenario.faults).into();
    let all_hosts = shared.hosts();
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
            apply_fault(&mut sim, &shared, &all_hosts, action, &events);
            events.borrow_mut().trace.push(line);
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
    let names: BTreeMap<std::net::IpAddr, String> = all_hosts
        .iter()
        .map(|h| (sim.lookup(h.as_str()), h.clone()))
        .collect();
    let mut links: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for ((from, to), t) in shared.network.traffic() {
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
    let ev = events.borrow();
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for line in &ev.trace {
        h = (h ^ hash(line)).wrapping_mul(0x0100_0000_01B3);
    }
    for ((a, b), (bytes, dgrams)) in &links {
        h = (h ^ hash(&format!("{a} {b} {bytes} {dgrams}"))).wrapping_mul(0x0100_0000_01B3);
    }
    let tail: Vec<String> = ev.trace.iter().rev().take(12).rev().cloned().collect();
    Ok(Outcome {
        seed,
        ended,
        converged: ev.converged,
        links,
        max_lag: ev.max_lag,
        revisions: ev.revisions,
        trace_hash: h,
        resync: ev.resync,
        violation: ev.violation.clone().map(|(v, at)| (v, at, tail)),
    })
}

fn hosts_of(shared: &Shared, all: &[String], name: &str) -> Vec<String> {
    match name {
        "agents" => shared.agent_hosts(),
        "*" => all.to_vec(),
        n => vec![shared.host_of(n)],
    }
}

fn nodes_on(shared: &Shared, host: &str) -> Vec<String> {
    let mut out: Vec<String> = shared
        .topology
        .all_clusters()
        .into_iter()
        .filter(|c| hosts::agents_host(&c.parent) == host)
        .map(|c| c.name)
        .collect();
    if out.is_empty() {
        out.push(host.to_owned());
    }
    out
}

fn apply_fault(
    sim: &mut turmoil::Sim<'_>,
    shared: &Shared,
    all: &[String],
    action: Action,
    events: &RefCell<Events>,
) {
    let pairs = |a: &str, b: &str| {
        let (xs, ys) = (hosts_of(shared, all, a), hosts_of(shared, all, b));
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
    match action {
        Action::Partition(a, b) => pairs(&a, &b)
            .into_iter()
            .for_each(|(x, y)| sim.partition(x.as_str(), y.as_str())),
        Action::PartitionOneway(a, b) => pairs(&a, &b)
            .into_iter()
            .for_each(|(x, y)| sim.partition_oneway(x.as_str(), y.as_str())),
        Action::Repair(a, b) => pairs(&a, &b)
            .into_iter()
            .for_each(|(x, y)| sim.repair(x.as_str(), y.as_str())),
        Action::Hold(a, b) => pairs(&a, &b)
            .into_iter()
            .for_each(|(x, y)| sim.hold(x.as_str(), y.as_str())),
        Action::Release(a, b) => pairs(&a, &b)
            .into_iter()
            .for_each(|(x, y)| sim.release(x.as_str(), y.as_str())),
        Action::Crash { target, keep_disk } => {
            for host in hosts_of(shared, all, &target) {
                sim.crash(host.as_str());
                if !keep_disk {
                    for node in nodes_on(shared, &host) {
                        shared.lose_disk(&node);
                        events.borrow_mut().lost_disks.push(node);
                    }
                }
            }
        }
        Action::Restart(target) => {
            for host in hosts_of(shared, all, &target) {
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
                    None => shared.network.set_loss(rate.unwrap_or(0.0)),
                    Some(_) => {
                        for (x, y) in &links {
                            shared.network.set_link_loss(
                                sim.lookup(x.as_str()),
                                sim.lookup(y.as_str()),
                                rate,
                            );
                        }
                    }
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

fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

fn configmaps(c: &ConfigMaps) -> String {
    let filler = "x".repeat(c.size);
    let labels: String = c
        .labels
        .iter()
        .map(|(k, v)| format!("{k}: {v:?}, "))
        .collect();
    (c.first..c.count)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: {}-{i}, namespace: {}, labels: {{ {labels} }} }}\ndata: {{ version: \"{}\", filler: \"{filler}\" }}\n---\n",
                c.prefix, c.namespace, c.version
            )
        })
        .collect()
}

/// Applies one workload step at the root; `Ok(None)` when the root is down (retried
/// later), the revision and the keys written otherwise.
async fn apply_workload(
    shared: &Shared,
    w: &Workload,
) -> Result<Option<(u64, Vec<(ObjectKey, bool)>)>, String> {
    let Some(root) = shared
        .relays
        .borrow()
        .get(&shared.topology.root.name)
        .cloned()
    else {
        return Ok(None);
    };
    if let Some(d) = &w.delete {
        let key = ObjectKey {
            space: Space::default_space(),
            group: d.group.clone(),
            version: d.version.clone(),
            kind: d.kind.clone(),
            namespace: d.namespace.clone(),
            name: d.name.clone(),
        };
        let k = key.clone();
        let r = root
            .query(move |c| {
                if c.log().get(&k).is_none() {
                    return Ok(None);
                }
                c.apply(vec![Change::Delete(k)]).map(|p| Some(p.0))
            })
            .await;
        return match r {
            None => Ok(None),
            Some(Ok(rev)) => Ok(Some((rev.unwrap_or(0), vec![(key, false)]))),
            Some(Err(e)) => Err(format!("delete refused: {e}")),
        };
    }
    let text = match (&w.apply, &w.configmaps) {
        (Some(t), _) => t.clone(),
        (None, Some(c)) => configmaps(c),
        (None, None) => return Ok(Some((0, vec![]))),
    };
    let manifests = parse_manifests(&text, &Space::default_space()).map_err(|errs| {
        errs.iter()
            .map(|e| format!("document {} {}: {}", e.document, e.field, e.reason))
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let r = root
        .query(move |c| c.apply_manifests(&manifests).map_err(|e| e.to_string()))
        .await;
    match r {
        None => Ok(None),
        Some(Ok(applied)) => Ok(Some((
            applied.revision.map(|p| p.0).unwrap_or(0),
            applied.applied.into_iter().map(|k| (k, true)).collect(),
        ))),
        Some(Err(e)) => Err(e),
    }
}

async fn root_view(shared: &Shared) -> Option<RootView> {
    let root = shared
        .relays
        .borrow()
        .get(&shared.topology.root.name)
        .cloned()?;
    root.query(|c| {
        let placements = c.placements().to_vec();
        let objects: Vec<_> = c
            .log()
            .live()
            .filter(|o| !is_placement(&o.meta))
            .map(|o| (o.meta.clone(), o.revision))
            .collect();
        let mut summaries = Vec::new();
        for p in &placements {
            for (meta, _) in &objects {
                if p.selects_object(meta) {
                    summaries.push((
                        p.name.clone(),
                        meta.key.clone(),
                        c.reports().summarize(p, &meta.key),
                    ));
                }
            }
        }
        let all = c
            .log()
            .live()
            .map(|o| (o.key().clone(), o.revision))
            .collect();
        RootView {
            objects,
            placements,
            all,
            summaries,
        }
    })
    .await
}

async fn agents_view(shared: &Shared) -> BTreeMap<String, Held> {
    let handles: Vec<_> = shared
        .agents
        .borrow()
        .iter()
        .map(|(n, h)| (n.clone(), h.clone()))
        .collect();
    let mut out = BTreeMap::new();
    for (name, h) in handles {
        if let Some(held) = h
            .query(|a| {
                a.log()
                    .live()
                    .map(|o| (o.key().clone(), o.revision))
                    .collect::<Held>()
            })
            .await
        {
            out.insert(name, held);
        }
    }
    out
}

async fn relay_heads(shared: &Shared) -> BTreeMap<String, u64> {
    let clients: Vec<_> = shared
        .relays
        .borrow()
        .iter()
        .map(|(n, c)| (n.clone(), c.clone()))
        .collect();
    let mut out = BTreeMap::new();
    for (name, c) in clients {
        if let Some(head) = c.query(|core| core.log().head().0).await {
            out.insert(name, head);
        }
    }
    out
}

async fn observe(
    shared: Rc<Shared>,
    events: Rc<RefCell<Events>>,
    scenario: Scenario,
) -> turmoil::Result {
    let fail = |v: Violation| {
        events.borrow_mut().violation = Some((v, now()));
    };
    let mut workload: VecDeque<Workload> = {
        let mut w = scenario.workload.clone();
        w.sort_by_key(|w| w.at);
        w.into()
    };
    let last_work = workload.back().map(|w| w.at).unwrap_or_default();
    let healed = scenario.healed_at().max(last_work);
    let mut monotonic = Monotonic::default();
    // Writes the root acknowledged: key → (revision, live).
    let mut acked: BTreeMap<ObjectKey, (u64, bool)> = BTreeMap::new();
    let mut heads: BTreeMap<String, u64> = BTreeMap::new();
    let mut delta_start: Option<u64> = None;
    loop {
        let t = now();
        for node in std::mem::take(&mut events.borrow_mut().lost_disks) {
            monotonic.forget(&node);
            heads.remove(&node);
        }
        while workload.front().is_some_and(|w| w.at <= t) {
            let Some(w) = workload.front() else { break };
            match apply_workload(&shared, w).await {
                Ok(None) => break,
                Ok(Some((rev, keys))) => {
                    let mut ev = events.borrow_mut();
                    ev.trace.push(format!(
                        "{} workload rev {rev} ({} objects)",
                        secs(t),
                        keys.len()
                    ));
                    if rev > 0 {
                        ev.revisions += 1;
                    }
                    for (k, live) in keys {
                        acked.insert(k, (rev, live));
                    }
                    drop(ev);
                    workload.pop_front();
                }
                Err(e) => {
                    fail(Violation {
                        invariant: "the workload applies",
                        detail: e,
                    });
                    return Ok(());
                }
            }
        }
        // Delta bytes: counted from when the partition healed.
        if let Some(d) = &scenario.checks.delta
            && delta_start.is_none()
            && t >= d.after
        {
            delta_start = Some(link_bytes(&shared, &d.link));
        }
        let root = root_view(&shared).await;
        let agents = agents_view(&shared).await;
        let relay_heads = relay_heads(&shared).await;
        // Nothing acknowledged is lost across crashes that keep the disk.
        for (name, head) in &relay_heads {
            let before = heads.insert(name.clone(), *head).unwrap_or(0);
            if *head < before {
                fail(Violation {
                    invariant: "nothing acknowledged is lost across a crash that keeps the disk",
                    detail: format!("{name}'s log went back from position {before} to {head}"),
                });
                return Ok(());
            }
        }
        if let Some(root) = &root {
            for (key, (rev, live)) in &acked {
                let held = root.all.get(key).map(|r| ((), *r));
                let ok = match (live, held) {
                    (true, Some((_, r))) => r.0 >= *rev,
                    (false, None) => true,
                    _ => false,
                };
                if !ok {
                    fail(Violation {
                        invariant: "nothing acknowledged is lost across a crash that keeps the disk",
                        detail: format!(
                            "the root acknowledged {} at rev {rev} (live: {live}) and now holds {:?}",
                            key.name,
                            held.map(|(_, r)| r.0)
                        ),
                    });
                    return Ok(());
                }
            }
        }
        let expected = root
            .as_ref()
            .map(|r| check::expected(&shared.topology, r))
            .unwrap_or_default();
        if root.is_some() {
            if let Some(v) = monotonic.observe(&agents, &expected) {
                fail(v);
                return Ok(());
            }
        }
        let digest = agents.iter().fold(0u64, |h, (n, held)| {
            held.iter().fold(h ^ hash(n), |h, (k, r)| {
                (h ^ hash(&k.name) ^ r.0).wrapping_mul(0x0100_0000_01B3)
            })
        });
        {
            let mut ev = events.borrow_mut();
            ev.max_lag = monotonic.max_lag;
            ev.trace.push(format!(
                "{} sample agents {} digest {digest:x} heads {relay_heads:?}",
                secs(t),
                agents.len()
            ));
        }
        let converged = root.as_ref().is_some_and(|r| {
            workload.is_empty()
                && check::divergence(&expected, &agents).is_empty()
                && check::summary_mismatches(&shared.topology, r, &agents).is_empty()
        });
        if converged && t >= healed {
            events.borrow_mut().converged = Some((t, t - healed));
            if let (Some(d), Some(start)) = (&scenario.checks.delta, delta_start) {
                let sent = link_bytes(&shared, &d.link) - start;
                let full = child_bytes(&shared, &d.link[1]).await;
                let limit = (full as f64 * d.max_fraction) as u64;
                events.borrow_mut().resync = Some((sent, full));
                events.borrow_mut().trace.push(format!(
                    "{} resync {} -> {}: {sent} bytes, full resend {full}",
                    secs(t),
                    d.link[0],
                    d.link[1]
                ));
                if sent > limit {
                    fail(Violation {
                        invariant: "resync after a partition sends only the delta",
                        detail: format!(
                            "{} -> {}: {sent} bytes after healing, over {limit} ({} of a full \
                             resend of {full} bytes)",
                            d.link[0], d.link[1], d.max_fraction
                        ),
                    });
                }
            }
            return Ok(());
        }
        if t >= healed + scenario.settle || t >= scenario.duration {
            let mut why = check::divergence(&expected, &agents);
            if let Some(r) = &root {
                why.extend(check::summary_mismatches(&shared.topology, r, &agents));
            } else {
                why.push("the root is down".into());
            }
            if !workload.is_empty() {
                why.push(format!("{} workload steps not applied", workload.len()));
            }
            why.truncate(6);
            fail(Violation {
                invariant: "the hierarchy converges within `settle` once the network healed",
                detail: format!(
                    "not converged {} after healing at {}: {}",
                    secs(t.saturating_sub(healed)),
                    secs(healed),
                    why.join("; ")
                ),
            });
            return Ok(());
        }
        tokio::time::sleep(SAMPLE).await;
    }
}

fn link_bytes(shared: &Shared, link: &[String; 2]) -> u64 {
    let from = turmoil::lookup(shared.host_of(&link[0]));
    let to = turmoil::lookup(shared.host_of(&link[1]));
    shared
        .network
        .traffic()
        .get(&(from, to))
        .map(|t| t.bytes)
        .unwrap_or(0)
}

/// Body bytes of everything `node` holds: what a full resend would carry.
async fn child_bytes(shared: &Shared, node: &str) -> u64 {
    let relay = shared.relays.borrow().get(node).cloned();
    if let Some(c) = relay {
        return c
            .query(|core| core.log().live().map(|o| o.body.len() as u64).sum())
            .await
            .unwrap_or(0);
    }
    let agent = shared.agents.borrow().get(node).cloned();
    match agent {
        Some(a) => a
            .query(|core| core.log().live().map(|o| o.body.len() as u64).sum())
            .await
            .unwrap_or(0),
        None => 0,
    }
}

/// Names of the keys a set of changes touched, for traces.
pub fn key_names(keys: &BTreeSet<ObjectKey>) -> Vec<String> {
    keys.iter().map(|k| k.name.clone()).collect()
}
