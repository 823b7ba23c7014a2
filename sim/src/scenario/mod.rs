//! Scenario files: a topology, a workload schedule and a fault schedule.
//!
//! ```yaml
//! topology: ../../deploy/examples/demo.yaml   # relative to this file; or the document:
//! # topology: { apiVersion: strata.dev/v1alpha1, kind: Topology, metadata: ..., spec: ... }
//! duration: 300s           # simulated time the scenario runs
//! settle: 60s              # the bound on convergence once the last fault healed
//! workload:
//!   - { at: 1s, configmaps: { count: 20, prefix: cfg, namespace: app, labels: { app: web } } }
//!   - { at: 2s, apply: "<manifests, YAML>" }
//!   - { at: 9s, delete: { kind: ConfigMap, namespace: app, name: cfg-3 } }
//!   - { at: 12s, relabel: { cluster: eu-pos-1, labels: { role: kiosk } } }
//!   - { at: 14s, relabel: { relay: eu, labels: { region: emea } } }   # restarts the relay
//! start: { within: 20s }   # each node first starts at a seeded random time in [0, 20s]
//! faults:
//!   - { at: 60s, partition: [center, eu] }          # also: partition_oneway, repair, hold, release
//!   - { at: 200s, crash: eu, keep_disk: true, restart_after: 30s }   # keep_disk: default true
//!   - { from: 0s, to: 600s, loss: 0.2, latency: 500ms, jitter: 100ms }   # optional link: [a, b]
//! checks:
//!   delta: { link: [center, eu], after: 90s, max_fraction: 0.5 }
//!   # also: available, rollout, converge_by, stateful_move (see StatefulMoveCheck)
//! ```
//!
//! The topology is compiled by `strata_topology` (see [`crate::topology`]); its errors
//! are reported with the scenario file's name. Names in faults are relays, clusters,
//! `agents` (every agent) or `*` (every host). The agents below one relay share one
//! simulated host (turmoil's cost grows with the cube of the hosts), so a fault on a
//! cluster applies to every cluster of its host.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use strata_protocol::model::{Labels, ObjectKey, ObjectKeyParts, Space};

use crate::topology::{self, Topology, TopologySource};

mod durations;
mod stateful;
pub(crate) use durations::duration;
use durations::opt_duration;
pub use durations::{DurationError, parse_duration};
pub use stateful::StatefulMoveCheck;

/// A scenario: as written, `T` is where its topology comes from; once loaded, the
/// compiled topology.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario<T = Topology> {
    /// The hierarchy.
    pub topology: T,
    /// The topology compiler's warnings (it was accepted regardless).
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// How long to simulate.
    #[serde(with = "duration")]
    pub duration: Duration,
    /// Once every fault has healed, the hierarchy must converge within this long.
    #[serde(with = "duration")]
    pub settle: Duration,
    /// The simulator's step (1 ms by default, at most 10 ms): every step visits every
    /// host and, in turmoil, every link for each host, which at a few hundred hosts is
    /// most of a run's time. A scenario of 100,000 clusters takes 5 ms.
    #[serde(default = "one_ms", with = "duration")]
    pub tick: Duration,
    /// What users do.
    #[serde(default)]
    pub workload: Vec<Workload>,
    /// What goes wrong.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// How the nodes start (by default all at once).
    #[serde(default)]
    pub start: Start,
    /// Extra checks.
    #[serde(default)]
    pub checks: Checks,
    /// How every child reaches its parent: `quic` (the default), `auto` (QUIC, TLS/TCP
    /// when QUIC cannot complete a handshake, back to QUIC when it can) or `tcp`. Not
    /// the nodes' default (`auto`): the scenarios' figures were taken over QUIC only, and
    /// a scenario about TCP says so.
    #[serde(default = "quic_only")]
    pub transport: strata_node::dial::TransportMode,
    /// Short-lived certificates, renewed over the links and recovered with a token
    /// (see [`crate::certs`]); absent: certificates that never expire, in memory.
    #[serde(default)]
    pub certificates: Option<crate::certs::Certificates>,
}

