//! Upsync: objects born on the leaf cluster (policy reports, ...) that the center asks
//! for, by kind, namespace, names and label selector. The agent lists and watches
//! them and hands out each change (current manifest, or gone) once.
//!
//! The rules come from the placements on this cluster that ask for upsync; the agent
//! core reports each change upward as a [`strata_protocol::wire::ReportKey::Upsynced`].

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::Api;
use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use serde_json::Value;
use strata_protocol::model::{ObjectKey, ObjectKeyParts};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;

use super::watch::{self, ObjectRef, Seen};

pub use crate::backend::UpsyncRule;

impl UpsyncRule {
    fn accepts(&self, r: &ObjectRef) -> bool {
        self.group == r.group
            && self.kind == r.kind
            && self
                .namespace
                .as_ref()
                .is_none_or(|n| r.namespace.as_ref() == Some(n))
            && (self.names.is_empty() || self.names.contains(&r.name))
    }
}

pub use crate::backend::Upsynced;

/// The agent's upsync state, owned by the worker.
pub(super) struct Upsync {
    rules: Vec<UpsyncRule>,
    held: BTreeMap<ObjectRef, (ObjectKey, Vec<u8>)>,
    tasks: JoinSet<()>,
    /// The watchers of the current rules report here (a new channel per rule set, so
    /// nothing from the previous set's watchers is read).
    pub(super) rx: mpsc::UnboundedReceiver<Seen>,
    out: mpsc::UnboundedSender<Upsynced>,
    wake: Arc<Notify>,
}

fn clean(v: &Value) -> Vec<u8> {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
        m.remove("resourceVersion");
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

impl Upsync {
    pub(super) fn new(out: mpsc::UnboundedSender<Upsynced>, wake: Arc<Notify>) -> Upsync {
        Upsync {
            rules: Vec::new(),
            held: BTreeMap::new(),
            tasks: JoinSet::new(),
            rx: mpsc::unbounded_channel().1,
            out,
            wake,
        }
    }

    fn rule_for(&self, r: &ObjectRef) -> Option<&UpsyncRule> {
        self.rules.iter().find(|rule| rule.accepts(r))
    }

    /// Replaces the rules: lists what they select now, hands out the difference with
    /// what was held, and watches from there.
    pub(super) async fn set_rules(&mut self, client: &kube::Client, rules: Vec<UpsyncRule>) {
        self.tasks.abort_all();
        let (tx, rx) = mpsc::unbounded_channel();
        self.rx = rx;
        self.rules = rules;
        let mut now: BTreeMap<ObjectRef, (ObjectKey, Vec<u8>)> = BTreeMap::new();
        for rule in self.rules.clone() {
            let gvk = GroupVersionKind::gvk(&rule.group, &rule.version, &rule.kind);
            let ar = match pinned_kind(client, &gvk).await {
                Ok((ar, _)) => ar,
                Err(e) => {
                    tracing::warn!(kind = %rule.kind, error = %e, "cannot upsync: kind not served");
                    continue;
                }
            };
            let api: Api<DynamicObject> = match &rule.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
                None => Api::all_with(client.clone(), &ar),
            };
            match watch::list(&api, &ar, &rule.selector).await {
                Ok((objects, rv)) => {
                    for (r, v) in objects.into_iter().filter(|(r, _)| rule.accepts(r)) {
                        let key = self.key(&rule, &r);
                        now.insert(r, (key, clean(&v)));
                    }
                    let selector = rule.selector.clone();
                    self.tasks
                        .spawn(watch::follow(api, ar, selector, rv, tx.clone()));
                }
                Err(e) => {
                    tracing::warn!(kind = %rule.kind, error = %e, "cannot list objects to upsync")
                }
            }
        }
        let gone: Vec<ObjectRef> = self
            .held
            .keys()
            .filter(|r| !now.contains_key(*r))
            .cloned()
            .collect();
        for r in gone {
            self.put(&r, None);
        }
        for (r, (key, body)) in now {
            self.put(&r, Some((key, body)));
        }
    }

    fn key(&self, rule: &UpsyncRule, r: &ObjectRef) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
            space: rule.space.clone(),
            group: r.group.clone(),
            version: rule.version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        })
    }

    /// What a watcher saw.
    pub(super) fn seen(&mut self, seen: Seen) {
        match seen {
            Seen::Live(r, v) => self.live(&r, &v),
            Seen::Gone(r) => self.put(&r, None),
            Seen::Listed {
                group,
                kind,
                objects,
            } => {
                let present: Vec<&ObjectRef> = objects.iter().map(|(r, _)| r).collect();
                let gone: Vec<ObjectRef> = self
                    .held
                    .keys()
                    .filter(|r| r.group == group && r.kind == kind && !present.contains(r))
                    .cloned()
                    .collect();
                for r in gone {
                    self.put(&r, None);
                }
                for (r, v) in &objects {
                    self.live(r, v);
                }
            }
        }
    }

    fn live(&mut self, r: &ObjectRef, v: &Value) {
        if let Some(rule) = self.rule_for(r) {
            let key = self.key(rule, r);
            self.put(r, Some((key, clean(v))));
        }
    }

    /// Records an object's state and hands it out if it changed.
    fn put(&mut self, r: &ObjectRef, state: Option<(ObjectKey, Vec<u8>)>) {
        let change = match state {
            Some((key, body)) => {
                if self.held.get(r).is_some_and(|(_, b)| *b == body) {
                    return;
                }
                self.held.insert(r.clone(), (key.clone(), body.clone()));
                Upsynced {
                    key,
                    body: Some(body),
                }
            }
            None => match self.held.remove(r) {
                Some((key, _)) => Upsynced { key, body: None },
                None => return,
            },
        };
        if self.out.send(change).is_ok() {
            self.wake.notify_one();
        }
    }
}
