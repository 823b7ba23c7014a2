//! The agent's configuration file (`agent run --config FILE`): which cluster, which
//! parent, which certificates, where to keep state, and the cluster backend.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use strata_node::config::{
    ConfigError, ParentConfig, RawParent, RawTls, TlsFiles, check_node_name, read_yaml,
};
use strata_protocol::model::AGENT_PROPERTY_PREFIX;

/// The backends an agent configuration may name, for messages.
pub const NAME_A_BACKEND: &str = "`kubernetes: { in_cluster: true }` (the pod's service account), `kubernetes: { kubeconfig: PATH, context: NAME }`, or `simulated: {}` (a simulated cluster, for tests and demos)";

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
    /// The cluster backend.
    pub backend: Backend,
    /// Where metrics, `/healthz` and `/readyz` are served (plain HTTP), if anywhere.
    pub metrics: Option<std::net::SocketAddr>,
}

/// Which cluster the agent keeps. The file must name one: an agent never simulates a
/// cluster unless told to.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A simulated cluster (`simulated:`), for tests and demos.
    Simulated(Simulated),
    /// A real cluster through its Kubernetes API.
    Kubernetes(Kubernetes),
}

/// How to reach a real cluster's API server.
#[derive(Debug, Clone)]
pub struct Kubernetes {
    /// How to connect.
    pub connect: crate::kubernetes::Connect,
    /// Take over fields other managers own when applying.
    pub force_conflicts: bool,
    /// How volume moves run mover pods.
    pub mover: crate::kubernetes::volumes::MoverOptions,
}