/// One workload step (exactly one action).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// When.
    #[serde(with = "duration")]
    pub at: Duration,
    /// Manifests (YAML, `---` separated) applied at the root in one revision.
    pub apply: Option<String>,
    /// Generated ConfigMaps applied at the root in one revision.
    pub configmaps: Option<ConfigMaps>,
    /// An object deleted at the root.
    pub delete: Option<ObjectRef>,
    /// A cluster's own labels replaced (its agent restarts with them).
    pub relabel: Option<Relabel>,
}

/// New labels for one cluster or relay (exactly one of the two), which restarts with
/// them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Relabel {
    /// A cluster (its agent restarts).
    pub cluster: Option<String>,
    /// A relay (it restarts; its subtree keeps running).
    pub relay: Option<String>,
    /// Its labels from now on (replacing those the topology gave it).
    pub labels: Labels,
}

impl Relabel {
    /// The node relabeled.
    pub fn node(&self) -> &str {
        self.cluster
            .as_deref()
            .or(self.relay.as_deref())
            .unwrap_or("")
    }
}

/// How the hierarchy starts. Real sites start in any order: a node may come up long
/// before or after its parent, and its children before it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Start {
    /// Each node (relay or agent) first starts at a random time in `[0, within]`,
    /// drawn from the seed; zero starts everything at once.
    #[serde(default, with = "duration")]
    pub within: Duration,
}

/// `count` ConfigMaps `prefix-0..`; applying again with another `version` changes them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigMaps {
    /// How many.
    pub count: usize,
    /// Only those from this index on (to change a part of them).
    #[serde(default)]
    pub first: usize,
    /// Name prefix.
    pub prefix: String,
    /// Namespace.
    pub namespace: String,
    /// Labels (placements select on them).
    #[serde(default)]
    pub labels: Labels,
    /// Written into the data, so that a new version is a change.
    #[serde(default)]
    pub version: u64,
    /// Bytes of filler data per object.
    #[serde(default)]
    pub size: usize,
}

/// An object by its identity (to delete, or to watch).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectRef {
    /// API group ("" for core).
    #[serde(default)]
    pub group: String,
    /// Version.
    #[serde(default = "v1")]
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// The object's key in the space `default` (where scenarios apply).
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
            space: Space::default_space(),
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        })
    }
}

fn v1() -> String {
    "v1".into()
}

fn one_ms() -> Duration {
    Duration::from_millis(1)
}

fn quic_only() -> strata_node::dial::TransportMode {
    strata_node::dial::TransportMode::Quic
}

/// One fault (exactly one action).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// When (for instant faults).
    #[serde(default, with = "opt_duration")]
    pub at: Option<Duration>,
    /// Start of a network condition.
    #[serde(default, with = "opt_duration")]
    pub from: Option<Duration>,
    /// End of a network condition.
    #[serde(default, with = "opt_duration")]
    pub to: Option<Duration>,
    /// Cut a link both ways.
    pub partition: Option<[String; 2]>,
    /// Cut a link from the first to the second only.
    pub partition_oneway: Option<[String; 2]>,
    /// Heal a link both ways.
    pub repair: Option<[String; 2]>,
    /// Hold a link's messages.
    pub hold: Option<[String; 2]>,
    /// Release held messages.
    pub release: Option<[String; 2]>,
    /// Crash a node (or `agents`).
    pub crash: Option<String>,
    /// Whether the crashed node keeps its disk.
    #[serde(default)]
    pub keep_disk: Option<bool>,
    /// When to restart it (never, if absent).
    #[serde(default, with = "opt_duration")]
    pub restart_after: Option<Duration>,
    /// Message loss rate during `from..to`.
    pub loss: Option<f64>,
    /// Latency during `from..to`.
    #[serde(default, with = "opt_duration")]
    pub latency: Option<Duration>,
    /// Jitter on top of the latency during `from..to`.
    #[serde(default, with = "opt_duration")]
    pub jitter: Option<Duration>,
    /// UDP dropped during `from..to` while TCP passes (a firewall that blocks UDP).
    pub block_udp: Option<bool>,
    /// The link a condition applies to (everywhere if absent).
    pub link: Option<[String; 2]>,
}

