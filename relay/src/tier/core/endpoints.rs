//! Where the subtree's apps can be reached: the endpoints agents report
//! ([`ReportKey::Endpoints`](strata_protocol::wire::ReportKey::Endpoints)), per
//! placement for the root's `ServiceEndpoints`, and the addresses DNS answers with;
//! and the drain that ends a make-before-break move (`choose.rs` asks
//! [`NodeCore::drained`]).
//!
//! A relay knows its own subtree only: the clusters below it.

use std::net::IpAddr;
use std::time::Duration;

use strata_protocol::choice::Decision;
use strata_protocol::model::{Cluster, ObjectKey};
use strata_protocol::time::UnixMillis;
use strata_protocol::wire::{EndpointKind, ServiceEndpoints};

use super::{NodeCore, last_seen};

/// One cluster's endpoints for a Service or Ingress, as this node knows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEndpoints {
    /// The cluster.
    pub cluster: String,
    /// The relays from this node down to the cluster's parent: its length is how far
    /// the cluster is (nearest first).
    pub path: Vec<String>,
    /// What its agent reported.
    pub endpoints: ServiceEndpoints,
    /// Whether every link down to it is up and its agent reaches its API server.
    pub reachable: bool,
    /// Whether a move is draining it: it still holds the app, DNS leaves it out.
    pub draining: bool,
}

impl ClusterEndpoints {
    /// Whether DNS names it: Available, reachable, not draining.
    pub fn serves(&self) -> bool {
        self.endpoints.available && self.reachable && !self.draining
    }
}

/// What DNS answers for one name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsTargets {
    /// IP addresses, nearest cluster first, each once.
    pub addresses: Vec<IpAddr>,
    /// Host names (a load balancer's or an Ingress's), nearest cluster first.
    pub hosts: Vec<String>,
    /// Whether the name exists here at all (some cluster below reports it, served or
    /// not): an empty answer, not NXDOMAIN, while it moves.
    pub known: bool,
}

impl NodeCore {
    /// Sets how long a finished move's old clusters drain before they are dropped
    /// (the root's DNS `ttl` plus `drainGrace`); zero drops them at once.
    pub fn set_drain(&mut self, drain: Duration) {
        self.drain = drain;
    }

    /// The placements that place `object` here, each with the clusters below that
    /// report its endpoints and that it admits, nearest first.
    pub fn service_endpoints(&self, object: &ObjectKey) -> Vec<(String, Vec<ClusterEndpoints>)> {
        let Some(meta) = self.log.get(object).map(|o| o.meta.clone()) else {
            return Vec::new();
        };
        let links = self.reachability();
        let wall = self.wall_now();
        let reported: Vec<(&Cluster, &ServiceEndpoints)> = self
            .reports
            .endpoints_of(object)
            .filter_map(|(from, cluster, e)| Some((self.reports.cluster(&from, &cluster)?, e)))
            .collect();
        let mut out = Vec::new();
        for p in self
            .placements
            .iter()
            .filter(|p| p.space == object.space && p.selects_object(&meta))
        {
            let view = self.root_view.for_placement(p);
            let decision: Option<&Decision> = self
                .root_view
                .decisions
                .get(&(p.space.clone(), p.name.clone()));
            let mut clusters: Vec<ClusterEndpoints> = reported
                .iter()
                .filter(|(c, _)| view.selects(c))
                .map(|(c, e)| ClusterEndpoints {
                    cluster: c.name.clone(),
                    path: c.path.clone(),
                    endpoints: (*e).clone(),
                    reachable: last_seen(c, &links, wall).0,
                    draining: decision.is_some_and(|d| d.drains(&c.name)),
                })
                .collect();
            clusters.sort_by(|a, b| (a.path.len(), &a.cluster).cmp(&(b.path.len(), &b.cluster)));
            out.push((p.name.clone(), clusters));
        }
        out
    }

    /// The clusters below that still report `object`'s endpoints although no placement
    /// places it there any more: their copies are being taken away.
    pub fn endpoints_leaving(&self, object: &ObjectKey) -> Vec<(String, ServiceEndpoints)> {
        let placed: Vec<String> = self
            .service_endpoints(object)
            .into_iter()
            .flat_map(|(_, cs)| cs.into_iter().map(|c| c.cluster))
            .collect();
        self.reports
            .endpoints_of(object)
            .filter(|(_, cluster, _)| !placed.contains(cluster))
            .map(|(_, cluster, e)| (cluster, e.clone()))
            .collect()
    }

