//! A relay node's runtime: the sync core (no I/O) and the tasks that drive it.
//!
//! * [`core`]: [`core::NodeCore`], the sync core of one node.
//! * [`reports`]: what the node knows of its subtree from its children's reports.
//! * [`runtime`]: the core driven by the node layer's driver, with the children's
//!   connections; [`runtime::start`] starts a node.
//! * [`tunnel`]: debug tunnels: which child a cluster's tunnel goes to, and forwarding
//!   the parent's tunnel streams one tier down.
//! * [`volume`]: volume moves: volume streams forwarded, copies run at the lowest
//!   common relay, and at the root each placement's two-phase move.
//! * [`volume_replicas`]: at the root, ReadWriteMany replicas' syncs and cutovers.
//! * [`session_key`]: the key a child's session is kept under.
//! * `accept`: the listener's accept loop, one task per incoming connection.
//! * `input`: the relay's own inputs to the driver ([`runtime::RelayInput`]), and the
//!   answers some of them wait for.

mod accept;
mod client;
pub mod core;
mod input;
pub mod reach;
pub mod reports;
pub mod runtime;
pub mod session_key;
#[cfg(test)]
mod testing;
pub mod tunnel;
pub mod volume;
pub mod volume_moves;
pub mod volume_replicas;