/// Extra checks of a scenario.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checks {
    /// Resync after a partition sends only the delta.
    pub delta: Option<DeltaCheck>,
    /// An object stays available on enough clusters (a move made before it breaks).
    pub available: Option<AvailableCheck>,
    /// A placement's rollouts keep their promises (see [`RolloutCheck`]).
    pub rollout: Option<RolloutCheck>,
    /// By this time every cluster holds what the root holds, every workload step due by
    /// then applied, although a fault is still in place (e.g. UDP blocked: TLS/TCP must
    /// carry everything).
    #[serde(default, with = "opt_duration")]
    pub converge_by: Option<Duration>,
    /// A stateful app moves between two clusters while it writes (see
    /// [`StatefulMoveCheck`]).
    pub stateful_move: Option<StatefulMoveCheck>,
}

/// A placement's rollouts, watched at every sample: no cluster outside the waves the
/// root released ever holds a revision being rolled out; a rolled-back revision leaves
/// every cluster (each back on the previous revision) before the next rollout starts;
/// a relay cut off keeps what its clusters were released before the cut and receives
/// nothing released after it while away; the last rollout ends in `outcome`. The
/// figures (wave times, time to roll back) are printed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutCheck {
    /// The placement (in the space `default`).
    pub placement: String,
    /// The object it rolls out.
    pub object: ObjectRef,
    /// How the last rollout ends: `Complete` or `RolledBack`.
    pub outcome: strata_protocol::rollout::Phase,
    /// A relay cut off from its parent during a rollout.
    #[serde(default)]
    pub cut_off: Option<CutOff>,
}

/// A relay away from `from` to `to` (the partition is a fault of the scenario).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CutOff {
    /// The relay.
    pub relay: String,
    /// When it is cut off.
    #[serde(with = "duration")]
    pub from: Duration,
    /// When it is back.
    #[serde(with = "duration")]
    pub to: Duration,
}

/// The clusters where `object` is available (held and reported `Available` by the
/// cluster) never fall below `at_least` once they first reached it, which must happen
/// by `by`. For a move, `at_least` is `min(old, new)`: the clusters the placement chose
/// before and after it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AvailableCheck {
    /// The object.
    pub object: ObjectRef,
    /// The bound.
    pub at_least: usize,
    /// When the bound must have been reached (the check is armed from then on at the
    /// latest).
    #[serde(with = "duration")]
    pub by: Duration,
}

/// Bytes from parent to child on `link` between `after` and convergence stay under
/// `max_fraction` of the bodies the child holds at the end (a full resend).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaCheck {
    /// [parent, child].
    pub link: [String; 2],
    /// When the link heals.
    #[serde(with = "duration")]
    pub after: Duration,
    /// The bound, as a fraction of a full resend.
    pub max_fraction: f64,
}

