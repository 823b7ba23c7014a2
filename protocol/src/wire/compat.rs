//! What changed on the wire in protocol versions 4 ([`RENEW_VERSION`]), 5
//! ([`PATH_VERSION`]) and 6 ([`ENDPOINTS_VERSION`]), and how a node of this build speaks to an older peer:
//! [`ErrorCode::Revoked`] becomes [`ErrorCode::UnknownChild`] before version 4, and link
//! records travel without their certificate expiry before version 4
//! ([`LinkRecordV3`]) and without their path before version 5 ([`LinkRecordV4`]);
//! endpoints are not sent at all before version 6.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    ENDPOINTS_VERSION, ErrorCode, LinkRecord, LinkTransport, PATH_VERSION, ProtocolVersion,
    RENEW_VERSION, ReportKey, ReportValue, Reports, Role,
};
use crate::time::UnixMillis;

impl ErrorCode {
    /// The code as a peer speaking `version` can decode it: codes added after that
    /// version become the nearest older one.
    pub fn for_version(self, version: ProtocolVersion) -> ErrorCode {
        match self {
            ErrorCode::Revoked if version < RENEW_VERSION => ErrorCode::UnknownChild,
            other => other,
        }
    }
}

impl ReportValue {
    /// The value as it goes on the wire to a parent speaking `version`: a link record
    /// whole from version 5 on, with its certificate expiry but not its path in version
    /// 4, with neither before.
    pub fn for_version(self, version: ProtocolVersion) -> ReportValue {
        match self {
            ReportValue::Link(r) | ReportValue::LinkExpiring(r) | ReportValue::LinkVia(r) => {
                if version >= PATH_VERSION {
                    ReportValue::LinkVia(r)
                } else if version >= RENEW_VERSION {
                    ReportValue::LinkExpiring(r)
                } else {
                    ReportValue::Link(r)
                }
            }
            other => other,
        }
    }

    /// The value as received, in the one shape the rest of the code handles.
    pub fn received(self) -> ReportValue {
        match self {
            ReportValue::LinkExpiring(r) | ReportValue::LinkVia(r) => ReportValue::Link(r),
            other => other,
        }
    }
}

/// A [`LinkRecord`] as protocol version 3 and older encode it: without
/// [`LinkRecord::cert_expires`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)] // the fields are [`LinkRecord`]'s
pub struct LinkRecordV3 {
    pub path: Vec<String>,
    pub role: Role,
    pub connected: bool,
    pub since: UnixMillis,
    pub last_heard: UnixMillis,
    pub lag: Option<u64>,
    pub clusters: u64,
}

/// A [`LinkRecord`] as protocol version 4 encodes it: without [`LinkRecord::via`].
/// The version-3 fields come first, inline (bincode puts a nested struct's fields in
/// place, with nothing around them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRecordV4 {
    /// What version 3 knew.
    pub v3: LinkRecordV3,
    /// [`LinkRecord::cert_expires`].
    pub cert_expires: Option<UnixMillis>,
    /// [`LinkRecord::transport`].
    pub transport: Option<LinkTransport>,
}

/// Encodes a [`LinkRecord`] in an older shape `V` (serde's `serialize_with`).
pub(super) fn encode_as<V: From<LinkRecord> + Serialize, S: Serializer>(
    r: &LinkRecord,
    s: S,
) -> Result<S::Ok, S::Error> {
    V::from(r.clone()).serialize(s)
}

/// Decodes a [`LinkRecord`] sent in an older shape `V` (serde's `deserialize_with`).
pub(super) fn decode_as<'de, V: Into<LinkRecord> + Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<LinkRecord, D::Error> {
    V::deserialize(d).map(Into::into)
}

impl From<LinkRecord> for LinkRecordV4 {
    fn from(r: LinkRecord) -> Self {
        LinkRecordV4 {
            cert_expires: r.cert_expires,
            transport: r.transport,
            v3: LinkRecordV3::from(r),
        }
    }
}

