//! The agent runtime: upstream link, cluster backends (Kubernetes API, simulated
//! cluster), local desired-state cache and status watcher.
//!
//! # Layout
//!
//! * [`backend`]: the [`backend::ClusterBackend`] trait every cluster kind implements.
//! * [`simulated`]: a simulated cluster (a fake, for demos, tests and benchmarks).
//! * [`kubernetes`]: the Kubernetes API backend (discovery, server-side apply, prune,
//!   drift repair, health, associated objects).
//! * [`config`]: the agent's configuration file.
//! * [`core`]: the agent's sync core (link, desired state, cluster), no I/O.
//! * [`runtime`]: the tasks that drive it.

pub mod backend;
pub mod config;
pub mod core;
pub mod kubernetes;
pub mod runtime;
pub mod simulated;
