//! The relay: a node at any tier (root, regional, site). Its core routes the object log
//! to its children by placement and merges what they report; at the root it also serves
//! the user API. What it shares with the agent (the driver, the parent link, QUIC and
//! mutual TLS, the store) is the node layer, [`strata_node`].
//!
//! # Layout
//!
//! * [`api`]: the root's HTTPS user API (bearer tokens); [`api_metrics`]: its request
//!   counts and latency.
//! * [`cli`]: the `relay` command line.
//! * [`certs`]: issuing the hierarchy's CA and node certificates (rcgen).
//! * [`client`]: the CLI's HTTPS client of the API.
//! * [`config`]: the node configuration file, validated with every fault named.
//! * [`demo`]: `relay demo`, a whole hierarchy of processes on this machine.
//! * `http`: what the API and the metrics server share (listener, accept loop).
//! * [`join`]: agents that are not in the topology join a relay with a single-use token.
//! * [`kinds`]: what the CLI's KIND argument names, from the root's discovery.
//! * [`kube`]: the Kubernetes API of each space (kubectl, client libraries), the async
//!   door (`reads/`, `writes/`, `schemas/`) over the pure crate `strata-kube-core`.
//! * [`kubeconfig_cli`]: `relay kubeconfig`.
//! * [`lifecycle`]: `relay cordon|uncordon|drain`: taints on a cluster at the root.
//! * [`rollout_cli`]: `relay rollout status|pause|resume|abort|undo`: a placement's
//!   rollout through its annotation and status.
//! * [`metrics`]: Prometheus metrics, `/healthz` and `/readyz` (what readiness means).
//! * [`tier`]: the relay's tier logic: its sync core (`tier::core`), what its children
//!   reported (`tier::reports`), and `tier::runtime`: the core and its children's
//!   connections as a [`strata_node::driver::Node`]; `tier::accept`, the accept loop.
//!   (Named apart from the node layer, the crate `strata-node` in `relay/node/`.)
//! * [`objects_cli`]: `relay get` and `relay delete KIND NAME`, with kubectl's flags.
//! * [`placement_summary`]: a placement's `statusSummary` values at the root.
//! * [`renew`]: signing children's certificate renewals.
//! * [`serve`]: `relay serve`: a node from its configuration file until a signal.
//! * [`topology_cli`]: `relay topology validate|certs|render` over [`strata_topology`].
//! * [`up`]: `relay up`: a whole topology as processes on this machine.
//! * [`views`]: the CLI's text views of the tier tree and the inventory.

pub mod api;
pub mod api_metrics;
pub mod certs;
pub mod cli;
pub mod cli_api;
pub mod client;
pub mod config;
pub mod demo;
pub mod fleet_status;
pub mod generation;
mod http;
pub mod join;
pub mod join_limits;
pub mod kinds;
pub mod kube;
pub mod kubeconfig_cli;
pub mod lifecycle;
pub mod limits;
pub mod metrics;
pub mod objects_cli;
pub mod placement_summary;
pub mod reload;
pub mod renew;
pub mod rollout_cli;
pub mod serve;
pub mod tier;
pub mod topology_cli;
pub mod uid;
pub mod up;
pub mod views;