impl From<LinkRecordV4> for LinkRecord {
    fn from(r: LinkRecordV4) -> Self {
        LinkRecord {
            cert_expires: r.cert_expires,
            transport: r.transport,
            ..LinkRecord::from(r.v3)
        }
    }
}

impl From<LinkRecord> for LinkRecordV3 {
    fn from(r: LinkRecord) -> Self {
        LinkRecordV3 {
            path: r.path,
            role: r.role,
            connected: r.connected,
            since: r.since,
            last_heard: r.last_heard,
            lag: r.lag,
            clusters: r.clusters,
        }
    }
}

impl From<LinkRecordV3> for LinkRecord {
    fn from(r: LinkRecordV3) -> Self {
        LinkRecord {
            path: r.path,
            role: r.role,
            connected: r.connected,
            since: r.since,
            last_heard: r.last_heard,
            lag: r.lag,
            clusters: r.clusters,
            cert_expires: None,
            transport: None,
            via: None,
        }
    }
}

impl Reports {
    /// The batch as it goes on the wire to a parent speaking `version`
    /// ([`ReportValue::for_version`]); endpoints are left out for a parent older than
    /// version 6 ([`ENDPOINTS_VERSION`]), which could not decode them (the batch keeps
    /// its number: acknowledgements stay contiguous).
    pub fn for_version(mut self, version: ProtocolVersion) -> Reports {
        if version < ENDPOINTS_VERSION {
            self.items
                .retain(|r| !matches!(r.key, ReportKey::Endpoints { .. }));
        }
        for r in &mut self.items {
            let v = std::mem::replace(&mut r.value, ReportValue::Removed);
            r.value = v.for_version(version);
        }
        self
    }

