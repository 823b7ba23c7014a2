//! Summaries the user specifies: a placement's `statusSummary` entries, evaluated by
//! the agent on the objects it reports, merged at every tier, shown at the root.
//!
//! An entry has a name, a path into the reported object (the applied manifest with the
//! cluster's `.status`), an operation and an optional `groupBy` cluster label.
//!
//! **Paths** are a JSONPath subset: `.field` (dotted fields), `["field.with.dots"]`,
//! `[n]` (an array element) and `[*]` (every element), an optional leading `$`; e.g.
//! `.status.readyReplicas`, `.spec.template.spec.containers[*].image`,
//! `.metadata.labels["app.kubernetes.io/version"]`. A path that finds nothing in an
//! object contributes nothing.
//!
//! **Operations** (over every value found, on every cluster): `sum`, `min`, `max` of
//! integers (other values are ignored; fractions are truncated), `count` of the values
//! found, `countBy` a histogram of values (strings as they are, others as JSON) of which
//! the root shows the `top` (default 10) most frequent, `any` / `all` of booleans.
//!
//! **Merging.** Each object's values travel as entries of its status's numbers (keys
//! under [`PREFIX`]), so they merge with the summary algebra every tier already runs
//! ([`crate::summary::Summary::merge`]: associative, commutative, with identity): `sum`,
//! `count` and `countBy` read the sum, `min` and `all` the minimum, `max` and `any` the
//! maximum. Histograms are exact (the top-k cut happens only when shown), so their size
//! grows with the number of distinct values: point `countBy` at low-cardinality fields.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::model::Labels;
use crate::summary::NumberStats;

/// Where user summary entries live among a status's numbers.
pub const PREFIX: &str = "strata.dev/summary/";

/// How many `countBy` values the root shows unless `top` says otherwise.
pub const DEFAULT_TOP: u32 = 10;

/// One `statusSummary` entry of a placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SummarySpec {
    /// The name the root shows the value under (letters, digits, `-`, `_`).
    pub name: String,
    /// A path into the reported object (see the module doc).
    pub path: String,
    /// What to compute.
    pub op: SummaryOp,
    /// For `countBy`: how many values to show, the most frequent first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<u32>,
    /// Group the value by this cluster label (clusters without it form the group `""`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<String>,
}

/// A summary operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SummaryOp {
    /// Sum of integers.
    Sum,
    /// Smallest integer.
    Min,
    /// Largest integer.
    Max,
    /// Number of values found.
    Count,
    /// Histogram of values.
    CountBy,
    /// Whether any boolean is true.
    Any,
    /// Whether every boolean is true.
    All,
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// An object's field.
    Field(String),
    /// An array element.
    Index(usize),
    /// Every array element.
    All,
}

/// Why a path does not parse ([`parse_path`]); each but [`PathError::Empty`] names the
/// path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// No step at all.
    #[error("a path needs at least one step, e.g. .status.readyReplicas")]
    Empty,
    /// A `.` not followed by a name.
    #[error("{path:?}: empty field name")]
    EmptyField {
        /// The path.
        path: String,
    },
    /// A `[` not closed.
    #[error("{path:?}: '[' without ']'")]
    Unclosed {
        /// The path.
        path: String,
    },
    /// Brackets around something that is neither an index, `*` nor a quoted name.
    #[error("{path:?}: [{inner}] is neither an index, [*] nor a quoted field")]
    Bracket {
        /// The path.
        path: String,
        /// Between the brackets.
        inner: String,
    },
    /// Neither `.` nor `[` where a step starts.
    #[error("{path:?}: expected '.' or '[' at {rest:?} (paths look like .status.readyReplicas)")]
    Unexpected {
        /// The path.
        path: String,
        /// The rest of the path from there.
        rest: String,
    },
}