/// Joining the parent relay with a single-use token.
#[derive(Debug, Clone)]
pub struct JoinConfig {
    /// The token (a line of the relay's `nodes/<relay>/join.tokens`).
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
    #[serde(default)]
    kubernetes: Option<RawKubernetes>,
    #[serde(default)]
    metrics: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKubernetes {
    /// A kubeconfig file (relative to the configuration file); without it and without
    /// `in_cluster`, `KUBECONFIG` or `~/.kube/config`.
    #[serde(default)]
    kubeconfig: Option<PathBuf>,
    /// Use the pod's service account.
    #[serde(default)]
    in_cluster: bool,
    /// The kubeconfig's context (its current context when absent).
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    force_conflicts: Option<bool>,
    #[serde(default)]
    mover_image: Option<String>,
    #[serde(default)]
    snapshot_class: Option<String>,
    #[serde(default)]
    mover_port: Option<u16>,
    #[serde(default)]
    mover_wait_seconds: Option<u64>,
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
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        let raw: Raw = read_yaml(path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut faults = Vec::new();
        if let Err(e) = check_node_name(&raw.cluster) {
            faults.push(format!("cluster: {e}"));
        }
        let parent = raw.parent.check(&raw.cluster, &mut faults);
        match (&raw.simulated, &raw.kubernetes) {
            (Some(_), Some(_)) => faults
                .push("simulated, kubernetes: name one cluster backend, not both".to_owned()),
            (None, None) => faults.push(format!(
                "cluster {:?} names no backend: say how the agent reaches its cluster with {NAME_A_BACKEND}",
                raw.cluster
            )),
            _ => {}
        }
        if let Some(k) = &raw.kubernetes {
            if k.in_cluster && k.kubeconfig.is_some() {
                faults.push(
                    "kubernetes: kubeconfig and in_cluster: true exclude each other".to_owned(),
                );
            }
            if k.in_cluster && k.context.is_some() {
                faults.push(
                    "kubernetes: context names a kubeconfig's context; it does not go with in_cluster: true".to_owned(),
                );
            }
        }
        for key in raw.properties.keys() {
            if key.starts_with(AGENT_PROPERTY_PREFIX) {
                faults.push(format!(
                    "properties: {key:?} is reserved: properties under {AGENT_PROPERTY_PREFIX:?} are what the agent reports"
                ));
            }
        }
        let metrics = raw
            .metrics
            .as_deref()
            .and_then(|a| strata_node::config::addr("metrics", a, &mut faults));
        let data = base.join(&raw.data);
        let (tls, join) = match (raw.tls, raw.join) {
            (Some(tls), None) => (Some(tls.resolve(base, &mut faults)), None),
            (None, Some(j)) => {
                if j.token.trim().is_empty() {
                    faults.push("join.token: empty".to_owned());
                }
                let tls = TlsFiles {
                    cert: data.join(format!("{}.crt", raw.cluster)),
                    key: data.join(format!("{}.key", raw.cluster)),
                    ca: base.join(j.ca),
                    renew_at_percent: strata_node::renew::DEFAULT_RENEW_AT_PERCENT,
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
        let (Some(parent), Some(tls), true) = (parent, tls, faults.is_empty()) else {
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                faults,
            });
        };
        let backend = match (raw.kubernetes, raw.simulated) {
            (Some(k), _) => Backend::Kubernetes(Kubernetes {
                connect: match (k.kubeconfig, k.in_cluster) {
                    (Some(p), _) => crate::kubernetes::Connect::Kubeconfig {
                        path: base.join(p),
                        context: k.context,
                    },
                    (None, true) => crate::kubernetes::Connect::InCluster,
                    (None, false) => {
                        crate::kubernetes::Connect::KubeconfigFromEnv { context: k.context }
                    }
                },
                force_conflicts: k.force_conflicts.unwrap_or(true),
                mover: {
                    let d = crate::kubernetes::volumes::MoverOptions::default();
                    crate::kubernetes::volumes::MoverOptions {
                        image: k.mover_image.unwrap_or(d.image),
                        snapshot_class: k.snapshot_class,
                        port: k.mover_port.unwrap_or(d.port),
                        wait: k.mover_wait_seconds.map_or(d.wait, Duration::from_secs),
                        poll: d.poll,
                    }
                },
            }),
            (None, Some(simulated)) => Backend::Simulated(Simulated {
                ready_delay: Duration::from_millis(simulated.ready_delay_ms.unwrap_or(500)),
                fail: simulated.fail,
            }),
            // Refused above.
            (None, None) => {
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    faults,
                });
            }
        };
        Ok(AgentConfig {
            cluster: raw.cluster,
            labels: raw.labels,
            properties: raw.properties,
            parent,
            tls,
            join,
            data,
            backend,
            metrics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_node::config::{field_names, reference_example, undocumented_fields};

    const REFERENCE: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/CONFIG.md"));

    #[test]
    fn the_configuration_reference_names_every_field_and_its_example_parses() {
        let sections: &[(&str, &[&str])] = &[
            ("", field_names::<Raw>()),
            ("parent.", field_names::<RawParent>()),
            ("tls.", field_names::<RawTls>()),
            ("join.", field_names::<RawJoin>()),
            ("kubernetes.", field_names::<RawKubernetes>()),
            ("simulated.", field_names::<RawSimulated>()),
        ];
        assert!(sections[0].1.contains(&"kubernetes"), "{sections:?}");
        assert_eq!(
            undocumented_fields(REFERENCE, sections),
            Vec::<String>::new()
        );
        let config = load(&reference_example(REFERENCE, "## An agent").unwrap()).unwrap();
        assert_eq!(config.cluster, "store-0042-pos");
    }

    fn load(text: &str) -> Result<AgentConfig, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, text)?;
        Ok(AgentConfig::load(&path)?)
    }

    const BASE: &str = "cluster: leaf\nparent: { name: site, address: 127.0.0.1:7443 }\n\
                        tls: { cert: a.crt, key: a.key, ca: ca.crt }\ndata: data\n";

    #[test]
    fn the_kubernetes_section_picks_the_backend() {
        let c = load(&format!("{BASE}kubernetes: {{ kubeconfig: kc }}\n")).unwrap();
        let Backend::Kubernetes(k) = c.backend else {
            panic!("not kubernetes")
        };
        assert!(
            matches!(&k.connect, crate::kubernetes::Connect::Kubeconfig { path, context: None } if path.ends_with("kc"))
        );
        assert!(k.force_conflicts);
        let c = load(&format!(
            "{BASE}kubernetes: {{ kubeconfig: kc, context: lab-1 }}\n"
        ))
        .unwrap();
        let Backend::Kubernetes(k) = c.backend else {
            panic!("not kubernetes")
        };
        assert_eq!(
            k.connect,
            crate::kubernetes::Connect::Kubeconfig {
                path: c.data.parent().unwrap().join("kc"),
                context: Some("lab-1".into())
            }
        );
        let c = load(&format!("{BASE}kubernetes: {{ context: lab-2 }}\n")).unwrap();
        assert!(matches!(
            c.backend,
            Backend::Kubernetes(Kubernetes {
                connect: crate::kubernetes::Connect::KubeconfigFromEnv { context: Some(ref c) },
                ..
            }) if c == "lab-2"
        ));
        let c = load(&format!("{BASE}kubernetes: {{ in_cluster: true }}\n")).unwrap();
        assert!(matches!(
            c.backend,
            Backend::Kubernetes(Kubernetes {
                connect: crate::kubernetes::Connect::InCluster,
                ..
            })
        ));
        assert!(matches!(
            load(&format!("{BASE}simulated: {{}}\n")).unwrap().backend,
            Backend::Simulated(_)
        ));
    }

    #[test]
    fn a_file_without_a_backend_is_refused_naming_the_cluster_and_the_choices() {
        let e = load(BASE).unwrap_err().to_string();
        assert!(
            e.ends_with(&format!(
                "cluster \"leaf\" names no backend: say how the agent reaches its cluster with {NAME_A_BACKEND}"
            )),
            "{e}"
        );
        assert!(e.contains("agent.yaml"), "the file is named: {e}");
    }

    #[test]
    fn reserved_properties_and_a_context_in_cluster_are_refused() {
        let e = load(&format!(
            "{BASE}properties: {{ strata.dev/backend: real }}\nkubernetes: {{ in_cluster: true, context: x }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("properties: \"strata.dev/backend\" is reserved"),
            "{e}"
        );
        assert!(
            e.contains("kubernetes: context names a kubeconfig's context"),
            "{e}"
        );
    }

    #[test]
    fn conflicting_backends_are_refused_by_name() {
        let e = load(&format!(
            "{BASE}simulated: {{}}\nkubernetes: {{ in_cluster: true, kubeconfig: kc }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("name one cluster backend"), "{e}");
        assert!(e.contains("exclude each other"), "{e}");
    }

    const JOIN_BASE: &str = "cluster: store-1\nparent: { name: fr, address: \"127.0.0.1:7443\" }\ndata: data/store-1\nsimulated: {}\n";

    fn load_in(dir: &Path, extra: &str) -> anyhow::Result<AgentConfig> {
        let path = dir.join("agent.yaml");
        std::fs::write(&path, format!("{JOIN_BASE}{extra}")).unwrap();
        Ok(AgentConfig::load(&path)?)
    }

    #[test]
    fn a_joining_agent_keeps_its_certificate_in_its_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let c = load_in(d, "join: { token: abc, ca: ca.crt }\n").unwrap();
        assert_eq!(c.join.unwrap().token, "abc");
        assert_eq!(c.tls.cert, d.join("data/store-1/store-1.crt"));
        assert_eq!(c.tls.key, d.join("data/store-1/store-1.key"));
        assert_eq!(c.tls.ca, d.join("ca.crt"));
        let both = "join: { token: abc, ca: ca.crt }\ntls: { cert: a, key: b, ca: c }\n";
        let err = load_in(d, both).unwrap_err().to_string();
        assert!(err.ends_with("join: and tls: exclude each other (an agent that joins keeps its key and certificate in its data directory)"), "{err}");
        let err = load_in(d, "").unwrap_err().to_string();
        assert!(
            err.ends_with("tls: required (or join:, to join with a token)"),
            "{err}"
        );
        let err = load_in(d, "join: { token: \" \", ca: ca.crt }\n")
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("join.token: empty"), "{err}");
    }
}
