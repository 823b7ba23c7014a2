//! The topology file as written: serde structs that refuse unknown fields. Nothing here
//! is checked beyond YAML types; [`crate::compile()`] checks everything else at once.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A whole topology document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTopology {
    /// Must be `strata.dev/v1alpha1`.
    pub api_version: String,
    /// Must be `Topology`.
    pub kind: String,
    /// The hierarchy's name.
    pub metadata: RawMetadata,
    /// The nodes.
    pub spec: RawSpec,
}

/// `metadata`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetadata {
    /// The hierarchy's name (goes into the CA's name).
    pub name: String,
}

/// `spec`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    /// The root relay (optional here so that its absence is reported with the rest).
    #[serde(default)]
    pub root: Option<RawRoot>,
    /// Relays below the root, at any depth.
    #[serde(default)]
    pub relays: Vec<RawRelay>,
    /// Leaf clusters, each run by an agent.
    #[serde(default)]
    pub clusters: Vec<RawCluster>,
    /// Where agents not listed may join with a token.
    #[serde(default)]
    pub joining: Vec<RawJoining>,
    /// How long issued certificates are valid.
    #[serde(default)]
    pub certificates: Option<RawCertificates>,
}

/// `spec.certificates`: lifetimes in days.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawCertificates {
    /// Node certificates (and what join CAs sign); a year when absent.
    #[serde(default)]
    pub node_days: Option<u32>,
    /// The CA and join CAs; ten years when absent.
    #[serde(default)]
    pub ca_days: Option<u32>,
}

/// `spec.root`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoot {
    /// Node name.
    pub name: String,
    /// QUIC listen address; `127.0.0.1:0` or absent: a port assigned when rendering.
    #[serde(default)]
    pub listen: Option<String>,
    /// The address children dial, when `listen` is a wildcard (`0.0.0.0:7443`).
    #[serde(default)]
    pub address: Option<String>,
    /// The user API: its HTTPS address (`127.0.0.1:0` or absent: assigned when
    /// rendering), or `{ listen, names }` with the DNS names and IP addresses its
    /// certificate carries.
    #[serde(default)]
    pub api: Option<RawApi>,
    /// Prometheus metrics address.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Labels every cluster inherits.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Answering DNS for the whole hierarchy's apps, and the drain of moves.
    #[serde(default)]
    pub dns: Option<RawDns>,
}

/// `dns:` of the root or a relay: an authoritative DNS server for the apps below it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDns {
    /// `IP:PORT` for UDP and TCP (`127.0.0.1:0`: a port assigned when rendering);
    /// absent: none (at the root, the drain of moves only).
    #[serde(default)]
    pub listen: Option<String>,
    /// The zone.
    pub zone: String,
    /// The answers' TTL, in seconds.
    #[serde(default, rename = "ttlSeconds")]
    pub ttl_seconds: Option<u32>,
    /// At the root: how long past a TTL a finished move's old clusters stay.
    #[serde(default, rename = "drainGraceSeconds")]
    pub drain_grace_seconds: Option<u64>,
}

/// One entry of `spec.relays`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRelay {
    /// Node name.
    pub name: String,
    /// The parent's name (a relay or the root). Optional here so a missing parent is
    /// reported as a second root, with the rest.
    #[serde(default)]
    pub parent: Option<String>,
    /// QUIC listen address; `127.0.0.1:0` or absent: a port assigned when rendering.
    #[serde(default)]
    pub listen: Option<String>,
    /// The address children dial, when `listen` is a wildcard.
    #[serde(default)]
    pub address: Option<String>,
    /// Prometheus metrics address.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Labels every cluster below inherits.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Answering DNS for the apps below it.
    #[serde(default)]
    pub dns: Option<RawDns>,
    /// How it reaches its parent: the address it dials instead of the parent's own
    /// (`host:port` allowed, resolved at every connect), e.g. a load balancer's name.
    #[serde(default, rename = "parentAddress")]
    pub parent_address: Option<String>,
    /// `auto | quic | tcp` (absent: the node's default, `auto`).
    #[serde(default)]
    pub transport: Option<String>,
    /// An HTTP CONNECT proxy for TLS/TCP, `http://user:pass@host:port`.
    #[serde(default)]
    pub proxy: Option<String>,
    /// How often a TLS/TCP link to the parent pings, in milliseconds (under the idle
    /// timeout of every proxy and balancer on the way).
    #[serde(default, rename = "keepaliveMs")]
    pub keepalive_ms: Option<u64>,
}

/// One entry of `spec.clusters`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// The cluster's (and its agent's) name.
    pub name: String,
    /// The relay it connects to.
    pub parent: String,
    /// The cluster's own labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The cluster's properties.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// How it reaches its parent: the address it dials instead of the parent's own
    /// (`host:port` allowed, resolved at every connect), e.g. a load balancer's name.
    #[serde(default, rename = "parentAddress")]
    pub parent_address: Option<String>,
    /// `auto | quic | tcp` (absent: the node's default, `auto`).
    #[serde(default)]
    pub transport: Option<String>,
    /// An HTTP CONNECT proxy for TLS/TCP, `http://user:pass@host:port`.
    #[serde(default)]
    pub proxy: Option<String>,
    /// How often a TLS/TCP link to the parent pings, in milliseconds (under the idle
    /// timeout of every proxy and balancer on the way).
    #[serde(default, rename = "keepaliveMs")]
    pub keepalive_ms: Option<u64>,
    /// How its agent reaches a real cluster's API server (one backend: this or
    /// `simulated`).
    #[serde(default)]
    pub kubernetes: Option<RawKubernetes>,
    /// A simulated cluster (tests and demos), only when said.
    #[serde(default)]
    pub simulated: Option<RawSimulated>,
    /// Where its agent serves `/metrics`, `/healthz` and `/readyz` (`IP:PORT`; `IP:0`: a
    /// port assigned when rendering).
    #[serde(default)]
    pub metrics: Option<String>,
}

/// `spec.clusters[].kubernetes`: `{ inCluster: true }`, or `{ kubeconfig: PATH,
/// context: NAME }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawKubernetes {
    /// Use the service account of the pod the agent runs in.
    #[serde(default)]
    pub in_cluster: Option<bool>,
    /// A kubeconfig file on the agent's host (relative: to the agent's configuration).
    #[serde(default)]
    pub kubeconfig: Option<String>,
    /// The kubeconfig's context to use (its current context when absent).
    #[serde(default)]
    pub context: Option<String>,
}

/// `spec.clusters[].simulated`: `{}`, or `{ readyDelayMs: N }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSimulated {
    /// How long a simulated Deployment takes to become available.
    #[serde(default)]
    pub ready_delay_ms: Option<u64>,
}

/// One entry of `spec.joining`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJoining {
    /// The relay agents join below.
    pub parent: String,
    /// How many single-use join tokens to issue.
    pub tokens: u32,
}

/// `spec.root.api`: `api: ADDR`, or `api: { listen: ADDR, names: [...] }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawApi {
    /// Only the address.
    Listen(String),
    /// The address and the names clients reach it by.
    Full(RawApiFull),
}

/// `api: { listen, names }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApiFull {
    /// The HTTPS address; absent: a loopback port assigned when rendering.
    #[serde(default)]
    pub listen: Option<String>,
    /// DNS names and IP addresses the API's certificate carries (besides the root's
    /// name, the listen IP and, on loopback, `localhost`).
    #[serde(default)]
    pub names: Vec<String>,
}