/// Why a scenario cannot be used. Every variant names the scenario file (`path`).
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // every variant names the scenario file (`path`)
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// The YAML does not match the scenario format.
    #[error("{path}: {detail}")]
    Parse { path: String, detail: String },
    /// The topology file the scenario names is unreadable or wrong.
    #[error("{path}: topology: {source}")]
    TopologyFile {
        path: String,
        /// What is wrong (naming the topology file).
        source: strata_topology::LoadError,
    },
    /// The topology embedded in the scenario is wrong; every error is listed.
    #[error("{path}: topology: {} error(s):\n  {}", errors.len(), errors.join("\n  "))]
    Topology {
        path: String,
        /// Each error, as the topology compiler names it.
        errors: Vec<String>,
    },
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Scenario::parse(&text, path)
    }

    /// Parses and checks scenario text; `path` names it in errors, and a topology file
    /// it names is found relative to `path`'s folder.
    pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let p = path.display().to_string();
        let parse = |detail: String| ScenarioError::Parse {
            path: p.clone(),
            detail,
        };
        // The parser's default budget (250,000 nodes, 1,000,000 events) guards against
        // hostile input; a scenario is ours, and one of 100,000 clusters has about five
        // nodes per cluster. Every node and event takes at least a byte of the text.
        let size = text.len().max(1_000_000);
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! { max_nodes: size, max_events: size },
        };
        let raw: Scenario<TopologySource> =
            serde_saphyr::from_str_with_options(text, options).map_err(|e| parse(e.to_string()))?;
        let checked = match raw.topology {
            TopologySource::File(file) => {
                let dir = path.parent().unwrap_or(Path::new(""));
                strata_topology::load(&dir.join(file)).map_err(|source| {
                    ScenarioError::TopologyFile {
                        path: p.clone(),
                        source,
                    }
                })?
            }
            TopologySource::Inline(raw) => match strata_topology::compile(*raw) {
                (Some(topology), d) => strata_topology::Checked {
                    topology,
                    warnings: d.warnings,
                },
                (None, d) => {
                    return Err(ScenarioError::Topology {
                        path: p,
                        errors: d.errors,
                    });
                }
            },
        };
        let s = Scenario {
            topology: checked.topology,
            warnings: checked.warnings,
            duration: raw.duration,
            settle: raw.settle,
            tick: raw.tick,
            workload: raw.workload,
            faults: raw.faults,
            start: raw.start,
            checks: raw.checks,
            transport: raw.transport,
            certificates: raw.certificates,
        };
        if s.tick < Duration::from_millis(1) || s.tick > Duration::from_millis(10) {
            return Err(parse(format!(
                "tick: {:?} is not between 1ms and 10ms",
                s.tick
            )));
        }
        if let Some(c) = &s.certificates {
            c.check(&s.topology).map_err(parse)?;
        }
        for (i, w) in s.workload.iter().enumerate() {
            let n = [
                w.apply.is_some(),
                w.configmaps.is_some(),
                w.delete.is_some(),
                w.relabel.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if n != 1 {
                return Err(parse(format!(
                    "workload[{i}]: exactly one of apply, configmaps, delete, relabel"
                )));
            }
            if let Some(r) = &w.relabel {
                match (&r.cluster, &r.relay) {
                    (Some(c), None) if topology::cluster(&s.topology, c).is_none() => {
                        return Err(parse(format!(
                            "workload[{i}]: relabel names cluster {c:?}, which is not a cluster"
                        )));
                    }
                    (None, Some(n)) if s.topology.relay(n).is_none() => {
                        return Err(parse(format!(
                            "workload[{i}]: relabel names relay {n:?}, which is not a relay"
                        )));
                    }
                    (Some(_), None) | (None, Some(_)) => {}
                    _ => {
                        return Err(parse(format!(
                            "workload[{i}]: relabel names exactly one of cluster, relay"
                        )));
                    }
                }
            }
        }
        if let Some(r) = &s.checks.rollout {
            use strata_protocol::rollout::Phase;
            if !matches!(r.outcome, Phase::Complete | Phase::RolledBack) {
                return Err(parse(
                    "checks.rollout.outcome: Complete or RolledBack".to_owned(),
                ));
            }
            if let Some(c) = &r.cut_off
                && s.topology.relay(&c.relay).is_none()
            {
                return Err(parse(format!(
                    "checks.rollout.cut_off.relay: {:?} is not a relay",
                    c.relay
                )));
            }
        }
        if let Some(fault) = s
            .checks
            .stateful_move
            .as_ref()
            .and_then(|c| c.fault(&s.topology))
        {
            return Err(parse(fault));
        }
        for (i, f) in s.faults.iter().enumerate() {
            let instant = [
                f.partition.is_some(),
                f.partition_oneway.is_some(),
                f.repair.is_some(),
                f.hold.is_some(),
                f.release.is_some(),
                f.crash.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            let condition = f.loss.is_some() || f.latency.is_some() || f.block_udp.is_some();
            match (instant, condition) {
                (1, false) if f.at.is_some() => {}
                (0, true) if f.from.is_some() && f.to.is_some() => {}
                _ => {
                    return Err(parse(format!(
                        "faults[{i}]: either `at` with one of partition, partition_oneway, \
                         repair, hold, release, crash; or `from`/`to` with loss, latency \
                         and/or block_udp"
                    )));
                }
            }
            for name in f.names() {
                if name != "agents" && name != "*" && !s.topology.node_names().any(|n| n == name) {
                    return Err(parse(format!("faults[{i}]: unknown node {name:?}")));
                }
            }
        }
        Ok(s)
    }

    /// When the last fault ends (or the last node first starts): from then on the
    /// network is healthy and every node runs.
    pub fn healed_at(&self) -> Duration {
        let faults = self
            .faults
            .iter()
            .map(|f| {
                let restart = f.at.unwrap_or_default() + f.restart_after.unwrap_or_default();
                f.to.unwrap_or_default()
                    .max(restart)
                    .max(f.at.unwrap_or_default())
            })
            .max()
            .unwrap_or_default();
        faults.max(self.start.within)
    }
}

