//! `checks.stateful_move`: a stateful app (a workload, a Service, a ReadWriteOnce claim
//! named in its placement's `moveVolumes`) moves from one cluster to another while it
//! writes to its claim all the time. The check itself is in `crate::stateful_check`.
//!
//! ```yaml
//! checks:
//!   stateful_move:
//!     placement: shop
//!     workload: { group: apps, kind: Deployment, namespace: shop, name: shop }
//!     service: { kind: Service, namespace: shop, name: web }   # web.shop.<zone> in DNS
//!     claim: { claim: data, namespace: shop }
//!     from: eu-1
//!     to: us-1
//!     write_every: 100ms     # the app writes this often wherever it runs
//!     write_bytes: 512       # each write: this many bytes at the next offset
//!     resumed: true          # the copy must have been cut and resumed (passes > 1)
//! ```

use std::time::Duration;

use serde::Deserialize;
use strata_protocol::placement_spec::VolumeClaim;

use super::{ObjectRef, duration};

/// A stateful app that moves from `from` to `to`. Checked while it runs (the app's
/// writer and DNS, every `write_every`) and at the end (see `crate::stateful_check`):
/// never two writers of the claim; every acknowledged write on the cluster where the
/// app ends; DNS never names a cluster whose app is not Available, nor one that stops
/// being Available within the TTL of an answer naming it; the move finished (the app
/// and its data on `to`, nothing of it left on `from`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatefulMoveCheck {
    /// The placement that moves (in the space `default`).
    pub placement: String,
    /// The app's workload: it writes to the claim on the clusters that hold it.
    pub workload: ObjectRef,
    /// The app's Service (type LoadBalancer): `<name>.<namespace>.<zone>` in DNS.
    pub service: ObjectRef,
    /// The claim that moves with it (ReadWriteOnce).
    pub claim: VolumeClaim,
    /// The cluster it runs on before the move.
    pub from: String,
    /// The cluster it runs on after it.
    pub to: String,
    /// How often the app writes (and the writers and DNS are checked).
    #[serde(with = "duration")]
    pub write_every: Duration,
    /// Bytes per write, each at the next offset of the claim (none is overwritten).
    pub write_bytes: usize,
    /// The copy must have been cut and resumed: a pass after the first.
    #[serde(default)]
    pub resumed: bool,
}

impl StatefulMoveCheck {
    /// What is wrong with it given the scenario's topology, if anything.
    pub(crate) fn fault(&self, topology: &crate::topology::Topology) -> Option<String> {
        for c in [&self.from, &self.to] {
            if crate::topology::cluster(topology, c).is_none() {
                return Some(format!(
                    "checks.stateful_move: {c:?} is not a cluster of the topology"
                ));
            }
        }
        if self.from == self.to {
            return Some("checks.stateful_move: from and to name the same cluster".into());
        }
        if self.write_bytes == 0 || self.write_every.is_zero() {
            return Some(
                "checks.stateful_move: write_bytes and write_every must not be zero".into(),
            );
        }
        if !topology.relays.iter().any(|r| r.dns.is_some()) {
            return Some(
                "checks.stateful_move: no relay of the topology answers DNS (`dns:`)".into(),
            );
        }
        None
    }
}
