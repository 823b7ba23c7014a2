//! proptest strategies for every wire type, shared by the test files that need them.

#![allow(dead_code, unreachable_pub, missing_docs)]

use proptest::prelude::*;
use strata_protocol::model::{
    Cluster, ContentHash, Cursor, Health, LogId, Object, ObjectKey, ObjectKeyParts, ObjectMeta,
    Position, Revision, Space, Status,
};
use strata_protocol::summary::{ErrorSample, Summary};
use strata_protocol::time::UnixMillis;
use strata_protocol::wire::{
    Change, ChildToParent, Delta, ErrorCode, Hello, JoinReply, JoinRequest, LinkPath, LinkRecord,
    LinkTransport, ParentToChild, RenewReply, Report, ReportKey, ReportValue, Reports, Role,
    RouteId, Snapshot, StreamMark, Welcome,
};

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9-]{0,12}"
}

fn text() -> impl Strategy<Value = String> {
    ".{0,24}"
}

fn labels() -> impl Strategy<Value = std::collections::BTreeMap<String, String>> {
    prop::collection::btree_map(name(), name(), 0..3)
}

pub fn key() -> impl Strategy<Value = ObjectKey> {
    (
        name(),
        name(),
        name(),
        name(),
        prop::option::of(name()),
        name(),
    )
        .prop_map(|(space, group, version, kind, namespace, name)| {
            ObjectKey::new(ObjectKeyParts {
                space: Space(space),
                group,
                version,
                kind,
                namespace,
                name,
            })
        })
}

pub fn object() -> impl Strategy<Value = Object> {
    (
        key(),
        labels(),
        any::<u64>(),
        any::<[u8; 32]>(),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(key, labels, rev, hash, body)| Object {
            meta: ObjectMeta { key, labels }.into(),
            revision: Revision(rev),
            hash: ContentHash(hash),
            body: body.into(),
        })
}

fn cursor() -> impl Strategy<Value = Cursor> {
    (any::<u64>(), any::<u64>()).prop_map(|(l, p)| Cursor {
        log: LogId(l),
        position: Position(p),
    })
}

fn health() -> impl Strategy<Value = Health> {
    prop::sample::select(Health::ALL.to_vec())
}

pub fn status() -> impl Strategy<Value = Status> {
    (
        health(),
        any::<u64>(),
        any::<Option<i64>>(),
        prop::option::of(text()),
        prop::collection::btree_map(name(), any::<i64>(), 0..3),
        prop::collection::vec(any::<u8>(), 0..32),
        any::<u64>(),
    )
        .prop_map(
            |(health, rev, generation, message, numbers, status, at)| Status {
                health,
                revision: Revision(rev),
                observed_generation: generation,
                message,
                numbers,
                status,
                observed_at: UnixMillis(at),
            },
        )
}

fn cluster() -> impl Strategy<Value = Cluster> {
    (
        name(),
        labels(),
        labels(),
        prop::collection::vec(name(), 0..3),
    )
        .prop_map(|(name, labels, properties, path)| Cluster {
            name,
            labels,
            properties,
            path,
        })
}

fn link() -> impl Strategy<Value = LinkRecord> {
    (
        prop::collection::vec(name(), 0..3),
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
        any::<u64>(),
        proptest::option::of(any::<u64>()),
        any::<u64>(),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(
            |(path, relay, connected, since, last_heard, lag, clusters, expires)| LinkRecord {
                path,
                role: if relay { Role::Relay } else { Role::Agent },
                connected,
                since: UnixMillis(since),
                last_heard: UnixMillis(last_heard),
                lag,
                clusters,
                cert_expires: expires.map(UnixMillis),
                transport: match expires.map(|e| e % 3) {
                    Some(0) => Some(LinkTransport::Quic),
                    Some(1) => Some(LinkTransport::Tcp),
                    _ => None,
                },
                via: match lag.map(|l| l % 3) {
                    Some(0) => Some(LinkPath::Direct),
                    Some(1) => Some(LinkPath::Proxied),
                    _ => None,
                },
            },
        )
}

fn summary() -> impl Strategy<Value = Summary> {
    prop::collection::vec((name(), status()), 0..4).prop_map(|reports| {
        reports.iter().fold(Summary::default(), |acc, (c, s)| {
            acc.merged(&Summary::of_status(c, s))
        })
    })
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop::sample::select(vec![
        ErrorCode::UnsupportedVersion,
        ErrorCode::UnknownChild,
        ErrorCode::OutsideSubtree,
        ErrorCode::Malformed,
        ErrorCode::Oversized,
        ErrorCode::ProtocolViolation,
        ErrorCode::TooSlow,
        ErrorCode::Replaced,
        ErrorCode::ShuttingDown,
        ErrorCode::Overloaded,
        ErrorCode::IdleTimeout,
        ErrorCode::Revoked,
    ])
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        object().prop_map(Change::Upsert),
        key().prop_map(Change::Delete)
    ]
}

fn report() -> impl Strategy<Value = Report> {
    let key = prop_oneof![
        (name(), key()).prop_map(|(cluster, object)| ReportKey::Status { cluster, object }),
        (name(), key()).prop_map(|(placement, object)| ReportKey::Summary { placement, object }),
        name().prop_map(|name| ReportKey::Cluster { name }),
        name().prop_map(|node| ReportKey::Link { node }),
        (name(), key()).prop_map(|(cluster, object)| ReportKey::Upsynced { cluster, object }),
        any::<u64>().prop_map(|run| ReportKey::Complete { run }),
    ];
    let value = prop_oneof![
        status().prop_map(ReportValue::Status),
        summary().prop_map(|s| ReportValue::Summary(Box::new(s))),
        cluster().prop_map(ReportValue::Cluster),
        // `Link` travels in version 3's shape (no expiry); `LinkExpiring` in version
        // 4's (no path); `LinkVia` whole.
        link().prop_map(|mut l| {
            l.cert_expires = None;
            l.transport = None;
            l.via = None;
            ReportValue::Link(l)
        }),
        link().prop_map(|mut l| {
            l.via = None;
            ReportValue::LinkExpiring(l)
        }),
        link().prop_map(ReportValue::LinkVia),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(ReportValue::Upsynced),
        Just(ReportValue::Removed),
        Just(ReportValue::Complete),
    ];
    (key, value).prop_map(|(key, value)| Report { key, value })
}

