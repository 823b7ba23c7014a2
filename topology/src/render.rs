//! Each node's configuration file from a topology, `nodes/NAME/config.yaml` (for `relay
//! serve --config` or `agent run --config`), in the node's own directory next to the
//! certificates of [`crate::certs`] (see [`crate::files`]; paths inside are relative to
//! it). Every configuration is read back before it is written and refused if it names
//! the CA key, another node's file, or a key outside the node's directory.
//!
//! Addresses the topology leaves to be assigned (`127.0.0.1:0`, or omitted) get a free
//! port on first render, kept in `ports.yaml` so that re-rendering gives the same files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::certs::Action;
use crate::compile::{ClusterBackend, ParentLink};
use crate::files::{self, ConfinementError};
use crate::helm::{self, POD_METRICS, PodNode, PodPorts};
use crate::layout::{Layout, Refs};
use crate::names::check_node_name;
pub use crate::output::{Process, RenderError};
use crate::output::{mkdir, quote, write_if_changed};
use crate::ports::Ports;
pub use crate::ports::unused_port;
use crate::systemd;
use crate::{Addr, Topology};

/// Choices the topology does not make.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// Give every relay a metrics address (assigned on its listen IP) when the topology
    /// gives none; `relay up` reads them to see that every link is connected.
    pub metrics_everywhere: bool,
    /// `summary_interval_ms` of every relay (the relay's default when `None`).
    pub summary_interval_ms: Option<u64>,
    /// How long (ms) a simulated cluster's Deployments take to become available, for
    /// the simulated clusters whose topology entry does not say (the agent's default
    /// when `None`).
    pub simulated_ready_delay_ms: Option<u64>,
    /// Render the agents of clusters the topology names no backend for with a
    /// simulated cluster (`relay up`, `relay demo`, tests). `false`: render them
    /// without a backend, so their agents refuse to start until their configuration
    /// names one.
    pub simulate_unset: bool,
}

/// One node's rendered configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFile {
    /// The node.
    pub name: String,
    /// Which binary runs it.
    pub process: Process,
    /// Its configuration file.
    pub config: PathBuf,
    /// Where its metrics are served, if anywhere.
    pub metrics: Option<SocketAddr>,
    /// How many children the topology puts below it (relays and clusters).
    pub children: usize,
    /// Where a relay answers DNS (`dns.listen`), if it does.
    pub dns: Option<SocketAddr>,
}

/// Every node's configuration, parents before children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The nodes: the root first, each relay before its children, agents last.
    pub nodes: Vec<NodeFile>,
    /// The root's name.
    pub root: String,
    /// The root's user API.
    pub api: SocketAddr,
    /// What was written or kept, per file.
    pub files: Vec<(PathBuf, Action)>,
    /// Clusters rendered simulated: said so by the topology, or named no backend
    /// there ([`RenderOptions::simulate_unset`]).
    pub simulated: Vec<String>,
}

/// What else `render` writes for each node, besides its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Helm values for `deploy/helm/strata` and the node's Secret manifest
    /// (`values.yaml`, `secret.yaml`; see [`crate::helm`]).
    Helm,
    /// The configuration directory of the node's systemd unit, and the unit (see
    /// [`crate::systemd`]).
    Systemd,
}

/// Writes every node's configuration into its directory under `dir`.
pub fn render(
    topology: &Topology,
    dir: &Path,
    options: &RenderOptions,
) -> Result<Rendered, RenderError> {
    render_for(topology, dir, options, &[])
}

