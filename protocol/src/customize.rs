//! Customization rendered at the edge: a placement's per-cluster rules, applied by the
//! agent to an object just before it hands the object to its cluster.
//!
//! A rule may be limited to clusters (a label selector) and to objects (kinds,
//! namespaces, names, labels), and holds a JSON merge patch (RFC 7386) or a JSON patch
//! (RFC 6902), or both (the merge patch first). String values in a patch may use
//! variables, filled from the cluster:
//!
//! * `${cluster.name}`, `${cluster.labels.KEY}`, `${cluster.properties.KEY}`;
//! * `$${` is a literal `${`.
//!
//! **Types.** A string that is exactly one variable (`"${cluster.properties.replicas}"`)
//! becomes a JSON number or boolean when the variable's value is a JSON number or
//! boolean (`2`, `-1`, `0.5`, `true`, `false`; `"0042"` is no JSON number and stays a
//! string); `"${cluster.properties.replicas | string}"` always stays a string. A
//! variable inside a longer string is always text.
//!
//! **Failures.** A variable the cluster lacks, a path that does not exist, a `test`
//! that does not hold: the object is not applied on that cluster and its status is
//! `Failed` with the reason; never a silent skip. Rendering is pure and deterministic:
//! the same object, rules and cluster always give the same bytes.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::model::{Labels, ObjectMeta};
use crate::placement_spec::Placement;
pub use crate::placement_spec::{CustomizeRule, PatchOp};

/// What variables are filled from: a cluster's name, labels and properties.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterVars {
    /// `${cluster.name}`.
    pub name: String,
    /// `${cluster.labels.KEY}`.
    pub labels: Labels,
    /// `${cluster.properties.KEY}`.
    pub properties: BTreeMap<String, String>,
}

/// Why a rule could not be rendered for a cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CustomizeError {
    /// A variable names something the cluster lacks, or is malformed.
    #[error("{rule}: {reason}")]
    Variable {
        /// The rule (`placement P customize[i]`).
        rule: String,
        /// What is missing or wrong.
        reason: VariableError,
    },
    /// A JSON patch operation did not apply.
    #[error("{rule} jsonPatch[{op}]: {reason}")]
    Patch {
        /// The rule (`placement P customize[i]`).
        rule: String,
        /// The operation's index.
        op: usize,
        /// Why.
        reason: String,
    },
    /// The object's manifest is not JSON.
    #[error("manifest is not JSON: {0}")]
    Manifest(String),
}

/// Why a variable could not be filled ([`substitute`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariableError {
    /// A filter other than `string`.
    #[error("unknown filter {filter:?} in ${{{expr}}}")]
    UnknownFilter {
        /// The filter.
        filter: String,
        /// The variable's expression.
        expr: String,
    },
    /// The cluster has no such label or property.
    #[error("cluster {cluster} has no {what} {key:?} (in ${{{expr}}})")]
    Missing {
        /// The cluster.
        cluster: String,
        /// `label` or `property`.
        what: &'static str,
        /// The label's or property's key.
        key: String,
        /// The variable's expression.
        expr: String,
    },
    /// A name that is no variable.
    #[error(
        "unknown variable ${{{expr}}} (cluster.name, cluster.labels.KEY and cluster.properties.KEY exist)"
    )]
    Unknown {
        /// The variable's expression.
        expr: String,
    },
    /// A `${` without its `}`.
    #[error("unterminated variable in {text:?}")]
    Unterminated {
        /// The string it is in.
        text: String,
    },
}

impl CustomizeRule {
    /// Checks what can be checked without a cluster: variable syntax and pointers.
    /// Returns the field at fault (relative to the rule) and why.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.merge_patch.is_none() && self.json_patch.is_empty() {
            return Err((String::new(), "a rule needs mergePatch or jsonPatch".into()));
        }
        let empty = ClusterVars::default();
        let check = |v: &Value, field: String| -> Result<(), (String, String)> {
            substitute(v, &empty, true)
                .map(|_| ())
                .map_err(|e| (field, e.to_string()))
        };
        if let Some(m) = &self.merge_patch {
            check(m, "mergePatch".into())?;
        }
        for (i, op) in self.json_patch.iter().enumerate() {
            let field = format!("jsonPatch[{i}]");
            for p in op.pointers() {
                parse_pointer(p).map_err(|e| (field.clone(), e))?;
            }
            if let Some(v) = op.value() {
                check(v, field)?;
            }
        }
        Ok(())
    }
}

