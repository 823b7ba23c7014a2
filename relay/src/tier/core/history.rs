//! The root's watch history, as kube-apiserver's watch cache keeps one: every committed
//! write (create, update, patch, label change, delete) as one event, in revision order,
//! with the object as written (for a delete, its last state) and the state it replaced.
//! The object log keeps only each key's latest change, so it cannot replay "created,
//! patched, deleted" to a watch from before the create; this can.
//!
//! Bounded by a count of events and by their age: the oldest revisions go first, whole
//! (a watch from a revision at or above the floor gets every event after it), once
//! there are more than the capacity or once they were committed more than
//! [`WATCH_RETENTION`] ago, as kube-apiserver's etcd is compacted every five minutes.
//! Without the age bound the root's memory grew with every write until the count was
//! reached, which at a hundred writes a minute took well over an hour. A watch from
//! below the floor, or from before this run (the history starts empty, its floor at the
//! log's head), is answered 410 `Expired` and the client lists again, as kube-apiserver
//! answers a `resourceVersion` its cache no longer holds.
//!
//! Pure: no clock, no I/O (the core gives it `now`). What a watch sends for each
//! event, given what it selects, is [`WatchHistory::events_after`]; the state of the
//! changed keys at an older revision (a list at an exact `resourceVersion`, a later
//! page of a paged list) is [`WatchHistory::state_at`].

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use strata_protocol::model::{Object, ObjectKey};
use strata_protocol::time::Instant;

/// How many events the root keeps for watches unless told otherwise
/// ([`super::NodeCore::set_watch_events`]).
pub const WATCH_EVENTS: usize = 10_000;

/// How long the root keeps a committed write for watches: a watch from an older
/// revision is answered 410 and lists again. kube-apiserver's default compaction of
/// etcd, every five minutes, leaves a client about as long.
pub const WATCH_RETENTION: Duration = Duration::from_secs(300);

/// One committed write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEvent {
    /// The revision (the log position) that committed it: the event's
    /// `resourceVersion`.
    pub revision: u64,
    /// The object written.
    pub key: ObjectKey,
    /// The object as written; `None` for a delete.
    pub object: Option<Object>,
    /// The object before this write; `None` when it did not exist.
    pub prev: Option<Object>,
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventType {
    /// The object is new to the watch (created, or now matching its selectors).
    Added,
    /// The object changed and the watch selected it before and after.
    Modified,
    /// The object is gone for the watch (deleted, or no longer matching).
    Deleted,
}

impl EventType {
    /// As the wire names it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// What a watch sends for one event of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent<'a> {
    /// Its type.
    pub kind: EventType,
    /// The event's `resourceVersion`.
    pub revision: u64,
    /// The object to send: as written, or for `DELETED` its last selected state (whose
    /// `resourceVersion` the sender sets to [`WatchEvent::revision`], as
    /// kube-apiserver does).
    pub object: &'a Object,
}

/// A watch from a revision the history no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too old resource version: {requested} ({floor})")]
pub struct Expired {
    /// The revision asked for.
    pub requested: u64,
    /// The oldest revision a watch may start from.
    pub floor: u64,
}

/// The bounded history of committed writes.
#[derive(Debug, Clone)]
pub struct WatchHistory {
    events: VecDeque<HistoryEvent>,
    capacity: usize,
    /// A watch may start from any revision at or above this one.
    floor: u64,
    /// The committed head: events above it are staged, not yet visible.
    head: u64,
    /// (when, the head committed then), oldest first: one per commit that moved the
    /// head within the retention, so that [`WatchHistory::expire`] knows which
    /// revisions are older than it.
    commits: VecDeque<(Instant, u64)>,
}

impl WatchHistory {
    /// An empty history for a log whose committed head is `head`: watches may start
    /// there, not before.
    pub fn new(capacity: usize, head: u64) -> Self {
        WatchHistory {
            events: VecDeque::new(),
            capacity: capacity.max(1),
            floor: head,
            head,
            commits: VecDeque::new(),
        }
    }

