//! What the worker tells the agent core: statuses (with the associated objects of
//! workloads), each sent only when it says something new.

use std::collections::BTreeMap;

use strata_protocol::model::{Health, Object, ObjectKey, Status};

use super::Worker;
use crate::kubernetes::associated::{self, has_pods};
use crate::kubernetes::health::assess;

impl Worker {
    /// Reads the associated objects of every workload again: one LIST of ReplicaSets
    /// (when a Deployment is there) and one of Pods per namespace.
    pub(super) async fn resync(&mut self) {
        let mut by_namespace: BTreeMap<String, Vec<ObjectKey>> = BTreeMap::new();
        for key in self.live.keys().filter(|k| has_pods(&k.kind)) {
            if let Some(ns) = &key.namespace {
                by_namespace
                    .entry(ns.clone())
                    .or_default()
                    .push(key.clone());
            }
        }
        for (ns, keys) in by_namespace {
            let deployments = keys.iter().any(|k| k.kind == "Deployment");
            let lists = associated::list_namespace(&self.client, &ns, deployments).await;
            let lists = match lists {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!(namespace = %ns, error = %e, "cannot read associated objects");
                    continue;
                }
            };
            for key in keys {
                let summary = self
                    .live
                    .get(&key)
                    .map(|live| associated::summarize(&key.kind, live, &lists));
                self.report_sync(&key, summary);
            }
        }
    }

    pub(super) fn report_sync(
        &mut self,
        key: &ObjectKey,
        associated: Option<associated::Associated>,
    ) {
        let (Some(live), Some(d)) = (self.live.get(key), self.desired.get(key)) else {
            return;
        };
        let a = assess(&key.kind, live);
        let mut numbers = a.numbers;
        let mut message = a.message;
        // Between two reads, the last summary of the associated objects stands.
        if let Some(assoc) = associated {
            self.associated.insert(key.clone(), assoc);
        }
        if let Some(assoc) = self.associated.get(key) {
            numbers.extend(assoc.numbers());
            if let Some(f) = &assoc.latest_failure {
                message = Some(match message {
                    Some(m) => format!("{m}; {f}"),
                    None => f.clone(),
                });
            }
        }
        let status = Status {
            health: a.health,
            revision: d.object.revision,
            observed_generation: a.observed_generation,
            message,
            numbers,
            status: live
                .get("status")
                .map(|s| serde_json::to_vec(s).unwrap_or_default())
                .unwrap_or_default(),
            observed_at: self.clock.wall(),
        };
        self.send(key, status);
    }

    pub(super) fn report_now(&mut self, key: &ObjectKey, health: Health, message: String) {
        if let Some(d) = self.desired.get(key) {
            let object = d.object.clone();
            self.report_failure(key, &object, health, message);
        }
    }

    pub(super) fn report_failure(
        &mut self,
        key: &ObjectKey,
        object: &Object,
        health: Health,
        message: String,
    ) {
        let status = Status {
            health,
            revision: object.revision,
            observed_generation: None,
            message: Some(message),
            numbers: BTreeMap::new(),
            status: Vec::new(),
            observed_at: self.clock.wall(),
        };
        self.send(key, status);
    }

    /// Sends a status unless it says what the last one said.
    fn send(&mut self, key: &ObjectKey, status: Status) {
        if let Some(prev) = self.reported.get(key) {
            let mut same = prev.clone();
            same.observed_at = status.observed_at;
            if same == status {
                return;
            }
        }
        self.reported.insert(key.clone(), status.clone());
        if self.statuses.send((key.clone(), status)).is_ok() {
            self.wake.notify_one();
        }
    }
}
