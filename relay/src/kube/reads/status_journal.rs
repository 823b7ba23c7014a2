//! When each object's `.status` last changed, so that a watch from a `resourceVersion`
//! misses no status change.
//!
//! A status (what the clusters report) changes without moving the root's revision, so
//! the log cannot say which status changes came after a client's list. The journal
//! numbers them instead: each refresh reads the status digest of every object of one
//! type in one space, and an object whose digest differs from the last refresh's is
//! stamped with a new *epoch*. It also records, for each head it saw, the epoch before
//! that refresh's stamps.
//!
//! A client that listed at revision `R` read the node after `R` was committed, so it
//! saw every status stamped by a refresh that ran before `R` was committed, which is
//! every refresh that saw a head below `R`. A watch from `R` therefore sends every
//! object stamped after [`StatusJournal::epoch_at`]`(R)` (some of them the client
//! may already have: a repeated `MODIFIED` with the current object is harmless), and
//! then follows the journal's epochs. A journal starts when its type is first read
//! (a get or a list), in the same turn of the node as that read, so what it starts
//! from is what that client saw; one that a watch starts (no read of the type since
//! the node started) counts every status as changed, so that watch is sent them all.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use strata_protocol::model::{ObjectKey, Space};

use super::event_cache::EventCache;
use super::render;
use crate::kube::catalog::ResourceType;
use crate::tier::core::NodeCore;

/// The journal as the API's requests and watches share it. It is used only inside the
/// node's turns (the closures given to `NodeClient::query`), which run one at a time,
/// so taking it never waits and nothing holds it across an await: watches and requests
/// queue on the node as they did before, not on the journal.
#[derive(Debug, Clone, Default)]
pub struct SharedJournal(Arc<tokio::sync::Mutex<StatusJournal>>);

impl SharedJournal {
    /// Runs `f` on the journal; `None` if something holds it, which cannot happen
    /// within the node's turns (callers then do what is safe: retry, or skip a look).
    pub fn with<T>(&self, f: impl FnOnce(&mut StatusJournal) -> T) -> Option<T> {
        self.0.try_lock().ok().map(|mut j| f(&mut j))
    }
}

/// How many heads a type's journal remembers (as many as the root keeps revisions for
/// watches): a watch from an older version is told what changed since the journal's
/// oldest head, which is more than it needs, never less.
const HEADS: usize = crate::tier::core::WATCH_HISTORY as usize;

/// How many vanished fleet statuses a type's journal remembers.
const GONE: usize = 10_000;

/// A type in a space: (space, group, kind).
type TypeId = (Space, String, String);

/// The journal of every type read so far (see the module's doc), and the watch events
/// rendered for every watch ([`EventCache`], which the journal's epochs key).
#[derive(Debug, Default)]
pub struct StatusJournal {
    types: BTreeMap<TypeId, TypeJournal>,
    events: EventCache,
}

#[derive(Debug)]
struct TypeJournal {
    /// The latest epoch stamped.
    epoch: u64,
    /// Per object: its status digest and the epoch that stamped it.
    objects: BTreeMap<ObjectKey, (u64, u64)>,
    /// Per object: the epoch that first saw it.
    born: BTreeMap<ObjectKey, u64>,
    /// Objects of a type made from reports (fleet statuses), which no write deletes:
    /// the epoch that saw each go, the oldest dropped past [`GONE`].
    gone: BTreeMap<ObjectKey, u64>,
    /// (head seen by a refresh, the epoch before that refresh's stamps), oldest first.
    heads: VecDeque<(u64, u64)>,
    /// When the last refresh ran.
    refreshed: tokio::time::Instant,
}

fn type_id(space: &Space, t: &ResourceType) -> TypeId {
    (space.clone(), t.group.clone(), t.kind.clone())
}

impl StatusJournal {
    /// Starts the journal of `t` in `space` if it has none: a client is reading the
    /// type, and the journal's start is what it saw.
    pub fn observe(&mut self, core: &NodeCore, space: &Space, t: &ResourceType) {
        let id = type_id(space, t);
        if !self.types.contains_key(&id) {
            self.read(core, space, t, true);
        }
    }

    /// The watch events rendered so far.
    pub fn events(&mut self) -> &mut EventCache {
        &mut self.events
    }

    /// Reads every status of `t` in `space` now, stamping what changed; the latest
    /// epoch. A journal that starts here (a watch, with no read before it since the
    /// node started) stamps every object: no one is known to have seen them.
    pub fn refresh(&mut self, core: &NodeCore, space: &Space, t: &ResourceType) -> u64 {
        self.read(core, space, t, false)
    }

