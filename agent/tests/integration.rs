//! The agent's integration tests, in one test binary: each module below was a binary of
//! its own, and linking thirty binaries of the whole stack cost CI minutes. Run one
//! module with a filter, e.g. `cargo test -p strata-agent --test integration proxies::`.
//!
//! The helpers the modules share: `common` (nodes in this process or as processes,
//! proxies, balancers), `kube_fleet` (a `relay up` fleet for the real
//! Kubernetes clients of the API conformance tests), `fake_apiserver` (the fake Kubernetes API server a leaf's agent
//! drives), `tree` (a hierarchy in this process) and `etcd_cluster` (three etcd members
//! on loopback, shared with `strata-node`'s tests).

// Tests may unwrap, and the synchronous helpers that drive processes may sleep.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

mod common;
#[path = "../../relay/node/tests/etcd_cluster/mod.rs"]
mod etcd_cluster;
mod fake_apiserver;
mod kube_fleet;
mod tree;

mod ca_rotation;
mod cores;
mod debug_tunnel;
mod demo;
mod docs;
mod edge;
mod etcd_root;
mod helm_chart;
mod helm_wait;
mod hierarchy;
mod join_flood;
mod join_up;
mod joining;
mod kube_cli;
mod kube_controller;
mod kube_delete;
mod kube_watch;
mod kubectl;
mod kubectl_verbs;
mod kubernetes;
mod mixed_versions;
mod operability;
mod placements;
mod processes;
mod proxies;
mod proxy_processes;
mod python_e2e;
mod renewal;
mod replicas;
mod revocation;
mod rollout_processes;
mod rollouts;
mod start_order;
mod tiers;
mod tunnel_cap;
mod up;