    /// The oldest revision a watch may start from.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The committed head the history knows.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Events held (staged ones included).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether it holds no event.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The most events it keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keeps at most `capacity` events from now on.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
        self.trim();
    }

    /// Forgets everything: the history starts again at `head` (a standby that took a
    /// whole new copy of the log, whose changes it did not see one by one).
    pub fn reset(&mut self, head: u64) {
        self.events.clear();
        self.commits.clear();
        self.floor = head;
        self.head = head;
    }

    /// Records a write staged at `revision` (above the committed head): `key` goes
    /// from `prev` to `object`. A second write of the same key at the same revision
    /// folds into the first (one revision, one event per key); a write that changes
    /// nothing is not recorded.
    pub fn record(
        &mut self,
        revision: u64,
        key: ObjectKey,
        object: Option<Object>,
        prev: Option<Object>,
    ) {
        if revision <= self.head {
            // Not a new revision: only a reset history can take it.
            return;
        }
        let same = self
            .events
            .iter()
            .rev()
            .take_while(|e| e.revision == revision)
            .position(|e| e.key == key);
        if let Some(back) = same {
            let at = self.events.len() - 1 - back;
            let first_prev = self.events[at].prev.clone();
            if first_prev.is_none() && object.is_none() {
                self.events.remove(at);
            } else {
                self.events[at].object = object;
            }
            return;
        }
        if prev.is_none() && object.is_none() {
            return;
        }
        self.events.push_back(HistoryEvent {
            revision,
            key,
            object,
            prev,
        });
    }

    /// Makes every event at or below `revision` visible, committed at `now`, and drops
    /// the oldest revisions beyond the capacity or the retention.
    pub fn commit(&mut self, revision: u64, now: Instant) {
        if revision > self.head {
            self.head = revision;
            self.commits.push_back((now, revision));
        }
        self.trim();
        self.expire(now);
    }

    /// When the oldest committed event held passes the retention: when
    /// [`WatchHistory::expire`] next has something to drop.
    pub fn poll_expiry(&self) -> Option<Instant> {
        self.commits.front().map(|(at, _)| *at + WATCH_RETENTION)
    }

    /// Drops the revisions committed more than [`WATCH_RETENTION`] before `now`.
    pub fn expire(&mut self, now: Instant) {
        while let Some(&(at, revision)) = self.commits.front() {
            if now.saturating_since(at) <= WATCH_RETENTION {
                break;
            }
            self.drop_through(revision);
        }
    }

    /// Drops every committed event at or below `revision` and the commit times up to
    /// it: a watch may start from `revision` on.
    fn drop_through(&mut self, revision: u64) {
        while self.events.front().is_some_and(|e| e.revision <= revision) {
            self.events.pop_front();
        }
        while self.commits.front().is_some_and(|(_, r)| *r <= revision) {
            self.commits.pop_front();
        }
        self.floor = self.floor.max(revision);
    }

    fn trim(&mut self) {
        while self.events.len() > self.capacity {
            let Some(oldest) = self.events.front().map(|e| e.revision) else {
                break;
            };
            if oldest > self.head {
                // Only staged events: nothing committed to drop.
                break;
            }
            self.drop_through(oldest);
        }
    }

    /// The committed events after revision `since`, in order; [`Expired`] when
    /// `since` is below the floor.
    pub fn after(&self, since: u64) -> Result<impl Iterator<Item = &HistoryEvent>, Expired> {
        if since < self.floor {
            return Err(Expired {
                requested: since,
                floor: self.floor,
            });
        }
        let start = self.events.partition_point(|e| e.revision <= since);
        let head = self.head;
        Ok(self
            .events
            .range(start..)
            .take_while(move |e| e.revision <= head))
    }

    /// What a watch from revision `since` sends, in order, for the committed events
    /// after it, as kube-apiserver's watch cache does: `selects` tells whether the
    /// watch selects a state of an object (its kind, namespace, labels and fields). A
    /// write to an object it selected before and after is `MODIFIED`; one that makes
    /// it selected is `ADDED` (a create, or labels that now match); one that makes it
    /// no longer selected is `DELETED` with its last selected state (a delete, or
    /// labels that no longer match); writes it selected neither before nor after are
    /// not sent.
    pub fn events_after(
        &self,
        since: u64,
        mut selects: impl FnMut(&Object) -> bool,
    ) -> Result<Vec<WatchEvent<'_>>, Expired> {
        let mut out = Vec::new();
        for e in self.after(since)? {
            let now = e.object.as_ref().filter(|o| selects(o));
            let before = e.prev.as_ref().filter(|o| selects(o));
            let (kind, object) = match (now, before) {
                (Some(o), None) => (EventType::Added, o),
                (Some(o), Some(_)) => (EventType::Modified, o),
                (None, Some(p)) => (EventType::Deleted, p),
                (None, None) => continue,
            };
            out.push(WatchEvent {
                kind,
                revision: e.revision,
                object,
            });
        }
        Ok(out)
    }

    /// The state at revision `at` of every key written after it (`None`: it did not
    /// exist then); keys not named are as they are now. [`Expired`] below the floor.
    pub fn state_at(&self, at: u64) -> Result<BTreeMap<&ObjectKey, Option<&Object>>, Expired> {
        let mut state = BTreeMap::new();
        for e in self.after(at)? {
            // The first write after `at` replaced the state at `at`.
            state.entry(&e.key).or_insert(e.prev.as_ref());
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use strata_protocol::model::{
        Body, ContentHash, Labels, ObjectKeyParts, ObjectMeta, Revision, Space,
    };

    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
            space: Space("default".into()),
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        })
    }

    fn obj(name: &str, rev: u64, app: &str) -> Object {
        let mut labels = Labels::new();
        labels.insert("app".into(), app.into());
        Object {
            meta: Arc::new(ObjectMeta {
                key: key(name),
                labels,
            }),
            revision: Revision(rev),
            hash: ContentHash([rev as u8; 32]),
            body: Body::from(Vec::new()),
        }
    }

    fn kinds(events: &[WatchEvent<'_>]) -> Vec<(EventType, u64, String)> {
        events
            .iter()
            .map(|e| (e.kind, e.revision, e.object.key().name.clone()))
            .collect()
    }

    #[test]
    fn create_patch_delete_replay_in_order_one_event_each() {
        let mut h = WatchHistory::new(100, 0);
        h.record(1, key("a"), Some(obj("a", 1, "x")), None);
        h.commit(1, Instant::ZERO);
        h.record(2, key("a"), Some(obj("a", 2, "x")), Some(obj("a", 1, "x")));
        h.commit(2, Instant::ZERO);
        h.record(3, key("a"), None, Some(obj("a", 2, "x")));
        h.commit(3, Instant::ZERO);
        let events = h.events_after(0, |_| true).expect("in the window");
        assert_eq!(
            kinds(&events),
            vec![
                (EventType::Added, 1, "a".into()),
                (EventType::Modified, 2, "a".into()),
                (EventType::Deleted, 3, "a".into()),
            ]
        );
        // The deleted object is its last state.
        assert_eq!(events[2].object.revision, Revision(2));
        assert_eq!(kinds(&h.events_after(2, |_| true).expect("ok")).len(), 1);
        assert!(h.events_after(3, |_| true).expect("ok").is_empty());
    }

    #[test]
    fn label_transitions_add_and_delete() {
        let mut h = WatchHistory::new(100, 0);
        let x = |o: &Object| o.meta.labels.get("app").is_some_and(|v| v == "x");
        h.record(1, key("a"), Some(obj("a", 1, "y")), None);
        h.record(2, key("a"), Some(obj("a", 2, "x")), Some(obj("a", 1, "y")));
        h.record(3, key("a"), Some(obj("a", 3, "x")), Some(obj("a", 2, "x")));
        h.record(4, key("a"), Some(obj("a", 4, "y")), Some(obj("a", 3, "x")));
        h.commit(4, Instant::ZERO);
        let events = h.events_after(0, x).expect("ok");
        assert_eq!(
            kinds(&events),
            vec![
                (EventType::Added, 2, "a".into()),
                (EventType::Modified, 3, "a".into()),
                (EventType::Deleted, 4, "a".into()),
            ]
        );
        assert_eq!(events[2].object.revision, Revision(3));
    }

    #[test]
    fn staged_events_wait_for_their_commit() {
        let mut h = WatchHistory::new(100, 5);
        h.record(6, key("a"), Some(obj("a", 6, "x")), None);
        assert!(h.events_after(5, |_| true).expect("ok").is_empty());
        h.commit(6, Instant::ZERO);
        assert_eq!(h.events_after(5, |_| true).expect("ok").len(), 1);
        // Not above the head: ignored.
        h.record(6, key("b"), Some(obj("b", 6, "x")), None);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn the_floor_moves_by_whole_revisions_and_older_watches_expire() {
        let mut h = WatchHistory::new(3, 0);
        h.record(1, key("a"), Some(obj("a", 1, "x")), None);
        h.record(1, key("b"), Some(obj("b", 1, "x")), None);
        h.commit(1, Instant::ZERO);
        h.record(2, key("a"), Some(obj("a", 2, "x")), Some(obj("a", 1, "x")));
        h.commit(2, Instant::ZERO);
        assert_eq!(h.floor(), 0);
        h.record(3, key("b"), None, Some(obj("b", 1, "x")));
        h.commit(3, Instant::ZERO);
        assert_eq!(h.floor(), 1);
        assert_eq!(h.len(), 2);
        let e = h.events_after(0, |_| true).expect_err("expired");
        assert_eq!(e.to_string(), "too old resource version: 0 (1)");
        assert_eq!(h.events_after(1, |_| true).expect("ok").len(), 2);
    }

    #[test]
    fn a_fresh_history_serves_from_the_head_only() {
        let h = WatchHistory::new(10, 7);
        assert!(h.events_after(7, |_| true).expect("ok").is_empty());
        assert!(h.events_after(6, |_| true).is_err());
    }

    #[test]
    fn writes_of_one_key_at_one_revision_fold() {
        let mut h = WatchHistory::new(10, 0);
        h.record(1, key("a"), Some(obj("a", 1, "x")), None);
        h.record(1, key("a"), Some(obj("a", 1, "y")), Some(obj("a", 1, "x")));
        h.commit(1, Instant::ZERO);
        let events = h.events_after(0, |_| true).expect("ok");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, EventType::Added);
        assert_eq!(events[0].object.meta.labels["app"], "y");
        // Created and deleted in one revision: nothing happened.
        h.record(2, key("b"), Some(obj("b", 2, "x")), None);
        h.record(2, key("b"), None, Some(obj("b", 2, "x")));
        h.commit(2, Instant::ZERO);
        assert_eq!(h.events_after(1, |_| true).expect("ok").len(), 0);
    }

    #[test]
    fn state_at_undoes_later_writes() {
        let mut h = WatchHistory::new(10, 0);
        h.record(1, key("a"), Some(obj("a", 1, "x")), None);
        h.commit(1, Instant::ZERO);
        h.record(2, key("a"), Some(obj("a", 2, "x")), Some(obj("a", 1, "x")));
        h.record(2, key("b"), Some(obj("b", 2, "x")), None);
        h.commit(2, Instant::ZERO);
        h.record(3, key("a"), None, Some(obj("a", 2, "x")));
        h.commit(3, Instant::ZERO);
        let at1 = h.state_at(1).expect("ok");
        assert_eq!(at1[&key("a")].map(|o| o.revision), Some(Revision(1)));
        assert_eq!(at1[&key("b")], None);
        assert!(h.state_at(3).expect("ok").is_empty());
    }

    fn secs(s: u64) -> Instant {
        Instant::from_origin(Duration::from_secs(s))
    }

    #[test]
    fn writes_older_than_the_retention_are_dropped_whole_revisions_at_a_time() {
        let mut h = WatchHistory::new(100, 0);
        h.record(1, key("a"), Some(obj("a", 1, "x")), None);
        h.record(1, key("b"), Some(obj("b", 1, "x")), None);
        h.commit(1, secs(0));
        h.record(2, key("a"), Some(obj("a", 2, "x")), Some(obj("a", 1, "x")));
        h.commit(2, secs(100));
        assert_eq!(h.poll_expiry(), Some(secs(0) + WATCH_RETENTION));
        // Exactly the retention old: still kept.
        h.expire(secs(0) + WATCH_RETENTION);
        assert_eq!((h.len(), h.floor()), (3, 0));
        // Older: revision 1 goes, both its events; a watch from 1 still gets 2.
        h.expire(secs(1) + WATCH_RETENTION);
        assert_eq!((h.len(), h.floor()), (1, 1));
        assert_eq!(h.events_after(1, |_| true).expect("ok").len(), 1);
        assert!(
            h.events_after(0, |_| true).is_err(),
            "0 is below the floor now"
        );
        assert_eq!(h.poll_expiry(), Some(secs(100) + WATCH_RETENTION));
        // Nothing written since: the history empties, and a watch from the head
        // (caught up, no write missed) may still start.
        h.expire(secs(101) + WATCH_RETENTION);
        assert_eq!((h.len(), h.floor(), h.head()), (0, 2, 2));
        assert_eq!(h.events_after(2, |_| true).expect("ok").len(), 0);
        assert_eq!(h.poll_expiry(), None);
    }

    #[test]
    fn staged_writes_outlive_the_retention_until_committed() {
        let mut h = WatchHistory::new(100, 0);
        h.record(1, key("a"), Some(obj("a", 1, "x")), None);
        h.commit(1, secs(0));
        h.record(2, key("a"), Some(obj("a", 2, "x")), Some(obj("a", 1, "x")));
        h.expire(secs(1000));
        assert_eq!((h.len(), h.floor()), (1, 1), "the staged event stays");
        h.commit(2, secs(1000));
        assert_eq!(h.events_after(1, |_| true).expect("ok").len(), 1);
    }

    #[test]
    fn the_count_bound_forgets_the_commit_times_it_dropped() {
        let mut h = WatchHistory::new(1, 0);
        for rev in 1..=3 {
            h.record(rev, key("a"), Some(obj("a", rev, "x")), None);
            h.commit(rev, secs(rev));
        }
        assert_eq!((h.len(), h.floor()), (1, 2));
        assert_eq!(h.poll_expiry(), Some(secs(3) + WATCH_RETENTION));
    }
}
