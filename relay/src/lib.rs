//! The relay runtime: QUIC endpoint with mutual TLS, upstream link, downstream child
//! sessions, the durable store, routing, aggregation and the root user API.
//!
//! # Layout
//!
//! * [`certs`]: issuing the hierarchy's CA and node certificates (rcgen).
//! * [`config`]: the node configuration file, validated with every fault named.
//! * [`node`]: a node's sync core and the tasks driving it.
//! * [`objects`]: user manifests (any Kubernetes object, placements) into objects.
//! * [`transport`]: QUIC endpoints and framed messages, one stream per class.
//! * [`tls`]: mutual TLS (rustls, ring) and the peer's node name.
//! * [`store`]: the durable [`store::Store`] (sled, or in memory for tests).
//!
//! Under construction (issue 3): the protocol core it drives is
//! [`strata_protocol::sync`].

pub mod certs;
pub mod config;
pub mod node;
pub mod objects;
pub mod store;
pub mod tls;
pub mod transport;
