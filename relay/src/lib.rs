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
//! * [`objects`]: user manifests (any Kubernetes object, placements) into objects.
//! * [`transport`]: QUIC endpoints and framed messages, one stream per class.
//! * [`tls`]: mutual TLS (rustls, ring) and the peer's node name.
//! * [`serve`]: `relay serve`: a node from its configuration file until a signal.
//! * [`topology_cli`]: `relay topology validate|certs|render` over [`strata_topology`].
//! * [`up`]: `relay up`: a whole topology as processes on this machine.
//! * [`store`]: the durable [`store::Store`] (sled, or in memory for tests).
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
pub mod objects;
pub mod serve;
pub mod store;
pub mod tls;
pub mod topology_cli;
pub mod transport;
pub mod up;
pub mod views;

/// Logs to standard error, filtered by `RUST_LOG` (default `info`): what the `relay`
/// and `agent` binaries use.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
