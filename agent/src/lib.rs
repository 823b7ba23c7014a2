//! The agent runtime: upstream link, cluster backends (Kubernetes API, simulated cluster),
//! local desired-state cache and status watcher.
//!
//! Not built yet (issues 3 and 4).