    /// What DNS answers for `object`: the addresses of the clusters where some
    /// placement places it, it is Available and reachable, and no move drains it;
    /// nearest first.
    pub fn dns_targets(&self, object: &ObjectKey) -> DnsTargets {
        let mut targets = DnsTargets::default();
        let mut served: Vec<ClusterEndpoints> = Vec::new();
        for (_, clusters) in self.service_endpoints(object) {
            targets.known |= !clusters.is_empty();
            for c in clusters {
                // Served when one placement serves it there; left out when a move
                // drains it under any other.
                if let Some(seen) = served.iter_mut().find(|s| s.cluster == c.cluster) {
                    seen.draining |= c.draining;
                } else {
                    served.push(c);
                }
            }
        }
        served.sort_by(|a, b| (a.path.len(), &a.cluster).cmp(&(b.path.len(), &b.cluster)));
        for c in served.iter().filter(|c| c.serves()) {
            for e in &c.endpoints.addresses {
                match e.address.parse::<IpAddr>() {
                    Ok(ip) if !targets.addresses.contains(&ip) => targets.addresses.push(ip),
                    Ok(_) => {}
                    // Ingress hosts are names clients already use, not targets.
                    Err(_) if e.kind == EndpointKind::IngressHost => {}
                    Err(_) if !targets.hosts.contains(&e.address) => {
                        targets.hosts.push(e.address.clone());
                    }
                    Err(_) => {}
                }
            }
        }
        targets
    }

    /// A finished move's old clusters (`decision.retiring`, the new clusters being
    /// available) drain before they are dropped: DNS leaves them out for the drain time
    /// while they keep the app. Returns whether they may be dropped now; if not, marks
    /// them draining in `decision` (since when: kept from `decided` while the same
    /// clusters drain).
    pub(super) fn drained(
        &self,
        decided: &Decision,
        decision: &mut Decision,
        wall: UnixMillis,
    ) -> bool {
        if self.drain.is_zero() {
            return true;
        }
        let same = decided.draining == decision.retiring;
        let since = match decided.draining_since {
            Some(s) if same => s,
            _ => wall.0,
        };
        let drain_ms = u64::try_from(self.drain.as_millis()).unwrap_or(u64::MAX);
        if same && wall.0 >= since.saturating_add(drain_ms) {
            return true;
        }
        decision.draining = decision.retiring.clone();
        decision.draining_since = Some(since);
        false
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::tier::core::testing::root;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|&n| n.to_owned()).collect()
    }

    /// The decision of a move whose new clusters are available: `old` retiring.
    fn settled(old: &[&str]) -> Decision {
        Decision {
            retiring: set(old),
            ..Decision::default()
        }
    }

    #[test]
    fn a_finished_move_drains_its_old_clusters_for_the_drain_time_then_drops_them() {
        let mut core = root();
        core.set_drain(Duration::from_secs(10));
        // The new clusters are available at t = 100 s: the old one starts draining.
        let mut d = settled(&["old"]);
        assert!(!core.drained(&Decision::default(), &mut d, UnixMillis(100_000)));
        assert_eq!(
            (d.draining.clone(), d.draining_since),
            (set(&["old"]), Some(100_000))
        );
        assert!(d.drains("old") && !d.drains("new"));
        // Still draining 9.999 s later (the drain's start is kept).
        let before = d.clone();
        let mut again = settled(&["old"]);
        assert!(!core.drained(&before, &mut again, UnixMillis(109_999)));
        assert_eq!(again.draining_since, Some(100_000));
        // Dropped once the drain is over.
        let mut last = settled(&["old"]);
        assert!(core.drained(&again, &mut last, UnixMillis(110_000)));
        // Another cluster joining the retiring set starts the drain again, for all.
        let mut more = settled(&["old", "older"]);
        assert!(!core.drained(&again, &mut more, UnixMillis(110_000)));
        assert_eq!(more.draining_since, Some(110_000));
        // Without a drain (a root without `dns:`), the old clusters go at once.
        core.set_drain(Duration::ZERO);
        assert!(core.drained(&Decision::default(), &mut settled(&["old"]), UnixMillis(0)));
    }

    #[test]
    fn an_older_relay_reads_a_draining_decision_and_still_admits_the_cluster() {
        // What an older relay parses: the fields it knows, the new ones ignored.
        let mut d = settled(&["old"]);
        d.draining = set(&["old"]);
        d.draining_since = Some(5);
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["draining"], serde_json::json!(["old"]));
        let mut older = json.clone();
        older.as_object_mut().unwrap().remove("draining");
        let back: Decision = serde_json::from_value(older).unwrap();
        assert!(back.admits("old", || false), "retiring: still admitted");
        let back: Decision = serde_json::from_value(json).unwrap();
        assert!(back.admits("old", || false) && back.drains("old"));
    }
}
