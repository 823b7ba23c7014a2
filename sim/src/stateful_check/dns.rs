//! The stateful move check's DNS side: each relay with `dns:` asked for the app's
//! Service through its own answer function, as its DNS server asks it, and what the
//! answers named, step after step ([`DnsWatch`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use strata_relay::dns::{RawDns, Zone};

use crate::check::{Violation, secs};
use crate::hosts::SimHierarchy;
use crate::scenario::ObjectRef;

/// What the relays' DNS answered, step after step: when each cluster was last named
/// (and until when a client may use that answer), and each relay's windows with no
/// address.
#[derive(Debug, Default)]
pub struct DnsWatch {
    /// Cluster → (the relay that named it last, when, until when that answer lives).
    named: BTreeMap<String, (String, Duration, Duration)>,
    /// Relay → when its current window with no address began (after it first gave
    /// one).
    empty_since: BTreeMap<String, Duration>,
    /// Relay → the longest window with no address that ended (it answered again).
    longest: BTreeMap<String, Duration>,
    /// Relays that gave an address at least once.
    answered: BTreeSet<String>,
}

/// One relay's answer at one step.
#[derive(Debug, Clone)]
pub struct DnsAnswer {
    /// The relay.
    pub relay: String,
    /// The addresses, in order.
    pub addresses: Vec<IpAddr>,
    /// The answer's TTL.
    pub ttl: Duration,
}

impl DnsWatch {
    /// Takes the answers of one step at `t`: `clusters` maps addresses to clusters,
    /// `available` are the clusters where the app is Available now. A violation when an
    /// answer names an address of no cluster, or of a cluster where the app is not
    /// Available, or when a cluster named within a TTL is no longer Available.
    pub fn observe(
        &mut self,
        t: Duration,
        answers: &[DnsAnswer],
        clusters: &BTreeMap<IpAddr, String>,
        available: &BTreeSet<String>,
        name: &str,
    ) -> Option<Violation> {
        for a in answers {
            if a.addresses.is_empty() {
                if self.answered.contains(&a.relay) {
                    self.empty_since.entry(a.relay.clone()).or_insert(t);
                }
                continue;
            }
            self.answered.insert(a.relay.clone());
            if let Some(since) = self.empty_since.remove(&a.relay) {
                let w = self.longest.entry(a.relay.clone()).or_default();
                *w = (*w).max(t - since);
            }
            for ip in &a.addresses {
                let Some(cluster) = clusters.get(ip) else {
                    return Some(Violation {
                        invariant: "DNS answers only addresses of clusters where the app is Available",
                        detail: format!(
                            "at {} {}'s DNS answers {name} with {ip}, the address of no cluster",
                            secs(t),
                            a.relay
                        ),
                    });
                };
                if !available.contains(cluster) {
                    return Some(Violation {
                        invariant: "DNS answers only addresses of clusters where the app is Available",
                        detail: format!(
                            "at {} {}'s DNS answers {name} with {ip} ({cluster}), where the app \
                             is not Available",
                            secs(t),
                            a.relay
                        ),
                    });
                }
                self.named
                    .insert(cluster.clone(), (a.relay.clone(), t, t + a.ttl));
            }
        }
        for (cluster, (relay, at, until)) in &self.named {
            if t < *until && !available.contains(cluster) {
                return Some(Violation {
                    invariant: "DNS answers only addresses of clusters where the app is Available",
                    detail: format!(
                        "{relay}'s DNS named {cluster} for {name} at {} with a TTL until {}, \
                         but at {} the app is not Available there",
                        secs(*at),
                        secs(*until),
                        secs(t)
                    ),
                });
            }
        }
        None
    }

    /// Each relay's longest window with no address that ended (once it first gave
    /// one), and since when it has had none, if its last answer had none (the app
    /// left its subtree, or the window is still open).
    pub fn windows(&self) -> BTreeMap<String, (Duration, Option<Duration>)> {
        self.answered
            .iter()
            .map(|relay| {
                let longest = self.longest.get(relay).copied().unwrap_or_default();
                (
                    relay.clone(),
                    (longest, self.empty_since.get(relay).copied()),
                )
            })
            .collect()
    }
}

/// A relay that answers DNS, as the check asks it.
pub(crate) struct DnsRelay {
    relay: String,
    zone: Zone,
    query: Vec<u8>,
}

