//! Watches: `?watch=true` streams `{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK",
//! "object": ...}` lines from a `resourceVersion` (the root's revision) on. Without
//! one (or with `0`), every matching object comes first as `ADDED`. A version the log
//! has compacted away answers 410 Gone, as Kubernetes does, so the client lists again.
//!
//! The stream is the response body itself: it asks the node for the keys changed since
//! the last position it delivered whenever the node commits a new head (at once, so an
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
use strata_protocol::model::{ObjectKey, Position, Space};

use super::render;
use super::status_journal::{SharedJournal, StatusJournal};
use crate::kube::catalog::ResourceType;
use crate::kube::selector::{FieldQuery, LabelQuery};
use crate::kube::{Answer, failure};
use crate::node::core::NodeCore;
use crate::node::runtime::NodeClient;

/// How often a watch asks the node what changed when no new head woke it.
pub const POLL: Duration = Duration::from_millis(200);
/// A bookmark goes out after this long without events, when the client asked for them.
const BOOKMARK_EVERY: Duration = Duration::from_secs(10);
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
}

/// A watch that has started: what to send first, and where to continue from.
#[derive(Debug)]
pub struct Watch {
    spec: WatchSpec,
    node: NodeClient,
    since: u64,
    pending: VecDeque<Value>,
    /// Nothing follows what is pending (the history the watch needed is gone).
    ended: bool,
    /// The status journal, and the epoch delivered so far.
    journal: SharedJournal,
    epoch: u64,
    /// The node's committed head: a change wakes the watch.
    head: tokio::sync::watch::Receiver<u64>,
}

impl WatchSpec {
    fn selects(&self, key: &ObjectKey) -> bool {
        let t = &self.resource;
        key.space == self.space
            && key.group == t.group
            && key.kind == t.kind
            && (self.namespace.is_none() || key.namespace == self.namespace)
            && self.fields.matches(key)
    }

