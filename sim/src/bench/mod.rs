//! The scale benchmark harness (issue 7): a hierarchy of real relays and agents over
//! real QUIC + mTLS on loopback, measured against a flat hub and a NATS leafnode tree
//! in the same run. Performance is measured here, never asserted.
//!
//! # Layout
//!
//! * `tree`: builds and restarts the hierarchy (one process, an endpoint and a store
//!   per node and agent, a runtime per tier).
//! * `measure`: the goals' measurements on one hierarchy (P1–P4, P6, CPU).
//! * `nats`: the NATS baseline (`nats-server` processes, a minimal client).
//! * `procstat`: RSS and CPU from `/proc`.
//! * `table`: the printed table.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use strata_node::dial::TransportMode;

mod api;
mod calibrate;
mod measure;
mod nats;
mod procstat;
mod table;
mod tree;

pub use api::{Served, serve_api};
pub use table::render;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Relays per parent at each tier, then agents per lowest relay (product = leaves).
    pub fanout: Vec<usize>,
    /// Size of the object's payload in bytes.
    pub object_bytes: usize,
    /// Updates measured (latencies pooled, bytes averaged).
    pub rounds: usize,
    /// Objects created while a region is cut off (P4).
    pub changed: usize,
    /// Also run the flat hub.
    pub flat: bool,
    /// The NATS baseline: `None` to skip it.
    pub nats: Option<NatsChoice>,
    /// The placement customizes the object for every cluster (rendered by each agent).
    pub customize: bool,
    /// How every child reaches its parent (`--transport`; QUIC by default).
    pub transport: TransportMode,
}

/// Where the NATS baseline's server comes from.
#[derive(Debug, Clone)]
pub enum NatsChoice {
    /// `nats-server` on the PATH, or skipped with a note when there is none.
    IfFound,
    /// Required: this binary (or the PATH's when `None`); missing is an error.
    Required(Option<PathBuf>),
}

/// Which NATS the baseline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatsFlavor {
    /// Core NATS: at-most-once delivery, nothing kept.
    Core,
    /// JetStream: a durable stream at the hub and a durable consumer per leaf that
    /// acknowledges every message.
    JetStream,
}

/// The benchmark could not be run: what was being set up or awaited (`what`), the
/// limit that passed (`secs`), and why or how far it got (`detail`).
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are named in the type's doc
pub enum BenchError {
    /// Building or driving the hierarchy failed.
    #[error("setting up {what}: {detail}")]
    Setup {
        /// What was being set up.
        what: String,
        detail: String,
    },
    /// Something expected never happened.
    #[error("{what} not reached within {secs} s: {detail}")]
    Timeout {
        what: String,
        secs: u64,
        detail: String,
    },
    /// The NATS baseline failed.
    #[error("NATS baseline: {detail}")]
    Nats { detail: String },
    /// The shape asked for is impossible.
    #[error("shape: {0}")]
    Shape(String),
    /// This process may not open as many descriptors as the hierarchy needs.
    #[error(
        "{leaves} leaves over {transport} need about {need} open files in one process (every socket of every node and agent), but `ulimit -n` allows {limit} (hard limit {hard}): raise it, use fewer leaves, or QUIC (one socket per agent, not two)"
    )]
    Descriptors {
        leaves: usize,
        transport: TransportMode,
        need: u64,
        limit: u64,
        hard: u64,
    },
}

impl BenchError {
    pub(crate) fn setup(what: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        BenchError::Setup {
            what: what.into(),
            detail: detail.to_string(),
        }
    }
}

/// The fan-out for `leaves` when none is given: 10 regions of 10 sites where the
/// leaves divide evenly, fewer tiers for small runs.
pub fn derive_fanout(leaves: usize) -> Result<Vec<usize>, BenchError> {
    match leaves {
        0 => Err(BenchError::Shape("no leaves".into())),
        n if n >= 200 && n % 100 == 0 => Ok(vec![10, 10, n / 100]),
        n if n >= 20 && n % 10 == 0 => Ok(vec![2, 5, n / 10]),
        n => Ok(vec![1, 1, n]),
    }
}

/// Latency distribution in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Dist {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

