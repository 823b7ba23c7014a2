//! Watch events rendered once for every watch, as kube-apiserver's watch cache
//! serializes an object once for all its watchers.
//!
//! A write reaches every watch of its type on the next turn of the node, and each
//! watch used to render the object (parse the stored body, add the metadata and the
//! status) and serialize it itself: with 1,000 watchers, 1,000 times the same bytes,
//! most of the root's CPU in a fan-out. The first watch to send an event renders it
//! into its JSON line and keeps it here; the next ones send the same bytes.
//!
//! An event is the same for every watch that sends it when its object, revision and
//! event type are the same, it has the same form (an object or a one-row table), and
//! the status it carries is the same. A status changes without moving the revision,
//! so the key also holds the status journal's epoch of the type
//! ([`super::status_journal`]): a status change stamped by a refresh moves the epoch,
//! and an event asked for after it is rendered again, with the status now. Between
//! two refreshes (at most the watches' `STATUS_EVERY`, a second) a cached event may carry
//! the status of its first render; the refresh that stamps the change then sends a
//! `MODIFIED` with the new one, as a status change between two writes is sent.
//!
//! The cache keeps the [`CAPACITY`] latest events and drops the oldest: a watch that
//! falls further behind renders again, and nothing is unbounded.

use std::collections::{BTreeMap, VecDeque};

use hyper::body::Bytes;
use serde_json::Value;
use strata_protocol::model::ObjectKey;

use crate::tier::core::history::EventType;

/// One event of a watch: rendered for this watch alone (serialized by its stream), or
/// the JSON line every watch that sends it shares ([`EventCache`]).
#[derive(Debug, Clone)]
pub enum Event {
    /// Rendered for this watch.
    Value(Value),
    /// One JSON line, newline included, rendered once for every watch.
    Line(Bytes),
}

impl Event {
    /// The line the stream sends.
    pub fn into_line(self) -> Bytes {
        match self {
            Event::Value(v) => line(&v),
            Event::Line(l) => l,
        }
    }

    /// The event as JSON (as a client reads it).
    pub fn into_value(self) -> Value {
        match self {
            Event::Value(v) => v,
            Event::Line(l) => serde_json::from_slice(&l).unwrap_or(Value::Null),
        }
    }
}

/// `v` as one line of a watch's body.
pub fn line(v: &Value) -> Bytes {
    let mut line = v.to_string().into_bytes();
    line.push(b'\n');
    Bytes::from(line)
}

/// The name of an event type on the wire.
pub fn event_name(kind: EventType) -> &'static str {
    match kind {
        EventType::Added => "ADDED",
        EventType::Modified => "MODIFIED",
        EventType::Deleted => "DELETED",
    }
}

/// How many rendered events the cache keeps.
pub const CAPACITY: usize = 2048;

/// What makes two watches' events the same bytes: the object, the revision the event
/// carries, its type, whether it is a table row, and the status epoch of the type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EventId {
    /// The object.
    pub key: ObjectKey,
    /// The event's `resourceVersion`.
    pub revision: u64,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: EventType,
    /// A one-row table (`kubectl get -w`) rather than the object.
    pub table: bool,
    /// The status journal's epoch of the type when it was rendered.
    pub epoch: u64,
}

/// The latest rendered events, each one JSON line (newline included).
#[derive(Debug, Default)]
pub struct EventCache {
    lines: BTreeMap<EventId, Bytes>,
    order: VecDeque<EventId>,
    hits: u64,
    misses: u64,
}

impl EventCache {
    /// The line of `id`, rendered by `render` if the cache does not hold it.
    pub fn line(&mut self, id: EventId, render: impl FnOnce() -> Bytes) -> Bytes {
        if let Some(line) = self.lines.get(&id) {
            self.hits += 1;
            return line.clone();
        }
        self.misses += 1;
        let line = render();
        if self.order.len() >= CAPACITY
            && let Some(oldest) = self.order.pop_front()
        {
            self.lines.remove(&oldest);
        }
        self.order.push_back(id.clone());
        self.lines.insert(id, line.clone());
        line
    }

    /// How many events were found rendered, and how many were rendered.
    pub fn counts(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    /// How many events the cache holds.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether the cache holds none.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_protocol::model::{ObjectKeyParts, Space};

    fn id(name: &str, revision: u64, epoch: u64) -> EventId {
        EventId {
            key: ObjectKey::new(ObjectKeyParts {
                space: Space::default_space(),
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("shop".into()),
                name: name.into(),
            }),
            revision,
            kind: EventType::Added,
            table: false,
            epoch,
        }
    }

    #[test]
    fn an_event_is_rendered_once_and_again_for_a_new_epoch_or_form() {
        let mut cache = EventCache::default();
        let mut renders = 0;
        let mut get = |cache: &mut EventCache, id: EventId| {
            cache.line(id, || {
                renders += 1;
                Bytes::from(format!("render {renders}\n"))
            })
        };
        assert_eq!(get(&mut cache, id("a", 5, 0)), "render 1\n");
        assert_eq!(get(&mut cache, id("a", 5, 0)), "render 1\n");
        assert_eq!(
            get(&mut cache, id("a", 5, 1)),
            "render 2\n",
            "a new status epoch"
        );
        let mut table = id("a", 5, 1);
        table.table = true;
        assert_eq!(get(&mut cache, table), "render 3\n", "a table row");
        let mut deleted = id("a", 5, 1);
        deleted.kind = EventType::Deleted;
        assert_eq!(get(&mut cache, deleted), "render 4\n");
        assert_eq!(cache.counts(), (1, 4));
    }

    #[test]
    fn the_oldest_event_goes_past_the_capacity() {
        let mut cache = EventCache::default();
        for r in 0..CAPACITY as u64 + 10 {
            cache.line(id("a", r, 0), || Bytes::from(r.to_string()));
        }
        assert_eq!(cache.len(), CAPACITY);
        let again = cache.line(id("a", 0, 0), || Bytes::from_static(b"again"));
        assert_eq!(again, "again", "the first one was dropped");
        let kept = cache.line(id("a", CAPACITY as u64 + 9, 0), || Bytes::from_static(b"x"));
        assert_eq!(kept, (CAPACITY as u64 + 9).to_string());
    }
}