    /// The batch as received, in the one shape the rest of the code handles
    /// ([`ReportValue::received`]).
    pub fn received(mut self) -> Reports {
        for r in &mut self.items {
            let v = std::mem::replace(&mut r.value, ReportValue::Removed);
            r.value = v.received();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_value, encode_value};
    use crate::wire::LinkPath;

    fn record() -> LinkRecord {
        LinkRecord {
            path: vec!["eu".into()],
            role: Role::Relay,
            connected: true,
            since: UnixMillis(5),
            last_heard: UnixMillis(6),
            lag: Some(1),
            clusters: 3,
            cert_expires: Some(UnixMillis(7)),
            transport: Some(LinkTransport::Tcp),
            via: Some(LinkPath::Proxied),
        }
    }

    #[test]
    fn a_version_3_peer_gets_link_records_and_codes_it_can_decode() {
        // `Link` encodes exactly as version 3's record did (no expiry field).
        let bytes = encode_value(&ReportValue::Link(record())).unwrap();
        let v3 = encode_value(&(3u32, LinkRecordV3::from(record()))).unwrap();
        assert_eq!(bytes, v3);
        let back: ReportValue = decode_value(&bytes).unwrap();
        assert_eq!(back.as_link_expiry(), None);
        // Version 4 carries the expiry, and a receiver sees one shape.
        let v4 = ReportValue::Link(record()).for_version(RENEW_VERSION);
        assert!(matches!(v4, ReportValue::LinkExpiring(_)));
        let back: ReportValue = decode_value(&encode_value(&v4).unwrap()).unwrap();
        assert_eq!(
            back.received(),
            ReportValue::Link(LinkRecord {
                via: None,
                ..record()
            })
        );
        assert!(matches!(
            ReportValue::Link(record()).for_version(3),
            ReportValue::Link(_)
        ));
        assert_eq!(ErrorCode::Revoked.for_version(3), ErrorCode::UnknownChild);
        assert_eq!(ErrorCode::Revoked.for_version(4), ErrorCode::Revoked);
    }

    #[test]
    fn a_version_4_peer_gets_link_records_without_their_path() {
        // `LinkExpiring` encodes exactly as version 4's record did (no path field), so
        // a parent of version 4 decodes what a child of version 5 sends it.
        let v4 = ReportValue::Link(record()).for_version(RENEW_VERSION);
        let bytes = encode_value(&v4).unwrap();
        let r = record();
        let as_v4 = encode_value(&(
            7u32,
            (
                r.path,
                r.role,
                r.connected,
                r.since,
                r.last_heard,
                r.lag,
                r.clusters,
                r.cert_expires,
                r.transport,
            ),
        ))
        .unwrap();
        assert_eq!(bytes, as_v4);
        // Version 5 carries the path; a receiver sees one shape, whole.
        let v5 = ReportValue::Link(record()).for_version(PATH_VERSION);
        assert!(matches!(v5, ReportValue::LinkVia(_)));
        let back: ReportValue = decode_value(&encode_value(&v5).unwrap()).unwrap();
        assert_eq!(back.received(), ReportValue::Link(record()));
        // A record forwarded down the versions loses what the older peer cannot hold.
        assert!(matches!(
            ReportValue::LinkVia(record()).for_version(3),
            ReportValue::Link(_)
        ));
        assert!(matches!(
            ReportValue::LinkVia(record()).for_version(4),
            ReportValue::LinkExpiring(_)
        ));
    }

    fn endpoints_report() -> crate::wire::Report {
        use crate::model::{ObjectKey, ObjectKeyParts, Space};
        use crate::wire::{Endpoint, EndpointKind, EndpointPort, ServiceEndpoints};
        crate::wire::Report {
            key: ReportKey::Endpoints {
                cluster: "c1".into(),
                object: ObjectKey::new(ObjectKeyParts {
                    space: Space("default".into()),
                    group: String::new(),
                    version: "v1".into(),
                    kind: "Service".into(),
                    namespace: Some("shop".into()),
                    name: "web".into(),
                }),
            },
            value: ReportValue::Endpoints(ServiceEndpoints {
                available: true,
                addresses: vec![Endpoint {
                    kind: EndpointKind::LoadBalancer,
                    address: "127.1.0.1".into(),
                    ports: vec![EndpointPort {
                        name: "http".into(),
                        port: 80,
                        protocol: "TCP".into(),
                    }],
                }],
            }),
        }
    }

    #[test]
    fn a_parent_older_than_version_6_is_sent_no_endpoints() {
        let complete = crate::wire::Report {
            key: ReportKey::Complete { run: 1 },
            value: ReportValue::Complete,
        };
        let batch = Reports {
            epoch: 0,
            epoch_start: 1,
            seq: 3,
            items: vec![endpoints_report(), complete.clone()],
        };
        // Version 5: the endpoints are left out, the batch keeps its number.
        let old = batch.clone().for_version(PATH_VERSION);
        assert_eq!(old.seq, 3);
        assert_eq!(old.items, vec![complete.clone()]);
        // Version 6 carries them, and they decode back whole.
        let new = batch.clone().for_version(ENDPOINTS_VERSION);
        assert_eq!(new.items.len(), 2);
        let back: Reports = decode_value(&encode_value(&new).unwrap()).unwrap();
        assert_eq!(back.received(), batch);
    }

    #[test]
    fn endpoints_keep_the_older_keys_wire_numbers_and_sort_before_complete() {
        // `Complete` was the sixth variant (index 5) up to version 5 and still is.
        let bytes = encode_value(&ReportKey::Complete { run: 9 }).unwrap();
        assert_eq!(bytes, encode_value(&(5u32, 9u64)).unwrap());
        // An outbox sends in key order: the marker after endpoints queued with it.
        let e = endpoints_report().key;
        assert!(e < ReportKey::Complete { run: 0 });
        assert!(ReportKey::Cluster { name: "z".into() } < e);
    }

    impl ReportValue {
        fn as_link_expiry(&self) -> Option<UnixMillis> {
            match self {
                ReportValue::Link(l) | ReportValue::LinkExpiring(l) | ReportValue::LinkVia(l) => {
                    l.cert_expires
                }
                _ => None,
            }
        }
    }
}
