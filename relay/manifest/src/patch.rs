//! The patch formats of the Kubernetes API: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902) and strategic merge patch, the format `kubectl apply` sends for built-in
//! types (lists of objects merge by a key, with its `$patch`, `$setElementOrder`,
//! `$retainKeys` and `$deleteFromPrimitiveList` directives).

use serde_json::{Map, Value};

/// Why a patch does not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatchError(pub String);

/// RFC 7386: objects merge, `null` removes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// RFC 6902: `add`, `remove`, `replace`, `move`, `copy` and `test`, all or nothing.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| PatchError("a JSON patch is an array of operations".into()))?;
    let mut work = target.clone();
    for (i, op) in ops.iter().enumerate() {
        let field = |name: &str| {
            op.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| PatchError(format!("operation {i}: `{name}` is required")))
        };
        let path = field("path")?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| PatchError(format!("operation {i}: `value` is required")))
        };
        match field("op")? {
            "add" => add(&mut work, path, value()?)?,
            "remove" => {
                remove(&mut work, path)?;
            }
            "replace" => {
                remove(&mut work, path)?;
                add(&mut work, path, value()?)?;
            }
            "move" => {
                let v = remove(&mut work, field("from")?)?;
                add(&mut work, path, v)?;
            }
            "copy" => {
                let v = pointer(&work, field("from")?)?.clone();
                add(&mut work, path, v)?;
            }
            "test" => {
                if *pointer(&work, path)? != value()? {
                    return Err(PatchError(format!("operation {i}: test of {path} failed")));
                }
            }
            other => return Err(PatchError(format!("operation {i}: unknown op {other:?}"))),
        }
    }
    *target = work;
    Ok(())
}

fn tokens(path: &str) -> Result<Vec<String>, PatchError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| PatchError(format!("{path:?} is not a JSON pointer")))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn pointer<'a>(v: &'a Value, path: &str) -> Result<&'a Value, PatchError> {
    v.pointer(path)
        .ok_or_else(|| PatchError(format!("{path} does not exist")))
}

fn parent<'a>(v: &'a mut Value, path: &str) -> Result<(&'a mut Value, String), PatchError> {
    let mut t = tokens(path)?;
    let last = t
        .pop()
        .ok_or_else(|| PatchError("the whole document cannot be the target".into()))?;
    let mut at = v;
    for tok in t {
        at = match at {
            Value::Object(m) => m.get_mut(&tok),
            Value::Array(a) => tok.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| PatchError(format!("{path}: {tok} does not exist")))?;
    }
    Ok((at, last))
}

fn add(v: &mut Value, path: &str, value: Value) -> Result<(), PatchError> {
    let (at, last) = parent(v, path)?;
    match at {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) if last == "-" => {
            a.push(value);
            Ok(())
        }
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i <= a.len() => {
                a.insert(i, value);
                Ok(())
            }
            _ => Err(PatchError(format!("{path}: index out of range"))),
        },
        _ => Err(PatchError(format!("{path}: the parent is not a container"))),
    }
}

fn remove(v: &mut Value, path: &str) -> Result<Value, PatchError> {
    let (at, last) = parent(v, path)?;
    let gone = match at {
        Value::Object(m) => m.remove(&last),
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => Some(a.remove(i)),
            _ => None,
        },
        _ => None,
    };
    gone.ok_or_else(|| PatchError(format!("{path} does not exist")))
}

/// The key lists of built-in types merge by, by field name, for patches that do not
/// say (`$setElementOrder/<field>` names the key when kubectl sends one). The set of
/// Kubernetes' `patchMergeKey` tags on list fields of the workload types.
pub fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "hostAliases" => "ip",
        "conditions" => "type",
        "topologySpreadConstraints" => "topologyKey",
        "ownerReferences" => "uid",
        // A container's ports merge by containerPort, a Service's by port.
        "ports" if items.iter().any(|i| i.get("containerPort").is_some()) => "containerPort",
        "ports" => "port",
        _ => return None,
    })
}

/// Lists of scalars whose patches merge as sets (Kubernetes' `patchStrategy:"merge"`).
fn merges_as_set(field: &str) -> bool {
    field == "finalizers"
}

const ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to `target`.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    match merge_map(target.clone(), patch)? {
        Some(v) => *target = v,
        None => *target = Value::Object(Map::new()),
    }
    Ok(())
}

/// `None`: the map is deleted (`$patch: delete`).
fn merge_map(original: Value, patch: &Value) -> Result<Option<Value>, PatchError> {
    let Value::Object(p) = patch else {
        return Ok(Some(patch.clone()));
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(None),
        Some("replace") => {
            let mut replaced = p.clone();
            replaced.remove("$patch");
            return Ok(Some(Value::Object(replaced)));
        }
        Some("merge") | None => {}
        Some(other) => return Err(PatchError(format!("unknown $patch directive {other:?}"))),
    }
    let mut out = match original {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    for (k, v) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with(ORDER) {
            continue;
        }
        if let Some(field) = k.strip_prefix(DELETE_FROM) {
            if let (Some(Value::Array(have)), Some(gone)) = (out.get_mut(field), v.as_array()) {
                have.retain(|x| !gone.contains(x));
            }
            continue;
        }
        if v.is_null() {
            out.remove(k);
            continue;
        }
        let current = out.remove(k).unwrap_or(Value::Null);
        let merged = match v {
            Value::Object(_) => merge_map(current, v)?,
            Value::Array(items) => Some(merge_list(
                k,
                current,
                items,
                p.get(&format!("{ORDER}{k}")),
            )?),
            _ => Some(v.clone()),
        };
        if let Some(m) = merged {
            out.insert(k.clone(), m);
        }
    }
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Some(Value::Object(out)))
}

