//! The Kubernetes backend's task: desired state in, API requests out, statuses back.

mod frozen;
mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope, pinned_kind};
use serde_json::{Value, json};
use strata_node::clock::Clock;
use strata_protocol::model::{Health, Object, ObjectKey, Status};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant as TokioInstant;

use super::associated;
use super::health::crd_established;
use super::upsync::{Upsync, Upsynced};
use super::volumes::FrozenWorkload;
use super::watch::{self, ObjectRef, Seen};
use super::{
    Command, FIELD_MANAGER, HASH_ANNOTATION, KubeCounters, KubeOptions, MANAGED_LABEL,
    MANAGED_VALUE,
};

const CRD_KIND: &str = "CustomResourceDefinition";
const CRD_GROUP: &str = "apiextensions.k8s.io";

struct Desired {
    object: Object,
    /// The manifest as applied: with the agent's label and hash annotation.
    body: Value,
    hash: String,
}

/// Namespaces and CRDs before everything else.
fn rank(key: &ObjectKey) -> u8 {
    match (key.group.as_str(), key.kind.as_str()) {
        ("", "Namespace") | (CRD_GROUP, CRD_KIND) => 0,
        _ => 1,
    }
}

fn object_ref(key: &ObjectKey) -> ObjectRef {
    ObjectRef {
        group: key.group.clone(),
        kind: key.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `live` holds everything `desired` says (extra fields are the server's).
pub(super) fn holds(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d
            .iter()
            .all(|(k, dv)| l.get(k).is_some_and(|lv| holds(lv, dv))),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| holds(lv, dv))
        }
        (l, d) => l == d,
    }
}

/// The manifest to apply: the body with identity fixed from the key, server-set fields
/// dropped, and the agent's label and hash annotation.
fn prepare(object: &Object) -> Result<(Value, String), String> {
    let key = object.key();
    let mut body: Value =
        serde_json::from_slice(&object.body).map_err(|e| format!("manifest is not JSON: {e}"))?;
    let Some(map) = body.as_object_mut() else {
        return Err("manifest is not an object".to_owned());
    };
    map.remove("status");
    let api_version = if key.group.is_empty() {
        key.version.clone()
    } else {
        format!("{}/{}", key.group, key.version)
    };
    map.insert("apiVersion".into(), Value::String(api_version));
    map.insert("kind".into(), Value::String(key.kind.clone()));
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return Err("metadata is not an object".to_owned());
    };
    for server_set in [
        "resourceVersion",
        "uid",
        "managedFields",
        "creationTimestamp",
        "generation",
        // The root's deletion in progress (finalizers hold the object there): a
        // cluster's API server refuses a deletion time set by an update.
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        meta.remove(server_set);
    }
    meta.insert("name".into(), Value::String(key.name.clone()));
    match &key.namespace {
        Some(ns) => meta.insert("namespace".into(), Value::String(ns.clone())),
        None => meta.remove("namespace"),
    };
    let hash = hex(&object.hash.0);
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if let Some(l) = labels.as_object_mut() {
        l.insert(MANAGED_LABEL.into(), Value::String(MANAGED_VALUE.into()));
    }
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if let Some(a) = annotations.as_object_mut() {
        a.insert(HASH_ANNOTATION.into(), Value::String(hash.clone()));
    }
    Ok((body, hash))
}

enum Outcome {
    Done,
    /// Not now; try again later (with this status reported meanwhile).
    Later(Health, String),
}

struct Worker {
    client: kube::Client,
    options: KubeOptions,
    clock: Clock,
    counters: Arc<KubeCounters>,
    statuses: mpsc::UnboundedSender<(ObjectKey, Status)>,
    upsync: Upsync,
    wake: Arc<Notify>,
    seen: mpsc::UnboundedSender<Seen>,
    desired: BTreeMap<ObjectKey, Desired>,
    by_ref: BTreeMap<ObjectRef, ObjectKey>,
    /// CRDs in the desired state, by the (group, kind) they define.
    crds: BTreeMap<(String, String), ObjectKey>,
    /// Objects to (re)apply, and when.
    due: BTreeMap<ObjectKey, TokioInstant>,
    attempts: BTreeMap<ObjectKey, u32>,
    resources: BTreeMap<(String, String, String), (ApiResource, bool)>,
    watched: BTreeSet<(String, String, String)>,
    live: BTreeMap<ObjectKey, Value>,
    /// Managed objects seen on the cluster that are not (yet) desired: an object
    /// restored from the store may arrive after its kind was listed.
    unclaimed: BTreeMap<ObjectRef, Value>,
    reported: BTreeMap<ObjectKey, Status>,
    associated: BTreeMap<ObjectKey, associated::Associated>,
    /// Workloads a volume move stopped: applied with 0 replicas while here.
    frozen: BTreeSet<FrozenWorkload>,
    tasks: JoinSet<()>,
}