    fn event(&self, core: &NodeCore, kind: &str, key: &ObjectKey, head: u64) -> Value {
        let object = match core.log().get(key) {
            Some(o) if self.table => render::table(core, &[o], head),
            Some(o) => render::object(core, o),
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

    /// Starts the watch inside the node: the first events, the revision they reach and
    /// the status journal's epoch they reach; or the Status refusing it. From a
    /// `resourceVersion`, the first events are every change after it: the log's, and
    /// every status change the journal stamped after it (see [`StatusJournal`]), so
    /// nothing that happened between the client's list and this watch is lost.
    pub fn start(
        &self,
        core: &NodeCore,
        journal: &mut StatusJournal,
        from: Option<u64>,
    ) -> Result<(Vec<Value>, u64, u64), Answer> {
        let head = core.log().head().0;
        if let Some(rv) = from.filter(|rv| *rv > head) {
            return Err(crate::kube::Status::too_large_resource_version(rv, head).into());
        }
        let epoch = journal.refresh(core, &self.space, &self.resource);
        match from {
            None | Some(0) => {
                let events = core
                    .log()
                    .live()
                    .filter(|o| self.selects(o.key()) && self.labels.matches(&o.meta.labels))
                    .map(|o| self.event(core, "ADDED", o.key(), head))
                    .collect();
                Ok((events, head, epoch))
            }
            Some(rv) => {
                let mut events = self.changes(core, rv)?;
                let after = journal.epoch_at(&self.space, &self.resource, rv);
                events.extend(self.status_changes(core, journal, after, &events));
                Ok((events, head, epoch))
            }
        }
    }

    /// What changed after revision `since` and status epoch `epoch`, looking at the
    /// statuses again if no one did for [`STATUS_EVERY`]; the events, the
    /// head and the epoch they reach.
    pub fn follow(
        &self,
        core: &NodeCore,
        journal: &mut StatusJournal,
        since: u64,
        epoch: u64,
    ) -> Result<(Vec<Value>, u64, u64), Answer> {
        let head = core.log().head().0;
        let mut events = if head == since {
            Vec::new()
        } else {
            self.changes(core, since)?
        };
        let now = journal.refresh_if_due(core, &self.space, &self.resource, STATUS_EVERY);
        events.extend(self.status_changes(core, journal, epoch, &events));
        Ok((events, head, now))
    }

    /// `MODIFIED` events for the selected objects whose status the journal stamped
    /// after `epoch`, but for those `sent` already names (an object both changed and
    /// restatused is sent once).
    fn status_changes(
        &self,
        core: &NodeCore,
        journal: &StatusJournal,
        epoch: u64,
        sent: &[Value],
    ) -> Vec<Value> {
        let head = core.log().head().0;
        let sent = events_name(sent);
        journal
            .changed_since(&self.space, &self.resource, epoch)
            .into_iter()
            .filter(|k| self.selects(k))
            .filter_map(|k| core.log().get(&k).map(|o| (k, o)))
            .filter(|(_, o)| self.labels.matches(&o.meta.labels))
            .map(|(k, _)| self.event(core, "MODIFIED", &k, head))
            .filter(|e| !sent.contains(&event_id(e)))
            .collect()
    }

    /// Events for what changed after `since`, as kube-apiserver sends them: `ADDED`
    /// for an object the watch did not select at `since` (new, or its labels now
    /// match), `MODIFIED` for one it did, `DELETED` for one it did that is gone or no
    /// longer matches (an informer drops it from its cache).
    fn changes(&self, core: &NodeCore, since: u64) -> Result<Vec<Value>, Answer> {
        let log = core.log();
        let head = log.head().0;
        if since < log.floor().0 {
            return Err(failure(
                410,
                "Expired",
                format!(
                    "too old resource version: {since} (the root keeps history from {})",
                    log.floor().0
                ),
                None,
            ));
        }
        let mut out = Vec::new();
        for key in log.keys_changed(Position(since), log.head()) {
            if !self.selects(&key) {
                continue;
            }
            let before = log
                .entry(&key)
                .and_then(|e| e.visible_at(Position(since)))
                .is_some_and(|m| self.labels.matches(&m.labels));
            match log.get(&key) {
                Some(o) if self.labels.matches(&o.meta.labels) => {
                    let kind = if before { "MODIFIED" } else { "ADDED" };
                    out.push(self.event(core, kind, &key, head));
                }
                _ if before => out.push(self.event(core, "DELETED", &key, head)),
                _ => {}
            }
        }
        Ok(out)
    }
}

fn events_name(events: &[Value]) -> Vec<Value> {
    events.iter().map(event_id).collect()
}

fn event_id(e: &Value) -> Value {
    let m = &e["object"]["metadata"];
    json!([m["namespace"], m["name"]])
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
        first: Vec<Value>,
        (since, epoch): (u64, u64),
    ) -> Watch {
        Watch {
            spec,
            head,
            node,
            since,
            pending: first.into(),
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
                    let mut line = event.to_string().into_bytes();
                    line.push(b'\n');
                    return Some((Ok(Frame::data(Bytes::from(line))), (w, quiet_since)));
                }
                if w.ended || tokio::time::Instant::now() >= deadline {
                    return None;
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
                            .with(|j| spec.follow(core, j, since, epoch))
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
                                w.pending.push_back(json!({
                                    "type": "BOOKMARK",
                                    "object": {
                                        "apiVersion": w.spec.resource.api_version(),
                                        "kind": w.spec.resource.kind,
                                        "metadata": { "resourceVersion": head.to_string() },
                                    },
                                }));
                            }
                        } else {
                            quiet_since = tokio::time::Instant::now();
                            w.pending.extend(events);
                        }
                    }
                    Err((_, status)) => {
                        // The history the watch needed is gone: say so, then end.
                        w.pending
                            .push_back(json!({ "type": "ERROR", "object": status }));
                        w.ended = true;
                    }
                }
            }
        })
    }
}
