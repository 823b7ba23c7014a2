//! Watches: `?watch=true` streams `{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK",
//! "object": ...}` lines, as kube-apiserver's watch cache does.
//!
//! * From a `resourceVersion`: every write after it, in order, one event per write,
//!   never coalesced, each with the object as written and that write's
//!   `resourceVersion` (from the root's [`WatchHistory`]). A write that makes an object
//!   match the selectors is `ADDED`, one that makes it stop matching `DELETED` (with
//!   its last matching state). A version below the history's floor (or from before
//!   the root's start) is answered 410 `Expired` (`too old resource version: X (Y)`),
//!   so the client lists again; one above the head 504 `ResourceVersionTooLarge`.
//! * Without one (or with `0`): every matching object first as `ADDED`, then changes.
//! * `sendInitialEvents=true&resourceVersionMatch=NotOlderThan` (a streaming list,
//!   client-go's WatchList): the current objects as `ADDED`, sorted by namespace and
//!   name, then (with `allowWatchBookmarks=true`, which clients send with it) a
//!   `BOOKMARK` at the list's `resourceVersion` annotated
//!   `k8s.io/initial-events-end: "true"` and `k8s.io/initial-events-list-blueprint`
//!   (an empty list, for list-over-watch), then changes. `sendInitialEvents=false`:
//!   changes only, from the `resourceVersion` or from now.
//! * `allowWatchBookmarks=true`: a `BOOKMARK` with the current `resourceVersion`
//!   after [`BOOKMARK_EVERY`] without events.
//!
//! The stream is the response body itself: it asks the node for the writes since the
//! last position it delivered whenever the node commits a new head (at once, so an
//! event reaches every watcher a few milliseconds after the write), and at least every
//! [`POLL`]; status changes (which move no revision) come from the shared
//! [`StatusJournal`], read again every [`STATUS_EVERY`]. A watch from a
//! `resourceVersion` starts with every change after it, status changes included, in
//! the same turn of the node that fixes where it goes on from: nothing falls between.
//! It ends when the client goes (the body is dropped), at `timeoutSeconds`, or when the
//! node stops.

use std::collections::VecDeque;
use std::time::Duration;

use hyper::body::{Bytes, Frame};
use serde_json::{Value, json};
use strata_protocol::model::{Object, ObjectKey, Space};

use super::event_cache::{Event, EventId, event_name, line};
use super::render;
use super::status_journal::{SharedJournal, StatusJournal};
use crate::kube::catalog::ResourceType;
use crate::kube::selector::{FieldQuery, LabelQuery};
use crate::kube::{Answer, failure};
use crate::tier::core::NodeCore;
use crate::tier::core::history::{EventType, WatchHistory};
use crate::tier::runtime::NodeClient;

/// How often a watch asks the node what changed when no new head woke it.
pub const POLL: Duration = Duration::from_millis(200);
/// A bookmark goes out after this long without events, when the client asked for them.
pub const BOOKMARK_EVERY: Duration = Duration::from_secs(10);
/// How often a watch looks for objects whose status (what their clusters report)
/// changed: a status change moves no revision, yet `kubectl wait` and `rollout status`
/// wait for exactly that. A look reads every object the watch selects, so it goes by
/// time, not by the number of writes.
pub const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How long a watch lasts without `timeoutSeconds` (clients then watch again).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// What a watch follows.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// The space.
    pub space: Space,
    /// The type.
    pub resource: ResourceType,
    /// `None`: every namespace.
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelQuery,
    /// `fieldSelector`.
    pub fields: FieldQuery,
    /// Events carry one-row tables (`kubectl get -w`).
    pub table: bool,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// `sendInitialEvents`, when given (with `resourceVersionMatch=NotOlderThan`).
    pub initial_events: Option<bool>,
}

/// The annotation of the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";
/// The annotation of that bookmark that carries an empty list (base64 of its JSON), which
/// client-go fills with the initial events when it lists over a watch.
pub const INITIAL_EVENTS_BLUEPRINT: &str = "k8s.io/initial-events-list-blueprint";

