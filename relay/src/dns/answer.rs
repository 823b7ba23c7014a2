//! A DNS query answered from the endpoints a relay knows: no I/O, no clock. The
//! server (`mod.rs`) calls [`answer`] inside the node's turn with
//! [`NodeCore::dns_targets`](crate::tier::core::NodeCore::dns_targets) as the lookup.
//!
//! Names: `<service>.<namespace>.<zone>` is the Service `service` in namespace
//! `namespace` of the space `default`; `<service>.<namespace>.<space>.<zone>` names
//! another space. Answers, authoritative:
//! * A and AAAA: the addresses of the clusters where the app is Available and no move
//!   drains it, nearest tier first; a name whose clusters give only host names (a
//!   load balancer's `hostname`) gets one CNAME to the nearest instead.
//! * A name this relay knows (some cluster below reports it) with nothing to give
//!   now (mid-move, not yet Available), or another record type: NOERROR with no
//!   answer and the zone's SOA (negative answers are cached for the TTL).
//! * Any other name in the zone: NXDOMAIN; a name outside it: REFUSED.

use std::net::IpAddr;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{CNAME, NS, SOA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use strata_protocol::model::{ObjectKey, ObjectKeyParts, Space};

use crate::tier::core::DnsTargets;

/// What became of a query, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Answered (with records, or NOERROR with none).
    Answered,
    /// A name in the zone that does not exist.
    NxDomain,
    /// Not ours (outside the zone, not a query, more than one question).
    Refused,
    /// Not a DNS message at all: nothing is sent back.
    Dropped,
}

impl Outcome {
    /// The outcome's label in the metrics.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::NxDomain => "nxdomain",
            Outcome::Refused => "refused",
            Outcome::Dropped => "dropped",
        }
    }
}

/// The zone a relay answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    /// Its apex, lower case, fully qualified.
    pub apex: Name,
    /// The TTL of every answer, in seconds.
    pub ttl: u32,
}

/// The Service a name in the zone stands for, if it is shaped like one.
pub fn service_of(zone: &Zone, name: &Name) -> Option<ObjectKey> {
    let name = name.to_lowercase();
    if !zone.apex.zone_of(&name) {
        return None;
    }
    let extra = usize::from(name.num_labels()).checked_sub(usize::from(zone.apex.num_labels()))?;
    let labels: Vec<String> = name
        .iter()
        .take(extra)
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    let (service, namespace, space) = match labels.as_slice() {
        [s, n] => (s, n, Space::default_space()),
        [s, n, space] => (s, n, Space(space.clone())),
        _ => return None,
    };
    Some(ObjectKey::new(ObjectKeyParts {
        space,
        group: String::new(),
        version: "v1".into(),
        kind: "Service".into(),
        namespace: Some(namespace.clone()),
        name: service.clone(),
    }))
}

/// Answers one DNS message (`query`, as received): the reply's bytes (none for what
/// is not a DNS message) and what became of it.
pub fn answer(
    zone: &Zone,
    query: &[u8],
    lookup: impl FnOnce(&ObjectKey) -> DnsTargets,
) -> (Option<Vec<u8>>, Outcome) {
    let Ok(request) = Message::from_vec(query) else {
        return (None, Outcome::Dropped);
    };
    if request.metadata.message_type != MessageType::Query {
        return (None, Outcome::Dropped);
    }
    let mut reply = Message::response(request.metadata.id, request.metadata.op_code);
    reply.metadata.recursion_desired = request.metadata.recursion_desired;
    reply.add_queries(request.queries.iter().cloned());
    let outcome = respond(zone, &request, &mut reply, lookup);
    reply.metadata.response_code = match outcome {
        Outcome::Answered | Outcome::Dropped => ResponseCode::NoError,
        Outcome::NxDomain => ResponseCode::NXDomain,
        Outcome::Refused => ResponseCode::Refused,
    };
    reply.metadata.authoritative = outcome != Outcome::Refused;
    (reply.to_vec().ok(), outcome)
}

fn respond(
    zone: &Zone,
    request: &Message,
    reply: &mut Message,
    lookup: impl FnOnce(&ObjectKey) -> DnsTargets,
) -> Outcome {
    let [q] = request.queries.as_slice() else {
        return Outcome::Refused;
    };
    if request.metadata.op_code != OpCode::Query || q.query_class() != DNSClass::IN {
        return Outcome::Refused;
    }
    let name = q.name().to_lowercase();
    if !zone.apex.zone_of(&name) {
        return Outcome::Refused;
    }
    if name == zone.apex {
        match q.query_type() {
            RecordType::SOA => {
                reply.add_answer(soa(zone));
            }
            RecordType::NS => {
                reply.add_answer(Record::from_rdata(
                    zone.apex.clone(),
                    zone.ttl,
                    RData::NS(NS(zone.apex.clone())),
                ));
            }
            _ => {
                reply.authorities.push(soa(zone));
            }
        }
        return Outcome::Answered;
    }
    let Some(service) = service_of(zone, &name) else {
        return Outcome::NxDomain;
    };
    let targets = lookup(&service);
    if !targets.known {
        return Outcome::NxDomain;
    }
    let want = q.query_type();
    let records: Vec<Record> = targets
        .addresses
        .iter()
        .filter(|ip| match ip {
            IpAddr::V4(_) => matches!(want, RecordType::A | RecordType::ANY),
            IpAddr::V6(_) => matches!(want, RecordType::AAAA | RecordType::ANY),
        })
        .map(|ip| Record::from_rdata(q.name().clone(), zone.ttl, RData::from(*ip)))
        .collect();
    if !records.is_empty() {
        reply.add_answers(records);
    } else if let Some(host) = targets
        .hosts
        .first()
        .filter(|_| targets.addresses.is_empty())
        .and_then(|h| Name::from_ascii(format!("{}.", h.trim_end_matches('.'))).ok())
    {
        reply.add_answer(Record::from_rdata(
            q.name().clone(),
            zone.ttl,
            RData::CNAME(CNAME(host)),
        ));
    } else {
        reply.authorities.push(soa(zone));
    }
    Outcome::Answered
}