/// Where the worker's findings go.
pub(super) struct Outputs {
    pub(super) statuses: mpsc::UnboundedSender<(ObjectKey, Status)>,
    pub(super) upsynced: mpsc::UnboundedSender<Upsynced>,
    pub(super) wake: Arc<Notify>,
    pub(super) counters: Arc<KubeCounters>,
}

pub(super) async fn run(
    client: kube::Client,
    options: KubeOptions,
    clock: Clock,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut frozen: tokio::sync::watch::Receiver<BTreeSet<FrozenWorkload>>,
    out: Outputs,
) {
    let Outputs {
        statuses,
        upsynced,
        wake,
        counters,
    } = out;
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    let mut resync = tokio::time::interval(options.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut w = Worker {
        client,
        options,
        clock,
        counters,
        statuses,
        upsync: Upsync::new(upsynced, wake.clone()),
        wake,
        seen: seen_tx,
        desired: BTreeMap::new(),
        by_ref: BTreeMap::new(),
        crds: BTreeMap::new(),
        due: BTreeMap::new(),
        attempts: BTreeMap::new(),
        resources: BTreeMap::new(),
        watched: BTreeSet::new(),
        live: BTreeMap::new(),
        unclaimed: BTreeMap::new(),
        reported: BTreeMap::new(),
        associated: BTreeMap::new(),
        frozen: BTreeSet::new(),
        tasks: JoinSet::new(),
    };
    loop {
        let next = w.due.values().min().copied();
        tokio::select! {
            biased;
            // Desired state first: it is what everything else is measured against.
            c = commands.recv() => {
                let Some(c) = c else { break };
                let mut batch = vec![c];
                while let Ok(c) = commands.try_recv() {
                    batch.push(c);
                }
                w.commands(batch).await;
            }
            // A volume move stopped or let go a workload: before drift, measured against it.
            Ok(()) = frozen.changed() => w.refreeze(frozen.borrow_and_update().clone()),
            // Then what the cluster did (drift, status).
            Some(seen) = seen_rx.recv() => w.seen(seen),
            Some(seen) = w.upsync.rx.recv() => w.upsync.seen(seen),
            _ = tokio::time::sleep_until(next.unwrap_or_else(TokioInstant::now)), if next.is_some() => {}
            _ = resync.tick() => w.resync().await,
        }
        w.reconcile_due().await;
    }
    w.tasks.shutdown().await;
}

impl Worker {
    async fn commands(&mut self, batch: Vec<Command>) {
        let now = TokioInstant::now();
        let mut deletes = Vec::new();
        for c in batch {
            match c {
                Command::Apply(object) => {
                    let key = object.key().clone();
                    // Deleted, then placed again within one batch: it stays.
                    deletes.retain(|k| *k != key);
                    if self.desired.get(&key).is_some_and(|d| {
                        d.object.hash == object.hash && d.object.revision == object.revision
                    }) {
                        continue;
                    }
                    match prepare(&object) {
                        Ok((body, hash)) => {
                            if key.group == CRD_GROUP && key.kind == CRD_KIND {
                                let group = body.pointer("/spec/group").and_then(Value::as_str);
                                let kind = body.pointer("/spec/names/kind").and_then(Value::as_str);
                                if let (Some(g), Some(k)) = (group, kind) {
                                    self.crds.insert((g.to_owned(), k.to_owned()), key.clone());
                                }
                            }
                            let r = object_ref(&key);
                            if let Some(v) = self.unclaimed.remove(&r) {
                                self.live.insert(key.clone(), v);
                            }
                            self.by_ref.insert(r, key.clone());
                            self.desired.insert(
                                key.clone(),
                                Desired {
                                    object: *object,
                                    body,
                                    hash,
                                },
                            );
                            self.attempts.remove(&key);
                            self.due.insert(key, now);
                        }
                        Err(reason) => {
                            self.desired.remove(&key);
                            self.due.remove(&key);
                            self.report_failure(&key, &object, Health::Failed, reason);
                        }
                    }
                }
                Command::Delete(key) => deletes.push(key),
                Command::Upsync(rules) => self.upsync.set_rules(&self.client, rules).await,
            }
        }
        // Custom resources before their CRDs, namespaces last.
        deletes.sort_by_key(|k| std::cmp::Reverse(rank(k)));
        for key in deletes {
            self.prune(&key).await;
        }
    }

    fn forget(&mut self, key: &ObjectKey) {
        if let Some(d) = self.desired.remove(key)
            && key.group == CRD_GROUP
            && key.kind == CRD_KIND
        {
            self.crds.retain(|_, k| k != key);
            drop(d);
        }
        self.by_ref.remove(&object_ref(key));
        self.due.remove(key);
        self.attempts.remove(key);
        self.reported.remove(key);
        self.associated.remove(key);
    }

    /// Deletes an object that is no longer placed, if (and only if) it carries the
    /// agent's label.
    async fn prune(&mut self, key: &ObjectKey) {
        self.forget(key);
        self.live.remove(key);
        let Ok((api, _)) = self.api(key).await else {
            return;
        };
        let current = match api.get_opt(&key.name).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(object = %key, error = %e, "cannot read an object to prune");
                return;
            }
        };
        let Some(current) = current else { return };
        if current
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_LABEL))
            .map(String::as_str)
            != Some(MANAGED_VALUE)
        {
            tracing::info!(object = %key, "not managed by strata: left in place");
            return;
        }
        self.counters.deletes.fetch_add(1, Ordering::Relaxed);
        let started = TokioInstant::now();
        let deleted = api.delete(&key.name, &DeleteParams::default()).await;
        self.counters.observe("delete", started.elapsed()).await;
        if let Err(e) = deleted {
            tracing::warn!(object = %key, error = %e, "delete failed");
        }
    }

    /// The resource of a key's kind, and an API handle for it (discovery, cached).
    async fn api(&mut self, key: &ObjectKey) -> Result<(Api<DynamicObject>, ApiResource), Outcome> {
        let id = (key.group.clone(), key.version.clone(), key.kind.clone());
        let (ar, namespaced) = match self.resources.get(&id) {
            Some(r) => r.clone(),
            None => {
                let gvk = GroupVersionKind::gvk(&key.group, &key.version, &key.kind);
                match pinned_kind(&self.client, &gvk).await {
                    Ok((ar, caps)) => {
                        let r = (ar, caps.scope == Scope::Namespaced);
                        self.resources.insert(id, r.clone());
                        r
                    }
                    Err(kube::Error::Discovery(_)) | Err(kube::Error::Api(_)) => {
                        return Err(Outcome::Later(
                            Health::Progressing,
                            format!(
                                "kind {} is not served by the API server (yet)",
                                gvk.api_version() + "/" + &key.kind
                            ),
                        ));
                    }
                    Err(e) => {
                        return Err(Outcome::Later(Health::Failed, format!("discovery: {e}")));
                    }
                }
            }
        };
        let api = match (&key.namespace, namespaced) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, &ar),
            (None, false) => Api::all_with(self.client.clone(), &ar),
            (Some(_), false) => {
                return Err(Outcome::Later(
                    Health::Failed,
                    format!(
                        "{} is cluster-scoped but the object names a namespace",
                        key.kind
                    ),
                ));
            }
            (None, true) => {
                return Err(Outcome::Later(
                    Health::Failed,
                    format!(
                        "{} is namespaced but the object names no namespace",
                        key.kind
                    ),
                ));
            }
        };
        Ok((api, ar))
    }

    /// Lists the kind's managed objects once, then follows them in their own task.
    async fn ensure_watched(
        &mut self,
        key: &ObjectKey,
        ar: &ApiResource,
    ) -> Result<(), kube::Error> {
        let id = (key.group.clone(), key.version.clone(), key.kind.clone());
        if self.watched.contains(&id) {
            return Ok(());
        }
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), ar);
        let selector = watch::managed_selector();
        let (objects, rv) = watch::list(&api, ar, &selector).await?;
        for (r, v) in objects {
            match self.by_ref.get(&r) {
                Some(k) => {
                    self.live.insert(k.clone(), v);
                }
                None => {
                    self.unclaimed.insert(r, v);
                }
            }
        }
        self.watched.insert(id);
        self.tasks.spawn(watch::follow(
            api,
            ar.clone(),
            selector,
            rv,
            self.seen.clone(),
        ));
        Ok(())
    }

    async fn reconcile_due(&mut self) {
        let now = TokioInstant::now();
        let mut ready: Vec<ObjectKey> = self
            .due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        ready.sort_by_key(rank);
        for key in ready {
            self.due.remove(&key);
            match self.reconcile(&key).await {
                Outcome::Done => {
                    self.attempts.remove(&key);
                }
                Outcome::Later(health, reason) => {
                    let n = self.attempts.entry(key.clone()).or_default();
                    let backoff = self.options.retry * 2u32.pow((*n).min(6));
                    *n += 1;
                    self.due.insert(key.clone(), TokioInstant::now() + backoff);
                    if let Some(d) = self.desired.get(&key) {
                        let object = d.object.clone();
                        self.report_failure(&key, &object, health, reason);
                    }
                }
            }
        }
    }

    async fn reconcile(&mut self, key: &ObjectKey) -> Outcome {
        let Some(d) = self.desired.get(key) else {
            return Outcome::Done;
        };
        // A custom resource waits for its CRD to be Established.
        if let Some(crd) = self.crds.get(&(key.group.clone(), key.kind.clone()))
            && !self.live.get(crd).is_some_and(crd_established)
        {
            return Outcome::Later(
                Health::Progressing,
                format!(
                    "waiting for CustomResourceDefinition {} to be Established",
                    crd.name
                ),
            );
        }
        let (body, hash) = (d.body.clone(), d.hash.clone());
        let (api, ar) = match self.api(key).await {
            Ok(a) => a,
            Err(o) => return o,
        };
        if let Err(e) = self.ensure_watched(key, &ar).await {
            return Outcome::Later(
                Health::Failed,
                format!("cannot list {}: {}", ar.plural, explain(&e)),
            );
        }
        // Once the live object is known: a workload a move stopped stays stopped.
        let body = self.held_body(key, &body, self.live.get(key));
        if let Some(live) = self.live.get(key) {
            let same_hash = live
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(HASH_ANNOTATION))
                .and_then(Value::as_str)
                == Some(hash.as_str());
            if same_hash && holds(live, &body) {
                self.counters.unchanged.fetch_add(1, Ordering::Relaxed);
                self.report_sync(key, None);
                return Outcome::Done;
            }
        }
        let mut params = PatchParams::apply(FIELD_MANAGER);
        params.force = self.options.force_conflicts;
        self.counters.applies.fetch_add(1, Ordering::Relaxed);
        let started = TokioInstant::now();
        let applied = api.patch(&key.name, &params, &Patch::Apply(&body)).await;
        self.counters.observe("apply", started.elapsed()).await;
        match applied {
            Ok(o) => {
                self.live.insert(key.clone(), watch::to_value(&ar, &o));
                self.report_sync(key, None);
                Outcome::Done
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                self.report_now(key, Health::Failed, format!("conflict: {}", s.message));
                Outcome::Done
            }
            Err(kube::Error::Api(s)) if s.code == 404 && key.namespace.is_some() => Outcome::Later(
                Health::Progressing,
                format!(
                    "waiting for namespace {}: {}",
                    key.namespace.as_deref().unwrap_or_default(),
                    s.message
                ),
            ),
            Err(e) => Outcome::Later(Health::Failed, explain(&e)),
        }
    }

    fn seen(&mut self, seen: Seen) {
        match seen {
            Seen::Live(r, v) => self.observe(&r, Some(v)),
            Seen::Gone(r) => self.observe(&r, None),
            Seen::Listed {
                group,
                kind,
                objects,
            } => {
                let present: BTreeSet<ObjectRef> = objects.iter().map(|(r, _)| r.clone()).collect();
                let missing: Vec<ObjectRef> = self
                    .by_ref
                    .keys()
                    .filter(|r| r.group == group && r.kind == kind && !present.contains(*r))
                    .cloned()
                    .collect();
                for r in missing {
                    self.observe(&r, None);
                }
                self.unclaimed
                    .retain(|r, _| r.group != group || r.kind != kind || present.contains(r));
                for (r, v) in objects {
                    self.observe(&r, Some(v));
                }
            }
        }
    }

    /// A managed object changed on the cluster: keep it, or repair it.
    fn observe(&mut self, r: &ObjectRef, live: Option<Value>) {
        let Some(key) = self.by_ref.get(r).cloned() else {
            match live {
                Some(v) => self.unclaimed.insert(r.clone(), v),
                None => self.unclaimed.remove(r),
            };
            return;
        };
        let Some(d) = self.desired.get(&key) else {
            return;
        };
        let held = self.held_body(&key, &d.body, live.as_ref());
        let drifted = match &live {
            None => true,
            Some(v) => !holds(v, &held),
        };
        match live {
            Some(v) => self.live.insert(key.clone(), v),
            None => self.live.remove(&key),
        };
        if drifted {
            if !self.due.contains_key(&key) {
                tracing::info!(object = %key, "managed object changed on the cluster; re-applying");
                self.counters.drift_repairs.fetch_add(1, Ordering::Relaxed);
            }
            self.due.insert(key, TokioInstant::now());
        } else {
            // Status only: reported at once (associated objects are read at each resync).
            self.report_sync(&key, None);
        }
    }
}

/// An API error as a user reads it: the server's own message for API errors.
fn explain(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => format!("forbidden: {}", s.message),
        kube::Error::Api(s) => format!("{} ({}): {}", s.reason, s.code, s.message),
        other => other.to_string(),
    }
}