/// As [`render`], and for each node what every one of `targets` needs.
pub fn render_for(
    topology: &Topology,
    dir: &Path,
    options: &RenderOptions,
    targets: &[Target],
) -> Result<Rendered, RenderError> {
    for node in topology.node_names() {
        check_node_name(node).map_err(|reason| ConfinementError::BadName {
            node: node.to_owned(),
            reason,
        })?;
    }
    mkdir(dir)?;
    let mut ports = Ports::load(dir)?;
    // Resolve every relay's addresses first: children need their parent's.
    let mut resolved: BTreeMap<&str, (SocketAddr, SocketAddr, Option<SocketAddr>)> =
        BTreeMap::new();
    for r in &topology.relays {
        let listen = ports.resolve(&r.name, "listen", r.listen)?;
        let dial = r.address.unwrap_or(listen);
        let metrics = match (r.metrics, options.metrics_everywhere) {
            (Some(m), _) => Some(ports.resolve(&r.name, "metrics", m)?),
            (None, true) => {
                let ip = match r.listen {
                    Addr::Fixed(a) if a.ip().is_unspecified() => IpAddr::from([127, 0, 0, 1]),
                    Addr::Fixed(a) => a.ip(),
                    Addr::Auto(ip) => ip,
                };
                Some(ports.resolve(&r.name, "metrics", Addr::Auto(ip))?)
            }
            (None, false) => None,
        };
        resolved.insert(&r.name, (listen, dial, metrics));
    }
    let root = topology.root();
    let api = ports.resolve(
        &root.name,
        "api",
        root.api.unwrap_or(Addr::Auto(IpAddr::from([127, 0, 0, 1]))),
    )?;

    let mut nodes = Vec::new();
    let mut written = Vec::new();
    let mut simulated = Vec::new();
    let parent_of = |name: &str, link: &ParentLink| -> String {
        let (_, dial, _) = resolved[name];
        let address = link.address.clone().unwrap_or_else(|| dial.to_string());
        let mut y = format!("parent: {{ name: {name}, address: \"{address}\"");
        if let Some(t) = &link.transport {
            let _ = write!(y, ", transport: {t}");
        }
        if let Some(p) = &link.proxy {
            let _ = write!(y, ", proxy: \"{p}\"");
        }
        if let Some(ms) = link.keepalive_ms {
            let _ = write!(y, ", keepalive_ms: {ms}");
        }
        y.push_str(" }\n");
        y
    };
    for r in &topology.relays {
        let (listen, _, metrics) = resolved[r.name.as_str()];
        let dns_listen = match r.dns.as_ref().and_then(|d| d.listen) {
            Some(a) => Some(ports.resolve(&r.name, "dns", a)?),
            None => None,
        };
        let children: Vec<&str> = r
            .relays
            .iter()
            .chain(r.clusters.iter())
            .map(String::as_str)
            .collect();
        let config = |refs: &mut Refs| -> String {
            let mut y = format!("# rendered from topology {:?}\n", topology.name);
            let _ = writeln!(y, "node: {}", r.name);
            let _ = writeln!(y, "listen: \"{listen}\"");
            if let Some(p) = &r.parent {
                y.push_str(&parent_of(p, &r.link));
            }
            y.push_str(&refs.tls());
            let _ = writeln!(y, "children: [{}]", children.join(", "));
            let _ = writeln!(y, "labels: {}", flow_map(&r.labels));
            if r.parent.is_none() {
                // The API's own certificate (the names clients reach it by) once `certs`
                // issued it; the node's certificate in a directory from before.
                let api_cert = files::api_cert(dir, &r.name);
                let tls = if api_cert.exists() {
                    format!(
                        ", cert: {}, key: {}",
                        refs.file(&api_cert),
                        refs.file(&files::api_key(dir, &r.name))
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    y,
                    "api: {{ listen: \"{api}\", tokens: {}{tls} }}",
                    refs.file(&files::api_tokens(dir))
                );
            }
            y.push_str(&refs.metrics(metrics));
            if let Some(d) = &r.dns {
                y.push_str(&dns_line(d, dns_listen));
            }
            if let Some(ms) = options.summary_interval_ms {
                let _ = writeln!(y, "summary_interval_ms: {ms}");
            }
            if r.join_tokens > 0 {
                let _ = writeln!(
                    y,
                    "# admits agents not listed that join with one of {} single-use tokens\njoin: {{ tokens: {}, ca_cert: {}, ca_key: {}{} }}",
                    r.join_tokens,
                    refs.file(&files::join_tokens(dir, &r.name)),
                    refs.file(&files::join_ca_cert(dir, &r.name)),
                    refs.file(&files::join_ca_key(dir, &r.name)),
                    match topology.certificates.node_days {
                        crate::certs::DEFAULT_NODE_DAYS => String::new(),
                        days => format!(", node_days: {days}"),
                    },
                );
            }
            // Every relay with children signs their renewals with its intermediate CA,
            // once `certs` issued it (a directory from before has none: nothing written).
            let signing_ca = files::join_ca_cert(dir, &r.name);
            if crate::certs::signs(r) && signing_ca.exists() {
                let _ = writeln!(
                    y,
                    "# signs its children's certificate renewals with its intermediate CA\nrenew: {{ ca_cert: {}, ca_key: {}{} }}",
                    refs.file(&signing_ca),
                    refs.file(&files::join_ca_key(dir, &r.name)),
                    match topology.certificates.node_days {
                        crate::certs::DEFAULT_NODE_DAYS => String::new(),
                        days => format!(", lifetime_s: {}", u64::from(days) * 86_400),
                    },
                );
            }
            y
        };
        let ports = PodPorts {
            quic: Some(listen.port()),
            api: r.parent.is_none().then_some(api.port()),
            metrics: metrics.map_or(POD_METRICS.port(), |m| m.port()),
        };
        let node = (topology.name.as_str(), r.name.as_str(), Process::Relay);
        let path = write_node(dir, node, (targets, ports), config, &mut written)?;
        nodes.push(NodeFile {
            name: r.name.clone(),
            process: Process::Relay,
            config: path,
            metrics,
            children: children.len(),
            dns: dns_listen,
        });
    }
    for c in &topology.clusters {
        let delay = options.simulated_ready_delay_ms;
        let metrics = match c.metrics {
            Some(m) => Some(ports.resolve(&c.name, "metrics", m)?),
            None => None,
        };
        let is_simulated = matches!(
            (&c.backend, options.simulate_unset),
            (Some(ClusterBackend::Simulated { .. }), _) | (None, true)
        );
        if is_simulated {
            simulated.push(c.name.clone());
        }
        let config = |refs: &mut Refs| -> String {
            let mut y = format!("# rendered from topology {:?}\n", topology.name);
            let _ = writeln!(y, "cluster: {}", c.name);
            let _ = writeln!(y, "labels: {}", flow_map(&c.labels));
            if !c.properties.is_empty() {
                let _ = writeln!(y, "properties: {}", flow_map(&c.properties));
            }
            y.push_str(&parent_of(&c.parent, &c.link));
            y.push_str(&refs.tls());
            y.push_str(&refs.metrics(metrics));
            match (&c.backend, options.simulate_unset) {
                (Some(ClusterBackend::Simulated { ready_delay_ms }), _) => {
                    y.push_str(&simulated_section(ready_delay_ms.or(delay)));
                }
                (Some(b), _) => y.push_str(&backend(b, refs)),
                (None, true) => {
                    y.push_str("# simulated: the topology names no backend for this cluster\n");
                    y.push_str(&simulated_section(delay));
                }
                (None, false) => y.push_str(
                    "# the topology names no backend for this cluster: the agent refuses to start until\n# this file says kubernetes: { in_cluster: true }, kubernetes: { kubeconfig: PATH }, or simulated: {}\n",
                ),
            }
            y
        };
        let ports = PodPorts {
            quic: None,
            api: None,
            metrics: metrics.map_or(POD_METRICS.port(), |m| m.port()),
        };
        let node = (topology.name.as_str(), c.name.as_str(), Process::Agent);
        let path = write_node(dir, node, (targets, ports), config, &mut written)?;
        nodes.push(NodeFile {
            name: c.name.clone(),
            process: Process::Agent,
            config: path,
            metrics,
            children: 0,
            dns: None,
        });
    }
    ports.save()?;
    Ok(Rendered {
        nodes,
        root: root.name.clone(),
        api,
        files: written,
        simulated,
    })
}

/// A simulated cluster's section, its Deployments available after `ms` if given.
fn simulated_section(ms: Option<u64>) -> String {
    match ms {
        Some(ms) => format!("simulated: {{ ready_delay_ms: {ms} }}\n"),
        None => "simulated: {}\n".to_owned(),
    }
}

/// A real cluster's section, as the topology names it.
fn backend(b: &ClusterBackend, refs: &mut Refs) -> String {
    match b {
        ClusterBackend::InCluster => "kubernetes: { in_cluster: true }\n".to_owned(),
        ClusterBackend::Kubeconfig { path, context } => format!(
            "kubernetes: {{ kubeconfig: {}{} }}\n",
            refs.kubeconfig(path),
            context
                .as_deref()
                .map(|c| format!(", context: {}", quote(c)))
                .unwrap_or_default()
        ),
        ClusterBackend::Simulated { ready_delay_ms } => simulated_section(*ready_delay_ms),
    }
}

/// Writes a node's configuration, built by `config` for its layout, and what each of
/// `targets` needs (with `ports`, for the chart). `node` is (topology, node, process).
fn write_node(
    dir: &Path,
    (topology, name, process): (&str, &str, Process),
    (targets, ports): (&[Target], PodPorts),
    config: impl Fn(&mut Refs) -> String,
    written: &mut Vec<(PathBuf, Action)>,
) -> Result<PathBuf, RenderError> {
    let path = write_config(
        dir,
        name,
        &config(&mut Refs::new(dir, name, Layout::Plain)),
        written,
    )?;
    for target in targets {
        match target {
            Target::Helm => {
                let mut refs = Refs::new(dir, name, Layout::Pod);
                let text = config(&mut refs);
                let node = PodNode {
                    topology,
                    name,
                    process,
                    config: &text,
                    ports,
                };
                written.extend(helm::write(dir, &node, &refs.held)?);
            }
            Target::Systemd => {
                let mut refs = Refs::new(dir, name, Layout::Host);
                let text = config(&mut refs);
                written.extend(systemd::write(dir, name, process, &text, &refs.held)?);
            }
        }
    }
    Ok(path)
}

/// Checks what `text` names, then writes it as `node`'s configuration.
fn write_config(
    dir: &Path,
    node: &str,
    text: &str,
    written: &mut Vec<(PathBuf, Action)>,
) -> Result<PathBuf, RenderError> {
    files::check_rendered(dir, node, text)?;
    mkdir(&files::node_dir(dir, node))?;
    let path = files::node_config(dir, node);
    written.push(write_if_changed(&path, text)?);
    Ok(path)
}

/// A YAML flow map with every key and value double-quoted.
fn flow_map(m: &BTreeMap<String, String>) -> String {
    let items: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{}: {}", quote(k), quote(v)))
        .collect();
    if items.is_empty() {
        return "{}".to_owned();
    }
    format!("{{ {} }}", items.join(", "))
}

/// A relay's `dns:` line, with its listen address resolved.
fn dns_line(d: &crate::Dns, listen: Option<SocketAddr>) -> String {
    let mut fields = Vec::new();
    if let Some(l) = listen {
        fields.push(format!("listen: \"{l}\""));
    }
    fields.push(format!("zone: \"{}\"", d.zone));
    if let Some(t) = d.ttl_seconds {
        fields.push(format!("ttl_s: {t}"));
    }
    if let Some(g) = d.drain_grace_seconds {
        fields.push(format!("drain_grace_s: {g}"));
    }
    format!("dns: {{ {} }}\n", fields.join(", "))
}