/// What a watch sends before it follows the changes after its start.
#[derive(Debug, Default)]
pub struct First {
    /// The objects at the start whose `ADDED` events open the watch, in order: rendered
    /// `INITIAL_BATCH` (256) at a time as the client reads them, so that a watch of 10,000
    /// objects holds 10,000 keys, not 10,000 rendered objects, and the node renders them
    /// between other work, not in one turn.
    pub initial: VecDeque<ObjectKey>,
    /// The events after those (the bookmark ending a streaming list), or every first
    /// event of a watch from a `resourceVersion`.
    pub then: Vec<Event>,
}

/// How many initial events a watch renders in one turn of the node.
const INITIAL_BATCH: usize = 256;

/// A watch that has started: what to send first, and where to continue from.
#[derive(Debug)]
pub struct Watch {
    spec: WatchSpec,
    node: NodeClient,
    since: u64,
    pending: VecDeque<Event>,
    /// The initial objects not rendered yet, and what is sent once they are.
    first: First,
    /// Nothing follows what is pending (the history the watch needed is gone).
    ended: bool,
    /// The status journal, and the epoch delivered so far.
    journal: SharedJournal,
    epoch: u64,
    /// The node's committed head: a change wakes the watch.
    head: tokio::sync::watch::Receiver<u64>,
}

impl WatchSpec {
    /// Whether the watch's type, space and namespace hold `key`.
    fn holds(&self, key: &ObjectKey) -> bool {
        let t = &self.resource;
        key.space == self.space
            && key.group == t.group
            && key.kind == t.kind
            && (self.namespace.is_none() || key.namespace == self.namespace)
    }

    /// Whether the watch selects this state of an object: its type, namespace, labels
    /// and fields.
    pub fn selects(&self, o: &Object) -> bool {
        self.holds(o.key())
            && self.labels.matches(&o.meta.labels)
            && self.fields.matches_object(o.key(), &o.body)
    }

    /// One event: `object` rendered (a table row for `kubectl get -w`) with the
    /// `resourceVersion` `rv`.
    fn event(&self, core: &NodeCore, kind: &str, object: &Object, rv: u64) -> Value {
        let mut rendered = render::object(core, object);
        rendered["metadata"]["resourceVersion"] = json!(rv.to_string());
        let object = if self.table && kind == "DELETED" {
            render::deleted_table(&rendered["metadata"])
        } else if self.table {
            let mut table = render::table(core, &[object], rv);
            if let Some(row) = table["rows"].get_mut(0) {
                row["object"]["metadata"]["resourceVersion"] = json!(rv.to_string());
            }
            table
        } else {
            rendered
        };
        json!({ "type": kind, "object": object })
    }

    /// The event of a write (or of a status change, `MODIFIED` at the object's own
    /// revision) as every watch of this form sends it: rendered once for all of them
    /// while the type's status `epoch` holds ([`super::event_cache`]).
    fn shared_event(
        &self,
        core: &NodeCore,
        journal: &mut StatusJournal,
        kind: EventType,
        object: &Object,
        (rv, epoch): (u64, u64),
    ) -> Event {
        let id = EventId {
            key: object.key().clone(),
            revision: rv,
            kind,
            table: self.table,
            epoch,
        };
        let render = || line(&self.event(core, event_name(kind), object, rv));
        Event::Line(journal.events().line(id, render))
    }

    /// The fleet status `key` names as a client reads it, when the watch selects it
    /// (a watch of `FleetStatus` or `ClusterFleetStatus`, made from reports).
    fn fleet(&self, core: &NodeCore, key: &ObjectKey, head: u64) -> Option<Value> {
        if !self.holds(key) || !self.fields.matches(key) {
            return None;
        }
        let ns = key.namespace.as_deref();
        let v = crate::fleet_status::find(core, &key.space, &self.resource.kind, ns, &key.name)
            .and_then(|e| crate::fleet_status::render(core, &e, head))?;
        let labels = serde_json::from_value(v["metadata"]["labels"].clone()).unwrap_or_default();
        self.labels.matches(&labels).then_some(v)
    }

    /// One event of a fleet status: `v` as read (a table row for `kubectl get -w`), or
    /// for `DELETED` with `v` gone, the name it had.
    fn fleet_event(&self, kind: &str, key: &ObjectKey, v: Option<Value>, head: u64) -> Value {
        let object = match v {
            Some(v) if self.table => crate::fleet_status::table(&[v], head),
            Some(v) => v,
            None => {
                let mut meta = json!({ "name": key.name, "resourceVersion": head.to_string() });
                if let Some(ns) = &key.namespace {
                    meta["namespace"] = json!(ns);
                }
                if self.table {
                    render::deleted_table(&meta)
                } else {
                    json!({ "apiVersion": self.resource.api_version(), "kind": self.resource.kind, "metadata": meta })
                }
            }
        };
        json!({ "type": kind, "object": object })
    }