/// Parses a path (see the module doc).
pub fn parse_path(path: &str) -> Result<Vec<Step>, PathError> {
    let mut rest = path.strip_prefix('$').unwrap_or(path);
    let mut steps = Vec::new();
    if rest.is_empty() {
        return Err(PathError::Empty);
    }
    let path_owned = || path.to_owned();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err(PathError::EmptyField { path: path_owned() });
            }
            steps.push(Step::Field(r[..end].to_owned()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r
                .find(']')
                .ok_or_else(|| PathError::Unclosed { path: path_owned() })?;
            let inner = &r[..end];
            let quoted = inner
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .or_else(|| inner.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')));
            steps.push(if inner == "*" {
                Step::All
            } else if let Some(q) = quoted {
                Step::Field(q.to_owned())
            } else {
                Step::Index(inner.parse().map_err(|_| PathError::Bracket {
                    path: path_owned(),
                    inner: inner.to_owned(),
                })?)
            });
            rest = &r[end + 1..];
        } else {
            return Err(PathError::Unexpected {
                path: path_owned(),
                rest: rest.to_owned(),
            });
        }
    }
    Ok(steps)
}

/// Every value the path finds in `doc` (`null`s are not values).
pub fn evaluate<'v>(steps: &[Step], doc: &'v Value) -> Vec<&'v Value> {
    let mut found = vec![doc];
    for step in steps {
        found = found
            .into_iter()
            .flat_map(|v| -> Vec<&Value> {
                match (step, v) {
                    (Step::Field(f), Value::Object(m)) => m.get(f).into_iter().collect(),
                    (Step::Index(i), Value::Array(a)) => a.get(*i).into_iter().collect(),
                    (Step::All, Value::Array(a)) => a.iter().collect(),
                    _ => Vec::new(),
                }
            })
            .collect();
    }
    found.retain(|v| !v.is_null());
    found
}

impl SummarySpec {
    /// Checks the name, the path and `top`; returns the field at fault and why.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 63
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return Err((
                "name".into(),
                "must be 1 to 63 letters, digits, '-' or '_'".into(),
            ));
        }
        parse_path(&self.path).map_err(|e| ("path".into(), e.to_string()))?;
        if self.top.is_some() && self.op != SummaryOp::CountBy {
            return Err(("top".into(), "only countBy takes top".into()));
        }
        Ok(())
    }

    fn key(&self, placement: &str, labels: &Labels) -> String {
        let mut key = format!("{PREFIX}{placement}/{}", self.name);
        if let Some(label) = &self.group_by {
            key.push('/');
            key.push_str(&escape(labels.get(label).map_or("", String::as_str)));
        }
        key
    }

    /// This entry's number entries for one object on a cluster with `labels`, where
    /// `doc` is the object as the cluster holds it (manifest and `.status`).
    pub fn numbers(&self, placement: &str, doc: &Value, labels: &Labels) -> BTreeMap<String, i64> {
        let Ok(steps) = parse_path(&self.path) else {
            return BTreeMap::new();
        };
        let values = evaluate(&steps, doc);
        let key = self.key(placement, labels);
        let ints = || values.iter().filter_map(|v| integer(v));
        let bools = || values.iter().filter_map(|v| v.as_bool());
        let mut out = BTreeMap::new();
        let one = match self.op {
            SummaryOp::Sum => ints().reduce(i64::saturating_add),
            SummaryOp::Min => ints().min(),
            SummaryOp::Max => ints().max(),
            SummaryOp::Count => Some(i64::try_from(values.len()).unwrap_or(i64::MAX)),
            SummaryOp::Any => bools().reduce(|a, b| a || b).map(i64::from),
            SummaryOp::All => bools().reduce(|a, b| a && b).map(i64::from),
            SummaryOp::CountBy => {
                for v in &values {
                    let text = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    *out.entry(format!("{key}/{}", escape(&text))).or_insert(0) += 1;
                }
                None
            }
        };
        if let Some(n) = one {
            out.insert(key, n);
        }
        out
    }

    /// The entry's value from merged number statistics (of every object of
    /// `placement`), as the root shows it.
    pub fn show(&self, placement: &str, numbers: &BTreeMap<String, NumberStats>) -> Value {
        let base = format!("{PREFIX}{placement}/{}", self.name);
        let mut groups: BTreeMap<String, Vec<(Vec<String>, NumberStats)>> = BTreeMap::new();
        let prefix = format!("{base}/");
        for (k, s) in numbers {
            let rest = if *k == base {
                ""
            } else if let Some(r) = k.strip_prefix(&prefix) {
                r
            } else {
                continue;
            };
            let mut parts: Vec<String> = if rest.is_empty() {
                Vec::new()
            } else {
                rest.split('/').map(unescape).collect()
            };
            let group = if self.group_by.is_some() && !parts.is_empty() {
                parts.remove(0)
            } else {
                String::new()
            };
            groups.entry(group).or_default().push((parts, *s));
        }
        if self.group_by.is_some() {
            Value::Object(
                groups
                    .iter()
                    .map(|(g, entries)| (g.clone(), self.value(entries)))
                    .collect(),
            )
        } else {
            groups
                .get("")
                .map_or_else(|| self.value(&[]), |entries| self.value(entries))
        }
    }

    fn value(&self, entries: &[(Vec<String>, NumberStats)]) -> Value {
        let plain = entries.iter().find(|(p, _)| p.is_empty()).map(|(_, s)| s);
        match self.op {
            SummaryOp::Sum | SummaryOp::Count => plain.map_or(json!(0), |s| clamp(s.sum)),
            SummaryOp::Min => plain.map_or(Value::Null, |s| json!(s.min)),
            SummaryOp::Max => plain.map_or(Value::Null, |s| json!(s.max)),
            SummaryOp::Any => plain.map_or(Value::Null, |s| json!(s.max == 1)),
            SummaryOp::All => plain.map_or(Value::Null, |s| json!(s.min == 1)),
            SummaryOp::CountBy => {
                let mut hist: Vec<(&str, i128)> = entries
                    .iter()
                    .filter_map(|(p, s)| p.first().map(|v| (v.as_str(), s.sum)))
                    .collect();
                hist.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
                let top = usize::try_from(self.top.unwrap_or(DEFAULT_TOP)).unwrap_or(usize::MAX);
                Value::Object(
                    hist.into_iter()
                        .take(top)
                        .map(|(v, n)| (v.to_owned(), clamp(n)))
                        .collect::<Map<_, _>>(),
                )
            }
        }
    }
}

