//! The fake API server's object store: resourceVersion, generation, a simplified
//! server-side apply with per-field managers, and the watch history.
//!
//! Simplifications (it is a fake): lists are atomic (replaced whole, never merged by
//! key); field ownership is tracked per leaf path; there is no defaulting, no
//! validation beyond "is a JSON object with a name", no finalizers, no cascading delete.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// Where an object lives: resource (group, plural), namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Slot {
    pub group: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub name: String,
}

/// One stored object with the fields each manager owns.
#[derive(Debug, Clone)]
pub struct Stored {
    pub object: Value,
    /// Leaf path (`.spec.replicas`) → manager.
    pub owners: BTreeMap<String, String>,
    /// What each applier last applied (to remove fields it stops applying).
    pub applied: BTreeMap<String, Value>,
}

/// A watch event kept for resumption from a resourceVersion.
#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    pub group: String,
    pub plural: String,
    pub kind: &'static str,
    pub object: Value,
}

/// Why an apply was refused.
#[derive(Debug)]
pub enum ApplyError {
    Conflict(String),
    Invalid(String),
}

#[derive(Debug, Default)]
pub struct ObjectStore {
    pub objects: BTreeMap<Slot, Stored>,
    pub rv: u64,
    pub history: Vec<Event>,
    uid: u64,
}

/// Every leaf path of a value (`.a.b`), with its value; lists are leaves.
pub fn leaves(v: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                leaves(v, &format!("{prefix}.{k}"), out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

fn get_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .skip(1)
        .try_fold(v, |v, seg| v.as_object()?.get(seg))
}

fn remove_path(v: &mut Value, path: &str) {
    let segs: Vec<&str> = path.split('.').skip(1).collect();
    let Some((last, parents)) = segs.split_last() else {
        return;
    };
    let mut cur = v;
    for s in parents {
        match cur.as_object_mut().and_then(|m| m.get_mut(*s)) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(*last);
    }
}

/// Deep merge: objects recursively, everything else replaced. `null` removes a field
/// (merge-patch semantics).
pub fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(k);
                } else {
                    merge(a.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (into, patch) => *into = patch.clone(),
    }
}

/// Whatever is not metadata or status: what `metadata.generation` counts changes of.
fn spec_part(v: &Value) -> Value {
    let mut m = v.as_object().cloned().unwrap_or_default();
    for k in ["metadata", "status", "apiVersion", "kind"] {
        m.remove(k);
    }
    Value::Object(m)
}

/// Paths a manager may not claim: identity and server-set metadata.
fn owned_path(path: &str) -> bool {
    ![
        ".apiVersion",
        ".kind",
        ".metadata.name",
        ".metadata.namespace",
    ]
    .contains(&path)
        && !path.starts_with(".status")
}