    fn read(&mut self, core: &NodeCore, space: &Space, t: &ResourceType, seen: bool) -> u64 {
        let head = core.log().head().0;
        let id = type_id(space, t);
        let fresh = !self.types.contains_key(&id);
        let journal = self.types.entry(id).or_insert_with(|| TypeJournal {
            epoch: 0,
            objects: BTreeMap::new(),
            born: BTreeMap::new(),
            gone: BTreeMap::new(),
            heads: VecDeque::new(),
            refreshed: tokio::time::Instant::now(),
        });
        journal.refreshed = tokio::time::Instant::now();
        let before = journal.epoch;
        if journal.heads.back().is_none_or(|(h, _)| *h != head) {
            journal.heads.push_back((head, before));
            if journal.heads.len() > HEADS {
                journal.heads.pop_front();
            }
        }
        let next = before + 1;
        // A built-in kind without a `.status` (a ConfigMap) never changes but by a
        // write: a new one is the history's `ADDED`, not a status change (a `MODIFIED`
        // after it, with nothing modified, reads to an informer as an update).
        let no_status = crate::fleet_status::builtin_has_status(&t.group, &t.kind) == Some(false);
        if no_status {
            // Nothing to stamp, ever: no object needs reading (a watch of ConfigMaps
            // starts without going through each).
            return journal.epoch;
        }
        let mut stamped = false;
        let mut objects = BTreeMap::new();
        let members: Vec<(ObjectKey, u64)> = if t.is_fleet_status() {
            crate::fleet_status::entries(core, space, &t.kind, None)
                .into_iter()
                .filter_map(|e| {
                    let v = crate::fleet_status::render(core, &e, head)?;
                    Some((e.key, crate::fleet_status::digest(&v)))
                })
                .collect()
        } else {
            core.log()
                .live()
                .filter(|o| {
                    let k = o.key();
                    k.space == *space && k.group == t.group && k.kind == t.kind
                })
                .map(|o| (o.key().clone(), render::status_digest(core, o)))
                .collect()
        };
        for (k, digest) in members {
            let k = &k;
            let at = match journal.objects.get(k) {
                Some((old, at)) if *old == digest => *at,
                // A journal started by a read stamps nothing: the reader saw all of it.
                None if fresh && seen => 0,
                _ => {
                    stamped = true;
                    next
                }
            };
            objects.insert(k.clone(), (digest, at));
            journal.born.entry(k.clone()).or_insert(at);
            journal.gone.remove(k);
        }
        if t.is_fleet_status() {
            for k in journal.objects.keys().filter(|k| !objects.contains_key(*k)) {
                journal.gone.insert(k.clone(), next);
                stamped = true;
            }
            while journal.gone.len() > GONE {
                let oldest = journal
                    .gone
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => journal.gone.remove(&k),
                    None => break,
                };
            }
        }
        journal.born.retain(|k, _| objects.contains_key(k));
        journal.objects = objects;
        if stamped {
            journal.epoch = next;
        }
        journal.epoch
    }

    /// Refreshes `t` in `space` if no one has for `every`; the latest epoch.
    pub fn refresh_if_due(
        &mut self,
        core: &NodeCore,
        space: &Space,
        t: &ResourceType,
        every: Duration,
    ) -> u64 {
        match self.types.get(&type_id(space, t)) {
            Some(j) if j.refreshed.elapsed() < every => j.epoch,
            _ => self.refresh(core, space, t),
        }
    }

    /// The epoch after which a client that listed `t` at `revision` may have missed a
    /// status change: the epoch before the first refresh that saw a head at or past
    /// `revision` (0 when the journal's heads start later, so that a watch is told
    /// everything the journal holds).
    pub fn epoch_at(&self, space: &Space, t: &ResourceType, revision: u64) -> u64 {
        let Some(j) = self.types.get(&type_id(space, t)) else {
            return 0;
        };
        match j.heads.front() {
            Some((oldest, _)) if *oldest > revision => 0,
            _ => j
                .heads
                .iter()
                .find(|(h, _)| *h >= revision)
                .map_or(j.epoch, |(_, e)| *e),
        }
    }

    /// Whether the journal first saw `key` (of `t` in `space`) after `epoch`.
    pub fn born_after(&self, space: &Space, t: &ResourceType, key: &ObjectKey, epoch: u64) -> bool {
        self.types
            .get(&type_id(space, t))
            .and_then(|j| j.born.get(key))
            .is_some_and(|at| *at > epoch)
    }

    /// The fleet statuses of `t` in `space` that went after `epoch`.
    pub fn gone_since(&self, space: &Space, t: &ResourceType, epoch: u64) -> Vec<ObjectKey> {
        self.types
            .get(&type_id(space, t))
            .map(|j| {
                j.gone
                    .iter()
                    .filter(|(_, at)| **at > epoch)
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The objects of `t` in `space` whose status was stamped after `epoch`.
    pub fn changed_since(&self, space: &Space, t: &ResourceType, epoch: u64) -> Vec<ObjectKey> {
        match self.types.get(&type_id(space, t)) {
            Some(j) if j.epoch > epoch => j
                .objects
                .iter()
                .filter(|(_, (_, at))| *at > epoch)
                .map(|(k, _)| k.clone())
                .collect(),
            _ => Vec::new(),
        }
    }
}
