//! The object model: what Strata moves around, independent of how it moves.
//!
//! Relays treat object bodies as opaque bytes; they route on [`ObjectMeta`] (identity and
//! labels), which the root extracts once when a user applies an object.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::time::UnixMillis;

/// Labels of an object or a cluster, ordered so that iteration never depends on hashing.
pub type Labels = BTreeMap<String, String>;

/// A named, isolated workload description (a tenant's logical cluster). Everything at
/// the root is scoped by space; a placement only ever places objects of its own space.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Space(pub String);

impl Space {
    /// The space used when the user names none.
    pub fn default_space() -> Self {
        Space("default".to_owned())
    }
}

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A position in the root's ordered change log. The root assigns revisions; every other
/// tier keeps the root's numbering, so a revision means the same thing everywhere.
///
/// `Revision(0)` is "before the first change": a new child subscribes after it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Revision(pub u64);

impl Revision {
    /// Before any change.
    pub const ZERO: Revision = Revision(0);

    /// The revision right after this one.
    pub fn next(self) -> Revision {
        Revision(self.0.saturating_add(1))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies one incarnation of a node's object log. A log rebuilt from nothing (a
/// relay that lost its disk) gets a new id, so cursors into the old log are never
/// mistaken for cursors into the new one. Chosen by the driver (randomly, or from the
/// simulation's seeded RNG) when it creates the store.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct LogId(pub u64);

/// A position in one node's object log. At the root, positions are revisions; a relay
/// numbers the batches it commits itself, so positions are only meaningful together
/// with their [`LogId`] (see [`Cursor`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Position(pub u64);

impl Position {
    /// Before the first change.
    pub const ZERO: Position = Position(0);

    /// The position right after this one.
    pub fn next(self) -> Position {
        Position(self.0.saturating_add(1))
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How far a child has applied its parent's log: durable at the child, reported in acks,
/// and named when it subscribes again.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Cursor {
    /// The parent log the position refers to.
    pub log: LogId,
    /// Everything up to here is applied.
    pub position: Position,
}

/// The identity of an object: which space it lives in and which Kubernetes object it is.
///
/// Cheap to clone: the parts sit behind one shared pointer. A node keeps an object's key
/// in its log, its store, its statuses and its reports, and a relay keeps one per cluster
/// and object; owning six strings in every copy was most of the memory an object cost
/// at every agent. Read the parts through `Deref` (`key.name`); build one from
/// [`ObjectKeyParts`]. On the wire and on disk exactly its parts.
///
/// Two keys that share their parts are equal without comparing them (`Ord` as `Eq`
/// does): a relay gives the statuses it stores the key of its log's object, so that the
/// lookups and merges of its summaries compare pointers, not six strings.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ObjectKey(Arc<ObjectKeyParts>);

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            std::cmp::Ordering::Equal
        } else {
            self.0.cmp(&other.0)
        }
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// What an [`ObjectKey`] is made of.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKeyParts {
    /// The space the object belongs to.
    pub space: Space,
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Namespace for namespaced kinds.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
}

impl ObjectKey {
    /// The key of these parts.
    pub fn new(parts: ObjectKeyParts) -> Self {
        ObjectKey(Arc::new(parts))
    }

    /// The parts to change, copied first if another key shares them.
    pub fn parts_mut(&mut self) -> &mut ObjectKeyParts {
        Arc::make_mut(&mut self.0)
    }
}

impl From<ObjectKeyParts> for ObjectKey {
    fn from(parts: ObjectKeyParts) -> Self {
        ObjectKey::new(parts)
    }
}

impl Deref for ObjectKey {
    type Target = ObjectKeyParts;
    fn deref(&self) -> &ObjectKeyParts {
        &self.0
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As the key printed before its parts were shared: logs and test output keep
        // their shape.
        f.debug_struct("ObjectKey")
            .field("space", &self.space)
            .field("group", &self.group)
            .field("version", &self.version)
            .field("kind", &self.kind)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish()
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.space)?;
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.kind)?;
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.kind)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " {ns}/{}", self.name),
            None => write!(f, " {}", self.name),
        }
    }
}

