//! The node layer: everything a relay and an agent share. A node is a pure core (the
//! relay's `NodeCore`, the agent's `AgentCore`) driven by one [`driver::Driver`]; this
//! crate holds that driver and what it stands on.
//!
//! # Layout
//!
//! * [`driver`]: the one drive loop ([`driver::Driver`], the [`driver::Node`] trait it
//!   drives, [`driver::ParentConn`], [`driver::NodeHandle`]).
//! * [`follower`]: [`follower::ParentFollower`], the child end of the link to the
//!   parent and what the node keeps about it.
//! * [`reconnect`]: keeping the connection to the parent up (backoff, hints).
//! * [`net`]: networking, below everything else here: [`transport`] (QUIC endpoints and
//!   framed messages, one stream per class), [`link`] (a connection whichever
//!   transport carries it, [`link::Link`]), [`tcp`] (the TLS/TCP transport, the classes
//!   multiplexed with per-class credit), [`dial`] (reaching the parent: names resolved
//!   at every connect, happy eyeballs, `auto | quic | tcp`, the proxy), [`proxy`] (HTTP
//!   CONNECT proxies), [`tls`] (mutual TLS and the peer's node name), [`listener`] (a
//!   QUIC listening endpoint), and the certificate files. The root re-exports those
//!   modules under their former paths.
//! * [`tunnel`]: debug tunnel streams (a user's Kubernetes request carried down to a
//!   cluster): opening, the header, serving the parent's, per-link caps.
//! * [`volume`]: volume streams (a move's data, through the lowest common relay):
//!   opening, frames, the chunk checksum, the pump.
//! * [`renew`]: renewing this node's certificate through its parent.
//! * [`store`]: the durable [`store::Store`] (sled; etcd at a root of several
//!   replicas; in memory for tests and the simulation).
//! * [`clock`]: tokio's clock as the protocol's instants, and the wall clock.
//! * [`objects`]: user manifests (any Kubernetes object) into objects; placements.
//! * [`config`]: the `parent` and `tls` sections, names, addresses, file errors.
//! * [`join`]: the join exchange's wire, and joining a relay with a token.
//! * [`ops`]: the metrics and health listener (`/metrics`, `/healthz`, `/readyz`);
//!   [`exposition`]: the Prometheus text format and histograms;
//!   [`process_metrics`]: the process's memory, descriptors, CPU and tokio tasks, on
//!   every node's `/metrics`.
//! * [`process`]: logging, stop signals, the system's randomness (run ids, secrets).
//!
//! # Data flow
//!
//! (`ARCHITECTURE.md` at the repository's root follows the same path hop by hop.)
//!
//! An object, from a user to a cluster:
//! 1. the root's API (`relay/src/api/`, or its Kubernetes API: `relay/src/kube/writes/`)
//!    parses manifests ([`objects`]) and `NodeCore::apply_manifests`
//!    (`relay/src/tier/core/log.rs`) appends them to the object log
//!    (`protocol/src/sync/log.rs`) in one revision;
//! 2. the [`driver::Driver`] commits the log to the [`store`] before anything is sent;
//! 3. `NodeCore::transmit` drains each child's `ChildSession`
//!    (`protocol/src/sync/child_session/`), which routes by placement
//!    (`protocol/src/route.rs`) and cuts deltas or snapshots;
//! 4. frames cross the wire ([`transport`]: `protocol/src/codec.rs` framing, one QUIC
//!    stream per class);
//! 5. a relay's [`reconnect`] loop hands them to its driver, its
//!    [`follower::ParentFollower`] (`ParentLink`, `protocol/src/sync/parent_link/`)
//!    applies them to the relay's own log, and steps 2 to 4 repeat one tier down;
//! 6. an agent's follower applies them to its log, and `AgentCore`
//!    (`agent/src/core/mod.rs`) hands them to its cluster backend (`agent/src/kubernetes/`
//!    or `agent/src/simulated.rs`).
//!
//! A report, from a cluster back up:
//! 1. the backend's statuses become reports in `AgentCore::process`, queued in the
//!    link's report outbox (`protocol/src/sync/reports.rs`) and sent by
//!    `ParentLink::poll_transmit` on the reports stream;
//! 2. the relay's `ChildSession` takes them in (its events are handled in
//!    `relay/src/tier/core/children.rs`); `NodeCore` checks they lie in the child's
//!    subtree (`relay/src/tier/reports/`), stores them, and merges summaries
//!    (`relay/src/tier/core/upward.rs`, `protocol/src/summary.rs`);
//! 3. the relay pushes changed summaries, clusters and links to its own parent through
//!    its follower, and so on up to the root, whose API answers from its reports.

pub mod clock;
pub mod config;
pub mod driver;
pub mod exposition;
pub mod follower;
pub mod join;
pub mod net;
pub mod ops;
// Manifests are parsed by a crate without the runtime, which the fuzz targets use.
pub use strata_manifest::objects;
pub mod process;
pub mod process_metrics;
pub mod reconnect;
pub mod renew;
pub mod store;
pub mod tunnel;
pub mod volume;

// The networking modules under the paths they had before `net/` (other crates use them).
pub use net::{dial, link, listener, proxy, tcp, tls, transport};
