//! Scenario files: a topology, a workload schedule and a fault schedule.
//!
//! ```yaml
//! topology: { root: { name: center }, relays: [...], clusters: [...] }
//! duration: 300s           # simulated time the scenario runs
//! settle: 60s              # the bound on convergence once the last fault healed
//! workload:
//!   - { at: 1s, configmaps: { count: 20, prefix: cfg, namespace: app, labels: { app: web } } }
//!   - { at: 2s, apply: "<manifests, YAML>" }
//!   - { at: 9s, delete: { kind: ConfigMap, namespace: app, name: cfg-3 } }
//!   - { at: 12s, relabel: { cluster: eu-pos-1, labels: { role: kiosk } } }
//! faults:
//!   - { at: 60s, partition: [center, eu] }          # also: partition_oneway, repair, hold, release
//!   - { at: 200s, crash: eu, keep_disk: true, restart_after: 30s }   # keep_disk: default true
//!   - { from: 0s, to: 600s, loss: 0.2, latency: 500ms, jitter: 100ms }   # optional link: [a, b]
//! checks:
//!   delta: { link: [center, eu], after: 90s, max_fraction: 0.5 }
//! ```
//!
//! Names in faults are relays, clusters, `agents` (every agent) or `*` (every host). The
//! agents below one relay share one simulated host (turmoil's cost grows with the cube
//! of the hosts), so a fault on a cluster applies to every cluster of its host.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use strata_protocol::model::Labels;

use crate::topology::{Topology, TopologyError};

/// A scenario as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The hierarchy.
    pub topology: Topology,
    /// How long to simulate.
    #[serde(with = "duration")]
    pub duration: Duration,
    /// Once every fault has healed, the hierarchy must converge within this long.
    #[serde(with = "duration")]
    pub settle: Duration,
    /// What users do.
    #[serde(default)]
    pub workload: Vec<Workload>,
    /// What goes wrong.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Extra checks.
    #[serde(default)]
    pub checks: Checks,
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
    pub delete: Option<DeleteSpec>,
    /// A cluster's own labels replaced (its agent restarts with them).
    pub relabel: Option<Relabel>,
}

/// New labels for one cluster.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Relabel {
    /// The cluster.
    pub cluster: String,
    /// Its labels from now on (replacing those the topology gave it).
    pub labels: Labels,
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

/// An object to delete.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteSpec {
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

fn v1() -> String {
    "v1".into()
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
    /// The link a condition applies to (everywhere if absent).
    pub link: Option<[String; 2]>,
}

/// Extra checks of a scenario.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checks {
    /// Resync after a partition sends only the delta.
    pub delta: Option<DeltaCheck>,
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

/// Why a scenario cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The YAML does not match the scenario format.
    #[error("{path}: {detail}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// The topology is wrong.
    #[error("{path}: {source}")]
    Topology {
        /// The file.
        path: String,
        /// What is wrong.
        source: TopologyError,
    },
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: p.clone(),
            source,
        })?;
        Scenario::parse(&text).map_err(|e| match e {
            ScenarioError::Parse { detail, .. } => ScenarioError::Parse { path: p, detail },
            ScenarioError::Topology { source, .. } => ScenarioError::Topology { path: p, source },
            other => other,
        })
    }

    /// Parses and checks scenario text.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let parse = |detail: String| ScenarioError::Parse {
            path: String::new(),
            detail,
        };
        let s: Scenario = serde_saphyr::from_str(text).map_err(|e| parse(e.to_string()))?;
        s.topology
            .validate()
            .map_err(|source| ScenarioError::Topology {
                path: String::new(),
                source,
            })?;
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
            if let Some(r) = &w.relabel
                && !s
                    .topology
                    .all_clusters()
                    .iter()
                    .any(|c| c.name == r.cluster)
            {
                return Err(parse(format!(
                    "workload[{i}]: relabel names {:?}, which is not a cluster",
                    r.cluster
                )));
            }
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
            let condition = f.loss.is_some() || f.latency.is_some();
            match (instant, condition) {
                (1, false) if f.at.is_some() => {}
                (0, true) if f.from.is_some() && f.to.is_some() => {}
                _ => {
                    return Err(parse(format!(
                        "faults[{i}]: either `at` with one of partition, partition_oneway, \
                         repair, hold, release, crash; or `from`/`to` with loss and/or latency"
                    )));
                }
            }
            for name in f.names() {
                if name != "agents" && name != "*" && !s.knows(name) {
                    return Err(parse(format!("faults[{i}]: unknown node {name:?}")));
                }
            }
        }
        Ok(s)
    }

    fn knows(&self, name: &str) -> bool {
        name == self.topology.root.name
            || self.topology.relays.iter().any(|r| r.name == name)
            || self.topology.all_clusters().iter().any(|c| c.name == name)
    }

    /// When the last fault ends: from then on the network is healthy.
    pub fn healed_at(&self) -> Duration {
        self.faults
            .iter()
            .map(|f| {
                let restart = f.at.unwrap_or_default() + f.restart_after.unwrap_or_default();
                f.to.unwrap_or_default()
                    .max(restart)
                    .max(f.at.unwrap_or_default())
            })
            .max()
            .unwrap_or_default()
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

/// Parses `250ms`, `3s`, `2m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .ok_or_else(|| format!("{s:?}: a duration needs a unit (ms, s, m)"))?;
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: not a number of {unit}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| super::parse_duration(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_bad_units_are_named() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5h").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn a_fault_on_an_unknown_node_is_refused() {
        let text = "
topology: { root: { name: c }, relays: [ { name: r, parent: c } ] }
duration: 10s
settle: 5s
faults: [ { at: 1s, partition: [c, nowhere] } ]
";
        let e = Scenario::parse(text).unwrap_err().to_string();
        assert!(e.contains("unknown node \"nowhere\""), "{e}");
    }
}
