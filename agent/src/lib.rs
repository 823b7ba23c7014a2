//! The agent runtime: upstream link, cluster backends (Kubernetes API, simulated
//! cluster), local desired-state cache and status watcher.
//!
//! # Layout
//!
//! * [`backend`]: the [`backend::ClusterBackend`] trait every cluster kind implements.
//! * [`simulated`]: a simulated cluster (a fake, for demos, tests and benchmarks).
//!
//! The runtime that connects to a parent is under construction (issue 3).

pub mod backend;
pub mod simulated;