impl PatchOp {
    fn pointers(&self) -> Vec<&str> {
        match self {
            PatchOp::Add { path, .. }
            | PatchOp::Remove { path }
            | PatchOp::Replace { path, .. }
            | PatchOp::Test { path, .. } => vec![path],
            PatchOp::Move { from, path } | PatchOp::Copy { from, path } => vec![from, path],
        }
    }

    fn value(&self) -> Option<&Value> {
        match self {
            PatchOp::Add { value, .. }
            | PatchOp::Replace { value, .. }
            | PatchOp::Test { value, .. } => Some(value),
            _ => None,
        }
    }
}

/// The rules of `placements` that apply to this object on a cluster with these labels,
/// in order: placements by (space, name), then each placement's rules as written. Each
/// comes with its name for messages (`placement P customize[i]`).
pub fn rules_for<'a>(
    placements: &'a [Placement],
    meta: &ObjectMeta,
    cluster_labels: &Labels,
) -> Vec<(String, &'a CustomizeRule)> {
    let mut ps: Vec<&Placement> = placements
        .iter()
        .filter(|p| !p.customize.is_empty() && p.selects_object(meta))
        .collect();
    ps.sort_by(|a, b| (&a.space, &a.name).cmp(&(&b.space, &b.name)));
    ps.into_iter()
        .flat_map(|p| {
            p.customize
                .iter()
                .enumerate()
                .filter(|(_, r)| r.applies(meta, cluster_labels))
                .map(move |(i, r)| (format!("placement {} customize[{i}]", p.name), r))
        })
        .collect()
}

/// Renders a manifest with `rules` (from [`rules_for`]) for one cluster.
pub fn render(
    manifest: &Value,
    rules: &[(String, &CustomizeRule)],
    cluster: &ClusterVars,
) -> Result<Value, CustomizeError> {
    let mut doc = manifest.clone();
    for (name, rule) in rules {
        let variable = |reason: VariableError| CustomizeError::Variable {
            rule: name.clone(),
            reason,
        };
        if let Some(m) = &rule.merge_patch {
            let patch = substitute(m, cluster, false).map_err(variable)?;
            merge_patch(&mut doc, &patch);
        }
        for (i, op) in rule.json_patch.iter().enumerate() {
            let op = match op.value() {
                Some(v) => {
                    let v = substitute(v, cluster, false).map_err(|reason| {
                        CustomizeError::Variable {
                            rule: format!("{name} jsonPatch[{i}]"),
                            reason,
                        }
                    })?;
                    op.with_value(v)
                }
                None => op.clone(),
            };
            json_patch_op(&mut doc, &op).map_err(|reason| CustomizeError::Patch {
                rule: name.clone(),
                op: i,
                reason,
            })?;
        }
    }
    Ok(doc)
}

impl PatchOp {
    fn with_value(&self, value: Value) -> PatchOp {
        match self {
            PatchOp::Add { path, .. } => PatchOp::Add {
                path: path.clone(),
                value,
            },
            PatchOp::Replace { path, .. } => PatchOp::Replace {
                path: path.clone(),
                value,
            },
            PatchOp::Test { path, .. } => PatchOp::Test {
                path: path.clone(),
                value,
            },
            other => other.clone(),
        }
    }
}

/// Fills variables in every string of `value` (object keys are left alone). With
/// `check_only`, variables are checked for syntax and left unfilled.
pub fn substitute(
    value: &Value,
    vars: &ClusterVars,
    check_only: bool,
) -> Result<Value, VariableError> {
    Ok(match value {
        Value::String(s) => substitute_str(s, vars, check_only)?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| substitute(v, vars, check_only))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), substitute(v, vars, check_only)?)))
                .collect::<Result<Map<_, _>, VariableError>>()?,
        ),
        other => other.clone(),
    })
}