impl Fault {
    /// The node names this fault mentions.
    pub fn names(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for pair in [
            &self.partition,
            &self.partition_oneway,
            &self.repair,
            &self.hold,
            &self.release,
            &self.link,
        ]
        .into_iter()
        .flatten()
        {
            out.extend(pair.iter().map(String::as_str));
        }
        out.extend(self.crash.as_deref());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_bad_units_are_named() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(
            parse_duration("5h")
                .unwrap_err()
                .to_string()
                .contains("unknown unit")
        );
    }

    const TINY: &str = "
topology:
  apiVersion: strata.dev/v1alpha1
  kind: Topology
  metadata: { name: tiny }
  spec:
    root: { name: c }
    relays: [ { name: r, parent: c } ]
    clusters: [ { name: k, parent: r } ]
duration: 10s
settle: 5s
";

    fn here(file: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(file)
    }

    #[test]
    fn the_step_defaults_to_a_millisecond_and_stays_within_ten() {
        let parse = |extra: &str| Scenario::parse(&format!("{TINY}{extra}"), Path::new("x.yaml"));
        assert_eq!(parse("").unwrap().tick, Duration::from_millis(1));
        assert_eq!(parse("tick: 5ms\n").unwrap().tick, Duration::from_millis(5));
        let e = parse("tick: 20ms\n").unwrap_err().to_string();
        assert!(e.contains("tick: 20ms is not between 1ms and 10ms"), "{e}");
    }

    #[test]
    fn a_fault_on_an_unknown_node_is_refused() {
        let text = format!("{TINY}faults: [ {{ at: 1s, partition: [c, nowhere] }} ]\n");
        let e = Scenario::parse(&text, Path::new("x.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.yaml: "), "{e}");
        assert!(e.contains("unknown node \"nowhere\""), "{e}");
    }

