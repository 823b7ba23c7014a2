//! Workloads a volume move stopped ([`crate::kubernetes::volumes`]): the worker
//! applies them with 0 replicas while they are stopped, so its own drift repair does
//! not start the old copy's writers again in the middle of a move.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use strata_protocol::model::ObjectKey;
use tokio::time::Instant as TokioInstant;

use super::Worker;
use crate::kubernetes::volume_objects::FROZEN_ANNOTATION;
use crate::kubernetes::volumes::FrozenWorkload;

impl Worker {
    /// The manifest to hold `key` at, `live` being what the cluster holds: its desired
    /// body, with 0 replicas while a volume move has it stopped: in the move's set,
    /// or carrying [`FROZEN_ANNOTATION`] (which outlives an agent restart in the middle
    /// of a move; the move's thaw removes it).
    pub(super) fn held_body(&self, key: &ObjectKey, body: &Value, live: Option<&Value>) -> Value {
        let mut body = body.clone();
        let annotated = live
            .and_then(|l| l.pointer("/metadata/annotations"))
            .is_some_and(|a| a.get(FROZEN_ANNOTATION).is_some());
        if key.group == "apps"
            && let Some(ns) = &key.namespace
            && (annotated
                || self
                    .frozen
                    .contains(&(key.kind.clone(), ns.clone(), key.name.clone())))
            && let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut)
        {
            spec.insert("replicas".into(), json!(0));
        }
        body
    }

    /// The set of stopped workloads changed: the workloads in or out of it are applied
    /// again (with 0 replicas, or their own).
    pub(super) fn refreeze(&mut self, frozen: BTreeSet<FrozenWorkload>) {
        let changed: BTreeSet<FrozenWorkload> =
            self.frozen.symmetric_difference(&frozen).cloned().collect();
        self.frozen = frozen;
        let now = TokioInstant::now();
        for key in self.desired.keys() {
            if key.group == "apps"
                && let Some(ns) = &key.namespace
                && changed.contains(&(key.kind.clone(), ns.clone(), key.name.clone()))
            {
                self.due.insert(key.clone(), now);
            }
        }
    }
}