/// One variable's value, and whether it must stay a string (`| string`).
fn lookup(
    expr: &str,
    vars: &ClusterVars,
    check_only: bool,
) -> Result<(String, bool), VariableError> {
    let (name, as_string) = match expr.split_once('|') {
        Some((n, f)) if f.trim() == "string" => (n.trim(), true),
        Some((_, f)) => {
            return Err(VariableError::UnknownFilter {
                filter: f.trim().to_owned(),
                expr: expr.to_owned(),
            });
        }
        None => (expr.trim(), false),
    };
    let missing = |what: &'static str, key: &str| VariableError::Missing {
        cluster: vars.name.clone(),
        what,
        key: key.to_owned(),
        expr: expr.to_owned(),
    };
    let value = if name == "cluster.name" {
        vars.name.clone()
    } else if let Some(key) = name.strip_prefix("cluster.labels.") {
        if check_only {
            String::new()
        } else {
            vars.labels
                .get(key)
                .cloned()
                .ok_or_else(|| missing("label", key))?
        }
    } else if let Some(key) = name.strip_prefix("cluster.properties.") {
        if check_only {
            String::new()
        } else {
            vars.properties
                .get(key)
                .cloned()
                .ok_or_else(|| missing("property", key))?
        }
    } else {
        return Err(VariableError::Unknown {
            expr: expr.to_owned(),
        });
    };
    Ok((value, as_string))
}

fn substitute_str(s: &str, vars: &ClusterVars, check_only: bool) -> Result<Value, VariableError> {
    if !s.contains("${") {
        return Ok(Value::String(s.to_owned()));
    }
    // A whole-string variable is typed (see the module doc).
    if let Some(expr) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}'))
        && !expr.contains('}')
        && !expr.contains("${")
    {
        let (value, as_string) = lookup(expr, vars, check_only)?;
        if !as_string
            && let Ok(typed @ (Value::Number(_) | Value::Bool(_))) =
                serde_json::from_str::<Value>(&value)
        {
            return Ok(typed);
        }
        return Ok(Value::String(value));
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after
                .find('}')
                .ok_or_else(|| VariableError::Unterminated { text: s.to_owned() })?;
            let (value, _) = lookup(&after[..end], vars, check_only)?;
            out.push_str(&value);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

/// Applies a JSON merge patch (RFC 7386) to `target`.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in fields {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Applies a JSON patch (RFC 6902) to `doc`, all or nothing.
pub fn json_patch(doc: &mut Value, ops: &[PatchOp]) -> Result<(), (usize, String)> {
    let mut work = doc.clone();
    for (i, op) in ops.iter().enumerate() {
        json_patch_op(&mut work, op).map_err(|e| (i, e))?;
    }
    *doc = work;
    Ok(())
}

/// The reference tokens of a JSON pointer (RFC 6901).
fn parse_pointer(p: &str) -> Result<Vec<String>, String> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(format!(
            "{p:?} is not a JSON pointer (it must start with '/')"
        ));
    };
    rest.split('/')
        .map(|t| {
            if t.replace("~0", "").replace("~1", "").contains('~') {
                Err(format!("{p:?} has a '~' not followed by 0 or 1"))
            } else {
                Ok(t.replace("~1", "/").replace("~0", "~"))
            }
        })
        .collect()
}

fn index(token: &str, len: usize, allow_end: bool, path: &str) -> Result<usize, String> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    let i: usize = token
        .parse()
        .ok()
        .filter(|_| valid)
        .ok_or_else(|| format!("{token:?} in {path} is not an array index"))?;
    let bound = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if i > bound || (!allow_end && len == 0) {
        return Err(format!(
            "index {i} in {path} is out of bounds (length {len})"
        ));
    }
    Ok(i)
}

fn get<'v>(doc: &'v Value, tokens: &[String], path: &str) -> Result<&'v Value, String> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get(t),
            Value::Array(a) => a.get(index(t, a.len(), false, path)?),
            _ => None,
        }
        .ok_or_else(|| format!("no value at {path}"))?;
    }
    Ok(cur)
}

