//! The ordered object log a parent serves its children from.
//!
//! The log keeps, for every key, only its latest change and the position at
//! which that change became visible here. "Everything after position P" is then the
//! latest state of every key whose position is above P: intermediate versions coalesce,
//! so a child that was away for a thousand changes of one object receives one.
//!
//! Tombstones stay until [`ObjectLog::compact`] drops them; a child whose cursor is below
//! the compacted floor may have missed a tombstone and must be sent a snapshot.
//!
//! Each key also keeps a short history of its *visibility* (live or not, and its
//! metadata) above the floor. Routing needs it: an object whose labels change so that a
//! child's route no longer selects it must be deleted at that child, and only the
//! history can tell that the child may hold an older, selected version.
//!
//! Changes are staged at a position above the head and become visible to sessions only
//! when that position is committed, so a delta that arrives in parts is served onward
//! only once it is whole.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{LogId, Object, ObjectKey, ObjectKeyParts, ObjectMeta, Position};
use crate::wire::Change;

use super::parent_index::ParentIndex;

/// Why the log refused a change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// Changes must be staged above the committed head.
    #[error("cannot stage a change at position {position}: the log is already at {head}")]
    StaleStage {
        /// Where the change was to be staged.
        position: Position,
        /// The committed head.
        head: Position,
    },
}

/// The latest change of one key, with its visibility history. Serializable, so a driver
/// can persist each entry the log reports dirty and [`ObjectLog::restore`] it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyEntry {
    position: Position,
    object: Option<Object>,
    /// Visibility changes in position order; the first may lie at or below the floor
    /// (the state a child at the floor sees). Never empty.
    history: Vec<Visibility>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Visibility {
    at: Position,
    /// `None` while the key is deleted.
    meta: Option<Arc<ObjectMeta>>,
}

impl KeyEntry {
    /// Where the latest change of this key sits in the log.
    pub fn position(&self) -> Position {
        self.position
    }

    /// The live object, or `None` for a tombstone.
    pub fn object(&self) -> Option<&Object> {
        self.object.as_ref()
    }

    /// The key's committed state at position `at` (its metadata; `None` while absent or
    /// deleted), for any `at` from the log's floor to its head: what a watch from `at`
    /// knew of it (was it there, did its labels match).
    pub fn visible_at(&self, at: Position) -> Option<&ObjectMeta> {
        self.history
            .iter()
            .rev()
            .find(|v| v.at <= at)
            .and_then(|v| v.meta.as_deref())
    }

    /// Whether any retained visible state of the key satisfies `selected`: the test for
    /// "a child whose route is `selected` may still hold some version of this key".
    pub fn ever_selected(&self, mut selected: impl FnMut(&ObjectMeta) -> bool) -> bool {
        self.history
            .iter()
            .any(|v| v.meta.as_deref().is_some_and(&mut selected))
    }
}

/// The log's scalar state, persisted next to its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMeta {
    /// The log's identity.
    pub id: LogId,
    /// Whether sessions may serve from it.
    pub serving: bool,
    /// The committed head.
    pub head: Position,
    /// The compaction floor.
    pub floor: Position,
}

/// An ordered, compactable object log, keyed by [`ObjectKey`].
///
/// Persistence: after each batch of changes (stage, commit, compact), write
/// [`ObjectLog::meta`] and, for every key from [`ObjectLog::take_dirty`], its
/// [`ObjectLog::entry`] (or its removal) in one atomic write; rebuild with
/// [`ObjectLog::restore`].
#[derive(Debug, Clone)]
pub struct ObjectLog {
    id: LogId,
    serving: bool,
    head: Position,
    floor: Position,
    keys: BTreeMap<ObjectKey, KeyEntry>,
    /// `(position, key)` of every key's latest change, for range scans.
    index: BTreeSet<(Position, ObjectKey)>,
    /// Keys changed since the last [`ObjectLog::take_dirty`].
    dirty: BTreeSet<ObjectKey>,
    /// Which positions stand for which cursors of the parent's log (a replica's only).
    parent_index: ParentIndex,
    /// See [`ObjectLog::generation`].
    generation: u64,
    /// The scalar state as [`ObjectLog::take_meta_change`] last gave it (as restored,
    /// for a restored log): what the store holds.
    saved_meta: Option<LogMeta>,
    /// Whether every entry at or below the floor is compacted (no tombstone, one
    /// visibility at or below it): then a compaction visits only the entries that
    /// settled since the last one. False after [`ObjectLog::restore`] and
    /// [`ObjectLog::install`], whose entries come as they were written.
    compacted: bool,
}

