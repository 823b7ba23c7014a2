//! What changed on the wire in protocol version 4 ([`RENEW_VERSION`]), and how a node
//! of this build speaks to an older peer: [`ErrorCode::Revoked`] becomes
//! [`ErrorCode::UnknownChild`], and link records travel without their certificate
//! expiry ([`LinkRecordV3`]).

use serde::{Deserialize, Serialize};

use super::{ErrorCode, LinkRecord, ProtocolVersion, RENEW_VERSION, ReportValue, Reports, Role};
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
    /// with its certificate expiry from version 4 on, without it before.
    pub fn for_version(self, version: ProtocolVersion) -> ReportValue {
        match self {
            ReportValue::Link(r) if version >= RENEW_VERSION => ReportValue::LinkExpiring(r),
            other => other,
        }
    }

    /// The value as received, in the one shape the rest of the code handles.
    pub fn received(self) -> ReportValue {
        match self {
            ReportValue::LinkExpiring(r) => ReportValue::Link(r),
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

pub(super) mod link_v3 {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{LinkRecord, LinkRecordV3};

    pub(in crate::wire) fn serialize<S: Serializer>(
        r: &LinkRecord,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        LinkRecordV3::from(r.clone()).serialize(s)
    }

    pub(in crate::wire) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<LinkRecord, D::Error> {
        LinkRecordV3::deserialize(d).map(LinkRecord::from)
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
        }
    }
}

impl Reports {
    /// The batch as it goes on the wire to a parent speaking `version`
    /// ([`ReportValue::for_version`]).
    pub fn for_version(mut self, version: ProtocolVersion) -> Reports {
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
        assert_eq!(back.received(), ReportValue::Link(record()));
        assert!(matches!(
            ReportValue::Link(record()).for_version(3),
            ReportValue::Link(_)
        ));
        assert_eq!(ErrorCode::Revoked.for_version(3), ErrorCode::UnknownChild);
        assert_eq!(ErrorCode::Revoked.for_version(4), ErrorCode::Revoked);
    }

    impl ReportValue {
        fn as_link_expiry(&self) -> Option<UnixMillis> {
            match self {
                ReportValue::Link(l) | ReportValue::LinkExpiring(l) => l.cert_expires,
                _ => None,
            }
        }
    }
}
