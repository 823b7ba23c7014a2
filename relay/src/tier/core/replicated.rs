//! A root replica on etcd taking in what other replicas commit
//! ([`strata_node::store::ReplicaEvent`]): at a standby, the writer's log, which its
//! children are served from with the same revisions (so a child moves between replicas
//! with its cursor and a delta); at every replica, the reports of children connected
//! to another one, so that inventory, routes and status are the same everywhere.

use std::collections::BTreeSet;

use strata_node::store::{Replicated, ReportSlot};
use strata_protocol::model::ObjectKey;
use strata_protocol::sync::{KeyEntry, LogMeta};
use strata_protocol::wire::{Report, ReportKey, ReportValue};

use super::NodeCore;

impl NodeCore {
    /// Whether this root replica serves without writing the log (a standby).
    pub fn is_standby(&self) -> bool {
        self.standby
    }

    /// Takes in records another replica committed; with `full`, they are everything
    /// there is, and what is held here but not among them is gone. The log's records
    /// are taken only at a standby; reports only for children not connected here
    /// (this replica is the one that writes those).
    pub fn take_replicated(&mut self, records: Vec<Replicated>, full: bool) {
        let mut meta: Option<LogMeta> = None;
        let mut entries: Vec<(ObjectKey, Option<KeyEntry>)> = Vec::new();
        let mut reports: Vec<(ReportSlot, Option<ReportValue>)> = Vec::new();
        for r in records {
            match r {
                Replicated::LogMeta(m) => meta = Some(m),
                Replicated::Entry(k, e) => entries.push((k, e)),
                Replicated::Report(slot, v) => reports.push((slot, v.map(|v| *v))),
            }
        }
        if self.standby {
            if full {
                let present: BTreeSet<&ObjectKey> = entries.iter().map(|(k, _)| k).collect();
                let gone: Vec<ObjectKey> = self
                    .log
                    .entries()
                    .map(|(k, _)| k)
                    .filter(|k| !present.contains(k))
                    .cloned()
                    .collect();
                entries.extend(gone.into_iter().map(|k| (k, None)));
            }
            let changed: Vec<ObjectKey> = entries
                .iter()
                .filter(|(k, e)| self.log.entry(k) != e.as_ref())
                .map(|(k, _)| k.clone())
                .collect();
            self.replicated_history(full, meta.as_ref(), &entries);
            self.log.install(meta, entries);
            for key in changed {
                self.note_key(key);
            }
            self.routes_stale = true;
        }
        if full {
            let present: BTreeSet<&ReportSlot> = reports.iter().map(|(s, _)| s).collect();
            let gone: Vec<ReportSlot> = self
                .reports
                .iter()
                .map(|(s, _)| s)
                .filter(|s| !present.contains(s))
                .cloned()
                .collect();
            reports.extend(gone.into_iter().map(|s| (s, None)));
        }
        for (slot, value) in reports {
            self.replicated_report(slot, value);
        }
    }

    /// A standby's watch history: the writer's writes as its records show them, one
    /// event per changed key at the position of its change. A full copy (a standby
    /// that starts or was away) is not a sequence of writes: the history starts again
    /// at its head, and older watches are answered 410 as after a restart.
    fn replicated_history(
        &mut self,
        full: bool,
        meta: Option<&LogMeta>,
        entries: &[(ObjectKey, Option<KeyEntry>)],
    ) {
        let head = meta.map_or(self.log.head(), |m| m.head).0;
        if full {
            self.history.reset(head);
            return;
        }
        let mut writes: Vec<(u64, &ObjectKey, Option<&KeyEntry>)> = entries
            .iter()
            .filter(|(k, e)| self.log.entry(k) != e.as_ref())
            .map(|(k, e)| (e.as_ref().map_or(head, |e| e.position().0), k, e.as_ref()))
            .collect();
        writes.sort_by_key(|(pos, _, _)| *pos);
        for (pos, key, entry) in writes {
            let prev = self.log.get(key).cloned();
            let object = entry.and_then(|e| e.object().cloned());
            if prev != object {
                self.history.record(pos, key.clone(), object, prev);
            }
        }
        self.history.commit(head, self.last_now);
    }

    /// Another replica's child reported (or its report went).
    fn replicated_report(&mut self, slot: ReportSlot, value: Option<ReportValue>) {
        let (child, key) = slot;
        if self.children.contains_key(&child) {
            return;
        }
        let report = Report {
            key: key.clone(),
            value: value.unwrap_or(ReportValue::Removed),
        };
        if !self.reports.accept(&child, report) {
            return;
        }
        match &key {
            ReportKey::Status { object, .. } | ReportKey::Summary { object, .. } => {
                self.dirty.insert(object.clone());
            }
            ReportKey::Cluster { .. } | ReportKey::Link { .. } => {
                self.dirty.extend(self.log.live().map(|o| o.key().clone()));
                self.replan = true;
            }
            ReportKey::Upsynced { .. }
            | ReportKey::Endpoints { .. }
            | ReportKey::Complete { .. } => {}
        }
    }

    /// This replica won the writer lease and holds everything committed before: it
    /// writes from now on (plans, rollouts, compaction, the API's writes).
    pub fn promote(&mut self) {
        self.standby = false;
        self.replan = true;
        self.routes_stale = true;
        self.reload_placements();
    }
}
