//! The relay runtime: QUIC endpoint with mutual TLS, upstream link, downstream child
//! sessions, the durable store, routing, aggregation and the root user API.
//!
//! # Layout
//!
//! * [`config`]: the node configuration file, validated with every fault named.
//! * [`objects`]: user manifests (any Kubernetes object, placements) into objects.
//! * [`store`]: the durable [`store::Store`] (sled, or in memory for tests).
//!
//! Under construction (issue 3): the protocol core it drives is
//! [`strata_protocol::sync`].

pub mod config;
pub mod objects;
pub mod store;