pub fn child_to_parent() -> impl Strategy<Value = ChildToParent> {
    prop_oneof![
        (
            any::<u16>(),
            any::<u16>(),
            name(),
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(
                |(min_version, max_version, node, relay, run)| ChildToParent::Hello(Hello {
                    min_version,
                    max_version,
                    node,
                    role: if relay { Role::Relay } else { Role::Agent },
                    run,
                })
            ),
        (any::<u32>(), cursor(), prop::option::of(any::<u64>())).prop_map(
            |(epoch, after, route)| ChildToParent::Subscribe {
                epoch,
                after,
                route: route.map(RouteId),
            }
        ),
        (any::<u32>(), any::<u64>(), cursor())
            .prop_map(|(epoch, seq, cursor)| ChildToParent::Ack { epoch, seq, cursor }),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(report(), 0..4)
        )
            .prop_map(
                |(epoch, epoch_start, seq, items)| ChildToParent::Reports(Reports {
                    epoch,
                    epoch_start,
                    seq,
                    items
                })
            ),
        any::<u64>().prop_map(|nonce| ChildToParent::Ping { nonce }),
        any::<u64>().prop_map(|nonce| ChildToParent::Pong { nonce }),
        (error_code(), text()).prop_map(|(code, reason)| ChildToParent::Goodbye { code, reason }),
        text().prop_map(|csr_pem| ChildToParent::Renew { csr_pem }),
        any::<bool>().prop_map(|p| ChildToParent::LinkPath(if p {
            LinkPath::Proxied
        } else {
            LinkPath::Direct
        })),
    ]
}

pub fn parent_to_child() -> impl Strategy<Value = ParentToChild> {
    prop_oneof![
        (
            any::<u16>(),
            name(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            labels()
        )
            .prop_map(
                |(version, parent, heartbeat_ms, idle_timeout_ms, incarnation, labels)| {
                    ParentToChild::Welcome(Welcome {
                        version,
                        parent,
                        heartbeat_ms,
                        idle_timeout_ms,
                        incarnation,
                        labels,
                    })
                }
            ),
        (error_code(), text(), any::<Option<u64>>()).prop_map(|(code, reason, retry_after_ms)| {
            ParentToChild::Refuse {
                code,
                reason,
                retry_after_ms,
            }
        }),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
            prop::collection::vec(change(), 0..4)
        )
            .prop_map(|(epoch, seq, part, log, from, to, last, changes)| {
                ParentToChild::Delta(Delta {
                    epoch,
                    seq,
                    part,
                    log: LogId(log),
                    from: Position(from),
                    to: Position(to),
                    last,
                    changes,
                })
            }),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            cursor(),
            any::<u64>(),
            any::<bool>(),
            prop::collection::vec(object(), 0..4)
        )
            .prop_map(|(epoch, seq, part, at, route, last, objects)| {
                ParentToChild::Snapshot(Snapshot {
                    epoch,
                    seq,
                    part,
                    at,
                    route: RouteId(route),
                    last,
                    objects,
                })
            }),
        (any::<u32>(), any::<u64>())
            .prop_map(|(epoch, seq)| ParentToChild::ReportsAck { epoch, seq }),
        (any::<u64>(), prop::option::of((any::<u32>(), any::<u64>()))).prop_map(|(nonce, mark)| {
            ParentToChild::Ping {
                nonce,
                mark: mark.map(|(epoch, next_seq)| StreamMark { epoch, next_seq }),
            }
        }),
        any::<u64>().prop_map(|nonce| ParentToChild::Pong { nonce }),
        (error_code(), text(), any::<Option<u64>>()).prop_map(|(code, reason, retry_after_ms)| {
            ParentToChild::Goodbye {
                code,
                reason,
                retry_after_ms,
            }
        }),
        prop::collection::btree_map(name(), text(), 0..4)
            .prop_map(|labels| ParentToChild::Labels { labels }),
        text().prop_map(|chain_pem| ParentToChild::Renewal(RenewReply::Granted { chain_pem })),
        (name(), text()).prop_map(
            |(parent, reason)| ParentToChild::Renewal(RenewReply::Refused { parent, reason })
        ),
    ]
}

pub fn error_sample() -> impl Strategy<Value = ErrorSample> {
    (name(), health(), text(), any::<u64>()).prop_map(|(cluster, health, message, at)| {
        ErrorSample {
            cluster,
            health,
            message,
            observed_at: UnixMillis(at),
        }
    })
}

pub fn join_request() -> impl Strategy<Value = JoinRequest> {
    (name(), text(), text()).prop_map(|(cluster, token, csr_pem)| JoinRequest {
        cluster,
        token,
        csr_pem,
    })
}

pub fn join_reply() -> impl Strategy<Value = JoinReply> {
    prop_oneof![
        text().prop_map(|chain_pem| JoinReply::Granted { chain_pem }),
        (name(), text()).prop_map(|(relay, reason)| JoinReply::Refused { relay, reason }),
    ]
}
