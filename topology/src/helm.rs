//! What `relay topology render --helm` writes beside each node's configuration, for the
//! chart `deploy/helm/strata`: `nodes/NAME/values.yaml`, the chart's values that run
//! exactly that node (its configuration, mounted as is), and `nodes/NAME/secret.yaml`,
//! a v1 Secret holding every file that configuration names (certificate, key, CA,
//! tokens, join CA, kubeconfig).
//!
//! The pod's layout, which the configuration names relative to its own directory (so
//! that the same files, laid out the same way anywhere, run the node):
//!
//! ```text
//! /etc/strata/config/config.yaml   the `config` value (a Secret of the chart's)
//! /etc/strata/secret/KEY           the node's Secret (`existingSecret`)
//! /etc/strata/state/data           the store, on the pod's volume
//! ```

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::certs::Action;
use crate::files;
use crate::output::{Process, RenderError, quote, write_bytes_if_changed, write_if_changed};

/// Where the node's Secret is mounted, relative to the configuration's directory.
pub const SECRET_DIR: &str = "../secret";
/// The store, relative to the configuration's directory: on the pod's volume.
pub const DATA_DIR: &str = "../state/data";
/// The Secret key of a cluster's kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Where a pod serves metrics and `/healthz`, `/readyz` when the topology names no
/// address (the chart's probes need one).
pub const POD_METRICS: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    DEFAULT_METRICS_PORT,
);
const DEFAULT_METRICS_PORT: u16 = 9090;

/// The ports a node's pod listens on, for its Service and probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodPorts {
    /// Where children connect (QUIC over UDP, TLS over TCP on the same port): relays.
    pub quic: Option<u16>,
    /// The user API: the root.
    pub api: Option<u16>,
    /// Metrics, `/healthz`, `/readyz`.
    pub metrics: u16,
}

/// One node as its pod runs it.
#[derive(Debug, Clone)]
pub struct PodNode<'a> {
    /// The topology's name.
    pub topology: &'a str,
    /// The node's name.
    pub name: &'a str,
    /// Which binary runs it.
    pub process: Process,
    /// Its configuration in the pod's layout.
    pub config: &'a str,
    /// Its ports.
    pub ports: PodPorts,
}

/// The name of a node's Secret.
pub fn secret_name(node: &str) -> String {
    format!("strata-{node}")
}

/// The chart's values that run `node`.
pub fn values(node: &PodNode) -> String {
    let mut y = format!(
        "# Helm values of node {name:?} of topology {topology:?}, written by `relay topology render --helm`.\n\
         # Its Secret first (certificate, key, tokens), then the chart with these values:\n\
         #   kubectl apply -n NAMESPACE -f secret.yaml\n\
         #   helm install {name} deploy/helm/strata -n NAMESPACE -f values.yaml\n\
         # Anything else of the chart's values (service, storage, resources, affinity...)\n\
         # goes in a second values file given after this one.\n",
        name = node.name,
        topology = node.topology,
    );
    let role = match node.process {
        Process::Relay => "relay",
        Process::Agent => "agent",
    };
    let _ = writeln!(y, "role: {role}");
    let _ = writeln!(y, "node: {}", node.name);
    let _ = writeln!(y, "existingSecret: {}", secret_name(node.name));
    y.push_str("ports:\n");
    if let Some(p) = node.ports.quic {
        let _ = writeln!(y, "  quic: {p}");
    }
    if let Some(p) = node.ports.api {
        let _ = writeln!(y, "  api: {p}");
    }
    let _ = writeln!(y, "  metrics: {}", node.ports.metrics);
    y.push_str("config: |\n");
    for line in node.config.lines() {
        if line.is_empty() {
            y.push('\n');
        } else {
            let _ = writeln!(y, "  {line}");
        }
    }
    y
}

/// The Secret manifest holding `held` (key, file), each file's bytes base64-encoded.
pub fn secret(node: &str, held: &[(String, PathBuf)]) -> Result<String, RenderError> {
    let mut y = format!(
        "# The files node {node:?} names in its Helm values' configuration (relay topology render --helm).\n\
         apiVersion: v1\nkind: Secret\nmetadata:\n  name: {}\n  labels:\n    app.kubernetes.io/part-of: strata\n    strata.dev/node: {node}\ntype: Opaque\ndata:\n",
        secret_name(node)
    );
    for (key, path) in held {
        let bytes = std::fs::read(path).map_err(|source| RenderError::SecretFile {
            node: node.to_owned(),
            path: path.clone(),
            source,
        })?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
        let _ = writeln!(y, "  {}: {encoded}", quote(key));
    }
    Ok(y)
}

/// Writes `node`'s values and Secret into its directory under `dir`.
pub(crate) fn write(
    dir: &Path,
    node: &PodNode,
    held: &[(String, PathBuf)],
) -> Result<Vec<(PathBuf, Action)>, RenderError> {
    Ok(vec![
        write_if_changed(&files::node_helm_values(dir, node.name), &values(node))?,
        // It holds the node's key: its owner's only.
        write_bytes_if_changed(
            &files::node_helm_secret(dir, node.name),
            secret(node.name, held)?.as_bytes(),
            true,
        )?,
    ])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_values_carry_the_configuration_verbatim_and_the_secret_every_file_named() {
        let config = "node: eu-west\n\n# a comment\nlisten: \"0.0.0.0:7443\"\n";
        let node = PodNode {
            topology: "retail",
            name: "eu-west",
            process: Process::Relay,
            config,
            ports: PodPorts {
                quic: Some(7443),
                api: None,
                metrics: 9090,
            },
        };
        let text = values(&node);
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Values {
            role: String,
            node: String,
            existing_secret: String,
            ports: BTreeMap<String, u16>,
            config: String,
        }
        let v: Values = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(
            (v.role.as_str(), v.node.as_str(), v.existing_secret.as_str()),
            ("relay", "eu-west", "strata-eu-west")
        );
        assert_eq!(v.config, config, "{text}");
        assert_eq!(
            v.ports,
            BTreeMap::from([("quic".to_owned(), 7443), ("metrics".to_owned(), 9090)])
        );

        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("node.key");
        std::fs::write(&key, b"KEY\n").unwrap();
        let manifest = secret("eu-west", &[("node.key".to_owned(), key)]).unwrap();
        assert!(manifest.contains("name: strata-eu-west\n"), "{manifest}");
        assert!(
            manifest.contains("  \"node.key\": S0VZCg==\n"),
            "{manifest}"
        );
        let missing = secret(
            "eu-west",
            &[("ca.crt".to_owned(), dir.path().join("ca.crt"))],
        );
        let e = missing.unwrap_err().to_string();
        assert!(
            e.starts_with("node \"eu-west\": ") && e.contains("run `relay topology certs` first"),
            "{e}"
        );
    }
}
