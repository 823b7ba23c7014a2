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
use crate::names::check_node_name;
use crate::{Addr, Topology};

/// Why the configs could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `ports.yaml` is not what render writes.
    #[error("{path}: {detail}")]
    Ports {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        detail: String,
    },
    /// A configuration would name what its node must not hold.
    #[error(transparent)]
    Confinement(#[from] ConfinementError),
    /// No free port could be found on an IP.
    #[error("no free port on {ip} for {what}: {source}")]
    NoPort {
        /// The IP.
        ip: IpAddr,
        /// What needed it (`center.listen`).
        what: String,
        /// Why.
        source: std::io::Error,
    },
}

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

/// What kind of process runs a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// `relay serve --config FILE`.
    Relay,
    /// `agent run --config FILE`.
    Agent,
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

/// Writes every node's configuration into its directory under `dir`.
pub fn render(
    topology: &Topology,
    dir: &Path,
    options: &RenderOptions,
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
    ports.save()?;

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
        let mut y = format!("# rendered from topology {:?}\n", topology.name);
        let _ = writeln!(y, "node: {}", r.name);
        let _ = writeln!(y, "listen: \"{listen}\"");
        if let Some(p) = &r.parent {
            y.push_str(&parent_of(p, &r.link));
        }
        y.push_str(&tls(dir, &r.name));
        let children: Vec<&str> = r
            .relays
            .iter()
            .chain(r.clusters.iter())
            .map(String::as_str)
            .collect();
        let _ = writeln!(y, "children: [{}]", children.join(", "));
        let _ = writeln!(y, "labels: {}", flow_map(&r.labels));
        if r.parent.is_none() {
            // The API's own certificate (the names clients reach it by) once `certs`
            // issued it; the node's certificate in a directory from before.
            let api_cert = files::api_cert(dir, &r.name);
            let tls = if api_cert.exists() {
                format!(
                    ", cert: {}, key: {}",
                    reference(dir, &r.name, &api_cert),
                    reference(dir, &r.name, &files::api_key(dir, &r.name))
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                y,
                "api: {{ listen: \"{api}\", tokens: {}{tls} }}",
                reference(dir, &r.name, &files::api_tokens(dir))
            );
        }
        if let Some(m) = metrics {
            let _ = writeln!(y, "metrics: \"{m}\"");
        }
        if let Some(ms) = options.summary_interval_ms {
            let _ = writeln!(y, "summary_interval_ms: {ms}");
        }
        if r.join_tokens > 0 {
            let _ = writeln!(
                y,
                "# admits agents not listed that join with one of {} single-use tokens\njoin: {{ tokens: {}, ca_cert: {}, ca_key: {}{} }}",
                r.join_tokens,
                reference(dir, &r.name, &files::join_tokens(dir, &r.name)),
                reference(dir, &r.name, &files::join_ca_cert(dir, &r.name)),
                reference(dir, &r.name, &files::join_ca_key(dir, &r.name)),
                match topology.certificates.node_days {
                    crate::certs::DEFAULT_NODE_DAYS => String::new(),
                    days => format!(", node_days: {days}"),
                },
            );
        }
        // Every relay with children signs their renewals with its intermediate CA, once
        // `certs` issued it (a directory from before has none: nothing written).
        let signing_ca = files::join_ca_cert(dir, &r.name);
        if crate::certs::signs(r) && signing_ca.exists() {
            let _ = writeln!(
                y,
                "# signs its children's certificate renewals with its intermediate CA\nrenew: {{ ca_cert: {}, ca_key: {}{} }}",
                reference(dir, &r.name, &signing_ca),
                reference(dir, &r.name, &files::join_ca_key(dir, &r.name)),
                match topology.certificates.node_days {
                    crate::certs::DEFAULT_NODE_DAYS => String::new(),
                    days => format!(", lifetime_s: {}", u64::from(days) * 86_400),
                },
            );
        }
        let path = write_config(dir, &r.name, &y, &mut written)?;
        nodes.push(NodeFile {
            name: r.name.clone(),
            process: Process::Relay,
            config: path,
            metrics,
            children: children.len(),
        });
    }
    for c in &topology.clusters {
        let mut y = format!("# rendered from topology {:?}\n", topology.name);
        let _ = writeln!(y, "cluster: {}", c.name);
        let _ = writeln!(y, "labels: {}", flow_map(&c.labels));
        if !c.properties.is_empty() {
            let _ = writeln!(y, "properties: {}", flow_map(&c.properties));
        }
        y.push_str(&parent_of(&c.parent, &c.link));
        y.push_str(&tls(dir, &c.name));
        let delay = options.simulated_ready_delay_ms;
        match (&c.backend, options.simulate_unset) {
            (Some(ClusterBackend::Simulated { ready_delay_ms }), _) => {
                simulated.push(c.name.clone());
                y.push_str(&simulated_section(ready_delay_ms.or(delay)));
            }
            (Some(b), _) => y.push_str(&backend(b)),
            (None, true) => {
                simulated.push(c.name.clone());
                y.push_str("# simulated: the topology names no backend for this cluster\n");
                y.push_str(&simulated_section(delay));
            }
            (None, false) => y.push_str(
                "# the topology names no backend for this cluster: the agent refuses to start until\n# this file says kubernetes: { in_cluster: true }, kubernetes: { kubeconfig: PATH }, or simulated: {}\n",
            ),
        }
        let path = write_config(dir, &c.name, &y, &mut written)?;
        nodes.push(NodeFile {
            name: c.name.clone(),
            process: Process::Agent,
            config: path,
            metrics: None,
            children: 0,
        });
    }
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
fn backend(b: &ClusterBackend) -> String {
    match b {
        ClusterBackend::InCluster => "kubernetes: { in_cluster: true }\n".to_owned(),
        ClusterBackend::Kubeconfig { path, context } => format!(
            "kubernetes: {{ kubeconfig: {}{} }}\n",
            quote(path),
            context
                .as_deref()
                .map(|c| format!(", context: {}", quote(c)))
                .unwrap_or_default()
        ),
        ClusterBackend::Simulated { ready_delay_ms } => simulated_section(*ready_delay_ms),
    }
}

/// The node's certificate, key, CA certificate and store: all in its own directory.
fn tls(dir: &Path, node: &str) -> String {
    format!(
        "tls: {{ cert: {}, key: {}, ca: {} }}\ndata: {}\n",
        reference(dir, node, &files::node_cert(dir, node)),
        reference(dir, node, &files::node_key(dir, node)),
        reference(dir, node, &files::node_ca_cert(dir, node)),
        reference(dir, node, &files::node_data(dir, node)),
    )
}

/// How `node`'s configuration names `path`: relative to the configuration, quoted.
fn reference(dir: &Path, node: &str, path: &Path) -> String {
    let named = files::from_node_config(dir, node, path).unwrap_or_else(|| path.to_owned());
    quote(&named.to_string_lossy())
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

fn mkdir(dir: &Path) -> Result<(), RenderError> {
    std::fs::create_dir_all(dir).map_err(|source| RenderError::Io {
        path: dir.to_owned(),
        source,
    })
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

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn write_if_changed(path: &Path, text: &str) -> Result<(PathBuf, Action), RenderError> {
    let action = match std::fs::read_to_string(path) {
        Ok(existing) if existing == text => return Ok((path.to_owned(), Action::Kept)),
        Ok(_) => Action::Replaced,
        Err(_) => Action::Created,
    };
    std::fs::write(path, text).map_err(|source| RenderError::Io {
        path: path.to_owned(),
        source,
    })?;
    Ok((path.to_owned(), action))
}

/// Ports assigned to `Addr::Auto` addresses, by `node.field`.
struct Ports {
    path: PathBuf,
    ports: BTreeMap<String, u16>,
    changed: bool,
}

impl Ports {
    fn load(dir: &Path) -> Result<Ports, RenderError> {
        let path = files::ports(dir);
        let ports = match std::fs::read_to_string(&path) {
            Ok(text) => serde_saphyr::from_str(&text).map_err(|e| RenderError::Ports {
                path: path.clone(),
                detail: e.to_string(),
            })?,
            Err(_) => BTreeMap::new(),
        };
        Ok(Ports {
            path,
            ports,
            changed: false,
        })
    }

    fn resolve(&mut self, node: &str, field: &str, a: Addr) -> Result<SocketAddr, RenderError> {
        let ip = match a {
            Addr::Fixed(a) => return Ok(a),
            Addr::Auto(ip) => ip,
        };
        let key = format!("{node}.{field}");
        if let Some(&port) = self.ports.get(&key) {
            return Ok(SocketAddr::new(ip, port));
        }
        let taken: Vec<u16> = self.ports.values().copied().collect();
        let port = unused_port(ip, &taken).map_err(|source| RenderError::NoPort {
            ip,
            what: key.clone(),
            source,
        })?;
        self.ports.insert(key, port);
        self.changed = true;
        Ok(SocketAddr::new(ip, port))
    }

    fn save(&self) -> Result<(), RenderError> {
        if !self.changed {
            return Ok(());
        }
        let mut text =
            String::from("# ports assigned by `relay topology render`; delete to reassign\n");
        for (k, p) in &self.ports {
            let _ = writeln!(text, "{k}: {p}");
        }
        std::fs::write(&self.path, text).map_err(|source| RenderError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// A port free for both UDP (QUIC) and TCP (the API, metrics) on `ip` right now, not
/// among `taken`, chosen below the kernel's ephemeral range where there is room (ports
/// 10,000 and up).
///
/// A port from the ephemeral range is free only until some socket binds port 0 (every
/// client connection, every agent's endpoint) and the kernel hands it out: a port
/// written into a node's configuration could be taken before the node starts, or
/// after it restarts. Below the range only explicit binds compete. Tried in a
/// different order in every process; without room below the range (or after 200
/// tries), the kernel's choice.
pub fn unused_port(ip: IpAddr, taken: &[u16]) -> std::io::Result<u16> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    const BASE: u16 = 10_000;
    // std's hasher keys are random per process: a seed without reading a clock.
    let seed = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    };
    let both_free = |port: u16| -> std::io::Result<u16> {
        let udp = std::net::UdpSocket::bind((ip, port))?;
        let port = udp.local_addr()?.port();
        if taken.contains(&port) {
            return Err(std::io::Error::other("a port already assigned"));
        }
        std::net::TcpListener::bind((ip, port))?;
        Ok(port)
    };
    let mut last = None;
    if low > BASE + 1_000 {
        for _ in 0..200 {
            // splitmix64 over a counter: a different candidate each try.
            let mut z = seed.wrapping_add(
                NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed),
            );
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let candidate = BASE + u16::try_from(z % u64::from(low - BASE)).unwrap_or(0);
            match both_free(candidate) {
                Ok(port) => return Ok(port),
                Err(e) => last = Some(e),
            }
        }
    }
    for _ in 0..100 {
        match both_free(0) {
            Ok(port) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("every port tried was taken")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assigned_ports_are_free_for_both_protocols_below_the_ephemeral_range_and_not_taken() {
        let ip: IpAddr = [127, 0, 0, 1].into();
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok());
        let mut taken = Vec::new();
        for _ in 0..20 {
            let port = unused_port(ip, &taken).unwrap();
            assert!(!taken.contains(&port), "{port} was given twice");
            if let Some(low) = low.filter(|l| *l > 11_000) {
                assert!((10_000..low).contains(&port), "{port} is not below {low}");
            }
            // Free for both, as the node will bind it.
            let _udp = std::net::UdpSocket::bind((ip, port)).unwrap();
            let _tcp = std::net::TcpListener::bind((ip, port)).unwrap();
            taken.push(port);
        }
        // A port held by someone else is not handed out.
        let held = std::net::UdpSocket::bind((ip, taken[0])).unwrap();
        for _ in 0..50 {
            assert_ne!(unused_port(ip, &[]).unwrap(), taken[0]);
        }
        drop(held);
    }
}