/// What routing may look at: the identity and the labels of an object, never its body.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// Identity.
    pub key: ObjectKey,
    /// The object's `metadata.labels`.
    pub labels: Labels,
}

/// A digest of an object's body, computed by the root (SHA-256). Lets every tier tell
/// "same content" without comparing bodies.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct ContentHash(pub [u8; 32]);

/// One version of an object as it travels outward: metadata for routing, the revision at
/// which the root last changed it, and the opaque manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Object {
    /// Identity and labels, shared like the body between the copies a node keeps.
    pub meta: Arc<ObjectMeta>,
    /// The root revision of this version.
    pub revision: Revision,
    /// Digest of `body`.
    pub hash: ContentHash,
    /// The manifest bytes, opaque to relays.
    pub body: Body,
}

/// An object's manifest bytes, shared: every copy of an [`Object`] a node keeps (its log,
/// its store, its cluster's view, each child's outbox) points at one buffer instead of
/// owning its own. Immutable once made; on the wire and on disk exactly a `Vec<u8>`.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Body(Arc<[u8]>);

impl Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Body {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Self {
        Body(bytes.into())
    }
}

impl From<&[u8]> for Body {
    fn from(bytes: &[u8]) -> Self {
        Body(bytes.into())
    }
}

impl From<String> for Body {
    fn from(text: String) -> Self {
        Body::from(text.into_bytes())
    }
}

impl From<&str> for Body {
    fn from(text: &str) -> Self {
        Body::from(text.as_bytes())
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for Body {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // One run of bytes. The codec writes it as it wrote `Vec<u8>`'s sequence of
        // bytes (the length, then the bytes), so stores written before read back
        // unchanged; but it is copied at once, where a sequence went byte by byte.
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_bytes(ByteRun::<Body>(std::marker::PhantomData))
    }
}

/// Takes a byte string whole (one copy into `T`), or a sequence of bytes from formats
/// that write one (JSON's array of numbers). Shared by [`Body`] and [`byte_run`].
struct ByteRun<T>(std::marker::PhantomData<T>);

impl<'de, T: for<'a> From<&'a [u8]> + From<Vec<u8>>> serde::de::Visitor<'de> for ByteRun<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a byte string")
    }
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<T, E> {
        Ok(T::from(v))
    }
    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<T, E> {
        Ok(T::from(v))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
        // The hint comes from the input: bounded, so a forged length cannot ask for a
        // huge allocation up front.
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64 * 1024));
        while let Some(b) = seq.next_element::<u8>()? {
            bytes.push(b);
        }
        Ok(T::from(bytes))
    }
}

/// `#[serde(with = "byte_run")]` for a `Vec<u8>` field: written and read as one run of
/// bytes, as [`Body`] is. The codec's bytes are those of `Vec<u8>`'s sequence (the
/// length, then the bytes), so what was stored before reads back; serde's sequence went
/// byte by byte, a call and a bounds check each.
pub(crate) mod byte_run {
    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_bytes(super::ByteRun::<Vec<u8>>(std::marker::PhantomData))
    }
}

impl Object {
    /// The object's identity.
    pub fn key(&self) -> &ObjectKey {
        &self.meta.key
    }
}

/// Properties under this prefix are the agent's own report about its cluster (which
/// backend it drives, whether it reaches the cluster's API server); topologies and agent
/// configurations may not set them. They travel in [`Cluster::properties`], so every
/// relay on the way forwards them as it forwards the rest of the record.
pub const AGENT_PROPERTY_PREFIX: &str = "strata.dev/";
/// Which backend the agent drives: `kubernetes` or `simulated`.
pub const BACKEND_PROPERTY: &str = "strata.dev/backend";
/// Present while the agent cannot reach its cluster's API server: why.
pub const UNREACHABLE_PROPERTY: &str = "strata.dev/unreachable";
/// With [`UNREACHABLE_PROPERTY`]: since when (Unix milliseconds, the agent's clock).
pub const UNREACHABLE_SINCE_PROPERTY: &str = "strata.dev/unreachable-since";