fn merge_list(
    field: &str,
    current: Value,
    items: &[Value],
    order: Option<&Value>,
) -> Result<Value, PatchError> {
    let order: Vec<Value> = order.and_then(Value::as_array).cloned().unwrap_or_default();
    let have = match current {
        Value::Array(a) => a,
        _ => Vec::new(),
    };
    // A list of scalars: a set when its field merges, otherwise replaced.
    if items.iter().chain(&order).all(|i| !i.is_object()) {
        if !merges_as_set(field) {
            return Ok(Value::Array(items.to_vec()));
        }
        let mut out = have;
        for i in items {
            if !out.contains(i) {
                out.push(i.clone());
            }
        }
        return Ok(Value::Array(out));
    }
    let key = order
        .first()
        .and_then(Value::as_object)
        .and_then(|m| m.keys().next().cloned())
        .or_else(|| merge_key(field, items).map(str::to_owned));
    // The patch's items, without its directives, in place of the list.
    let replaced = || {
        Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        )
    };
    let Some(key) = key else {
        // No merge key: the list is atomic, as for a JSON merge patch.
        return Ok(replaced());
    };
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(replaced());
    }
    let mut out = have;
    for item in items {
        let Some(id) = item.get(&key) else {
            return Err(PatchError(format!(
                "{field}: an element without its merge key {key:?}"
            )));
        };
        let at = out.iter().position(|o| o.get(&key) == Some(id));
        match (
            at,
            merge_map(at.map(|i| out[i].clone()).unwrap_or(Value::Null), item)?,
        ) {
            (Some(i), Some(v)) => out[i] = v,
            (Some(i), None) => {
                out.remove(i);
            }
            (None, Some(v)) => out.push(v),
            (None, None) => {}
        }
    }
    if !order.is_empty() {
        let rank = |v: &Value| {
            order
                .iter()
                .position(|o| o.get(&key) == v.get(&key))
                .unwrap_or(usize::MAX)
        };
        out.sort_by_key(rank);
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut v = json!({ "a": "b", "c": { "d": "e", "f": "g" } });
        merge_patch(&mut v, &json!({ "a": "z", "c": { "f": null } }));
        assert_eq!(v, json!({ "a": "z", "c": { "d": "e" } }));
    }

    #[test]
    fn json_patch_applies_all_or_nothing() {
        let mut v = json!({ "spec": { "replicas": 1, "list": [1, 2] } });
        json_patch(
            &mut v,
            &json!([
                { "op": "replace", "path": "/spec/replicas", "value": 3 },
                { "op": "add", "path": "/spec/list/-", "value": 3 },
                { "op": "remove", "path": "/spec/list/0" },
            ]),
        )
        .unwrap();
        assert_eq!(v, json!({ "spec": { "replicas": 3, "list": [2, 3] } }));
        let before = v.clone();
        let e = json_patch(
            &mut v,
            &json!([
                { "op": "replace", "path": "/spec/replicas", "value": 9 },
                { "op": "remove", "path": "/spec/nothing" },
            ]),
        )
        .unwrap_err();
        assert_eq!(e.0, "/spec/nothing does not exist");
        assert_eq!(v, before, "a failed patch changed the object");
    }

    #[test]
    fn strategic_merge_merges_containers_by_name_in_the_order_kubectl_sends() {
        let mut v = json!({ "spec": { "template": { "spec": { "containers": [
            { "name": "web", "image": "web:1", "ports": [ { "containerPort": 80 } ] },
            { "name": "log", "image": "log:1" },
        ], "finalizers": ["a"] } } } });
        let patch = json!({ "spec": { "template": { "spec": {
            "$setElementOrder/containers": [ { "name": "sidecar" }, { "name": "web" } ],
            "containers": [
                { "name": "web", "image": "web:2" },
                { "name": "sidecar", "image": "side:1" },
                { "name": "log", "$patch": "delete" },
            ],
            "finalizers": ["b"],
        } } } });
        strategic_merge_patch(&mut v, &patch).unwrap();
        assert_eq!(
            v,
            json!({ "spec": { "template": { "spec": { "containers": [
                { "name": "sidecar", "image": "side:1" },
                { "name": "web", "image": "web:2", "ports": [ { "containerPort": 80 } ] },
            ], "finalizers": ["a", "b"] } } } })
        );
    }

    #[test]
    fn strategic_merge_directives_replace_retain_and_delete_from_lists() {
        let mut v = json!({ "a": { "x": 1, "y": 2 }, "b": { "p": 1, "q": 2 }, "f": ["x", "y"] });
        let patch = json!({
            "a": { "$patch": "replace", "z": 3 },
            "b": { "$retainKeys": ["q"], "q": 5 },
            "$deleteFromPrimitiveList/f": ["x"],
        });
        strategic_merge_patch(&mut v, &patch).unwrap();
        assert_eq!(v, json!({ "a": { "z": 3 }, "b": { "q": 5 }, "f": ["y"] }));
    }
}
