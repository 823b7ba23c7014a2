//! Server-side apply (`PATCH` with `application/apply-patch+yaml`): each field manager
//! owns the fields its last applied configuration set, recorded in
//! `metadata.managedFields` (Kubernetes' `FieldsV1` form). Applying sets the fields the
//! configuration names, removes those the manager set before and no longer does (unless
//! another manager owns them too), and refuses (409) to change a field another manager
//! owns with a different value unless `force=true`, which takes it over.
//!
//! Simplifications, compared with Kubernetes: lists whose elements carry a known merge
//! key (`name` for containers and the like, see [`crate::patch`]) merge per element,
//! every other list is one field; writes other than apply keep the recorded owners as
//! they are (they do not add `Update` entries).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// One step of a field path: a map key, or the element of a keyed list.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Field(String),
    Key(String),
}

type Path = Vec<Step>;

/// A manager's fields.
#[derive(Debug, Clone)]
struct Owner {
    manager: String,
    operation: String,
    api_version: String,
    fields: BTreeSet<Path>,
}

/// Why an apply was refused: the fields another manager owns with another value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<(String, String)>);

/// What identifies an element of a list of objects, when it has such a key.
fn element_key(field: &str, items: &[Value]) -> Option<&'static str> {
    crate::patch::merge_key(field, items)
}

fn leaf_paths(value: &Value, at: &mut Path, out: &mut BTreeSet<Path>) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                at.push(Step::Field(k.clone()));
                match v {
                    Value::Array(items) => match element_key(k, items) {
                        Some(key) if items.iter().all(|i| i.get(key).is_some()) => {
                            for item in items {
                                let id = json!({ key: item[key] }).to_string();
                                at.push(Step::Key(id));
                                out.insert(at.clone());
                                leaf_paths(item, at, out);
                                at.pop();
                            }
                        }
                        _ => {
                            out.insert(at.clone());
                        }
                    },
                    Value::Object(inner) if !inner.is_empty() => leaf_paths(v, at, out),
                    _ => {
                        out.insert(at.clone());
                    }
                }
                at.pop();
            }
        }
        _ => {}
    }
}

/// The fields a configuration sets, identity (kind, name, namespace) aside.
fn fields_of(config: &Value) -> BTreeSet<Path> {
    let mut body = config.clone();
    if let Some(m) = body.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        m.remove("status");
    }
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "name",
            "namespace",
            "managedFields",
            "resourceVersion",
            "uid",
        ] {
            meta.remove(f);
        }
    }
    if body["metadata"].as_object().is_some_and(Map::is_empty)
        && let Some(m) = body.as_object_mut()
    {
        m.remove("metadata");
    }
    let mut out = BTreeSet::new();
    leaf_paths(&body, &mut Vec::new(), &mut out);
    out
}

fn get<'a>(v: &'a Value, path: &[Step]) -> Option<&'a Value> {
    let mut at = v;
    for step in path {
        at = match step {
            Step::Field(f) => at.get(f)?,
            Step::Key(k) => {
                let id: Map<String, Value> = serde_json::from_str(k).ok()?;
                at.as_array()?
                    .iter()
                    .find(|e| id.iter().all(|(kk, kv)| e.get(kk) == Some(kv)))?
            }
        };
    }
    Some(at)
}

fn set(v: &mut Value, path: &[Step], value: Value) {
    let Some((first, rest)) = path.split_first() else {
        *v = value;
        return;
    };
    match first {
        Step::Field(f) => {
            if !v.is_object() {
                *v = json!({});
            }
            if let Some(m) = v.as_object_mut() {
                let child = m.entry(f.clone()).or_insert(Value::Null);
                if rest.is_empty() {
                    *child = value;
                } else {
                    set(child, rest, value);
                }
            }
        }
        Step::Key(k) => {
            let Ok(id) = serde_json::from_str::<Map<String, Value>>(k) else {
                return;
            };
            if !v.is_array() {
                *v = json!([]);
            }
            if let Some(a) = v.as_array_mut() {
                let at = a
                    .iter()
                    .position(|e| id.iter().all(|(kk, kv)| e.get(kk) == Some(kv)));
                let i = at.unwrap_or_else(|| {
                    a.push(Value::Object(id.clone()));
                    a.len() - 1
                });
                if rest.is_empty() {
                    if !a[i].is_object() {
                        a[i] = Value::Object(id);
                    }
                } else {
                    set(&mut a[i], rest, value);
                }
            }
        }
    }
}