impl ObjectLog {
    /// An empty log at position zero. `id` must differ from the id of any earlier log of
    /// this node whose cursors children may still hold.
    pub fn new(id: LogId) -> Self {
        ObjectLog {
            id,
            serving: false,
            head: Position::ZERO,
            floor: Position::ZERO,
            keys: BTreeMap::new(),
            index: BTreeSet::new(),
            dirty: BTreeSet::new(),
            parent_index: ParentIndex::default(),
            generation: 0,
            saved_meta: None,
            compacted: true,
        }
    }

    /// Rebuilds a log from what a driver persisted. Entries staged above the head (a
    /// delta that was still arriving) come back staged.
    pub fn restore(
        meta: LogMeta,
        entries: impl IntoIterator<Item = (ObjectKey, KeyEntry)>,
    ) -> Self {
        let keys: BTreeMap<ObjectKey, KeyEntry> = entries.into_iter().collect();
        let index = keys.iter().map(|(k, e)| (e.position, k.clone())).collect();
        ObjectLog {
            id: meta.id,
            serving: meta.serving,
            head: meta.head,
            floor: meta.floor,
            keys,
            index,
            dirty: BTreeSet::new(),
            parent_index: ParentIndex::default(),
            generation: 0,
            saved_meta: Some(meta),
            compacted: false,
        }
    }

    /// The scalar state to persist.
    pub fn meta(&self) -> LogMeta {
        LogMeta {
            id: self.id,
            serving: self.serving,
            head: self.head,
            floor: self.floor,
        }
    }

    /// A counter that every change of the log moves (staging, commit, snapshot,
    /// compaction, serving, the parent index): what sessions read in their
    /// `poll_transmit` changes only when it does. A driver that polls only the sessions
    /// an input or a timer touched polls them all when it moved.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The scalar state to persist if it changed since the last call (always at a new
    /// log's first call; for a restored log, since what was restored). A node's turn
    /// with nothing changed then writes nothing: before, every turn (a heartbeat, a
    /// timer) rewrote the same meta and flushed the store, about once a second on an
    /// idle agent, wearing an edge device's flash for nothing.
    pub fn take_meta_change(&mut self) -> Option<LogMeta> {
        let meta = self.meta();
        if self.saved_meta == Some(meta) {
            return None;
        }
        self.saved_meta = Some(meta);
        Some(meta)
    }

    /// Keys whose entries changed (or were removed) since the last call.
    pub fn take_dirty(&mut self) -> BTreeSet<ObjectKey> {
        std::mem::take(&mut self.dirty)
    }

    /// Whether sessions may serve from this log. A root's log serves from the start
    /// ([`ObjectLog::mark_serving`]); a relay's log from its first commit, so that a
    /// relay rebuilt from nothing never tells its children that everything is gone.
    pub fn is_serving(&self) -> bool {
        self.serving
    }

    /// Lets sessions serve from this log (the root, or a relay restored from disk).
    pub fn mark_serving(&mut self) {
        self.generation += 1;
        self.serving = true;
    }

    /// Which positions of this log stand for which cursors of the parent's log.
    pub fn parent_index(&self) -> &ParentIndex {
        &self.parent_index
    }

    /// The index of parent cursors, to enable or record into.
    pub fn parent_index_mut(&mut self) -> &mut ParentIndex {
        self.generation += 1;
        &mut self.parent_index
    }

    /// This log's identity.
    pub fn id(&self) -> LogId {
        self.id
    }

    /// The highest committed position: what sessions may serve.
    pub fn head(&self) -> Position {
        self.head
    }

    /// Cursors below this position cannot be served a delta (tombstones may be gone).
    pub fn floor(&self) -> Position {
        self.floor
    }

    /// Number of live objects.
    pub fn live_len(&self) -> usize {
        self.keys.values().filter(|e| e.object.is_some()).count()
    }

