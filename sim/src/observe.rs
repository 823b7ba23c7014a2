//! The observer: a task inside the simulation that applies the workload at the root
//! when it is due and samples every node to check the invariants, during the run and
//! at its end.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use strata_node::objects::parse_manifests;
use strata_protocol::model::{Health, ObjectKey, Revision, Space};
use strata_protocol::route::is_placement;
use strata_protocol::wire::Change;

use crate::check::{self, Held, Monotonic, RootView, Violation, secs};
use crate::hosts::SimHierarchy;
use crate::record::RunRecord;
use crate::rng::hash;
use crate::rollout_check::RolloutWatch;
use crate::scenario::{AvailableCheck, ConfigMaps, Scenario, Workload};

/// How often the observer samples the hierarchy.
const SAMPLE: Duration = Duration::from_millis(500);

/// How often it samples when it watches a rollout (its figures are read from samples).
const ROLLOUT_SAMPLE: Duration = Duration::from_millis(250);

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
    hierarchy: &SimHierarchy,
    w: &Workload,
) -> Result<Option<(u64, Vec<(ObjectKey, bool)>)>, String> {
    let Some(root) = hierarchy
        .relays
        .borrow()
        .get(&hierarchy.topology.root().name)
        .cloned()
    else {
        return Ok(None);
    };
    if let Some(r) = &w.relabel {
        hierarchy
            .relabeled
            .borrow_mut()
            .insert(r.node().to_owned(), r.labels.clone());
        return Ok(Some((0, vec![])));
    }
    if let Some(d) = &w.delete {
        let key = d.key();
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

async fn root_view(hierarchy: &SimHierarchy) -> Option<RootView> {
    let root = hierarchy
        .relays
        .borrow()
        .get(&hierarchy.topology.root().name)
        .cloned()?;
    root.query(|c| {
        let placements = c.placements().to_vec();
        let objects: Vec<_> = c
            .log()
            .live()
            .filter(|o| !is_placement(&o.meta))
            .map(|o| ((*o.meta).clone(), o.revision))
            .collect();
        let mut summaries = Vec::new();
        for p in &placements {
            for (meta, _) in &objects {
                if p.selects_object(meta) {
                    summaries.push((p.name.clone(), meta.key.clone(), c.summary(p, &meta.key)));
                }
            }
        }
        let all = c
            .log()
            .live()
            .map(|o| (o.key().clone(), o.revision))
            .collect();
        let gated = c
            .rollouts()
            .iter()
            .filter(|((space, _), _)| *space == Space::default_space())
            .filter_map(|((_, name), s)| {
                let released = match s.gated()? {
                    true => s.released.clone(),
                    false => Default::default(),
                };
                Some((name.clone(), released))
            })
            .collect();
        RootView {
            objects,
            placements,
            all,
            summaries,
            gated,
        }
    })
    .await
}

/// Runs every future at once and collects their results in order: a sample asks all
/// nodes together, so it takes a step or two of simulated time, not one per node. Each
/// wake-up polls only the futures that were woken (`join_all`): polling all of them
/// at every answer made a sample quadratic in the clusters, most of the time of a
/// 100,000-cluster run.
async fn all<T>(futures: Vec<Pin<Box<dyn Future<Output = T> + '_>>>) -> Vec<T> {
    futures::future::join_all(futures).await
}

/// Asks every running node of `nodes` at once (see [`all`]), by name; a node that
/// stopped meanwhile is left out.
async fn ask_each<H, T, Fut>(
    nodes: &RefCell<BTreeMap<String, H>>,
    ask: impl Fn(H) -> Fut,
) -> BTreeMap<String, T>
where
    H: Clone,
    Fut: Future<Output = Option<T>> + 'static,
{
    let handles: Vec<(String, H)> = nodes
        .borrow()
        .iter()
        .map(|(n, h)| (n.clone(), h.clone()))
        .collect();
    let queries = handles
        .into_iter()
        .map(|(name, h)| {
            let answer = ask(h);
            Box::pin(async move { answer.await.map(|v| (name, v)) })
                as Pin<Box<dyn Future<Output = _>>>
        })
        .collect();
    all(queries).await.into_iter().flatten().collect()
}

async fn agents_view(hierarchy: &SimHierarchy) -> BTreeMap<String, Held> {
    ask_each(&hierarchy.agents, |h| async move {
        h.query(|a| {
            a.log()
                .live()
                .map(|o| (o.key().clone(), o.revision))
                .collect::<Held>()
        })
        .await
    })
    .await
}

/// What each agent's cluster removed since the last call, with the revision it held.
fn removals(hierarchy: &SimHierarchy) -> BTreeMap<String, Vec<(ObjectKey, Revision)>> {
    hierarchy
        .removals
        .borrow()
        .iter()
        .map(|(name, rx)| (name.clone(), rx.try_iter().collect()))
        .collect()
}

/// How many clusters hold `key` and report it `Available`.
async fn available_on(hierarchy: &SimHierarchy, key: &ObjectKey) -> usize {
    let answers = ask_each(&hierarchy.agents, |h| {
        let key = key.clone();
        async move {
            h.query(move |a| {
                a.log().get(&key).is_some()
                    && a.status(&key)
                        .is_some_and(|s| s.health == Health::Available)
            })
            .await
        }
    })
    .await;
    answers.values().filter(|ok| **ok).count()
}

/// The available check (see [`crate::scenario::AvailableCheck`]) at one sample: arms
/// once the object is available on enough clusters (or at `by`), then records the
/// fewest; a violation when it falls below the bound.
async fn check_available(
    hierarchy: &SimHierarchy,
    check: &AvailableCheck,
    record: &RefCell<RunRecord>,
    t: Duration,
) -> Option<Violation> {
    let key = check.object.key();
    let n = available_on(hierarchy, &key).await;
    let mut rec = record.borrow_mut();
    match rec.available {
        None if n >= check.at_least => {
            rec.available = Some((n, t));
            None
        }
        None if t >= check.by => Some(Violation {
            invariant: "the object is available on enough clusters before the move",
            detail: format!(
                "{} available on {n} clusters at {}, not the {} expected by {}",
                key.name,
                secs(t),
                check.at_least,
                secs(check.by)
            ),
        }),
        None => None,
        Some((fewest, armed)) => {
            rec.available = Some((fewest.min(n), armed));
            (n < check.at_least).then(|| Violation {
                invariant: "available clusters never fall below min(old, new) during a move",
                detail: format!(
                    "{} available on {n} clusters at {}, below {}",
                    key.name,
                    secs(t),
                    check.at_least
                ),
            })
        }
    }
}

async fn relay_heads(hierarchy: &SimHierarchy) -> BTreeMap<String, u64> {
    ask_each(&hierarchy.relays, |c| async move {
        c.query(|core| core.log().head().0).await
    })
    .await
}

pub(crate) async fn observe(
    hierarchy: Rc<SimHierarchy>,
    record: Rc<RefCell<RunRecord>>,
    scenario: Scenario,
) -> turmoil::Result {
    let fail = |v: Violation| {
        record.borrow_mut().violation = Some((v, now()));
    };
    let mut workload: VecDeque<Workload> = {
        let mut w = scenario.workload.clone();
        w.sort_by_key(|w| w.at);
        w.into()
    };
    let last_work = workload.back().map(|w| w.at).unwrap_or_default();
    let healed = scenario.healed_at().max(last_work);
    let mut clusters = check::effective_clusters(&hierarchy.topology, &BTreeMap::new());
    let mut monotonic = Monotonic::default();
    // Writes the root acknowledged: key → (revision, live).
    let mut acked: BTreeMap<ObjectKey, (u64, bool)> = BTreeMap::new();
    let mut heads: BTreeMap<String, u64> = BTreeMap::new();
    // What the root placed on each cluster at the previous sample (empty when the
    // root could not be asked).
    let mut placed_before: BTreeMap<String, Held> = BTreeMap::new();
    let mut rollout = RolloutWatch::default();
    // The stateful move check's app: owned here, it ends with the observer.
    let _app = scenario.checks.stateful_move.clone().map(|check| {
        AbortOnDrop(tokio::task::spawn_local(crate::stateful_check::run_app(
            hierarchy.clone(),
            check,
            record.clone(),
        )))
    });
    // SIM_SAMPLE_MS sets the period: shorter for finer figures, longer at 100,000
    // clusters, where each sample asks every agent (convergence is then seen at the
    // first sample after it). Another trace hash either way.
    let sample = match std::env::var("SIM_SAMPLE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(ms) => Duration::from_millis(ms),
        None if scenario.checks.rollout.is_some() => ROLLOUT_SAMPLE,
        None => SAMPLE,
    };
    loop {
        let t = now();
        // The app found a violation (see `stateful_check`).
        if record.borrow().violation.is_some() {
            return Ok(());
        }
        for node in std::mem::take(&mut record.borrow_mut().lost_disks) {
            monotonic.forget(&node);
            heads.remove(&node);
        }
        while workload.front().is_some_and(|w| w.at <= t) {
            let Some(w) = workload.front() else { break };
            match apply_workload(&hierarchy, w).await {
                Ok(None) => break,
                Ok(Some((rev, keys))) => {
                    let mut rec = record.borrow_mut();
                    rec.trace.push(format!(
                        "{} workload rev {rev} ({} objects)",
                        secs(t),
                        keys.len()
                    ));
                    if rev > 0 {
                        rec.revisions += 1;
                    }
                    for (k, live) in keys {
                        acked.insert(k, (rev, live));
                    }
                    if let Some(r) = &w.relabel {
                        rec.restarts.push(hierarchy.host_of(r.node()));
                    }
                    drop(rec);
                    clusters = check::effective_clusters(
                        &hierarchy.topology,
                        &hierarchy.relabeled.borrow(),
                    );
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
        let root = root_view(&hierarchy).await;
        let agents = agents_view(&hierarchy).await;
        let relay_heads = relay_heads(&hierarchy).await;
        if let Some(check) = &scenario.checks.available
            && let Some(v) = check_available(&hierarchy, check, &record, t).await
        {
            fail(v);
            return Ok(());
        }
        if let Some(check) = &scenario.checks.rollout {
            let v = rollout.sample(&hierarchy, check, &agents, t).await;
            record
                .borrow_mut()
                .rollout
                .extend(std::mem::take(&mut rollout.lines));
            if let Some(v) = v {
                fail(v);
                return Ok(());
            }
        }
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
            .map(|r| check::expected(&clusters, r))
            .unwrap_or_default();
        if root.is_some()
            && let Some(v) = monotonic.observe(&agents, &expected)
        {
            fail(v);
            return Ok(());
        }
        let removed = removals(&hierarchy);
        if let Some(v) = check::unasked_removal(&removed, &placed_before, &expected) {
            fail(v);
            return Ok(());
        }
        placed_before = expected.clone();
        let digest = agents.iter().fold(0u64, |h, (n, held)| {
            held.iter().fold(h ^ hash(n), |h, (k, r)| {
                (h ^ hash(&k.name) ^ r.0).wrapping_mul(0x0100_0000_01B3)
            })
        });
        {
            let mut rec = record.borrow_mut();
            rec.max_lag = monotonic.max_lag;
            rec.trace.push(format!(
                "{} sample agents {} digest {digest:x} heads {relay_heads:?}",
                secs(t),
                agents.len()
            ));
        }
        let rollout_done = scenario
            .checks
            .rollout
            .as_ref()
            .is_none_or(|c| rollout.done(c.outcome));
        // Every cluster holds what the root holds now, and the root's summaries say so.
        let caught_up = root.as_ref().is_some_and(|r| {
            rollout_done
                && check::divergence(&expected, &agents).is_empty()
                && check::summary_mismatches(&clusters, r, &agents).is_empty()
        });
        let converged = workload.is_empty() && caught_up;
        if let Some(by) = scenario.checks.converge_by {
            // Caught up with every workload step due by then (none is left before it).
            let due_done = workload.front().is_none_or(|w| w.at > by);
            let early = record.borrow().converged_early;
            if caught_up && due_done && early.is_none() {
                record.borrow_mut().converged_early = Some(t);
                record
                    .borrow_mut()
                    .trace
                    .push(format!("{} converged with the faults in place", secs(t)));
            } else if early.is_none() && t >= by {
                fail(Violation {
                    invariant: "the hierarchy catches up with the workload due by `checks.converge_by` \
                                although a fault is in place",
                    detail: format!("not converged at {}", secs(t)),
                });
                return Ok(());
            }
        }
        if converged && t >= healed {
            record.borrow_mut().converged = Some((t, t - healed));
            if let Some(check) = &scenario.checks.stateful_move
                && let Some(v) = crate::stateful_check::finish(&hierarchy, check, &record, t).await
            {
                fail(v);
                return Ok(());
            }
            let delta_start = record.borrow().delta_start;
            if let (Some(d), Some(start)) = (&scenario.checks.delta, delta_start) {
                let sent = hierarchy.link_bytes(&d.link, |h| turmoil::lookup(h)) - start;
                let full = child_bytes(&hierarchy, &d.link[1]).await;
                let limit = (full as f64 * d.max_fraction) as u64;
                record.borrow_mut().resync = Some((sent, full));
                record.borrow_mut().trace.push(format!(
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
                why.extend(check::summary_mismatches(&clusters, r, &agents));
            } else {
                why.push("the root is down".into());
            }
            if !workload.is_empty() {
                why.push(format!("{} workload steps not applied", workload.len()));
            }
            if !rollout_done {
                why.push(format!("the rollout is {:?}", rollout.phase));
            }
            if let Some(phase) = &record.borrow().app.phase {
                why.insert(0, format!("the stateful move's volume move is {phase}"));
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
        tokio::time::sleep(sample).await;
    }
}

/// A task that ends when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Body bytes of everything `node` holds: what a full resend would carry.
async fn child_bytes(hierarchy: &SimHierarchy, node: &str) -> u64 {
    let relay = hierarchy.relays.borrow().get(node).cloned();
    if let Some(c) = relay {
        return c
            .query(|core| core.log().live().map(|o| o.body.len() as u64).sum())
            .await
            .unwrap_or(0);
    }
    let agent = hierarchy.agents.borrow().get(node).cloned();
    match agent {
        Some(a) => a
            .query(|core| core.log().live().map(|o| o.body.len() as u64).sum())
            .await
            .unwrap_or(0),
        None => 0,
    }
}