fn remove(v: &mut Value, path: &[Step]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let Some(p) = get_mut(v, parent) else {
        return;
    };
    match last {
        Step::Field(f) => {
            if let Some(m) = p.as_object_mut() {
                m.remove(f);
            }
        }
        Step::Key(k) => {
            if let (Some(a), Ok(id)) = (
                p.as_array_mut(),
                serde_json::from_str::<Map<String, Value>>(k),
            ) {
                a.retain(|e| !id.iter().all(|(kk, kv)| e.get(kk) == Some(kv)));
            }
        }
    }
}

fn get_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut at = v;
    for step in path {
        at = match step {
            Step::Field(f) => at.get_mut(f)?,
            Step::Key(k) => {
                let id: Map<String, Value> = serde_json::from_str(k).ok()?;
                at.as_array_mut()?
                    .iter_mut()
                    .find(|e| id.iter().all(|(kk, kv)| e.get(kk) == Some(kv)))?
            }
        };
    }
    Some(at)
}

fn to_fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = json!({});
    for path in paths {
        let mut at = &mut root;
        for step in path {
            let name = match step {
                Step::Field(f) => format!("f:{f}"),
                Step::Key(k) => format!("k:{k}"),
            };
            let Some(m) = at.as_object_mut() else { break };
            at = m.entry(name).or_insert_with(|| json!({}));
            if matches!(step, Step::Key(_))
                && let Some(m) = at.as_object_mut()
            {
                m.entry(".").or_insert_with(|| json!({}));
            }
        }
    }
    root
}

fn from_fields_v1(tree: &Value, at: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(m) = tree.as_object() else { return };
    let children: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| k.as_str() != ".").collect();
    if (children.is_empty() || m.contains_key(".")) && !at.is_empty() {
        out.insert(at.clone());
    }
    for (k, v) in children {
        let step = if let Some(f) = k.strip_prefix("f:") {
            Step::Field(f.to_owned())
        } else if let Some(key) = k.strip_prefix("k:") {
            Step::Key(key.to_owned())
        } else {
            continue;
        };
        at.push(step);
        from_fields_v1(v, at, out);
        at.pop();
    }
}

fn owners(object: &Value) -> Vec<Owner> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut fields = BTreeSet::new();
            from_fields_v1(&e["fieldsV1"], &mut Vec::new(), &mut fields);
            Owner {
                manager: e["manager"].as_str().unwrap_or_default().to_owned(),
                operation: e["operation"].as_str().unwrap_or("Apply").to_owned(),
                api_version: e["apiVersion"].as_str().unwrap_or_default().to_owned(),
                fields,
            }
        })
        .collect()
}

fn show(path: &[Step]) -> String {
    path.iter()
        .map(|s| match s {
            Step::Field(f) => format!(".{f}"),
            Step::Key(k) => format!("[{k}]"),
        })
        .collect::<String>()
}

