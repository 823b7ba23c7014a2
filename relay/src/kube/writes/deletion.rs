//! Deletes as kube-apiserver answers them, and what the root does in place of
//! kube-controller-manager's garbage collector and namespace controller.
//!
//! - A delete answers the object for the kinds whose registry returns it
//!   ([`deletion::returns_deleted_object`]) and whenever the object stays, a `Status`
//!   `Success` naming it otherwise.
//! - An object with `metadata.finalizers` is not removed: it gets a `deletionTimestamp`
//!   (and `deletionGracePeriodSeconds: 0`) and stays until an update or patch empties
//!   its finalizers.
//! - `propagationPolicy` ([`Propagation`]) acts on the objects whose `ownerReferences`
//!   name the deleted one by `uid`, at the root: `Background` (the default) removes the
//!   owner, then its dependents; `Foreground` removes the dependents and keeps the owner
//!   with the `foregroundDeletion` finalizer until none remains at the root; `Orphan`
//!   removes their `ownerReferences` to it.
//! - A deleted Namespace is `Terminating`: everything in it is deleted at once (as
//!   above: finalizers keep what they hold), and the Namespace goes when nothing of it
//!   remains at the root and no cluster reports any object of it any more (the status
//!   reports, and summaries with a reporting cluster, the root holds). While it is
//!   terminating, nothing can be created in it (403, as kube-apiserver's
//!   NamespaceLifecycle admission answers).
//!
//! [`sweep`] finishes what waits: it runs after every write of the API and every second
//! ([`sweeper`]), since what clusters report arrives on its own time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use strata_kube_core::deletion::{self, FOREGROUND, Propagation};
use strata_node::objects::{manifest_from_value, to_object};
use strata_protocol::model::{Object, ObjectKey, Space};
use strata_protocol::wire::{Change, ReportKey, ReportValue};

use super::namespaces;
use crate::kube::render;
use crate::tier::core::NodeCore;
use crate::tier::runtime::NodeClient;

/// The time now, as `deletionTimestamp` has it (the core's wall clock).
fn now(core: &NodeCore) -> String {
    core.wall_now().rfc3339()
}

/// What one delete leaves: the changes to commit, and how each deleted object ends.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// New bodies (marked as being deleted, or orphaned), by key.
    put: BTreeMap<ObjectKey, Value>,
    /// Keys removed.
    gone: BTreeSet<ObjectKey>,
    /// The uids of the live objects, and their dependents by owner uid (built once).
    dependents: Option<BTreeMap<String, Vec<ObjectKey>>>,
    /// The live objects by space and uid (built once, when asked).
    uids: Option<BTreeMap<(Space, String), ObjectKey>>,
    now: String,
}

/// How the object a delete names ends.
#[derive(Debug)]
pub(crate) enum Ending {
    /// Removed.
    Gone,
    /// Kept, being deleted (finalizers hold it): its new state.
    Kept(Value),
}

impl Plan {
    pub(crate) fn new(core: &NodeCore) -> Plan {
        Plan {
            now: now(core),
            ..Plan::default()
        }
    }

    /// Sets `key`'s new body, unless it is what it was.
    fn put(&mut self, core: &NodeCore, key: &ObjectKey, value: Value) {
        if self.body(core, key).as_ref() != Some(&value) {
            self.put.insert(key.clone(), value);
        }
    }

    /// The body the plan holds for `key`: its new one, or the stored one; `None` once
    /// removed.
    fn body(&self, core: &NodeCore, key: &ObjectKey) -> Option<Value> {
        if self.gone.contains(key) {
            return None;
        }
        if let Some(v) = self.put.get(key) {
            return Some(v.clone());
        }
        core.log()
            .get(key)
            .and_then(|o| serde_json::from_slice(&o.body).ok())
    }

