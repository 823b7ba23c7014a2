//! The checked topology: relays, clusters, their addresses and links to their parents,
//! and what compiling found ([`Diagnostics`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use super::backend::{ClusterBackend, unset_warning};

/// A checked hierarchy: one root, relays whose parents exist and form a tree, clusters
/// below relays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// `metadata.name`.
    pub name: String,
    /// The root first, then every relay after its parent (breadth first, file order).
    pub relays: Vec<Relay>,
    /// The leaf clusters, in file order.
    pub clusters: Vec<Cluster>,
    /// How long issued certificates are valid (`spec.certificates`).
    pub certificates: crate::certs::Lifetimes,
}

/// An address as the topology gives it: a fixed one, or a port to be assigned on the
/// given IP (written `127.0.0.1:0`, or omitted for loopback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    /// This exact address.
    Fixed(SocketAddr),
    /// Any free port on this IP, chosen when the configs are rendered.
    Auto(IpAddr),
}

/// A relay (the root is one, with no parent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// Node name.
    pub name: String,
    /// The parent relay; `None` for the root.
    pub parent: Option<String>,
    /// Where it listens for children (QUIC).
    pub listen: Addr,
    /// The address children dial, when it differs from `listen` (a wildcard listen).
    pub address: Option<SocketAddr>,
    /// The user API (root only).
    pub api: Option<Addr>,
    /// The DNS names and IP addresses the user API's certificate carries besides the
    /// root's name and its listen address (root only; checked).
    pub api_names: Vec<String>,
    /// Prometheus metrics, if asked for.
    pub metrics: Option<Addr>,
    /// Labels every cluster below inherits.
    pub labels: BTreeMap<String, String>,
    /// Child relays, in file order.
    pub relays: Vec<String>,
    /// Child clusters, in file order.
    pub clusters: Vec<String>,
    /// Single-use join tokens to issue for agents joining below it.
    pub join_tokens: u32,
    /// How it reaches its parent (empty at the root).
    pub link: ParentLink,
    /// Its DNS server, if it has one.
    pub dns: Option<Dns>,
}

/// A relay's `dns:`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dns {
    /// Where it answers (UDP and TCP), if anywhere.
    pub listen: Option<Addr>,
    /// The zone, as written.
    pub zone: String,
    /// The TTL, in seconds.
    pub ttl_seconds: Option<u32>,
    /// The drain's grace, in seconds (root).
    pub drain_grace_seconds: Option<u64>,
}

/// How a node reaches its parent, as the topology says (checked, kept as written for
/// the node's configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParentLink {
    /// `parentAddress`: dialed instead of the parent's own address (`host:port`
    /// allowed).
    pub address: Option<String>,
    /// `transport`: `auto`, `quic` or `tcp`.
    pub transport: Option<String>,
    /// `proxy`: an `http://` CONNECT proxy for TLS/TCP.
    pub proxy: Option<String>,
    /// `keepaliveMs`: how often a TLS/TCP link pings.
    pub keepalive_ms: Option<u64>,
}

/// A leaf cluster and its agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Name of the cluster and of its agent.
    pub name: String,
    /// The relay its agent connects to.
    pub parent: String,
    /// The cluster's own labels.
    pub labels: BTreeMap<String, String>,
    /// The cluster's properties.
    pub properties: BTreeMap<String, String>,
    /// How its agent reaches its relay.
    pub link: ParentLink,
    /// How its agent reaches the cluster; `None` when the topology does not say (the
    /// rendered agent then refuses to start until its configuration names one).
    pub backend: Option<ClusterBackend>,
    /// Where its agent serves metrics and health, if the topology says.
    pub metrics: Option<Addr>,
}

/// What compiling found: errors (the topology is refused) and warnings (it is not).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// Faults, each naming the node or entry and what is wrong.
    pub errors: Vec<String>,
    /// Doubtful but usable choices.
    pub warnings: Vec<String>,
}

impl Topology {
    /// A warning naming the clusters whose backend the topology does not say, if any:
    /// what `relay topology render` writes for them refuses to start. `relay up`, `relay
    /// demo` and the simulator simulate them and need no such warning.
    pub fn unset_backend_warning(&self) -> Option<String> {
        unset_warning(
            self.clusters
                .iter()
                .filter(|c| c.backend.is_none())
                .map(|c| c.name.as_str()),
        )
    }

    /// The root relay.
    pub fn root(&self) -> &Relay {
        &self.relays[0]
    }

    /// A relay by name.
    pub fn relay(&self, name: &str) -> Option<&Relay> {
        self.relays.iter().find(|r| r.name == name)
    }

    /// Every node name (relays, then clusters).
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.relays
            .iter()
            .map(|r| r.name.as_str())
            .chain(self.clusters.iter().map(|c| c.name.as_str()))
    }
}