    #[test]
    fn a_stateful_move_check_names_two_clusters_and_needs_a_relay_answering_dns() {
        let check = |from: &str| {
            format!(
                "checks:\n  stateful_move: {{ placement: p, workload: {{ kind: Deployment, \
                 name: w }}, service: {{ kind: Service, name: s }}, claim: {{ claim: d, \
                 namespace: n }}, from: {from}, to: k, write_every: 100ms, write_bytes: 8 }}\n"
            )
        };
        let parse = |text: String| {
            Scenario::parse(&text, Path::new("x.yaml"))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let e = parse(format!("{TINY}{}", check("nowhere"))).unwrap_err();
        assert!(
            e.contains("\"nowhere\" is not a cluster of the topology"),
            "{e}"
        );
        let e = parse(format!("{TINY}{}", check("k"))).unwrap_err();
        assert!(e.contains("from and to name the same cluster"), "{e}");
        let two = TINY.replace(
            "clusters: [ { name: k, parent: r } ]",
            "clusters: [ { name: k, parent: r }, { name: j, parent: r } ]",
        );
        let e = parse(format!("{two}{}", check("j"))).unwrap_err();
        assert!(e.contains("no relay of the topology answers DNS"), "{e}");
        let dns = two.replace("root: { name: c }", "root: { name: c, dns: { zone: a.b } }");
        parse(format!("{dns}{}", check("j"))).unwrap();
    }

    #[test]
    fn a_relabel_names_one_cluster_or_one_relay_and_start_times_move_the_healing() {
        let parse = |w: &str| {
            Scenario::parse(&format!("{TINY}workload: [ {w} ]\n"), Path::new("x.yaml"))
                .map_err(|e| e.to_string())
        };
        let ok = parse("{ at: 1s, relabel: { relay: r, labels: { a: b } } }").unwrap();
        assert_eq!(ok.workload[0].relabel.as_ref().unwrap().node(), "r");
        let e = parse("{ at: 1s, relabel: { relay: k, labels: {} } }").unwrap_err();
        assert!(
            e.contains("relabel names relay \"k\", which is not a relay"),
            "{e}"
        );
        let e = parse("{ at: 1s, relabel: { cluster: r, labels: {} } }").unwrap_err();
        assert!(
            e.contains("relabel names cluster \"r\", which is not a cluster"),
            "{e}"
        );
        let e = parse("{ at: 1s, relabel: { cluster: k, relay: r, labels: {} } }").unwrap_err();
        assert!(e.contains("exactly one of cluster, relay"), "{e}");
        let started =
            Scenario::parse(&format!("{TINY}start: {{ within: 7s }}\n"), Path::new("x")).unwrap();
        assert_eq!(started.healed_at(), Duration::from_secs(7));
    }

    #[test]
    fn an_embedded_topology_is_compiled_and_every_error_named_with_the_scenario_file() {
        let s = Scenario::parse(TINY, Path::new("x.yaml")).unwrap();
        assert_eq!(s.topology.root().name, "c");
        // QUIC only unless the scenario says otherwise, whatever the nodes' default.
        assert_eq!(s.transport, strata_node::dial::TransportMode::Quic);
        assert_eq!(crate::topology::children_of(&s.topology, "r"), ["k"]);
        let bad = TINY
            .replace("{ name: r, parent: c }", "{ name: r, parent: nowhere }")
            .replace("strata.dev/v1alpha1", "v0");
        let e = Scenario::parse(&bad, Path::new("sim/scenarios/bad.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("sim/scenarios/bad.yaml: topology: 2 error(s)"),
            "{e}"
        );
        assert!(e.contains("apiVersion"), "{e}");
        assert!(e.contains("parent \"nowhere\" is not defined"), "{e}");
        let unknown = TINY.replace("metadata: { name: tiny }", "metadata: { name: tiny, x: 1 }");
        let e = Scenario::parse(&unknown, Path::new("x.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("x.yaml: ") && e.contains("unknown field `x`"),
            "{e}"
        );
    }

    #[test]
    fn a_topology_file_is_found_relative_to_the_scenario() {
        let text = "topology: ../../deploy/examples/demo.yaml\nduration: 10s\nsettle: 5s\n";
        let s = Scenario::parse(text, &here("scenarios/uses-demo.yaml")).unwrap();
        assert_eq!(s.topology.clusters.len(), 24);
        let c = crate::topology::cluster(&s.topology, "eu-site-1-c1").unwrap();
        let labels = crate::topology::effective_labels(&s.topology, c, &Default::default());
        let want: Labels = [("region", "eu"), ("site", "eu-site-1"), ("tier", "store")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(labels, want);
        let e = Scenario::parse(text, &here("uses-demo.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("uses-demo.yaml: topology: "), "{e}");
        assert!(e.contains("deploy/examples/demo.yaml: cannot read"), "{e}");
    }
}