    /// The live objects whose `ownerReferences` name `uid`.
    fn dependents_of(&mut self, core: &NodeCore, uid: &str) -> Vec<ObjectKey> {
        let index = self.dependents.get_or_insert_with(|| {
            let mut index: BTreeMap<String, Vec<ObjectKey>> = BTreeMap::new();
            for o in core.log().live() {
                if !contains(&o.body, b"ownerReferences") {
                    continue;
                }
                let Ok(v) = serde_json::from_slice::<Value>(&o.body) else {
                    continue;
                };
                for r in v["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if let Some(u) = r["uid"].as_str() {
                        index.entry(u.to_owned()).or_default().push(o.key().clone());
                    }
                }
            }
            index
        });
        let mut keys = index.get(uid).cloned().unwrap_or_default();
        keys.retain(|k| !self.gone.contains(k));
        keys
    }

    /// Deletes `key` under `policy` (its dependents too, as the policy says); how it ends.
    pub(crate) fn delete(
        &mut self,
        core: &NodeCore,
        key: &ObjectKey,
        policy: Propagation,
    ) -> Option<Ending> {
        let mut value = self.body(core, key)?;
        let uid = render::uid(key);
        if namespaces::is_namespace(key) {
            deletion::mark_deleting(&mut value, &self.now);
            if let Some(m) = value["metadata"].as_object_mut() {
                m.remove("deletionGracePeriodSeconds");
            }
            self.put(core, key, value.clone());
            for k in inside(core, key) {
                self.delete(core, &k, Propagation::Background);
            }
            return Some(Ending::Kept(value));
        }
        match policy {
            Propagation::Orphan => {
                for d in self.dependents_of(core, &uid) {
                    if let Some(mut dv) = self.body(core, &d)
                        && deletion::drop_owner(&mut dv, &uid)
                    {
                        self.put(core, &d, dv);
                    }
                }
            }
            Propagation::Foreground => {
                for d in self.dependents_of(core, &uid) {
                    self.delete(core, &d, Propagation::Background);
                }
                let mut finalizers = deletion::finalizers(&value);
                if !finalizers.iter().any(|f| f == FOREGROUND) {
                    finalizers.push(FOREGROUND.to_owned());
                }
                deletion::set_finalizers(&mut value, &finalizers);
            }
            Propagation::Background => {}
        }
        if !deletion::finalizers(&value).is_empty() {
            deletion::mark_deleting(&mut value, &self.now);
            self.put(core, key, value.clone());
            return Some(Ending::Kept(value));
        }
        self.remove(core, key);
        Some(Ending::Gone)
    }

    /// Removes `key` (an object whose last finalizer an update took away) and its dependents, in the background.
    pub(crate) fn finish(&mut self, core: &NodeCore, key: &ObjectKey) {
        self.remove(core, key);
    }

    /// Removes `key` and, in the background, its dependents:
    /// those with no other owner left go, the others lose their reference to it.
    fn remove(&mut self, core: &NodeCore, key: &ObjectKey) {
        self.put.remove(key);
        self.gone.insert(key.clone());
        let uid = render::uid(key);
        for d in self.dependents_of(core, &uid) {
            let Some(mut dv) = self.body(core, &d).filter(|v| deletion::owned_by(v, &uid)) else {
                continue;
            };
            let others_live = dv["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["uid"].as_str())
                .any(|u| u != uid && self.owner_lives(core, &d.space, u));
            if others_live {
                deletion::drop_owner(&mut dv, &uid);
                self.put(core, &d, dv);
            } else {
                self.delete(core, &d, Propagation::Background);
            }
        }
    }

    /// Whether the object with `uid` in `space` lives (and stays, as far as the plan
    /// knows).
    fn owner_lives(&mut self, core: &NodeCore, space: &Space, uid: &str) -> bool {
        let uids = self.uids.get_or_insert_with(|| {
            core.log()
                .live()
                .map(|o| {
                    (
                        (o.key().space.clone(), render::uid(o.key())),
                        o.key().clone(),
                    )
                })
                .collect()
        });
        uids.get(&(space.clone(), uid.to_owned()))
            .is_some_and(|k| !self.gone.contains(k))
    }

    /// Commits the plan (one revision); nothing when it changes nothing.
    pub(crate) fn commit(self, core: &mut NodeCore) -> Result<(), String> {
        if self.put.is_empty() && self.gone.is_empty() {
            return Ok(());
        }
        let rev = strata_protocol::model::Revision(core.log().head().next().0);
        let mut changes: Vec<Change> = self.gone.into_iter().map(Change::Delete).collect();
        for (key, value) in self.put {
            let manifest =
                manifest_from_value(value, &key.space).map_err(|e| format!("{key}: {}", e[0]))?;
            changes.push(Change::Upsert(to_object(&manifest, rev)));
        }
        core.apply(changes).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// The keys of the objects the root holds in the Namespace `namespace` names.
fn inside(core: &NodeCore, namespace: &ObjectKey) -> Vec<ObjectKey> {
    core.log()
        .live()
        .map(Object::key)
        .filter(|k| k.space == namespace.space && k.namespace.as_deref() == Some(&namespace.name))
        .cloned()
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// Whether any cluster still reports an object of namespace `ns` of `space`: a status,
/// or a summary with a reporting cluster under a placement that still exists (once a
/// placement is gone its subtree removes what it delivered, and what was last summed
/// under it is not taken back).
fn reported(core: &NodeCore, space: &Space, ns: &str) -> bool {
    let placed = |name: &str| {
        core.placements()
            .iter()
            .any(|p| p.space == *space && p.name == name)
    };
    core.reports().iter().any(|((_, key), value)| {
        let object = match key {
            ReportKey::Status { object, .. } => object,
            ReportKey::Summary { object, placement } if placed(placement) => object,
            _ => return false,
        };
        object.space == *space
            && object.namespace.as_deref() == Some(ns)
            && match value {
                ReportValue::Status(_) => true,
                ReportValue::Summary(s) => s.reporting > 0,
                _ => false,
            }
    })
}

/// Finishes what waits: objects being deleted whose finalizers are all gone are
/// removed; an owner deleted in the foreground loses `foregroundDeletion` once no
/// object at the root names it; a terminating Namespace goes once nothing of it remains
/// at the root or on the clusters. Whether it changed anything.
pub fn sweep(core: &mut NodeCore) -> bool {
    let deleting: Vec<(ObjectKey, Value)> = core
        .log()
        .live()
        .filter(|o| contains(&o.body, b"deletionTimestamp"))
        .filter_map(|o| {
            let v: Value = serde_json::from_slice(&o.body).ok()?;
            deletion::is_deleting(&v).then(|| (o.key().clone(), v))
        })
        .collect();
    if deleting.is_empty() {
        return false;
    }
    let mut plan = Plan::new(core);
    for (key, mut value) in deleting {
        if namespaces::is_namespace(&key) {
            let mut left = false;
            for k in inside(core, &key) {
                if let Some(Ending::Kept(_)) = plan.delete(core, &k, Propagation::Background) {
                    left = true;
                }
            }
            if !left && !reported(core, &key.space, &key.name) {
                plan.remove(core, &key);
            }
            continue;
        }
        let mut finalizers = deletion::finalizers(&value);
        if finalizers.iter().any(|f| f == FOREGROUND)
            && plan.dependents_of(core, &render::uid(&key)).is_empty()
        {
            finalizers.retain(|f| f != FOREGROUND);
            deletion::set_finalizers(&mut value, &finalizers);
            plan.put(core, &key, value.clone());
        }
        if finalizers.is_empty() {
            plan.remove(core, &key);
        }
    }
    let changed = !plan.put.is_empty() || !plan.gone.is_empty();
    if let Err(e) = plan.commit(core) {
        tracing::warn!(error = %e, "finishing deletions failed");
        return false;
    }
    changed
}

/// [`sweep`] until nothing is left to do (an owner in the foreground goes once its
/// dependents have, which may free its own owner), at most a few rounds; after each
/// delete and each update of an object being deleted.
pub(crate) fn settle(core: &mut NodeCore) {
    for _ in 0..8 {
        if !sweep(core) {
            return;
        }
    }
}

/// Runs [`sweep`] every second, for as long as the node runs.
pub fn sweeper(node: NodeClient) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            if node
                .query(|core: &mut NodeCore| sweep(core))
                .await
                .is_none()
            {
                return;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use strata_protocol::model::ObjectKeyParts;

    fn space() -> Space {
        Space("default".into())
    }

    fn key(kind: &str, namespace: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
            space: space(),
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_owned),
            name: name.into(),
        })
    }

    fn cm(name: &str, meta: Value) -> Value {
        let mut v = json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": "shop" }, "data": { "a": "b" } });
        for (k, x) in meta.as_object().into_iter().flatten() {
            v["metadata"][k] = x.clone();
        }
        v
    }

    fn owned(name: &str, owner: &str, meta: Value) -> Value {
        let mut v = cm(name, meta);
        v["metadata"]["ownerReferences"] = json!([ { "apiVersion": "v1", "kind": "ConfigMap",
            "name": owner, "uid": render::uid(&key("ConfigMap", Some("shop"), owner)) } ]);
        v
    }

    fn core_with(objects: &[Value]) -> NodeCore {
        let mut core = crate::tier::core::testing::root();
        let ns = json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "shop" } });
        let manifests: Vec<_> = std::iter::once(&ns)
            .chain(objects)
            .map(|v| manifest_from_value(v.clone(), &space()).unwrap())
            .collect();
        core.apply_manifests(&manifests).unwrap();
        core
    }

    fn body(core: &NodeCore, name: &str) -> Option<Value> {
        core.log()
            .get(&key("ConfigMap", Some("shop"), name))
            .map(|o| serde_json::from_slice(&o.body).unwrap())
    }

    fn delete(core: &mut NodeCore, name: &str, policy: Propagation) -> Ending {
        let mut plan = Plan::new(core);
        let ending = plan
            .delete(core, &key("ConfigMap", Some("shop"), name), policy)
            .unwrap();
        plan.commit(core).unwrap();
        settle(core);
        ending
    }

    #[test]
    fn background_removes_the_owner_then_its_dependents() {
        let mut core = core_with(&[
            cm("owner", json!({})),
            cm("other", json!({})),
            owned("kid", "owner", json!({})),
            owned("shared", "owner", json!({})),
        ]);
        // `shared` has a second owner that stays: it only loses the reference.
        let mut shared = body(&core, "shared").unwrap();
        shared["metadata"]["ownerReferences"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "uid": render::uid(&key("ConfigMap", Some("shop"), "other")) }));
        core.apply_manifests(&[manifest_from_value(shared, &space()).unwrap()])
            .unwrap();
        assert!(matches!(
            delete(&mut core, "owner", Propagation::Background),
            Ending::Gone
        ));
        assert!(body(&core, "owner").is_none() && body(&core, "kid").is_none());
        let shared = body(&core, "shared").unwrap();
        assert_eq!(
            shared["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn orphan_drops_the_references() {
        let mut core = core_with(&[cm("owner", json!({})), owned("kid", "owner", json!({}))]);
        delete(&mut core, "owner", Propagation::Orphan);
        assert!(body(&core, "owner").is_none());
        assert!(body(&core, "kid").unwrap()["metadata"]["ownerReferences"].is_null());
    }

    #[test]
    fn finalizers_keep_the_object_marked_until_they_are_gone() {
        let mut core = core_with(&[cm("held", json!({ "finalizers": ["example.com/x"] }))]);
        let Ending::Kept(v) = delete(&mut core, "held", Propagation::Background) else {
            panic!("kept");
        };
        assert!(deletion::is_deleting(&v));
        let stored = body(&core, "held").unwrap();
        assert_eq!(stored["metadata"]["deletionGracePeriodSeconds"], 0);
        // Deleting again changes nothing; a sweep leaves it while a finalizer holds it.
        let head = core.log().head();
        delete(&mut core, "held", Propagation::Background);
        assert!(!sweep(&mut core));
        assert_eq!(core.log().head(), head);
        // Its finalizers emptied (as an update does), the sweep removes it.
        let mut freed = stored;
        deletion::set_finalizers(&mut freed, &[]);
        core.apply_manifests(&[manifest_from_value(freed, &space()).unwrap()])
            .unwrap();
        assert!(sweep(&mut core));
        assert!(body(&core, "held").is_none());
    }

    #[test]
    fn foreground_keeps_the_owner_until_its_dependents_are_gone() {
        let mut core = core_with(&[
            cm("owner", json!({})),
            owned("kid", "owner", json!({ "finalizers": ["example.com/x"] })),
        ]);
        let Ending::Kept(v) = delete(&mut core, "owner", Propagation::Foreground) else {
            panic!("kept");
        };
        assert_eq!(v["metadata"]["finalizers"], json!([FOREGROUND]));
        assert!(body(&core, "owner").is_some(), "the kid is still there");
        let mut kid = body(&core, "kid").unwrap();
        assert!(deletion::is_deleting(&kid));
        deletion::set_finalizers(&mut kid, &[]);
        core.apply_manifests(&[manifest_from_value(kid, &space()).unwrap()])
            .unwrap();
        settle(&mut core);
        assert!(body(&core, "kid").is_none() && body(&core, "owner").is_none());
    }

    #[test]
    fn a_namespace_terminates_and_goes_once_nothing_of_it_remains() {
        let mut core = core_with(&[
            cm("a", json!({})),
            cm("held", json!({ "finalizers": ["x/y"] })),
        ]);
        let ns = key("Namespace", None, "shop");
        let mut plan = Plan::new(&core);
        assert!(matches!(
            plan.delete(&core, &ns, Propagation::Background),
            Some(Ending::Kept(_))
        ));
        plan.commit(&mut core).unwrap();
        settle(&mut core);
        assert!(namespaces::terminating(&core, &space(), "shop"));
        assert!(body(&core, "a").is_none());
        assert!(deletion::is_deleting(&body(&core, "held").unwrap()));
        let shown = render::object(&core, core.log().get(&ns).unwrap());
        assert_eq!(shown["status"]["phase"], "Terminating");
        // The last object held there goes: so does the Namespace (no cluster reports
        // any of it).
        let mut held = body(&core, "held").unwrap();
        deletion::set_finalizers(&mut held, &[]);
        core.apply_manifests(&[manifest_from_value(held, &space()).unwrap()])
            .unwrap();
        settle(&mut core);
        assert!(core.log().get(&ns).is_none());
    }
}