pub(crate) fn dns_relays(hierarchy: &SimHierarchy, service: &ObjectRef) -> Vec<DnsRelay> {
    let mut out = Vec::new();
    for r in &hierarchy.topology.relays {
        let Some(d) = &r.dns else { continue };
        let raw = RawDns {
            listen: None,
            zone: d.zone.clone(),
            ttl_s: d.ttl_seconds,
            drain_grace_s: d.drain_grace_seconds,
        };
        let Some(config) = raw.check(&mut Vec::new()) else {
            continue;
        };
        let ns = service.namespace.as_deref().unwrap_or("default");
        let Ok(name) = Name::from_ascii(format!("{}.{ns}.{}", service.name, config.zone.apex))
        else {
            continue;
        };
        let mut q = Message::query();
        q.add_query(Query::query(name, RecordType::A));
        let Ok(query) = q.to_vec() else { continue };
        out.push(DnsRelay {
            relay: r.name.clone(),
            zone: config.zone,
            query,
        });
    }
    out
}

/// What `relay`'s DNS answers now (`None`: the relay is not running).
pub(crate) async fn ask_dns(hierarchy: &SimHierarchy, r: &DnsRelay) -> Option<DnsAnswer> {
    let node = hierarchy.relays.borrow().get(&r.relay).cloned()?;
    let (zone, query) = (r.zone.clone(), r.query.clone());
    let (reply, _) = node
        .query(move |core| {
            strata_relay::dns::answer::answer(&zone, &query, |k| core.dns_targets(k))
        })
        .await?;
    let reply = Message::from_vec(&reply?).ok()?;
    Some(DnsAnswer {
        relay: r.relay.clone(),
        addresses: reply
            .answers
            .iter()
            .filter_map(|rec| rec.data.to_string().parse::<IpAddr>().ok())
            .collect(),
        ttl: Duration::from_secs(u64::from(r.zone.ttl)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_naming_a_cluster_not_available_now_or_within_a_ttl_fails() {
        let eu: IpAddr = "127.1.2.3".parse().unwrap();
        let us: IpAddr = "127.4.5.6".parse().unwrap();
        let clusters: BTreeMap<IpAddr, String> =
            [(eu, "eu-1".to_owned()), (us, "us-1".to_owned())].into();
        let ms = Duration::from_millis;
        let answer = |addresses: Vec<IpAddr>| DnsAnswer {
            relay: "center".into(),
            addresses,
            ttl: Duration::from_secs(1),
        };
        let both: BTreeSet<String> = ["eu-1".to_owned(), "us-1".to_owned()].into();
        let only_us: BTreeSet<String> = ["us-1".to_owned()].into();
        let none = BTreeSet::new();
        let name = "web.shop";

        // A draining move done right: eu-1 leaves DNS, stays Available a TTL, goes.
        let mut w = DnsWatch::default();
        assert_eq!(
            w.observe(ms(0), &[answer(vec![eu])], &clusters, &both, name),
            None
        );
        assert_eq!(
            w.observe(ms(100), &[answer(vec![us])], &clusters, &both, name),
            None
        );
        assert_eq!(
            w.observe(ms(1200), &[answer(vec![us])], &clusters, &only_us, name),
            None
        );
        // No address for 300 ms, then one again.
        assert_eq!(
            w.observe(ms(1300), &[answer(vec![])], &clusters, &only_us, name),
            None
        );
        assert_eq!(
            w.observe(ms(1600), &[answer(vec![us])], &clusters, &only_us, name),
            None
        );
        assert_eq!(w.windows()["center"], (ms(300), None));
        assert_eq!(
            w.observe(ms(1700), &[answer(vec![])], &clusters, &only_us, name),
            None
        );
        assert_eq!(w.windows()["center"], (ms(300), Some(ms(1700))));

        // An address whose cluster's app is not Available now.
        let mut w = DnsWatch::default();
        let v = w
            .observe(ms(500), &[answer(vec![us])], &clusters, &none, name)
            .unwrap();
        assert_eq!(
            v.detail,
            "at 0.500s center's DNS answers web.shop with 127.4.5.6 (us-1), where the app is \
             not Available"
        );

        // Dropped at once (no drain): named at 0 s with a TTL of 1 s, gone at 0.2 s.
        let mut w = DnsWatch::default();
        assert_eq!(
            w.observe(ms(0), &[answer(vec![eu])], &clusters, &both, name),
            None
        );
        let v = w
            .observe(ms(200), &[answer(vec![us])], &clusters, &only_us, name)
            .unwrap();
        assert_eq!(
            v.detail,
            "center's DNS named eu-1 for web.shop at 0.000s with a TTL until 1.000s, but at \
             0.200s the app is not Available there"
        );

        // An address of no cluster.
        let mut w = DnsWatch::default();
        let stray: IpAddr = "10.0.0.1".parse().unwrap();
        let v = w
            .observe(ms(0), &[answer(vec![stray])], &clusters, &both, name)
            .unwrap();
        assert!(v.detail.contains("the address of no cluster"), "{v:?}");
    }
}
