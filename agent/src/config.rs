//! The agent's configuration file (`agent run --config FILE`): which cluster, which
//! parent, which certificates, where to keep state, and the cluster backend.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use strata_relay::config::{ParentConfig, RawParent, RawTls, TlsFiles, check_node_name};

/// An agent's configuration, validated.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The cluster's name (and the agent's node name, in its certificate).
    pub cluster: String,
    /// The cluster's labels.
    pub labels: BTreeMap<String, String>,
    /// The cluster's properties.
    pub properties: BTreeMap<String, String>,
    /// The parent relay.
    pub parent: ParentConfig,
    /// Certificate files. For an agent that joins with a token: its key and chain in the
    /// data directory (written by the join), and the CA of `join.ca`.
    pub tls: TlsFiles,
    /// Joining the parent with a single-use token, when the agent has no certificate yet.
    pub join: Option<JoinConfig>,
    /// Where the desired state is kept.
    pub data: PathBuf,
    /// The simulated cluster's behaviour (the only backend today).
    pub simulated: Simulated,
}

/// Joining the parent relay with a single-use token.
#[derive(Debug, Clone)]
pub struct JoinConfig {
    /// The token (from the relay's `join/<relay>.tokens`).
    pub token: String,
}

/// How the simulated cluster behaves.
#[derive(Debug, Clone)]
pub struct Simulated {
    /// How long workloads take to become available.
    pub ready_delay: Duration,
    /// Every object fails with this reason, when set.
    pub fail: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    cluster: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
    parent: RawParent,
    #[serde(default)]
    tls: Option<RawTls>,
    #[serde(default)]
    join: Option<RawJoin>,
    data: PathBuf,
    #[serde(default)]
    simulated: Option<RawSimulated>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJoin {
    token: String,
    ca: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSimulated {
    #[serde(default)]
    ready_delay_ms: Option<u64>,
    #[serde(default)]
    fail: Option<String>,
}

impl AgentConfig {
    /// Reads and validates a configuration file; every fault names the file and field.
    pub fn load(path: &Path) -> anyhow::Result<AgentConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!(
                "{}: cannot read the configuration file: {e}",
                path.display()
            )
        })?;
        let raw: Raw = serde_saphyr::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut faults = Vec::new();
        if let Err(e) = check_node_name(&raw.cluster) {
            faults.push(format!("cluster: {e}"));
        }
        if let Err(e) = check_node_name(&raw.parent.name) {
            faults.push(format!("parent.name: {e}"));
        }
        let address: Option<SocketAddr> = raw.parent.address.parse().ok();
        if address.is_none() {
            faults.push(format!(
                "parent.address: {:?} is not an address of the form IP:PORT",
                raw.parent.address
            ));
        }
        let data = base.join(&raw.data);
        let (tls, join) = match (raw.tls, raw.join) {
            (Some(tls), None) => (Some(tls.resolve(base)), None),
            (None, Some(j)) => {
                if j.token.trim().is_empty() {
                    faults.push("join.token: empty".to_owned());
                }
                let tls = TlsFiles {
                    cert: data.join(format!("{}.crt", raw.cluster)),
                    key: data.join(format!("{}.key", raw.cluster)),
                    ca: base.join(j.ca),
                };
                (Some(tls), Some(JoinConfig { token: j.token }))
            }
            (Some(_), Some(_)) => {
                faults.push("join: and tls: exclude each other (an agent that joins keeps its key and certificate in its data directory)".to_owned());
                (None, None)
            }
            (None, None) => {
                faults.push("tls: required (or join:, to join with a token)".to_owned());
                (None, None)
            }
        };
        let (Some(address), Some(tls), true) = (address, tls, faults.is_empty()) else {
            anyhow::bail!("{}: {}", path.display(), faults.join("; "));
        };
        let simulated = raw.simulated.unwrap_or(RawSimulated {
            ready_delay_ms: None,
            fail: None,
        });
        Ok(AgentConfig {
            cluster: raw.cluster,
            labels: raw.labels,
            properties: raw.properties,
            parent: ParentConfig {
                name: raw.parent.name,
                address,
            },
            tls,
            join,
            data,
            simulated: Simulated {
                ready_delay: Duration::from_millis(simulated.ready_delay_ms.unwrap_or(500)),
                fail: simulated.fail,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str =
        "cluster: store-1\nparent: { name: fr, address: \"127.0.0.1:7443\" }\ndata: data/store-1\n";

    fn load(dir: &Path, extra: &str) -> anyhow::Result<AgentConfig> {
        let path = dir.join("agent.yaml");
        std::fs::write(&path, format!("{BASE}{extra}")).unwrap();
        AgentConfig::load(&path)
    }

    #[test]
    fn a_joining_agent_keeps_its_certificate_in_its_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let c = load(d, "join: { token: abc, ca: ca.crt }\n").unwrap();
        assert_eq!(c.join.unwrap().token, "abc");
        assert_eq!(c.tls.cert, d.join("data/store-1/store-1.crt"));
        assert_eq!(c.tls.key, d.join("data/store-1/store-1.key"));
        assert_eq!(c.tls.ca, d.join("ca.crt"));
        let both = "join: { token: abc, ca: ca.crt }\ntls: { cert: a, key: b, ca: c }\n";
        let err = load(d, both).unwrap_err().to_string();
        assert!(err.ends_with("join: and tls: exclude each other (an agent that joins keeps its key and certificate in its data directory)"), "{err}");
        let err = load(d, "").unwrap_err().to_string();
        assert!(
            err.ends_with("tls: required (or join:, to join with a token)"),
            "{err}"
        );
        let err = load(d, "join: { token: \" \", ca: ca.crt }\n")
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("join.token: empty"), "{err}");
    }
}
