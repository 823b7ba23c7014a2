//! The measurements on one running hierarchy (tree or flat hub): P1 propagation, P2
//! bytes per tier, P3 status to the root's summary, P4 region resync and reconnect
//! storm, P6 memory, and CPU per tier.

mod arrivals;
mod summaries;

use std::collections::BTreeMap;
use std::time::Duration;

use strata_node::objects::parse_manifests;
use strata_protocol::codec::encoded_len;
use strata_protocol::model::Space;
use strata_relay::tier::runtime::{LinkStats, NodeClient};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub(crate) use self::arrivals::Arrivals;
use self::summaries::{SUMMARY_POLL, Seen, shows_all, summary_complete};
use super::tree::{TIER_THREADS, Tree};
use super::{
    BenchError, Dist, Memory, Options, P3Hops, Resync, Storm, StormRefusals, TierBytes, TierHop,
    TopologyReport, calibrate, procstat,
};

/// The placement every benchmark object is selected by.
const PLACEMENT: &str = "apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: bench }
spec:
  objects: [ { selector: { matchLabels: { app: bench } } } ]
  clusters: { selector: { matchLabels: { tier: store } } }
";

/// A rule that gives every cluster its own variant of the object, rendered by its agent
/// (`--customize`): root egress should not change.
const CUSTOMIZE: &str = "  customize:
    - mergePatch: { data: { store: \"${cluster.name}\" } }
      jsonPatch: [ { op: add, path: /metadata/labels/cluster, value: \"${cluster.name}\" } ]
";

/// Profiling one phase: with `STRATA_BENCH_PERF_CTL` naming the control FIFO of a
/// `perf record --control fifo:FIFO --delay=-1` (started disabled) and
/// `STRATA_BENCH_PERF_PHASE` one of `idle`, `updates` or `storm`, perf samples that phase only.
/// Without them, nothing happens.
fn perf_window(phase: &str, enable: bool) {
    let (Some(fifo), Some(wanted)) = (
        std::env::var_os("STRATA_BENCH_PERF_CTL"),
        std::env::var_os("STRATA_BENCH_PERF_PHASE"),
    ) else {
        return;
    };
    if wanted != phase {
        return;
    }
    let command = if enable { "enable\n" } else { "disable\n" };
    match std::fs::OpenOptions::new().write(true).open(&fifo) {
        Ok(mut f) => {
            use std::io::Write;
            if let Err(e) = f.write_all(command.as_bytes()) {
                eprintln!("bench: perf control {}: {e}", fifo.to_string_lossy());
            }
        }
        Err(e) => eprintln!("bench: perf control {}: {e}", fifo.to_string_lossy()),
    }
    eprintln!("bench: perf {} for the {phase} phase", command.trim_end());
}

/// A ConfigMap of about `size` bytes.
pub(crate) fn object(name: &str, size: usize, version: usize) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{ name: {name}, namespace: bench, labels: {{ app: bench }} }}
data: {{ blob: \"{}\", version: \"{version}\" }}
",
        "x".repeat(size)
    )
}

async fn apply(root: &NodeClient, text: String) -> Result<u64, BenchError> {
    let m = parse_manifests(&text, &Space::default_space())
        .map_err(|e| BenchError::setup("benchmark manifests", format!("{e:?}")))?;
    let applied = root
        .query(move |c| c.apply_manifests(&m))
        .await
        .ok_or_else(|| BenchError::setup("apply", "root stopped"))?
        .map_err(|e| BenchError::setup("apply", e))?;
    applied
        .revision
        .map(|p| p.0)
        .ok_or_else(|| BenchError::setup("apply", "nothing changed"))
}

/// Milliseconds, as the report prints them.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The encoded size (as it travels, frame header included) of the object `name`.
async fn encoded(root: &NodeClient, name: impl Into<String>) -> usize {
    let name = name.into();
    root.query(move |c| {
        c.log()
            .live()
            .find(|o| o.key().name == name)
            .and_then(|o| encoded_len(o).ok())
    })
    .await
    .flatten()
    .unwrap_or(0)
}

/// When each relay of one tier pushed a summary showing all of its leaves at `rev` to its
/// parent, after `start`: every relay not yet complete is asked at each poll, so that one late
/// relay does not delay the others' times. Gives up at `limit`.
async fn tier_complete(
    level: usize,
    relays: Vec<(String, NodeClient)>,
    leaves_each: usize,
    rev: u64,
    start: Instant,
    limit: Duration,
) -> TierHop {
    let mut waiting = relays;
    let mut done: Vec<(Duration, String)> = Vec::new();
    while !waiting.is_empty() && start.elapsed() <= limit {
        let mut still = Vec::new();
        for (name, client) in waiting {
            if shows_all(&client, Seen::Pushed, leaves_each, rev).await {
                done.push((start.elapsed(), name));
            } else {
                still.push((name, client));
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            tokio::time::sleep(SUMMARY_POLL).await;
        }
    }
    done.sort();
    let median = done.get(done.len() / 2).map(|d| ms(d.0));
    TierHop {
        level,
        relays: done.len() + waiting.len(),
        incomplete: waiting.len(),
        median_ms: median,
        slowest: match waiting.first() {
            Some((name, _)) => Some((name.clone(), None)),
            None => done.last().map(|(t, n)| (n.clone(), Some(ms(*t)))),
        },
    }
}

fn sent(s: &LinkStats) -> u64 {
    s.children.iter().map(|c| c.1).sum()
}

fn received(s: &LinkStats) -> u64 {
    s.children.iter().map(|c| c.2).sum()
}

/// A generous limit for waits that grow with the number of leaves.
fn limit(leaves: usize) -> Duration {
    Duration::from_secs(60 + leaves as u64 / 50)
}

/// Waits until the root knows `leaves` clusters, or fails after [`limit`].
pub(crate) async fn wait_registered(root: &NodeClient, leaves: usize) -> Result<(), BenchError> {
    let setup = Instant::now();
    loop {
        let known = root
            .query(|c| c.reports().clusters().count())
            .await
            .unwrap_or(0);
        if known == leaves {
            return Ok(());
        }
        if setup.elapsed() > limit(leaves) {
            return Err(BenchError::Timeout {
                what: "registration".into(),
                secs: limit(leaves).as_secs(),
                detail: format!("only {known} of {leaves} clusters registered"),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Builds a hierarchy of shape `fanout`, measures it, and stops it.
pub(crate) async fn topology(
    label: &str,
    fanout: &[usize],
    opts: &Options,
    resync: bool,
) -> Result<TopologyReport, BenchError> {
    let leaves: usize = fanout.iter().product();
    let rss_start = procstat::rss_bytes();
    let mut peaks = procstat::Peaks::start();
    let (tx, rx) = mpsc::unbounded_channel();
    let mut arrivals = Arrivals::new(rx);
    let mut tree = Tree::build(fanout, tx, opts.transport)?;
    let root = tree.root()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_relays = procstat::rss_bytes();
    let setup = Instant::now();
    tree.start_agents(0..leaves)?;
    wait_registered(&root, leaves).await?;
    let register = setup.elapsed();
    peaks.end("registration");
    // Idle: every agent connected, nothing placed yet.
    let idle_before = (Instant::now(), procstat::cpu_by_thread(&TIER_THREADS));
    perf_window("idle", true);
    tokio::time::sleep(Duration::from_secs(2)).await;
    perf_window("idle", false);
    let cpu_idle_per_sec = cpu_spent(&idle_before.1, idle_before.0.elapsed().as_secs_f64());
    let rss_idle = procstat::rss_bytes();
    // Profiling the idle hierarchy's heap: with `STRATA_BENCH_EXIT_IDLE` set, the phase
    // ends here without tearing anything down, so that a heap profiler (heaptrack)
    // reports what every idle node and connection holds as memory left at exit.
    if std::env::var_os("STRATA_BENCH_EXIT_IDLE").is_some() {
        std::process::exit(0);
    }
    // The same number of agents without a connection (capped at 1,000).
    let orphans = leaves.min(1000);
    let before = procstat::rss_bytes();
    let handles = tree.start_orphans(orphans)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_orphan = procstat::rss_bytes().saturating_sub(before) / orphans as u64;
    for h in handles {
        h.shutdown().await;
    }
    peaks.end("idle");

    // First delivery: the placement and the object.
    let start = Instant::now();
    let rev = apply(
        &root,
        format!(
            "{PLACEMENT}{}---\n{}",
            if opts.customize { CUSTOMIZE } else { "" },
            object("payload", opts.object_bytes, 0)
        ),
    )
    .await?;
    let first = arrivals.wait(0..leaves, rev, start, limit(leaves)).await?;
    summary_complete(&root, leaves, rev, limit(leaves)).await?;
    let first = Dist::of(first.iter().map(|f| f.1).collect());
    peaks.end("first delivery");
    let encoded_object = encoded(&root, "payload").await;

    // Updates of the object alone, between two timings of the same fixed work.
    let calibrated_before = calibrate::calibrate();
    perf_window("updates", true);
    let churn_before = tree.churn().await;
    let cpu_before = procstat::cpu_by_thread(&TIER_THREADS);
    let mut p1 = Vec::new();
    let mut p3 = Vec::new();
    let mut p3_hops = Vec::new();
    let mut tier_sent = vec![0u64; tree.levels.len()];
    // UDP datagrams (to children, from children) per tier.
    let mut tier_datagrams = vec![(0u64, 0u64); tree.levels.len()];
    let mut root_received = 0u64;
    let mut window = Duration::ZERO;
    for round in 1..=opts.rounds {
        tokio::time::sleep(Duration::from_millis(300)).await;
        arrivals.drain();
        let before = tree.link_stats().await;
        let start = Instant::now();
        let rev = apply(&root, object("payload", opts.object_bytes, round)).await?;
        // Each relay tier's own summaries, watched beside the root's: which hop a late
        // summary waited on.
        let tiers: Vec<_> = (1..tree.levels.len())
            .map(|level| {
                let relays = tree.level_clients(level);
                let each = leaves / relays.len().max(1);
                tokio::spawn(tier_complete(
                    level,
                    relays,
                    each,
                    rev,
                    start,
                    limit(leaves),
                ))
            })
            .collect();
        let got = arrivals.wait(0..leaves, rev, start, limit(leaves)).await?;
        let done = summary_complete(&root, leaves, rev, limit(leaves)).await?;
        let done = done.saturating_duration_since(start);
        let last_applied = got.iter().map(|g| g.1).max().unwrap_or_default();
        let mut by_tier = Vec::new();
        for t in tiers {
            if let Ok(hop) = t.await {
                by_tier.push(hop);
            }
        }
        p3_hops.push(P3Hops {
            last_applied_ms: ms(last_applied),
            tiers: by_tier,
            root_complete_ms: ms(done),
        });
        p1.extend(got.iter().map(|g| g.1));
        p3.extend(got.iter().map(|g| done.saturating_sub(g.1)));
        tokio::time::sleep(Duration::from_millis(200)).await;
        window += start.elapsed();
        let after = tree.link_stats().await;
        for (level, (b, a)) in before.iter().zip(&after).enumerate() {
            // (bytes, datagrams out, datagrams in) to and from the tier's children.
            let sum = |stats: &Vec<LinkStats>| {
                stats.iter().fold((0, 0, 0), |(bytes, out, inn), s| {
                    let (d_out, d_in) = s.child_datagrams;
                    (bytes + sent(s), out + d_out, inn + d_in)
                })
            };
            let (b, a) = (sum(b), sum(a));
            tier_sent[level] += a.0.saturating_sub(b.0);
            tier_datagrams[level].0 += a.1.saturating_sub(b.1);
            tier_datagrams[level].1 += a.2.saturating_sub(b.2);
        }
        root_received += received(&after[0][0]).saturating_sub(received(&before[0][0]));
    }
    let cpu_after = procstat::cpu_by_thread(&TIER_THREADS);
    perf_window("updates", false);
    let calibrated_after = calibrate::calibrate();
    let churn_after = tree.churn().await;
    let rounds = opts.rounds.max(1) as u64;
    let p2 = tree
        .levels
        .iter()
        .enumerate()
        .map(|(level, nodes)| {
            let links: usize = nodes.iter().map(|n| n.children.len()).sum();
            let per_update = tier_sent[level] / rounds;
            let ideal = (encoded_object * links) as u64;
            let per_link = |n: u64| n as f64 / rounds as f64 / links.max(1) as f64;
            TierBytes {
                datagrams_sent_per_link: per_link(tier_datagrams[level].0),
                datagrams_received_per_link: per_link(tier_datagrams[level].1),
                tier: level,
                nodes: nodes.len(),
                links,
                bytes_per_update: per_update,
                ideal_bytes: ideal,
                ratio: per_update as f64 / ideal.max(1) as f64,
            }
        })
        .collect();
    let cpu_updates = cpu_between(&cpu_before, &cpu_after, 1.0);
    peaks.end("updates");

    let region = if resync && tree.levels.len() > 2 && opts.changed > 0 {
        Some(region_cut(&mut tree, &root, &mut arrivals, opts, leaves).await?)
    } else {
        None
    };
    if region.is_some() {
        peaks.end("resync");
    }
    let storm = storm(&mut tree, &root, &mut arrivals, opts, leaves).await?;
    peaks.end("storm");
    let cpu_total = procstat::cpu_by_thread(&TIER_THREADS).into_iter().collect();
    let relays = tree.relay_count() + 1;
    tree.shutdown().await;
    let (phase_peaks, peak_rss, udp_drops) = peaks.finish();
    Ok(TopologyReport {
        label: label.to_owned(),
        fanout: fanout.to_vec(),
        leaves,
        object_bytes: opts.object_bytes,
        encoded_object_bytes: encoded_object,
        register_secs: register.as_secs_f64(),
        first_delivery: first,
        p1: Dist::of(p1),
        p2,
        p3: Dist::of(p3),
        p3_root_bytes_received_per_update: root_received / rounds,
        p3_root_children: fanout[0],
        update_window_secs: window.as_secs_f64() / rounds as f64,
        p3_hops,
        p4: region,
        storm,
        memory: Memory {
            rss_start,
            rss_relays,
            rss_idle,
            relays,
            leaves,
            per_relay: rss_relays.saturating_sub(rss_start) / relays as u64,
            per_agent_with_connection: rss_idle.saturating_sub(rss_relays) / leaves.max(1) as u64,
            per_agent_unconnected: per_orphan,
        },
        cpu_idle_per_sec,
        cpu_updates,
        calibration_ms: (
            calibrated_before.as_secs_f64() * 1000.0,
            calibrated_after.as_secs_f64() * 1000.0,
        ),
        updates_reconnects: churn_after
            .connections
            .saturating_sub(churn_before.connections),
        updates_plans: churn_after.plans.saturating_sub(churn_before.plans),
        cpu_total,
        process_cpu_secs: procstat::process_cpu(),
        peak_rss,
        phase_peaks,
        udp_drops,
    })
}

/// P4a: the first region is stopped (store kept) while `opts.changed` objects are
/// created, then restarted; what the root sends it to catch up.
async fn region_cut(
    tree: &mut Tree,
    root: &NodeClient,
    arrivals: &mut Arrivals,
    opts: &Options,
    leaves: usize,
) -> Result<Resync, BenchError> {
    let name = tree.levels[1][0].name.clone();
    let below = leaves / tree.levels[1].len();
    if let Some(h) = tree.levels[1][0].handle.take() {
        let _ = h.shutdown().await;
    }
    // Until the root has dropped the old connection, so the next one is counted alone.
    for _ in 0..200 {
        let stats = root.link_stats().await.unwrap_or_default();
        if !stats.children.iter().any(|c| c.0 == name) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut last = 0;
    let mut changed_bytes = 0usize;
    for i in 0..opts.changed {
        last = apply(root, object(&format!("changed-{i}"), opts.object_bytes, 1)).await?;
        changed_bytes += encoded(root, format!("changed-{i}")).await;
    }
    // The other regions get the changes meanwhile.
    let elsewhere = Instant::now();
    arrivals
        .wait(below..leaves, last, elsewhere, limit(leaves))
        .await?;
    let start = Instant::now();
    tree.restart_node(1, 0).await?;
    // The last leaf's apply, by its own time (the wait may notice it later).
    let caught_up = arrivals
        .wait(0..below, last, start, limit(leaves))
        .await?
        .iter()
        .map(|got| got.1)
        .max()
        .unwrap_or_default();
    let stats = root.link_stats().await.unwrap_or_default();
    let sent: u64 = stats
        .children
        .iter()
        .filter(|c| c.0 == name)
        .map(|c| c.1)
        .sum();
    Ok(Resync {
        region: name,
        leaves_below: below,
        changed_objects: opts.changed,
        changed_bytes: changed_bytes as u64,
        resync_bytes: sent,
        ratio: sent as f64 / changed_bytes.max(1) as f64,
        caught_up_secs: caught_up.as_secs_f64(),
    })
}

/// P4b: every agent stops at once (stores kept), the object changes, and every agent
/// starts again at once; time until every leaf applied the change and until the root's
/// summary shows it.
async fn storm(
    tree: &mut Tree,
    root: &NodeClient,
    arrivals: &mut Arrivals,
    opts: &Options,
    leaves: usize,
) -> Result<Storm, BenchError> {
    let stopping = Instant::now();
    let fds = procstat::open_fds();
    tree.stop_agents().await;
    // In production each agent is a process and its socket goes with it; here a
    // stopped agent's socket closes once its connection has drained (three probe
    // timeouts, seconds after a loaded registration: 14.5 s for all of 3,000), and
    // 10,000 new sockets beside the old ones would pass the descriptor limit.
    let released_secs = sockets_released(fds.saturating_sub(leaves))
        .await
        .then(|| stopping.elapsed().as_secs_f64());
    let rev = apply(root, object("payload", opts.object_bytes, 1000)).await?;
    arrivals.drain();
    let before = tree.churn().await;
    perf_window("storm", true);
    let start = Instant::now();
    tree.start_agents(0..leaves)?;
    let started = start.elapsed();
    let (got, missing) = arrivals
        .wait_partial(0..leaves, rev, start, limit(leaves))
        .await;
    let all_applied = got.iter().map(|g| g.1).max().unwrap_or_default();
    let summary = if missing == 0 {
        Some(
            summary_complete(root, leaves, rev, limit(leaves))
                .await?
                .saturating_duration_since(start)
                .as_secs_f64(),
        )
    } else {
        None
    };
    perf_window("storm", false);
    let after = tree.churn().await;
    let refused = StormRefusals {
        handshakes: after
            .handshakes_refused
            .saturating_sub(before.handshakes_refused),
        sessions: after
            .sessions_refused
            .saturating_sub(before.sessions_refused),
        connections: after.connections.saturating_sub(before.connections),
    };
    let stats = tree.link_stats().await;
    let bytes_to_agents = stats.last().map(|l| l.iter().map(sent).sum()).unwrap_or(0);
    let objects_held = root.query(|c| c.log().live_len()).await.unwrap_or(0);
    Ok(Storm {
        bytes_to_agents,
        objects_held,
        agents: leaves,
        released_secs,
        start_secs: started.as_secs_f64(),
        all_applied_secs: all_applied.as_secs_f64(),
        applied: Dist::of(got.iter().map(|g| g.1).collect()),
        summary_secs: summary,
        missing,
        refused,
    })
}

/// Waits (at most 60 s) until this process holds at most `fds` descriptors; whether
/// it came to that.
async fn sockets_released(fds: usize) -> bool {
    for _ in 0..1200 {
        if procstat::open_fds() <= fds {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// CPU seconds each tier used between two samples, divided by `per` (1 for a total).
fn cpu_between(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    per: f64,
) -> Vec<(String, f64)> {
    TIER_THREADS
        .iter()
        .map(|t| {
            let d = after.get(*t).copied().unwrap_or(0.0) - before.get(*t).copied().unwrap_or(0.0);
            ((*t).to_owned(), d / per.max(f64::MIN_POSITIVE))
        })
        .collect()
}

/// CPU seconds per second each tier used since `before`, `secs` ago.
fn cpu_spent(before: &BTreeMap<String, f64>, secs: f64) -> Vec<(String, f64)> {
    cpu_between(before, &procstat::cpu_by_thread(&TIER_THREADS), secs)
}