    /// The fleet statuses the watch selects, as `ADDED` events.
    fn fleet_now(&self, core: &NodeCore, head: u64) -> Vec<Value> {
        let ns = self.namespace.as_deref();
        crate::fleet_status::entries(core, &self.space, &self.resource.kind, ns)
            .into_iter()
            .filter_map(|e| {
                let v = self.fleet(core, &e.key, head)?;
                Some(self.fleet_event("ADDED", &e.key, Some(v), head))
            })
            .collect()
    }

    /// Events for the fleet statuses the journal saw appear, change or go after
    /// `epoch`.
    fn fleet_changes(&self, core: &NodeCore, journal: &StatusJournal, epoch: u64) -> Vec<Value> {
        let head = core.log().head().0;
        let (space, t) = (&self.space, &self.resource);
        let mut out: Vec<Value> = journal
            .changed_since(space, t, epoch)
            .into_iter()
            .filter_map(|k| {
                let v = self.fleet(core, &k, head)?;
                let kind = if journal.born_after(space, t, &k, epoch) {
                    "ADDED"
                } else {
                    "MODIFIED"
                };
                Some(self.fleet_event(kind, &k, Some(v), head))
            })
            .collect();
        out.extend(
            journal
                .gone_since(space, t, epoch)
                .into_iter()
                .filter(|k| self.holds(k) && self.fields.matches(k))
                .map(|k| self.fleet_event("DELETED", &k, None, head)),
        );
        out
    }

    /// A `BOOKMARK` at `rv`; the one that ends a streaming list's initial events is
    /// annotated so.
    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Value {
        let mut object = json!({
            "apiVersion": self.resource.api_version(),
            "kind": self.resource.kind,
            "metadata": { "resourceVersion": rv.to_string() },
        });
        if initial_events_end {
            let blueprint = json!({
                "apiVersion": self.resource.api_version(),
                "kind": format!("{}List", self.resource.kind),
                "metadata": { "resourceVersion": rv.to_string() },
                "items": [],
            });
            object["metadata"]["annotations"] = json!({
                INITIAL_EVENTS_END: "true",
                INITIAL_EVENTS_BLUEPRINT: crate::kube::kubeconfig::base64(blueprint.to_string().as_bytes()),
            });
        }
        json!({ "type": "BOOKMARK", "object": object })
    }

    /// Starts the watch inside the node: the first events, the revision they reach and
    /// the status journal's epoch they reach; or the Status refusing it. From a
    /// `resourceVersion`, the first events are every write after it (the root's watch
    /// history), and every status change the journal stamped after it (see
    /// [`StatusJournal`]), so nothing that happened between the client's list and this
    /// watch is lost.
    pub fn start(
        &self,
        core: &NodeCore,
        journal: &mut StatusJournal,
        from: Option<u64>,
    ) -> Result<(First, u64, u64), Answer> {
        let head = core.log().head().0;
        let events = |then: Vec<Event>| First {
            initial: VecDeque::new(),
            then,
        };
        if let Some(rv) = from.filter(|rv| *rv > head) {
            return Err(crate::kube::Status::too_large_resource_version(rv, head).into());
        }
        let epoch = journal.refresh(core, &self.space, &self.resource);
        let value = Event::Value;
        // kube-apiserver: the current state first when asked (`sendInitialEvents`), or
        // for a legacy watch from no version (or `0`).
        let initial = self
            .initial_events
            .unwrap_or(matches!(from, None | Some(0)));
        if initial && self.resource.is_fleet_status() {
            let mut events: Vec<Event> =
                self.fleet_now(core, head).into_iter().map(value).collect();
            if self.initial_events == Some(true) && self.bookmarks {
                events.push(value(self.bookmark(head, true)));
            }
            return Ok((
                First {
                    initial: VecDeque::new(),
                    then: events,
                },
                head,
                epoch,
            ));
        }
        if initial {
            let mut objects: Vec<&Object> = core.log().live().filter(|o| self.selects(o)).collect();
            objects.sort_by(|a, b| {
                (&a.key().namespace, &a.key().name).cmp(&(&b.key().namespace, &b.key().name))
            });
            let mut then = Vec::new();
            if self.initial_events == Some(true) && self.bookmarks {
                then.push(value(self.bookmark(head, true)));
            }
            let initial = objects.into_iter().map(|o| o.key().clone()).collect();
            return Ok((First { initial, then }, head, epoch));
        }
        match from {
            None | Some(0) => Ok((events(Vec::new()), head, epoch)),
            Some(rv) => {
                let (sent, mut changes) = self.changes(core, journal, rv, epoch)?;
                let after = journal.epoch_at(&self.space, &self.resource, rv);
                changes.extend(self.status_changes(core, journal, (after, epoch), &sent));
                Ok((events(changes), head, epoch))
            }
        }
    }