/// The zone's SOA: this relay is its primary; the minimum (negative caching) is the TTL.
fn soa(zone: &Zone) -> Record {
    let host = Name::from_ascii("hostmaster")
        .ok()
        .and_then(|h| h.append_domain(&zone.apex).ok())
        .unwrap_or_else(|| zone.apex.clone());
    let ttl = i32::try_from(zone.ttl).unwrap_or(i32::MAX);
    Record::from_rdata(
        zone.apex.clone(),
        zone.ttl,
        RData::SOA(SOA::new(
            zone.apex.clone(),
            host,
            1,
            ttl,
            ttl,
            ttl,
            zone.ttl,
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;

    fn zone() -> Zone {
        Zone {
            apex: Name::from_ascii("apps.example.").unwrap(),
            ttl: 5,
        }
    }

    fn ask(
        name: &str,
        kind: RecordType,
        targets: DnsTargets,
    ) -> (Message, Outcome, Vec<ObjectKey>) {
        let mut q = Message::query();
        q.metadata.id = 7;
        q.add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
        let mut asked = Vec::new();
        let (bytes, outcome) = answer(&zone(), &q.to_vec().unwrap(), |k| {
            asked.push(k.clone());
            targets
        });
        (Message::from_vec(&bytes.unwrap()).unwrap(), outcome, asked)
    }

    fn known(addresses: &[&str], hosts: &[&str]) -> DnsTargets {
        DnsTargets {
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            known: true,
        }
    }

    #[test]
    fn a_service_is_answered_with_its_addresses_in_order() {
        let (m, o, asked) = ask(
            "Web.Shop.apps.example.",
            RecordType::A,
            known(&["127.1.0.2", "127.1.0.1", "::1"], &[]),
        );
        assert_eq!(o, Outcome::Answered);
        assert!(m.metadata.authoritative);
        assert_eq!(m.metadata.id, 7);
        let ips: Vec<String> = m.answers.iter().map(|r| r.data.to_string()).collect();
        assert_eq!(ips, ["127.1.0.2", "127.1.0.1"], "A only, nearest first");
        assert_eq!(m.answers[0].ttl, 5);
        let k = &asked[0];
        assert_eq!(
            (k.namespace.as_deref(), k.name.as_str(), k.space.0.as_str()),
            (Some("shop"), "web", "default")
        );
        let (m, _, _) = ask(
            "web.shop.apps.example.",
            RecordType::AAAA,
            known(&["127.1.0.1", "::1"], &[]),
        );
        assert_eq!(m.answers.len(), 1);
        let (_, _, asked) = ask(
            "web.shop.retail.apps.example.",
            RecordType::A,
            known(&[], &[]),
        );
        assert_eq!(asked[0].space.0, "retail");
    }

    #[test]
    fn mid_move_a_known_name_is_empty_not_missing_and_unknown_ones_are_nxdomain() {
        let (m, o, _) = ask("web.shop.apps.example.", RecordType::A, known(&[], &[]));
        assert_eq!(
            (o, m.metadata.response_code),
            (Outcome::Answered, ResponseCode::NoError)
        );
        assert!(m.answers.is_empty());
        assert_eq!(m.authorities.len(), 1, "the SOA, for negative caching");
        let (m, o, _) = ask(
            "web.shop.apps.example.",
            RecordType::A,
            DnsTargets::default(),
        );
        assert_eq!(
            (o, m.metadata.response_code),
            (Outcome::NxDomain, ResponseCode::NXDomain)
        );
        let (_, o, asked) = ask(
            "a.b.c.d.apps.example.",
            RecordType::A,
            known(&["127.0.0.1"], &[]),
        );
        assert_eq!(o, Outcome::NxDomain);
        assert!(asked.is_empty());
        let (m, o, _) = ask(
            "web.shop.example.org.",
            RecordType::A,
            known(&["127.0.0.1"], &[]),
        );
        assert_eq!(
            (o, m.metadata.response_code),
            (Outcome::Refused, ResponseCode::Refused)
        );
    }

    #[test]
    fn host_names_only_give_one_cname_and_the_apex_its_soa() {
        let (m, _, _) = ask(
            "web.shop.apps.example.",
            RecordType::A,
            known(&[], &["lb-1.cloud.example", "lb-2.cloud.example"]),
        );
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].record_type(), RecordType::CNAME);
        assert_eq!(m.answers[0].data.to_string(), "lb-1.cloud.example.");
        let (m, o, _) = ask("apps.example.", RecordType::SOA, DnsTargets::default());
        assert_eq!(o, Outcome::Answered);
        assert_eq!(m.answers[0].record_type(), RecordType::SOA);
        assert_eq!(
            answer(&zone(), b"not dns", |_| DnsTargets::default()).1,
            Outcome::Dropped
        );
    }
}
