//! The relay runtime: QUIC endpoint with mutual TLS, upstream link, downstream child
//! sessions, the durable store, routing, aggregation and the root user API.
//!
//! Not built yet (issue 3). What exists today is the protocol core it will drive:
//! [`strata_protocol::sync`].