    /// Every first event at once, as the stream sends them: the initial objects
    /// rendered, then the rest (for a caller that holds the node, as tests do).
    pub fn render_first(&self, core: &NodeCore, mut first: First) -> Vec<Value> {
        let keys: Vec<ObjectKey> = first.initial.drain(..).collect();
        let mut events = self.initial_events(core, &keys);
        events.extend(first.then.into_iter().map(Event::into_value));
        events
    }

    /// The `ADDED` events of initial objects, as they are now. One deleted since the
    /// watch started is left out, and one changed since is sent as it is now: either
    /// way its change follows from the history, as the watch continues from its start.
    fn initial_events(&self, core: &NodeCore, keys: &[ObjectKey]) -> Vec<Value> {
        keys.iter()
            .filter_map(|k| core.log().get(k))
            .filter(|o| self.selects(o))
            .map(|o| self.event(core, "ADDED", o, o.revision.0))
            .collect()
    }

    /// What changed after revision `since` and status epoch `epoch`, looking at the
    /// statuses again if no one did for [`STATUS_EVERY`]; the events (as a client
    /// reads them), the head and the epoch they reach.
    pub fn follow(
        &self,
        core: &NodeCore,
        journal: &mut StatusJournal,
        since: u64,
        epoch: u64,
    ) -> Result<(Vec<Value>, u64, u64), Answer> {
        let (events, head, now) = self.follow_events(core, journal, since, epoch)?;
        Ok((
            events.into_iter().map(Event::into_value).collect(),
            head,
            now,
        ))
    }

    /// [`WatchSpec::follow`] as the stream sends it. The statuses are looked at
    /// before the writes are rendered, so that a write's event carries every status
    /// change the look stamped (and the status change is not sent again).
    fn follow_events(
        &self,
        core: &NodeCore,
        journal: &mut StatusJournal,
        since: u64,
        epoch: u64,
    ) -> Result<(Vec<Event>, u64, u64), Answer> {
        let head = core.log().head().0;
        let now = journal.refresh_if_due(core, &self.space, &self.resource, STATUS_EVERY);
        let (sent, mut events) = if head == since {
            (Vec::new(), Vec::new())
        } else {
            self.changes(core, journal, since, now)?
        };
        events.extend(self.status_changes(core, journal, (epoch, now), &sent));
        Ok((events, head, now))
    }

    /// `MODIFIED` events for the selected objects whose status the journal stamped
    /// after `epoch` (and up to `now`, the type's epoch), but for those `sent`
    /// already has an event for (an object both changed and restatused is sent once).
    fn status_changes(
        &self,
        core: &NodeCore,
        journal: &mut StatusJournal,
        (epoch, now): (u64, u64),
        sent: &[ObjectKey],
    ) -> Vec<Event> {
        if self.resource.is_fleet_status() {
            let events = self.fleet_changes(core, journal, epoch);
            return events.into_iter().map(Event::Value).collect();
        }
        let changed = journal.changed_since(&self.space, &self.resource, epoch);
        changed
            .into_iter()
            .filter(|k| self.holds(k) && !sent.contains(k))
            .filter_map(|k| core.log().get(&k))
            .filter(|o| self.selects(o))
            .map(|o| {
                let at = (o.revision.0, now);
                self.shared_event(core, journal, EventType::Modified, o, at)
            })
            .collect()
    }