/// Applies `config` for `manager` to `current` (`None`: the object does not exist yet);
/// returns the new object with its `managedFields`, or the conflicts.
pub fn apply(
    current: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, Conflicts> {
    let mut object = current.cloned().unwrap_or_else(|| json!({}));
    let mut owners = owners(&object);
    let wanted = fields_of(config);
    let mut conflicts = Vec::new();
    for other in owners.iter_mut().filter(|o| o.manager != manager) {
        let clash: Vec<Path> = other
            .fields
            .intersection(&wanted)
            .filter(|p| get(&object, p) != get(config, p))
            .cloned()
            .collect();
        if force {
            for p in &clash {
                other.fields.remove(p);
            }
        } else {
            conflicts.extend(clash.iter().map(|p| (other.manager.clone(), show(p))));
        }
    }
    if !conflicts.is_empty() {
        return Err(Conflicts(conflicts));
    }
    let before: BTreeSet<Path> = owners
        .iter()
        .filter(|o| o.manager == manager && o.operation == "Apply")
        .flat_map(|o| o.fields.iter().cloned())
        .collect();
    let kept_by_others: BTreeSet<Path> = owners
        .iter()
        .filter(|o| o.manager != manager)
        .flat_map(|o| o.fields.iter().cloned())
        .collect();
    for p in &wanted {
        if let Some(v) = get(config, p) {
            let is_container = matches!(v, Value::Object(m) if !m.is_empty());
            if !is_container {
                set(&mut object, p, v.clone());
            } else if get(&object, p).is_none() {
                set(&mut object, p, json!({}));
            }
        }
    }
    // Shortest paths first: a list element goes whole (its key with it), and then its
    // fields are already gone.
    let mut dropped: Vec<&Path> = before
        .difference(&wanted)
        .filter(|p| !kept_by_others.contains(*p))
        .collect();
    dropped.sort_by_key(|p| p.len());
    for p in dropped {
        remove(&mut object, p);
    }
    for field in ["apiVersion", "kind"] {
        object[field] = config[field].clone();
    }
    for field in ["name", "namespace"] {
        if !config["metadata"][field].is_null() {
            object["metadata"][field] = config["metadata"][field].clone();
        }
    }
    owners.retain(|o| o.manager != manager || o.operation != "Apply");
    owners.push(Owner {
        manager: manager.to_owned(),
        operation: "Apply".to_owned(),
        api_version: config["apiVersion"].as_str().unwrap_or_default().to_owned(),
        fields: wanted,
    });
    owners.retain(|o| !o.fields.is_empty());
    object["metadata"]["managedFields"] = Value::Array(
        owners
            .iter()
            .map(|o| {
                json!({
                    "manager": o.manager,
                    "operation": o.operation,
                    "apiVersion": o.api_version,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": to_fields_v1(&o.fields),
                })
            })
            .collect(),
    );
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deploy(replicas: i64, image: &str, extra_env: bool) -> Value {
        let mut env = vec![json!({ "name": "A", "value": "1" })];
        if extra_env {
            env.push(json!({ "name": "B", "value": "2" }));
        }
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": { "replicas": replicas, "template": { "spec": { "containers": [
                { "name": "web", "image": image, "env": env },
            ] } } },
        })
    }

    #[test]
    fn a_manager_owns_what_it_applies_and_its_dropped_fields_go() {
        let first = apply(None, &deploy(2, "web:1", true), "helm", false).unwrap();
        assert_eq!(first["spec"]["replicas"], 2);
        let mf = &first["metadata"]["managedFields"][0];
        assert_eq!(mf["manager"], "helm");
        assert!(mf["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
            ["k:{\"name\":\"web\"}"]["f:image"]
            .is_object());
        let second = apply(Some(&first), &deploy(3, "web:2", false), "helm", false).unwrap();
        let env = &second["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(env, &json!([{ "name": "A", "value": "1" }]), "{second}");
        assert_eq!(second["spec"]["replicas"], 3);
    }

    #[test]
    fn another_managers_field_conflicts_unless_forced() {
        let first = apply(None, &deploy(2, "web:1", false), "helm", false).unwrap();
        let mine = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": { "replicas": 5 },
        });
        let Conflicts(c) = apply(Some(&first), &mine, "kubectl", false).unwrap_err();
        assert_eq!(c, [("helm".to_owned(), ".spec.replicas".to_owned())]);
        let forced = apply(Some(&first), &mine, "kubectl", true).unwrap();
        assert_eq!(forced["spec"]["replicas"], 5);
        assert_eq!(
            forced["spec"]["template"]["spec"]["containers"][0]["image"],
            "web:1"
        );
        // The same value is no conflict: both own it.
        let same = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": { "replicas": 2 },
        });
        assert!(apply(Some(&first), &same, "kubectl", false).is_ok());
    }
}