impl ObjectStore {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, slot: &Slot, kind: &'static str, object: Value) {
        self.history.push(Event {
            rv: self.rv,
            group: slot.group.clone(),
            plural: slot.plural.clone(),
            kind,
            object,
        });
    }

    /// Stores a new version of an object: bumps resourceVersion (and generation when
    /// its spec changed) only when something changed. Returns whether it changed.
    fn put(&mut self, slot: &Slot, mut stored: Stored, created: bool) -> bool {
        let old = self.objects.get(slot).map(|s| s.object.clone());
        if let Some(old) = &old {
            let mut a = old.clone();
            let mut b = stored.object.clone();
            remove_path(&mut a, ".metadata.resourceVersion");
            remove_path(&mut b, ".metadata.resourceVersion");
            if a == b {
                self.objects.insert(slot.clone(), stored);
                return false;
            }
        }
        let rv = self.next_rv();
        let generation = match &old {
            None => 1,
            Some(old) => {
                let g = get_path(old, ".metadata.generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                if spec_part(old) == spec_part(&stored.object) {
                    g
                } else {
                    g + 1
                }
            }
        };
        if created {
            self.uid += 1;
            let uid = format!("00000000-0000-0000-0000-{:012}", self.uid);
            merge(
                &mut stored.object,
                &json!({"metadata": {"uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"}}),
            );
        }
        merge(
            &mut stored.object,
            &json!({"metadata": {"resourceVersion": rv.to_string(), "generation": generation}}),
        );
        let object = stored.object.clone();
        self.objects.insert(slot.clone(), stored);
        self.record(slot, if created { "ADDED" } else { "MODIFIED" }, object);
        true
    }

    /// Server-side apply by `manager`. Creates the object if missing.
    pub fn apply(
        &mut self,
        slot: &Slot,
        body: Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, ApplyError> {
        if !body.is_object() {
            return Err(ApplyError::Invalid("the body is not an object".into()));
        }
        let mut new_leaves = BTreeMap::new();
        leaves(&body, "", &mut new_leaves);
        let new_leaves: BTreeMap<String, Value> = new_leaves
            .into_iter()
            .filter(|(p, _)| owned_path(p))
            .collect();
        let existing = self.objects.get(slot).cloned();
        let created = existing.is_none();
        let mut stored = existing.unwrap_or(Stored {
            object: json!({}),
            owners: BTreeMap::new(),
            applied: BTreeMap::new(),
        });
        let conflicts: Vec<String> = new_leaves
            .iter()
            .filter(|(p, v)| {
                stored.owners.get(*p).is_some_and(|m| m != manager)
                    && get_path(&stored.object, p) != Some(*v)
            })
            .map(|(p, _)| format!("conflict with \"{}\": {p}", stored.owners[p]))
            .collect();
        if !conflicts.is_empty() && !force {
            return Err(ApplyError::Conflict(format!(
                "Apply failed with {} conflict{}: {}",
                conflicts.len(),
                if conflicts.len() == 1 { "" } else { "s" },
                conflicts.join("; ")
            )));
        }
        // Fields this manager applied before and no longer applies are removed (when it
        // alone owns them).
        if let Some(prev) = stored.applied.get(manager) {
            let mut prev_leaves = BTreeMap::new();
            leaves(prev, "", &mut prev_leaves);
            for p in prev_leaves.keys() {
                if !new_leaves.contains_key(p)
                    && stored.owners.get(p).map(String::as_str) == Some(manager)
                {
                    remove_path(&mut stored.object, p);
                    stored.owners.remove(p);
                }
            }
        }
        merge(&mut stored.object, &body);
        for p in new_leaves.keys() {
            stored.owners.insert(p.clone(), manager.to_owned());
        }
        stored.applied.insert(manager.to_owned(), body);
        self.put(slot, stored, created);
        Ok(self.objects[slot].object.clone())
    }

    /// A merge patch (or a controller's write) by `manager`: takes ownership of the
    /// fields it sets.
    pub fn merge_patch(&mut self, slot: &Slot, patch: &Value, manager: &str) -> Option<Value> {
        let mut stored = self.objects.get(slot).cloned()?;
        merge(&mut stored.object, patch);
        let mut set = BTreeMap::new();
        leaves(patch, "", &mut set);
        for p in set.keys().filter(|p| owned_path(p)) {
            stored.owners.insert(p.clone(), manager.to_owned());
        }
        self.put(slot, stored, false);
        Some(self.objects[slot].object.clone())
    }

    /// Creates or replaces an object as a controller or a user would (not applied).
    pub fn insert(&mut self, slot: &Slot, object: Value) {
        let created = !self.objects.contains_key(slot);
        let stored = Stored {
            object,
            owners: BTreeMap::new(),
            applied: BTreeMap::new(),
        };
        self.put(slot, stored, created);
    }

    /// Deletes an object; returns its last version.
    pub fn delete(&mut self, slot: &Slot) -> Option<Value> {
        let stored = self.objects.remove(slot)?;
        let rv = self.next_rv();
        let mut object = stored.object;
        merge(
            &mut object,
            &json!({"metadata": {"resourceVersion": rv.to_string()}}),
        );
        self.record(slot, "DELETED", object.clone());
        Some(object)
    }

    /// Objects of one resource, optionally in one namespace, matching a label selector.
    pub fn list(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|(s, _)| {
                s.group == group
                    && s.plural == plural
                    && namespace.is_none_or(|n| s.namespace.as_deref() == Some(n))
            })
            .map(|(_, o)| o.object.clone())
            .filter(|o| selector.matches(o))
            .collect()
    }
}

/// A label selector: `k=v`, `k!=v`, `k` (exists), `!k`, joined by commas.
#[derive(Debug, Default, Clone)]
pub struct Selector {
    equal: BTreeMap<String, String>,
    not_equal: BTreeMap<String, String>,
    exists: BTreeSet<String>,
    absent: BTreeSet<String>,
}

impl Selector {
    pub fn parse(s: &str) -> Selector {
        let mut sel = Selector::default();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if let Some((k, v)) = term.split_once("!=") {
                sel.not_equal.insert(k.into(), v.into());
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                sel.equal.insert(k.into(), v.into());
            } else if let Some(k) = term.strip_prefix('!') {
                sel.absent.insert(k.into());
            } else {
                sel.exists.insert(term.into());
            }
        }
        sel
    }

    pub fn matches(&self, object: &Value) -> bool {
        let empty = Map::new();
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.equal.iter().all(|(k, v)| get(k) == Some(v))
            && self.not_equal.iter().all(|(k, v)| get(k) != Some(v))
            && self.exists.iter().all(|k| get(k).is_some())
            && self.absent.iter().all(|k| get(k).is_none())
    }
}