impl Dist {
    pub(crate) fn of(mut samples: Vec<Duration>) -> Dist {
        samples.sort();
        let at = |p: f64| {
            if samples.is_empty() {
                return 0.0;
            }
            let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
            samples[i.min(samples.len() - 1)].as_secs_f64() * 1000.0
        };
        Dist {
            n: samples.len(),
            p50_ms: at(0.5),
            p90_ms: at(0.9),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

/// P2: bytes one tier sent to its children for one update.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierBytes {
    /// 0 = root.
    pub tier: usize,
    /// Nodes in the tier.
    pub nodes: usize,
    /// Child connections of the tier.
    pub links: usize,
    /// Bytes sent to children per update (UDP payload as quinn counts it: includes
    /// acks, heartbeats and the summaries' acknowledgements in the window).
    pub bytes_per_update: u64,
    /// Encoded object x links.
    pub ideal_bytes: u64,
    /// `bytes_per_update / ideal_bytes`.
    pub ratio: f64,
    /// UDP datagrams to each child per update, in the same window (QUIC links).
    pub datagrams_sent_per_link: f64,
    /// UDP datagrams from each child per update, in the same window (QUIC links).
    pub datagrams_received_per_link: f64,
}

/// P4a: a region cut off while objects change, then back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resync {
    /// The region's relay.
    pub region: String,
    /// Leaves below it.
    pub leaves_below: usize,
    /// Objects created meanwhile.
    pub changed_objects: usize,
    /// Their encoded bytes.
    pub changed_bytes: u64,
    /// What the root sent the region on its new connection until every leaf below had
    /// the last change.
    pub resync_bytes: u64,
    /// `resync_bytes / changed_bytes`.
    pub ratio: f64,
    /// Restart to every leaf below holding the last change.
    pub caught_up_secs: f64,
}

/// P4b: every agent reconnects at once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Storm {
    /// Agents restarted.
    pub agents: usize,
    /// Time from the agents' stop until their sockets were released (`None`: not
    /// within the bound; the new agents then started beside the old sockets).
    #[serde(default)]
    pub released_secs: Option<f64>,
    /// Time to start them all (certificates, endpoints).
    pub start_secs: f64,
    /// Restart to every agent holding the change made while they were down.
    pub all_applied_secs: f64,
    /// Restart to each agent holding it.
    pub applied: Dist,
    /// Bytes the lowest relays sent their agents on the new connections.
    pub bytes_to_agents: u64,
    /// Objects each agent holds (what a full resend would carry).
    pub objects_held: usize,
    /// Restart to the root's summary showing it everywhere (`None` when some agent
    /// never got the change).
    pub summary_secs: Option<f64>,
    /// Agents that did not get the change within the limit.
    pub missing: usize,
    /// During the storm, at every relay: connections refused before their handshake
    /// (too many handshakes at once), hellos told to come back later (too many sessions
    /// setting up), and child connections opened (a child refused and back counts again).
    #[serde(default)]
    pub refused: StormRefusals,
}

/// What admission control did during the storm (see [`Storm::refused`]).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct StormRefusals {
    /// Connections refused before their TLS handshake.
    pub handshakes: u64,
    /// Hellos refused with a time to come back.
    pub sessions: u64,
    /// Child connections opened.
    pub connections: u64,
}

/// P6: memory of the (single) process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Memory {
    /// RSS before the hierarchy.
    pub rss_start: u64,
    /// RSS with the relays up.
    pub rss_relays: u64,
    /// RSS with every agent connected and idle.
    pub rss_idle: u64,
    /// Relays including the root.
    pub relays: usize,
    /// Agents.
    pub leaves: usize,
    /// (rss_relays - rss_start) / relays.
    pub per_relay: u64,
    /// (rss_idle - rss_relays) / agents: an agent with its store and endpoint plus both
    /// ends of its connection (an upper bound for each).
    pub per_agent_with_connection: u64,
    /// RSS per extra agent whose parent never answers (endpoint, store, tasks, no
    /// connection): `per_agent_with_connection` minus this estimates both ends of one
    /// idle connection.
    pub per_agent_unconnected: u64,
}

/// Where one update's statuses were on their way to the root's summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct P3Hops {
    /// The last leaf applied the update.
    pub last_applied_ms: f64,
    /// Each relay tier, the first (below the root) first.
    pub tiers: Vec<TierHop>,
    /// The root's summary showed every leaf.
    pub root_complete_ms: f64,
}

/// When the relays of one tier pushed summaries showing all of their own leaves to their
/// parents.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierHop {
    /// Hops below the root.
    pub level: usize,
    /// Relays in the tier.
    pub relays: usize,
    /// Relays that never showed all their leaves within the bench's limit.
    pub incomplete: usize,
    /// The median relay's time (`None`: none completed).
    pub median_ms: Option<f64>,
    /// The last relay, and its time (`None`: it never completed).
    pub slowest: Option<(String, Option<f64>)>,
}