fn parent_mut<'v>(
    doc: &'v mut Value,
    tokens: &[String],
    path: &str,
) -> Result<&'v mut Value, String> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => {
                let i = index(t, a.len(), false, path)?;
                a.get_mut(i)
            }
            _ => None,
        }
        .ok_or_else(|| format!("the parent of {path} does not exist"))?;
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let tokens = parse_pointer(path)?;
    let Some((last, parent)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parent, path)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = index(last, a.len(), true, path)?;
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!(
            "the parent of {path} is neither an object nor an array"
        )),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let tokens = parse_pointer(path)?;
    let Some((last, parent)) = tokens.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    match parent_mut(doc, parent, path)? {
        Value::Object(m) => m.remove(last).ok_or_else(|| format!("no value at {path}")),
        Value::Array(a) => {
            let i = index(last, a.len(), false, path)?;
            Ok(a.remove(i))
        }
        _ => Err(format!("no value at {path}")),
    }
}

fn json_patch_op(doc: &mut Value, op: &PatchOp) -> Result<(), String> {
    match op {
        PatchOp::Add { path, value } => add(doc, path, value.clone()),
        PatchOp::Remove { path } => remove(doc, path).map(|_| ()),
        PatchOp::Replace { path, value } => {
            let tokens = parse_pointer(path)?;
            get(doc, &tokens, path)?;
            if tokens.is_empty() {
                *doc = value.clone();
                return Ok(());
            }
            remove(doc, path)?;
            add(doc, path, value.clone())
        }
        PatchOp::Move { from, path } => {
            if from == path {
                return get(doc, &parse_pointer(from)?, from).map(|_| ());
            }
            if path.starts_with(&format!("{from}/")) {
                return Err(format!("cannot move {from} into its own child {path}"));
            }
            let value = remove(doc, from)?;
            add(doc, path, value)
        }
        PatchOp::Copy { from, path } => {
            let value = get(doc, &parse_pointer(from)?, from)?.clone();
            add(doc, path, value)
        }
        PatchOp::Test { path, value } => {
            let actual = get(doc, &parse_pointer(path)?, path)?;
            if actual == value {
                Ok(())
            } else {
                Err(format!("test failed: {path} is {actual}, not {value}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars() -> ClusterVars {
        ClusterVars {
            name: "store-1".into(),
            labels: [("country".to_owned(), "fr".to_owned())].into(),
            properties: [
                ("posReplicas".to_owned(), "3".to_owned()),
                ("store".to_owned(), "0042".to_owned()),
            ]
            .into(),
        }
    }

    #[test]
    fn whole_string_variables_are_typed_and_embedded_ones_are_text() {
        let v = vars();
        let s = |x: &str| substitute(&json!(x), &v, false).unwrap();
        assert_eq!(s("${cluster.properties.posReplicas}"), json!(3));
        assert_eq!(s("${cluster.properties.posReplicas | string}"), json!("3"));
        assert_eq!(s("${cluster.properties.store}"), json!("0042"));
        assert_eq!(
            s("pos-${cluster.name}-${cluster.labels.country}"),
            json!("pos-store-1-fr")
        );
        assert_eq!(s("$${cluster.name}"), json!("${cluster.name}"));
    }

    #[test]
    fn missing_and_unknown_variables_are_errors() {
        let v = vars();
        let e = substitute(&json!("${cluster.labels.region}"), &v, false).unwrap_err();
        assert!(
            e.to_string().contains("store-1 has no label \"region\""),
            "{e}"
        );
        assert!(substitute(&json!("${cluster.zone}"), &v, false).is_err());
        assert!(substitute(&json!("a ${cluster.name"), &v, false).is_err());
    }

    #[test]
    fn a_pointer_into_a_missing_parent_fails() {
        let mut doc = json!({ "spec": {} });
        let ops = [PatchOp::Add {
            path: "/spec/template/spec".into(),
            value: json!(1),
        }];
        assert!(json_patch(&mut doc, &ops).is_err());
        assert_eq!(doc, json!({ "spec": {} }), "all or nothing");
    }
}