    /// Events for every write after `since`, from the root's watch history, as
    /// kube-apiserver sends them (see [`WatchHistory::events_after`]), rendered once
    /// for every watch while the type's status epoch is `epoch`; with the objects they
    /// are about. 410 `Expired` when the history no longer reaches back to `since`.
    fn changes(
        &self,
        core: &NodeCore,
        journal: &mut StatusJournal,
        since: u64,
        epoch: u64,
    ) -> Result<(Vec<ObjectKey>, Vec<Event>), Answer> {
        let history: &WatchHistory = core.history();
        let events = history
            .events_after(since, |o| self.selects(o))
            .map_err(|e| failure(410, "Expired", e.to_string(), None))?;
        let keys = events.iter().map(|e| e.object.key().clone()).collect();
        let events = events
            .iter()
            .map(|e| self.shared_event(core, journal, e.kind, e.object, (e.revision, epoch)))
            .collect();
        Ok((keys, events))
    }
}

impl Watch {
    /// A watch that sends `first`, then follows from revision `since` and status
    /// epoch `epoch`; `head` is the node's head as it was before the watch started
    /// (a commit in between wakes it at once).
    pub fn new(
        spec: WatchSpec,
        node: NodeClient,
        head: tokio::sync::watch::Receiver<u64>,
        journal: SharedJournal,
        mut first: First,
        (since, epoch): (u64, u64),
    ) -> Watch {
        let pending = if first.initial.is_empty() {
            std::mem::take(&mut first.then).into()
        } else {
            VecDeque::new()
        };
        Watch {
            spec,
            head,
            node,
            since,
            pending,
            first,
            ended: false,
            journal,
            epoch,
        }
    }

    /// The response body: one JSON event per line.
    pub fn into_stream(
        self,
    ) -> impl futures::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>> + Send {
        let deadline = tokio::time::Instant::now() + self.spec.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let state = (self, tokio::time::Instant::now());
        futures::stream::unfold(state, move |(mut w, mut quiet_since)| async move {
            loop {
                if let Some(event) = w.pending.pop_front() {
                    return Some((Ok(Frame::data(event.into_line())), (w, quiet_since)));
                }
                if w.ended || tokio::time::Instant::now() >= deadline {
                    return None;
                }
                if !w.first.initial.is_empty() {
                    let n = w.first.initial.len().min(INITIAL_BATCH);
                    let batch: Vec<ObjectKey> = w.first.initial.drain(..n).collect();
                    let spec = w.spec.clone();
                    let events = w
                        .node
                        .query(move |core: &mut NodeCore| spec.initial_events(core, &batch))
                        .await?;
                    w.pending.extend(events.into_iter().map(Event::Value));
                    if w.first.initial.is_empty() {
                        w.pending.extend(std::mem::take(&mut w.first.then));
                    }
                    continue;
                }
                tokio::select! {
                    // A new head: what changed goes out now.
                    changed = w.head.changed() => {
                        if changed.is_err() {
                            // The node stopped.
                            return None;
                        }
                    }
                    // Nothing committed for a while: look at the statuses anyway.
                    () = tokio::time::sleep(POLL) => {}
                }
                let spec = w.spec.clone();
                let (since, epoch) = (w.since, w.epoch);
                let journal = w.journal.clone();
                let polled = w
                    .node
                    .query(move |core: &mut NodeCore| {
                        // Not had (it cannot be, in the node's turn): nothing now, the
                        // next wake looks again from the same place.
                        journal
                            .with(|j| spec.follow_events(core, j, since, epoch))
                            .unwrap_or(Ok((Vec::new(), since, epoch)))
                    })
                    .await?;
                match polled {
                    Ok((events, head, epoch)) => {
                        w.since = head;
                        w.epoch = epoch;
                        if events.is_empty() {
                            if w.spec.bookmarks && quiet_since.elapsed() >= BOOKMARK_EVERY {
                                quiet_since = tokio::time::Instant::now();
                                w.pending
                                    .push_back(Event::Value(w.spec.bookmark(head, false)));
                            }
                        } else {
                            quiet_since = tokio::time::Instant::now();
                            w.pending.extend(events);
                        }
                    }
                    Err((_, status)) => {
                        // The history the watch needed is gone: say so, then end.
                        let error = json!({ "type": "ERROR", "object": status });
                        w.pending.push_back(Event::Value(error));
                        w.ended = true;
                    }
                }
            }
        })
    }
}