/// Figures for one hierarchy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopologyReport {
    /// "tree" or "flat hub".
    pub label: String,
    /// Its shape.
    pub fanout: Vec<usize>,
    /// Agents.
    pub leaves: usize,
    /// Payload bytes.
    pub object_bytes: usize,
    /// The object as encoded on the wire (frame included).
    pub encoded_object_bytes: usize,
    /// Agents started to every cluster known at the root.
    pub register_secs: f64,
    /// Placement and object applied to every leaf holding it (first delivery).
    pub first_delivery: Dist,
    /// P1: update applied at the root to applied at each leaf (pooled over rounds).
    pub p1: Dist,
    /// P2: bytes per tier per update.
    pub p2: Vec<TierBytes>,
    /// P3: each leaf's apply (its status change) to the root's summary showing every
    /// leaf at the new revision.
    pub p3: Dist,
    /// Bytes the root received from its children per update window.
    pub p3_root_bytes_received_per_update: u64,
    /// The root's direct children.
    pub p3_root_children: usize,
    /// Mean update window over which bytes are counted (apply to summary + 200 ms).
    pub update_window_secs: f64,
    /// Per update round: when the last leaf applied, when the slowest first-tier relay's
    /// own summary showed all its leaves, and when the root's did (ms after the apply).
    #[serde(default)]
    pub p3_hops: Vec<P3Hops>,
    /// P4a (tree only).
    pub p4: Option<Resync>,
    /// P4b.
    pub storm: Storm,
    /// P6.
    pub memory: Memory,
    /// CPU seconds per second per tier (thread group) while every agent is connected
    /// and nothing changes: keep-alives, heartbeats and timers, the floor under every
    /// other figure.
    #[serde(default)]
    pub cpu_idle_per_sec: Vec<(String, f64)>,
    /// CPU seconds per tier (thread group) during the update rounds.
    pub cpu_updates: Vec<(String, f64)>,
    /// The same fixed work timed just before the update rounds and just after them, in
    /// ms: which spell of the machine the run fell in (see `calibrate.rs`).
    #[serde(default)]
    pub calibration_ms: (f64, f64),
    /// Child connections opened at the relays and the root during the update rounds
    /// (0 while every link holds), and the root's plans meanwhile.
    #[serde(default)]
    pub updates_reconnects: u64,
    /// See `updates_reconnects`.
    #[serde(default)]
    pub updates_plans: u64,
    /// CPU seconds per tier for the whole hierarchy's life.
    pub cpu_total: Vec<(String, f64)>,
    /// CPU seconds of the process that ran this hierarchy.
    pub process_cpu_secs: f64,
    /// Peak RSS of that process.
    pub peak_rss: u64,
    /// The peak RSS of each phase (registration, first delivery, updates, resync,
    /// storm), in order.
    pub phase_peaks: Vec<(String, u64)>,
    /// UDP datagrams the kernel dropped at full receive buffers in each phase (the
    /// whole machine's count: meaningful on a quiet machine only).
    #[serde(default)]
    pub udp_drops: Vec<(String, u64)>,
}

/// The NATS baseline's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NatsReport {
    /// Every client and leafnode link ran mutual TLS.
    #[serde(default)]
    pub tls: bool,
    /// Through JetStream (durable), not core NATS.
    #[serde(default)]
    pub jetstream: bool,
    /// JetStream: publish to each leaf's acknowledgement confirmed by the server
    /// (pooled over rounds), as our statuses are counted.
    #[serde(default)]
    pub acked: Option<Dist>,
    /// `nats-server` processes.
    pub servers: usize,
    /// Subscribers.
    pub leaves: usize,
    /// Payload per message.
    pub payload_bytes: usize,
    /// Until every subscriber heard a probe (interest propagated).
    pub interest_ready_secs: f64,
    /// Publish to each subscriber's receipt (pooled over rounds).
    pub p1: Dist,
    /// RSS of all servers at the end.
    pub servers_rss: u64,
    /// CPU seconds of all servers during the rounds.
    pub servers_cpu_updates: f64,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The machine and its load.
    pub machine: String,
    /// Our hierarchy.
    pub tree: TopologyReport,
    /// The flat hub baseline.
    pub flat: Option<TopologyReport>,
    /// The NATS baseline over plaintext TCP, or why it was skipped.
    pub nats: Result<NatsReport, String>,
    /// The NATS baseline with mutual TLS on every link (P5's lower bound).
    pub nats_tls: Result<NatsReport, String>,
    /// The JetStream baseline with mutual TLS on every link (P5's durable peer).
    pub jetstream_tls: Result<NatsReport, String>,
    /// CPU seconds of the harness process that assembled the report (with the NATS
    /// subscribers; each hierarchy reports its own).
    pub process_cpu_secs: f64,
    /// Peak RSS of that process.
    pub peak_rss: u64,
}

/// One hierarchy of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Phase {
    /// Our tree of relays, shaped by `--fanout`.
    Tree,
    /// The flat hub: the root with every agent connected directly.
    Flat,
}

