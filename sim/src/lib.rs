//! Deterministic simulation (turmoil) of the real relay and agent code: scenario files,
//! invariant checkers and the `sim` command.
//!
//! # Layout
//!
//! * [`net`]: quinn over turmoil's UDP (the `AsyncUdpSocket` adapter), per-message loss
//!   and byte counters per pair of hosts.
//! * [`rng`]: the one seeded source of randomness.
//! * [`topology`]: a scenario's Topology document (named or embedded), compiled by
//!   `strata_topology`, and what the simulation derives from it.
//! * [`scenario`]: scenario files (topology, workload, faults, checks).
//! * [`certs`]: certificates checked against virtual time; short-lived ones renewed
//!   over the links and recovered with a one-time token.
//! * [`clock`]: the wall clock, a fixed origin plus simulated time.
//! * [`cluster`]: the simulated clusters as the checks see them (what each holds, its
//!   volumes).
//! * [`hosts`]: relays and agents as turmoil hosts built from factories; disks kept or
//!   lost across crashes.
//! * [`check`]: the invariant checkers.
//! * `record`: what a run writes down as it goes, shared by the fault loop and the
//!   observer.
//! * `observe`: the observer task: workload at the root, samples, checks.
//! * `rollout_check`: the rollout check: released waves, rollback, a relay cut off.
//! * [`stateful_check`]: the stateful move check: the app writing to its claim, never
//!   two writers, no acknowledged write lost, DNS naming only Available clusters.
//! * [`run`]: one simulation of one seed: faults, workload, checks, summary, trace hash.
//! * [`bench`](mod@bench): the benchmark harness (the `bench` binary): real QUIC on loopback, with
//!   flat-hub and NATS baselines.
//!
//! The `sim` binary (`src/main.rs`) runs one seed or sweeps many.

pub mod bench;
pub mod certs;
pub mod check;
pub mod clock;
pub mod cluster;
pub mod hosts;
pub mod net;
mod observe;
mod record;
pub mod rng;
mod rollout_check;
pub mod run;
pub mod scenario;
pub mod stateful_check;
pub mod topology;