    /// The entry of one key, live or tombstone.
    pub fn entry(&self, key: &ObjectKey) -> Option<&KeyEntry> {
        self.keys.get(key)
    }

    /// Every entry, live or tombstone, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&ObjectKey, &KeyEntry)> {
        self.keys.iter()
    }

    /// The live object with this key.
    pub fn get(&self, key: &ObjectKey) -> Option<&Object> {
        self.keys.get(key).and_then(|e| e.object.as_ref())
    }

    /// Live objects in key order.
    pub fn live(&self) -> impl Iterator<Item = &Object> {
        self.keys.values().filter_map(|e| e.object.as_ref())
    }

    /// Live objects with keys strictly after `after` (or from the start), in key order:
    /// lets a snapshot be cut in parts that resume where the last one stopped.
    pub fn live_after<'a>(
        &'a self,
        after: Option<&ObjectKey>,
    ) -> impl Iterator<Item = &'a Object> + 'a {
        let range = match after {
            Some(k) => self.keys.range((
                std::ops::Bound::Excluded(k.clone()),
                std::ops::Bound::Unbounded,
            )),
            None => self.keys.range(..),
        };
        range.filter_map(|(_, e)| e.object.as_ref())
    }

    /// Keys whose latest change lies in `(after, through]`, in position order.
    pub fn keys_changed(&self, after: Position, through: Position) -> Vec<ObjectKey> {
        if through <= after {
            return Vec::new();
        }
        let start = (after.next(), min_key());
        self.index
            .range(start..)
            .take_while(|(pos, _)| *pos <= through)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// Stages a change at `position` (above the head). Returns whether it changed
    /// anything: an upsert of a version no newer than the one held, or a delete of
    /// something not live, is a no-op, so replays are harmless and no key ever goes back
    /// to an older revision.
    pub fn stage(&mut self, position: Position, change: Change) -> Result<bool, LogError> {
        if position <= self.head {
            return Err(LogError::StaleStage {
                position,
                head: self.head,
            });
        }
        let key = change.key().clone();
        let changed = match change {
            Change::Upsert(object) => self.stage_upsert(position, object),
            Change::Delete(key) => self.stage_delete(position, &key),
        };
        if changed {
            self.generation += 1;
            self.dirty.insert(key);
        }
        Ok(changed)
    }

    fn stage_upsert(&mut self, position: Position, object: Object) -> bool {
        let key = object.key().clone();
        match self.keys.get_mut(&key) {
            Some(entry) => {
                if let Some(held) = &entry.object
                    && (held.revision > object.revision
                        || (held.revision == object.revision && held.hash == object.hash))
                {
                    return false;
                }
                let meta_changed = entry
                    .history
                    .last()
                    .is_none_or(|v| v.meta.as_ref() != Some(&object.meta));
                if meta_changed {
                    push_visibility(&mut entry.history, position, Some(object.meta.clone()));
                }
                self.index.remove(&(entry.position, key.clone()));
                entry.position = position;
                entry.object = Some(object);
            }
            None => {
                let history = vec![Visibility {
                    at: position,
                    meta: Some(object.meta.clone()),
                }];
                self.keys.insert(
                    key.clone(),
                    KeyEntry {
                        position,
                        object: Some(object),
                        history,
                    },
                );
            }
        }
        self.index.insert((position, key));
        true
    }

    fn stage_delete(&mut self, position: Position, key: &ObjectKey) -> bool {
        let Some(entry) = self.keys.get_mut(key) else {
            return false;
        };
        if entry.object.is_none() {
            return false;
        }
        push_visibility(&mut entry.history, position, None);
        self.index.remove(&(entry.position, key.clone()));
        entry.position = position;
        entry.object = None;
        self.index.insert((position, key.clone()));
        true
    }

    /// Takes another replica's records of this same log as they are (a root replica
    /// following the writer's commits in a shared store): `meta` replaces the scalar
    /// state, each entry replaces or (`None`) removes its key. Nothing is marked dirty:
    /// the records are already durable where they came from.
    pub fn install(
        &mut self,
        meta: Option<LogMeta>,
        entries: impl IntoIterator<Item = (ObjectKey, Option<KeyEntry>)>,
    ) {
        self.generation += 1;
        self.compacted = false;
        for (key, entry) in entries {
            if let Some(old) = self.keys.remove(&key) {
                self.index.remove(&(old.position, key.clone()));
            }
            if let Some(entry) = entry {
                self.index.insert((entry.position, key.clone()));
                self.keys.insert(key, entry);
            }
        }
        if let Some(meta) = meta {
            self.id = meta.id;
            self.serving = meta.serving;
            self.head = meta.head;
            self.floor = meta.floor;
        }
    }

    /// Makes everything staged at or below `position` visible.
    pub fn commit(&mut self, position: Position) {
        if !self.serving || position > self.head {
            self.generation += 1;
        }
        self.serving = true;
        if position > self.head {
            self.head = position;
        }
    }

    /// Ends a snapshot received from the parent, whose objects were staged at `at`:
    /// deletes (at `at`) every live key not in `keep`, then commits `at`. Children see
    /// the snapshot as an ordinary delta: only what actually changed.
    pub fn finish_snapshot(
        &mut self,
        at: Position,
        keep: &BTreeSet<ObjectKey>,
    ) -> Result<(), LogError> {
        let doomed: Vec<ObjectKey> = self
            .keys
            .iter()
            .filter(|(k, e)| e.object.is_some() && !keep.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for key in doomed {
            self.stage(at, Change::Delete(key))?;
        }
        self.commit(at);
        Ok(())
    }

    /// Drops tombstones and visibility history at or below `through` (capped at the
    /// head). Children with cursors below the new floor will be sent snapshots; callers
    /// pass the lowest cursor they still want to serve with deltas.
    pub fn compact(&mut self, through: Position) {
        let floor = through.min(self.head);
        if floor <= self.floor {
            return;
        }
        // Only the keys whose latest change lies between the old floor and the new one
        // can have anything to drop: the others were compacted when the old floor was
        // set (a key's history lies at or below its latest change). Visiting every key
        // instead cost a root holding 10,000 objects a quarter of its CPU under writes.
        let from = if self.compacted {
            std::ops::Bound::Excluded((self.floor, max_key()))
        } else {
            std::ops::Bound::Unbounded
        };
        let to = std::ops::Bound::Excluded((floor.next(), min_key()));
        self.generation += 1;
        self.floor = floor;
        self.compacted = true;
        self.parent_index.forget_below(floor);
        let settled: Vec<ObjectKey> = self
            .index
            .range((from, to))
            .map(|(_, k)| k.clone())
            .collect();
        for key in settled {
            let Some(entry) = self.keys.get_mut(&key) else {
                continue;
            };
            if entry.object.is_none() {
                self.index.remove(&(entry.position, key.clone()));
                self.keys.remove(&key);
                self.dirty.insert(key);
                continue;
            }
            // A settled key (its latest change at or below the floor, so every child the
            // floor serves has been sent that change) forgets its older visibility. A
            // key with a change pending above the floor keeps it all: a child may still
            // hold a version older than anything at the floor, because a change that
            // moved on before a delta was cut is delivered with the next.
            let below = entry.history.iter().filter(|v| v.at <= floor).count();
            if below > 1 {
                entry.history.drain(..below - 1);
                self.dirty.insert(key);
            }
        }
    }
}

fn push_visibility(history: &mut Vec<Visibility>, at: Position, meta: Option<Arc<ObjectMeta>>) {
    // Never collapse entries at one position: a staged version may already have gone
    // to a child (deltas and snapshots send the latest version), and a later change
    // staged at the same position must not erase the record that it was selected.
    history.push(Visibility { at, meta });
}

/// A key after every key a log holds (its space is `U+10FFFF`), to end index ranges at
/// a position.
fn max_key() -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: crate::model::Space(char::MAX.to_string()),
        group: String::new(),
        version: String::new(),
        kind: String::new(),
        namespace: None,
        name: String::new(),
    })
}

/// The smallest possible key, to start index ranges at a position.
fn min_key() -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: crate::model::Space(String::new()),
        group: String::new(),
        version: String::new(),
        kind: String::new(),
        namespace: None,
        name: String::new(),
    })
}
