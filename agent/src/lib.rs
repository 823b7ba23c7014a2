//! The agent: keeps one leaf cluster in the state its placements describe and reports
//! how it is doing. It stands on the node layer ([`strata_node`]: driver, parent link,
//! QUIC, TLS, store) and never links the relay's API or CLI.
//!
//! # Layout
//!
//! * [`backend`]: the [`backend::ClusterBackend`] trait every cluster kind implements.
//! * [`simulated`]: a simulated cluster (a fake, for demos, tests and benchmarks);
//!   [`simulated_api`]: its small Kubernetes API (Pods, logs, events);
//!   [`sim_volumes`]: its claims' bytes, [`sim_volumes_api`] their door in its API.
//! * [`volume`]: a volume stream's end (a move's chunks read or written here), served
//!   from a [`volume::VolumeStore`]; [`mover`]: `agent mover`, the mover pod's
//!   process that serves one mounted volume of a real cluster.
//! * [`tunnel`]: the debug tunnel's end: the parent's tunnel streams served as the
//!   cluster's Kubernetes API, with the agent's own credentials.
//! * [`kubernetes`]: the Kubernetes API backend (discovery, server-side apply, prune,
//!   drift repair, health, associated objects).
//! * [`config`]: the agent's configuration file; [`cli`]: its command line.
//! * [`core`]: the agent's sync core (link, desired state, cluster), no I/O.
//! * [`endpoints`]: where a Service or Ingress can be reached, from its manifest and
//!   status.
//! * [`customize`]: objects rendered for this cluster, user summaries evaluated on them.
//! * [`runtime`]: the core as a [`strata_node::driver::Node`] under the driver.
//! * [`ops`]: the agent's metrics, `/healthz` and `/readyz` (what readiness means).

pub mod backend;
pub mod cli;
pub mod config;
pub mod core;
pub mod customize;
pub mod endpoints;
pub mod kubernetes;
pub mod mover;
pub mod ops;
pub mod runtime;
pub mod sim_volumes;
pub mod sim_volumes_api;
pub mod simulated;
pub mod simulated_api;
pub mod tunnel;
pub mod tunnel_body;
pub mod volume;