/// Builds, measures and stops one hierarchy in this process.
pub async fn topology(opts: &Options, phase: Phase) -> Result<TopologyReport, BenchError> {
    let leaves: usize = opts.fanout.iter().product();
    if leaves == 0 || opts.fanout.is_empty() {
        return Err(BenchError::Shape(format!(
            "fan-out {:?} has no leaves",
            opts.fanout
        )));
    }
    match phase {
        Phase::Tree => measure::topology("tree", &opts.fanout, opts, true).await,
        Phase::Flat => measure::topology("flat hub", &[leaves], opts, false).await,
    }
}

/// The NATS baseline for `opts`, carrying `payload` bytes per message, in plaintext or
/// with mutual TLS on every link, through core NATS or JetStream; `Err` says why it was
/// skipped, or how it failed.
pub async fn nats_baseline(
    opts: &Options,
    payload: usize,
    tls: bool,
    flavor: NatsFlavor,
) -> Result<Result<NatsReport, String>, BenchError> {
    let Some(choice) = &opts.nats else {
        return Ok(Err("skipped (--no-nats)".to_owned()));
    };
    let explicit = match choice {
        NatsChoice::Required(p) => p.as_deref(),
        NatsChoice::IfFound => None,
    };
    match (nats::find(explicit), choice) {
        (Some(bin), _) => match nats::run(&bin, &opts.fanout, payload, opts, (tls, flavor)).await {
            Ok(report) => Ok(Ok(report)),
            Err(e) if matches!(choice, NatsChoice::Required(_)) => Err(e),
            // A baseline that fails costs its own figures, not the whole run's (a
            // 10,000-leaf run's tree phase takes minutes): said on stderr and in the
            // report; `--require-nats` fails the run instead.
            Err(e) => {
                eprintln!("the NATS baseline failed; the run's other figures are kept: {e}");
                Ok(Err(format!("failed: {e}")))
            }
        },
        (None, NatsChoice::Required(_)) => Err(BenchError::Nats {
            detail: "nats-server not found (sim/install-nats.sh installs it)".into(),
        }),
        (None, NatsChoice::IfFound) => Ok(Err(
            "skipped: nats-server not found (sim/install-nats.sh)".to_owned(),
        )),
    }
}

/// Fails at once, rather than minutes into registration, when this process may not
/// open the sockets the tree needs: about one per agent over QUIC, two over TCP.
pub fn check_descriptors(opts: &Options) -> Result<(), BenchError> {
    let Some((limit, hard)) = procstat::open_file_limit() else {
        return Ok(());
    };
    let need = descriptors_needed(&opts.fanout, opts.transport);
    if need > limit {
        return Err(BenchError::Descriptors {
            leaves: opts.fanout.iter().product(),
            transport: opts.transport,
            need,
            limit,
            hard,
        });
    }
    Ok(())
}

/// About how many files one process running the tree holds open: one socket per agent
/// over QUIC (each parent's endpoint serves all its children), both ends of every link
/// over TCP, two per relay for its listeners, and some slack.
fn descriptors_needed(fanout: &[usize], transport: TransportMode) -> u64 {
    let leaves: usize = fanout.iter().product();
    let relays: usize = (0..fanout.len())
        .map(|tier| fanout[..tier].iter().product::<usize>())
        .sum();
    let per_link = match transport {
        TransportMode::Tcp => 2,
        TransportMode::Quic | TransportMode::Auto => 1,
    };
    let links = (leaves + relays).saturating_sub(1);
    u64::try_from(links * per_link + relays * 2 + 256).unwrap_or(u64::MAX)
}

/// The machine and its load average now: call it before the first phase starts.
pub fn machine() -> String {
    procstat::machine()
}

/// Assembles a report from the phases' figures; `machine` is [`machine`] at the start.
pub fn report(
    machine: String,
    tree: TopologyReport,
    flat: Option<TopologyReport>,
    nats: Result<NatsReport, String>,
    nats_tls: Result<NatsReport, String>,
    jetstream_tls: Result<NatsReport, String>,
) -> Report {
    Report {
        machine,
        tree,
        flat,
        nats,
        nats_tls,
        jetstream_tls,
        process_cpu_secs: procstat::process_cpu(),
        peak_rss: procstat::peak_rss_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_thousand_agents_over_tcp_need_more_files_than_over_quic() {
        let fanout = [10, 10, 100];
        // 111 nodes, 10,110 links.
        assert_eq!(
            descriptors_needed(&fanout, TransportMode::Quic),
            10_110 + 222 + 256
        );
        assert_eq!(
            descriptors_needed(&fanout, TransportMode::Tcp),
            20_220 + 222 + 256
        );
        // 3 relays in a line and 5 agents: 7 links.
        assert_eq!(
            descriptors_needed(&[1, 1, 5], TransportMode::Quic),
            7 + 6 + 256
        );
    }
}