/// A leaf cluster as the inventory knows it (our SyncTarget). Registered by its agent and
/// known to every relay on its path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    /// Unique name of the cluster in the hierarchy.
    pub name: String,
    /// Labels placements select on, including those inherited from the relays above.
    pub labels: Labels,
    /// Free-form properties (capacity, versions) usable by customization.
    pub properties: BTreeMap<String, String>,
    /// Relay names from the root down to the cluster's own parent.
    pub path: Vec<String>,
}

impl Cluster {
    /// Why its agent cannot reach the cluster's API server, and since when, as the
    /// agent last reported ([`UNREACHABLE_PROPERTY`]); `None` while it reaches it.
    pub fn backend_unreachable(&self) -> Option<(&str, Option<UnixMillis>)> {
        let why = self.properties.get(UNREACHABLE_PROPERTY)?;
        let since = self
            .properties
            .get(UNREACHABLE_SINCE_PROPERTY)
            .and_then(|s| s.parse().ok())
            .map(UnixMillis);
        Some((why, since))
    }

    /// Records what the agent found of its cluster's API server: reached (`None`), or
    /// not, with why and since when. Returns whether the record changed.
    pub fn set_backend_unreachable(&mut self, unreachable: Option<(&str, UnixMillis)>) -> bool {
        let before = self.properties.clone();
        match unreachable {
            None => {
                self.properties.remove(UNREACHABLE_PROPERTY);
                self.properties.remove(UNREACHABLE_SINCE_PROPERTY);
            }
            Some((why, since)) => {
                self.properties
                    .insert(UNREACHABLE_PROPERTY.to_owned(), why.to_owned());
                // The first time it went, kept while the reason changes.
                self.properties
                    .entry(UNREACHABLE_SINCE_PROPERTY.to_owned())
                    .or_insert_with(|| since.0.to_string());
            }
        }
        before != self.properties
    }
}

/// The health of one object on one cluster, from least to most settled. `Degraded` and
/// `Failed` are the two bad outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Health {
    /// The agent handed the object to the cluster's API; nothing more is known.
    Applied,
    /// The object is converging (rollout in progress).
    Progressing,
    /// The object does what it should.
    Available,
    /// Running, but below what was asked (e.g. fewer ready replicas).
    Degraded,
    /// Could not be applied, or the object reports failure.
    Failed,
}

impl Health {
    /// Every health state, in declaration order.
    pub const ALL: [Health; 5] = [
        Health::Applied,
        Health::Progressing,
        Health::Available,
        Health::Degraded,
        Health::Failed,
    ];
}

/// The status of one object on one cluster, as the agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Health derived from the object's own status.
    pub health: Health,
    /// The root revision the agent applied.
    pub revision: Revision,
    /// `metadata.generation` the cluster's controller has observed, when the kind has one.
    pub observed_generation: Option<i64>,
    /// A human-readable reason, mostly for `Degraded` and `Failed`.
    pub message: Option<String>,
    /// Numeric fields extracted from `.status` (e.g. `readyReplicas`) for summaries.
    pub numbers: BTreeMap<String, i64>,
    /// The object's `.status`, serialized as JSON, for exact status of singletons.
    #[serde(with = "byte_run")]
    pub status: Vec<u8>,
    /// When the agent observed this status.
    pub observed_at: UnixMillis,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
            space: Space("default".into()),
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            namespace: Some("pos".into()),
            name: name.into(),
        })
    }

    #[test]
    fn keys_order_by_their_parts_whether_or_not_they_share_them() {
        let (a, b) = (key("a"), key("b"));
        let (a2, shared) = (key("a"), a.clone());
        assert_eq!(a.cmp(&shared), std::cmp::Ordering::Equal);
        assert_eq!(a.cmp(&a2), std::cmp::Ordering::Equal);
        assert_eq!(a.cmp(&b), std::cmp::Ordering::Less);
        assert_eq!(b.partial_cmp(&a2), Some(std::cmp::Ordering::Greater));
        let mut keys = [b.clone(), a2, shared, b];
        keys.sort();
        assert_eq!(
            keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
            ["a", "a", "b", "b"]
        );
    }
}
