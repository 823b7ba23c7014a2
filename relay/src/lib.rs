//! The relay runtime: QUIC endpoint with mutual TLS, upstream link, downstream child
//! sessions, the durable store, routing, aggregation and the root user API.
//!
//! # Layout
//!
//! * [`api`]: the root's HTTPS user API (bearer tokens).
//! * [`cli`]: the `relay` command line.
//! * [`certs`]: issuing the hierarchy's CA and node certificates (rcgen).
//! * [`client`]: the CLI's HTTPS client of the API.
//! * [`config`]: the node configuration file, validated with every fault named.
//! * [`demo`]: `relay demo`, a whole hierarchy of processes on this machine.
//! * [`join`]: agents that are not in the topology join a relay with a single-use token.
//! * [`metrics`]: Prometheus text metrics over HTTP.
//! * [`node`]: a node's sync core and the tasks driving it.
//! * [`serve`]: `relay serve`: a node from its configuration file until a signal.
//! * [`topology_cli`]: `relay topology validate|certs|render` over [`strata_topology`].
//! * [`up`]: `relay up`: a whole topology as processes on this machine.
//! * [`views`]: the CLI's text views of the tier tree and the inventory.
//!
//! Under construction (issue 3): the protocol core it drives is
//! [`strata_protocol::sync`].

pub mod api;
pub mod certs;
pub mod cli;
pub mod client;
pub mod config;
pub mod demo;
pub mod join;
pub mod metrics;
pub mod node;
pub mod serve;
pub mod topology_cli;
pub mod up;
pub mod views;