/// The `status.summary` of a placement: every entry by name.
pub fn show_all(
    specs: &[SummarySpec],
    placement: &str,
    numbers: &BTreeMap<String, NumberStats>,
) -> Value {
    Value::Object(
        specs
            .iter()
            .map(|s| (s.name.clone(), s.show(placement, numbers)))
            .collect(),
    )
}

/// Whether a number entry is a user summary's (not a status field to show as such).
pub fn is_user_entry(key: &str) -> bool {
    key.starts_with(PREFIX)
}

fn integer(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        #[allow(clippy::cast_possible_truncation)]
        v.as_f64().map(|f| f as i64)
    })
}

fn clamp(x: i128) -> Value {
    json!(i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX }))
}

/// Keeps `/` and `%` out of a key part.
fn escape(s: &str) -> String {
    s.replace('%', "%25").replace('/', "%2F")
}

fn unescape(s: &str) -> String {
    s.replace("%2F", "/").replace("%25", "%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_and_find_values() {
        let doc = json!({
            "spec": { "template": { "spec": { "containers": [
                { "image": "pos:2.1" }, { "image": "side:1" }
            ] } } },
            "metadata": { "labels": { "app.kubernetes.io/version": "2" } },
        });
        let find = |p: &str| -> Vec<Value> {
            evaluate(&parse_path(p).unwrap(), &doc)
                .into_iter()
                .cloned()
                .collect()
        };
        assert_eq!(
            find(".spec.template.spec.containers[*].image"),
            [json!("pos:2.1"), json!("side:1")]
        );
        assert_eq!(
            find("$.spec.template.spec.containers[1].image"),
            [json!("side:1")]
        );
        assert_eq!(
            find(".metadata.labels[\"app.kubernetes.io/version\"]"),
            [json!("2")]
        );
        assert!(find(".status.readyReplicas").is_empty());
        assert!(parse_path("status").is_err());
        assert!(parse_path(".a[x]").is_err());
        assert!(parse_path(".a[").is_err());
    }
}
