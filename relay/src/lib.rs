//! The relay: a node at any tier (root, regional, site). Its core routes the object log
//! to its children by placement and merges what they report; at the root it also serves
//! the user API. What it shares with the agent (the driver, the parent link, QUIC and
//! mutual TLS, the store) is the node layer, [`strata_node`].
//!
//! # Layout
//!
//! * [`api`]: the root's HTTPS user API (bearer tokens); [`api_metrics`]: its request
//!   counts and latency.
//! * [`certs`]: issuing the hierarchy's CA and node certificates (rcgen).
//! * [`client`]: the CLI's HTTPS client of the API.
//! * [`cmd`]: the command layer, the one home of `anyhow`: the `relay` command line
//!   (`cmd::Cli`, `cmd::run`), `serve` (a node from its configuration file until a
//!   signal), `up` and `demo` (a whole hierarchy as processes on this machine),
//!   `topology`, `kubeconfig`, `objects` (`relay get`, `relay delete`), `rollout`,
//!   `lifecycle` (`cordon|uncordon|drain`), `api` (the flags and errors of the commands
//!   that call the root's API), `kinds` (what a KIND argument names), `views` (the
//!   text views of the tier tree and the inventory) and `tokens` (`relay token`,
//!   `relay join-token`).
//! * [`config`]: the node configuration file, validated with every fault named.
//! * [`dns`]: the relay's authoritative DNS for its subtree's apps (issue 50).
//! * [`fleet_status`] and [`service_endpoints`]: the read-only kinds the root makes
//!   from what the clusters report (`FleetStatus`, `ServiceEndpoints`).
//! * [`identity`]: API users from x509 client certificates and OIDC ID tokens, and the
//!   roles the configuration maps them to.
//! * `http`: what the API and the metrics server share (listener, accept loop).
//! * [`join`]: agents that are not in the topology join a relay with a single-use token.
//! * [`kube`]: the Kubernetes API of each space (kubectl, client libraries), the async
//!   door (`reads/`, `writes/`, `schemas/`) over the pure crate `strata-kube-core`.
//! * [`metrics`]: Prometheus metrics, `/healthz` and `/readyz` (what readiness means).
//! * [`tier`]: the relay's tier logic: its sync core (`tier::core`), what its children
//!   reported (`tier::reports`), and `tier::runtime`: the core and its children's
//!   connections as a [`strata_node::driver::Node`]; `tier::accept`, the accept loop.
//!   (Named apart from the node layer, the crate `strata-node` in `relay/node/`.)
//! * [`placement_summary`]: a placement's `statusSummary` values at the root.
//! * [`renew`]: signing children's certificate renewals.

pub mod api;
pub mod api_metrics;
pub mod certs;
pub mod client;
pub mod cmd;
pub mod config;
pub mod dns;
pub mod fleet_status;
pub mod generation;
mod http;
pub mod identity;
pub mod join;
pub mod join_limits;
pub mod kube;
pub mod limits;
pub mod metrics;
pub mod placement_summary;
pub mod reload;
pub mod renew;
pub mod service_endpoints;
pub mod tier;
pub mod uid;
