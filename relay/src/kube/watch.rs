//! Watches: `?watch=true` streams `{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK",
//! "object": ...}` lines from a `resourceVersion` (the root's revision) on. Without
//! one (or with `0`), every matching object comes first as `ADDED`. A version the log
//! has compacted away answers 410 Gone, as Kubernetes does, so the client lists again.
//!
//! The stream is the response body itself: it asks the node for the keys changed since
//! the last position it delivered whenever the node commits a new head (at once, so an
//! event reaches every watcher a few milliseconds after the write), and at least every
//! [`POLL`]; it looks for status changes every [`STATUS_EVERY`]. It ends when the client
//! goes (the body is dropped), at `timeoutSeconds`, or when the node stops.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use hyper::body::{Bytes, Frame};
use serde_json::{Value, json};
use strata_protocol::model::{ObjectKey, Position, Space};

use super::catalog::ResourceType;
use super::selector::{FieldQuery, LabelQuery};
use super::{Answer, failure, render};
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
    /// The last status seen per object, to send status changes too.
    statuses: BTreeMap<ObjectKey, u64>,
    /// When statuses were last looked at (`None`: never yet).
    status_looked: Option<tokio::time::Instant>,
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

    /// Starts the watch inside the node: the first events, and the position they reach;
    /// or the Status refusing it.
    pub fn start(&self, core: &NodeCore, from: Option<u64>) -> Result<(Vec<Value>, u64), Answer> {
        let head = core.log().head().0;
        match from {
            None | Some(0) => {
                let events = core
                    .log()
                    .live()
                    .filter(|o| self.selects(o.key()) && self.labels.matches(&o.meta.labels))
                    .map(|o| self.event(core, "ADDED", o.key(), head))
                    .collect();
                Ok((events, head))
            }
            Some(rv) if rv > head => Err(super::too_large_resource_version(rv, head)),
            Some(rv) => self.changes(core, rv).map(|events| (events, head)),
        }
    }

    /// `MODIFIED` events for the objects whose status changed since `seen` (updated);
    /// the first look only records.
    fn status_changes(
        &self,
        core: &NodeCore,
        seen: &mut BTreeMap<ObjectKey, u64>,
        first: bool,
    ) -> Vec<Value> {
        let head = core.log().head().0;
        let mut out = Vec::new();
        let mut now = BTreeMap::new();
        for o in core.log().live() {
            if !self.selects(o.key()) || !self.labels.matches(&o.meta.labels) {
                continue;
            }
            let digest = render::status_digest(core, o);
            if !first && seen.get(o.key()).is_some_and(|d| *d != digest) {
                out.push(self.event(core, "MODIFIED", o.key(), head));
            }
            now.insert(o.key().clone(), digest);
        }
        *seen = now;
        out
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
    /// A watch that sends `first`, then follows from `since`.
    pub fn new(spec: WatchSpec, node: NodeClient, first: Vec<Value>, since: u64) -> Watch {
        Watch {
            spec,
            head: node.head_changes(),
            node,
            since,
            pending: first.into(),
            ended: false,
            statuses: BTreeMap::new(),
            status_looked: None,
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
                let since = w.since;
                let first = w.status_looked.is_none();
                let look = w
                    .status_looked
                    .is_none_or(|at| at.elapsed() >= STATUS_EVERY);
                if look {
                    w.status_looked = Some(tokio::time::Instant::now());
                }
                let mut seen = std::mem::take(&mut w.statuses);
                let polled = w
                    .node
                    .query(move |core: &mut NodeCore| {
                        let head = core.log().head().0;
                        let mut events = if head == since {
                            Vec::new()
                        } else {
                            match spec.changes(core, since) {
                                Ok(e) => e,
                                Err(gone) => return (Err(gone), seen),
                            }
                        };
                        if look {
                            let changed = spec.status_changes(core, &mut seen, first);
                            // An object both changed and restatused is sent once.
                            let sent = events_name(&events);
                            events.extend(
                                changed.into_iter().filter(|c| !sent.contains(&event_id(c))),
                            );
                        }
                        (Ok((events, head)), seen)
                    })
                    .await;
                let (polled, seen) = polled?;
                w.statuses = seen;
                match polled {
                    Ok((events, head)) => {
                        w.since = head;
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
