//! Networking: a node's links to its parent and children, whichever transport carries
//! them, and reaching the parent. Nothing here knows the node's config, its store or
//! its renewal; those stand on this module.
//!
//! # Layout
//!
//! From the bottom up:
//! * [`message`]: what both transports share: [`message::WireMessage`], the stream
//!   classes and their byte counts, [`message::TransportError`], close codes;
//! * `out_queue`: a link's outgoing messages, one bounded queue per class, in one
//!   allocation that holds memory only while messages wait;
//! * [`windows`]: the debug tunnel streams' caps and windows, which both transports
//!   size their streams by;
//! * [`tls`]: mutual TLS (rustls, ring) and the peer's node name; [`cert_files`]: this
//!   node's certificate files, written durably and settled after a crash;
//! * [`resolve`]: [`resolve::ParentAddress`], names resolved at every connect, happy
//!   eyeballs; [`proxy`]: HTTP CONNECT proxies (`proxy:`, `HTTPS_PROXY`, `NO_PROXY`);
//! * [`tcp`]: the TLS/TCP transport, the classes multiplexed with per-class credit;
//! * [`link`]: a connection whichever transport carries it ([`link::Link`]);
//! * [`quic_config`]: QUIC's tuning; [`listener`]: a QUIC listening endpoint that
//!   remembers each peer's path MTU;
//! * [`transport`]: QUIC endpoints, and framed messages on one stream per class over
//!   either transport ([`transport::split`]);
//! * [`dial`]: reaching the parent: `auto | quic | tcp`, the proxy, a renewed
//!   certificate ([`dial::Connector`]).
//!
//! The crate's root re-exports [`dial`], [`link`], [`listener`], [`proxy`], [`tcp`],
//! [`tls`] and [`transport`] under their former paths (`strata_node::transport`, ...).

pub mod cert_files;
pub mod dial;
pub mod link;
pub mod listener;
pub mod message;
mod out_queue;
mod plain_udp;
pub mod proxy;
pub mod quic_config;
pub mod resolve;
pub mod tcp;
pub mod tls;
pub mod transport;
pub mod windows;
