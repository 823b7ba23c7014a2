//! Strata's system tests, in one test binary: relays and agents together, as processes
//! over real QUIC on loopback (`relay up`, `relay demo`, the binaries started one by
//! one), in this process over real sockets, or as cores wired in a tree in virtual
//! time; with the real kubectl, Helm, kube-rs and Python clients, etcd, proxies and
//! balancers. Each module below was a binary of its own once, and linking thirty
//! binaries of the whole stack cost CI minutes. Run one module with a filter, e.g.
//! `cargo test -p strata-system-tests --test system proxies::`.
//!
//! The fixtures the modules share: `common` (nodes in this process or as processes,
//! the binaries, proxies, balancers, the sample app `APP`), `kube_fleet` (a `relay up`
//! fleet for the real Kubernetes clients: the API conformance tests' and, with a
//! topology of their own, `kube_cli`'s and `kube_delete`'s) and `tree` (a
//! hierarchy of cores in this process). Two more live in `strata-test-tools`, because
//! other crates' tests use them too: `etcd_cluster` (three etcd members on loopback,
//! shared with `strata-node`'s tests) and `fake_apiserver` (the fake Kubernetes API
//! server a leaf's agent drives, shared with the agent's own tests).

// Tests may unwrap, and the synchronous helpers that drive processes may sleep.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

mod common;
mod kube_fleet;
mod tree;

mod api_durability;
mod ca_rotation;
mod cores;
mod cores_dns;
mod debug_tunnel;
mod demo;
mod dns_move;
mod docs;
mod edge;
mod etcd_root;
mod helm_chart;
mod helm_fleet;
mod helm_pod;
mod helm_wait;
mod hierarchy;
mod identity;
mod join_flood;
mod join_up;
mod joining;
mod kube_cli;
mod kube_controller;
mod kube_delete;
mod kube_watch;
mod kubectl;
mod kubectl_plugin;
mod kubectl_verbs;
mod mixed_versions;
mod operability;
mod placements;
mod processes;
mod proxies;
mod proxy_processes;
mod python_e2e;
mod real_clusters;
mod renewal;
mod replicas;
mod revocation;
mod rollout_processes;
mod rollouts;
mod start_order;
mod tiers;
mod token_reload;
mod tunnel_cap;
mod up;
mod volume_figures;
mod volume_moves;
mod volume_real;
mod volume_replicas;
mod web_ui;
