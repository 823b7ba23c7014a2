//! A built-in kind's own `.status` at the root, as any Kubernetes tool reads it: only
//! fields of the kind's schema (none at all for a kind without a status), with the zero
//! value of each field the schema requires; the standard numeric fields over the
//! selected clusters; the conditions kube's controllers write for the kind; and
//! `observedGeneration` once every selected cluster observed the write that set it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde_json::{Map, Value, json};
use strata_protocol::model::Revision;
use strata_protocol::summary::Summary;
use strata_protocol::user_summary::is_user_entry;

/// A built-in kind's `.status` from its schema: its fields, and the zero value of each
/// field the schema requires (`DaemonSetStatus.numberReady`), which typed clients refuse
/// to go without. `None`: the kind has no `.status`.
type StatusFields = Option<StatusSchema>;

#[derive(Debug, Default)]
struct StatusSchema {
    fields: BTreeSet<String>,
    required: Vec<(String, Value)>,
}

/// The zero value of a schema's type, as Go's encoder writes a field that is not a pointer.
fn zero_of(schema: &Value) -> Value {
    let ty = match &schema["type"] {
        Value::Array(types) => types.iter().find(|t| *t != "null").cloned(),
        other => Some(other.clone()),
    };
    match ty.as_ref().and_then(Value::as_str) {
        Some("integer" | "number") => json!(0),
        Some("string") => json!(""),
        Some("boolean") => json!(false),
        Some("array") => json!([]),
        _ => json!({}),
    }
}

/// The `.status` fields of every built-in kind, from its schema.
fn builtin_status_fields() -> &'static BTreeMap<(String, String), StatusFields> {
    static KINDS: OnceLock<BTreeMap<(String, String), StatusFields>> = OnceLock::new();
    KINDS.get_or_init(|| {
        let mut g = schemars::generate::SchemaSettings::draft2020_12().into_generator();
        let built: Vec<((String, String), Value)> = strata_kube_builtins::builtins()
            .into_iter()
            .map(|b| {
                let schema = (b.schema)(&mut g).to_value();
                ((b.group.to_owned(), b.kind.to_owned()), schema)
            })
            .collect();
        let definitions = g.definitions().clone();
        // A type's schema is a reference to its definition.
        let resolve = |v: &Value| -> Value {
            match v["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
                Some(name) => definitions.get(name).cloned().unwrap_or(Value::Null),
                None => v.clone(),
            }
        };
        built
            .into_iter()
            .map(|(kind, schema)| {
                let schema = resolve(&schema);
                let fields = schema["properties"].get("status").map(|status| {
                    let status = resolve(status);
                    let properties = status["properties"].as_object();
                    let required = status["required"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(|f| {
                            let field = properties.and_then(|p| p.get(f)).map(&resolve);
                            (f.to_owned(), zero_of(&field.unwrap_or(Value::Null)))
                        })
                        .collect();
                    StatusSchema {
                        fields: properties
                            .map(|p| p.keys().cloned().collect())
                            .unwrap_or_default(),
                        required,
                    }
                });
                (kind, fields)
            })
            .collect()
    })
}

/// A kind's status schema: `None` for a kind that is not built in (a custom resource,
/// or one of Strata's), `Some(None)` for a built-in kind without a `.status`.
fn status_schema(group: &str, kind: &str) -> Option<&'static StatusFields> {
    builtin_status_fields().get(&(group.to_owned(), kind.to_owned()))
}

/// Whether a built-in kind has a `.status` in its schema; `None` for a kind that is not
/// built in (a custom resource, or one of Strata's).
pub fn builtin_has_status(group: &str, kind: &str) -> Option<bool> {
    status_schema(group, kind).map(Option::is_some)
}

/// Whether a status field belongs to the `.status` of the kind whose [`status_schema`]
/// this is (any field of a kind that is not built in).
fn status_field(schema: Option<&StatusFields>, field: &str) -> bool {
    match schema {
        Some(Some(schema)) => schema.fields.contains(field),
        Some(None) => false,
        None => true,
    }
}

/// `status.observedGeneration`: `generation` once every selected cluster (of every
/// placement) reported a revision at or after `at`, the write that set it; one less
/// before (the fleet has not caught up); `None` when no placement selects a cluster.
pub fn observed_generation(
    generation: u64,
    at: Revision,
    sums: &[(String, Summary)],
) -> Option<u64> {
    let expected: u64 = sums.iter().map(|(_, s)| s.expected).sum();
    if expected == 0 {
        return None;
    }
    let everyone = sums.iter().all(|(_, s)| {
        s.expected == 0 || (s.reporting >= s.expected && s.min_revision.is_some_and(|r| r >= at))
    });
    Some(if everyone {
        generation
    } else {
        generation.saturating_sub(1)
    })
}

fn condition(kind: &str, yes: bool, reason: &str, message: String) -> Value {
    json!({
        "type": kind,
        "status": if yes { "True" } else { "False" },
        "reason": reason,
        "message": message,
    })
}

/// The conditions of an object of `(group, kind)` over `sums`, as kube's controllers
/// write them for the kind: a Deployment's `Available` and `Progressing` (reason
/// `NewReplicaSetAvailable` once available everywhere, `ProgressDeadlineExceeded`
/// when it failed somewhere); a Job's `Complete` (with `SuccessCriteriaMet`) once it
/// completed on every selected cluster, `Failed` when it failed on one; for a custom
/// resource `Ready`, `Available` and `Progressing`; none for other built-in kinds.
pub fn conditions(group: &str, kind: &str, sums: &[(String, Summary)], generation: u64) -> Value {
    let expected: u64 = sums.iter().map(|(_, s)| s.expected).sum();
    let reporting: u64 = sums.iter().map(|(_, s)| s.reporting).sum();
    let available: u64 = sums.iter().map(|(_, s)| s.health.available).sum();
    let progressing: u64 = sums.iter().map(|(_, s)| s.health.progressing).sum();
    let failed: u64 = sums.iter().map(|(_, s)| s.health.failed).sum();
    let failing: u64 = failed + sums.iter().map(|(_, s)| s.health.degraded).sum::<u64>();
    let all = expected > 0 && available == expected && reporting == expected;
    let on = format!("available on {available} of {expected} clusters");
    let out = match (group, kind) {
        ("apps", "Deployment") => vec![
            condition(
                "Available",
                all,
                if all {
                    "MinimumReplicasAvailable"
                } else {
                    "MinimumReplicasUnavailable"
                },
                on,
            ),
            if failing > 0 {
                condition(
                    "Progressing",
                    false,
                    "ProgressDeadlineExceeded",
                    format!("failed or degraded on {failing} of {expected} clusters"),
                )
            } else if all {
                condition(
                    "Progressing",
                    true,
                    "NewReplicaSetAvailable",
                    format!("rolled out on all {expected} clusters"),
                )
            } else {
                condition(
                    "Progressing",
                    true,
                    "ReplicaSetUpdated",
                    format!("{progressing} of {expected} clusters progressing"),
                )
            },
        ],
        ("batch", "Job") if failed > 0 => vec![
            condition(
                "FailureTarget",
                true,
                "BackoffLimitExceeded",
                format!("failed on {failed} of {expected} clusters"),
            ),
            condition(
                "Failed",
                true,
                "BackoffLimitExceeded",
                format!("failed on {failed} of {expected} clusters"),
            ),
        ],
        ("batch", "Job") if all => vec![
            condition(
                "SuccessCriteriaMet",
                true,
                "CompletionsReached",
                format!("completed on all {expected} clusters"),
            ),
            condition(
                "Complete",
                true,
                "CompletionsReached",
                format!("completed on all {expected} clusters"),
            ),
        ],
        _ if builtin_has_status(group, kind).is_some() => Vec::new(),
        _ => {
            let mut c = vec![
                condition(
                    "Ready",
                    all,
                    if all { "Available" } else { "NotAvailable" },
                    on.clone(),
                ),
                condition("Available", all, "StrataFleet", on),
                condition(
                    "Progressing",
                    failing == 0 && (progressing > 0 || all),
                    "StrataFleet",
                    format!("{progressing} progressing, {failing} failing"),
                ),
            ];
            for x in &mut c {
                x["observedGeneration"] = json!(generation);
            }
            c
        }
    };
    Value::Array(out)
}

/// `.status` of an object of `(group, kind)` stored at `generation` (set at revision
/// `at`) from `sums`, its summaries under the placements that select it; `None` for a
/// built-in kind without a status. One cluster's exact status when a single cluster is
/// selected; else the numeric fields summed and [`conditions`]; with
/// `observedGeneration` (see [`observed_generation`]). A kind that has a status shows
/// at least `{}`, as kube-apiserver's defaulted objects do.
pub fn object_status(
    group: &str,
    kind: &str,
    (generation, at): (u64, Revision),
    sums: &[(String, Summary)],
) -> Option<Value> {
    // The kind's schema, looked up once.
    let schema = status_schema(group, kind);
    if let Some(None) = schema {
        return None;
    }
    let mut out = Map::new();
    let expected: u64 = sums.iter().map(|(_, s)| s.expected).sum();
    if let [(_, s)] = sums
        && expected == 1
        && let Some(exact) = &s.exact
        && let Ok(Value::Object(st)) = serde_json::from_slice::<Value>(&exact.status.status)
    {
        out = st;
    } else if expected > 0 {
        // A kind whose status counts what its spec asks per cluster (`spec.replicas`):
        // readers compare the two (kstatus: "Pending termination" when `replicas` is
        // above the spec), so the status reads as the fleet's weakest cluster does:
        // `replicas` the most any cluster runs, the other counts the fewest. Other kinds:
        // the sum over the clusters. The fleet's totals are in its FleetStatus.
        let per_cluster = matches!(
            (group, kind),
            ("apps", "Deployment" | "StatefulSet" | "ReplicaSet") | ("", "ReplicationController")
        );
        let mut merged: BTreeMap<&String, (i64, i64, i128)> = BTreeMap::new();
        for (_, s) in sums {
            // User summaries are the Placement's, not status fields.
            for (field, n) in s.numbers.iter().filter(|(f, _)| !is_user_entry(f)) {
                let m = merged.entry(field).or_insert((i64::MAX, i64::MIN, 0));
                *m = (m.0.min(n.min), m.1.max(n.max), m.2 + n.sum);
            }
        }
        for (field, (min, max, sum)) in merged {
            let value = match (per_cluster, field.as_str()) {
                (true, "replicas") => max,
                (true, _) => min,
                (false, _) => i64::try_from(sum).unwrap_or(i64::MAX),
            };
            out.insert(field.clone(), json!(value));
        }
        let c = conditions(group, kind, sums, generation);
        if c.as_array().is_some_and(|c| !c.is_empty()) {
            out.insert("conditions".into(), c);
        }
    }
    out.remove("observedGeneration");
    if let Some(g) = observed_generation(generation, at, sums)
        && status_field(schema, "observedGeneration")
    {
        out.insert("observedGeneration".into(), json!(g));
    }
    // Only fields of the kind's own status: typed clients refuse any other.
    out.retain(|field, _| status_field(schema, field));
    if group.is_empty() && kind == "Service" && !out.contains_key("loadBalancer") {
        out.insert("loadBalancer".into(), json!({}));
    }
    if let Some(Some(schema)) = schema {
        for (field, zero) in &schema.required {
            out.entry(field.clone()).or_insert_with(|| zero.clone());
        }
    }
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_without_a_status_get_none() {
        assert_eq!(builtin_has_status("", "ConfigMap"), Some(false));
        assert_eq!(builtin_has_status("apps", "Deployment"), Some(true));
        assert_eq!(builtin_has_status("example.com", "Widget"), None);
        assert!(object_status("", "ConfigMap", (1, Revision(1)), &[]).is_none());
        assert_eq!(
            object_status("apps", "Deployment", (1, Revision(1)), &[]),
            Some(json!({}))
        );
        assert_eq!(
            object_status("", "Service", (1, Revision(1)), &[]),
            Some(json!({ "loadBalancer": {} }))
        );
        // Fields the schema requires are there, zero, before any cluster reports.
        let ds = object_status("apps", "DaemonSet", (1, Revision(1)), &[]).unwrap();
        for field in [
            "currentNumberScheduled",
            "desiredNumberScheduled",
            "numberMisscheduled",
            "numberReady",
        ] {
            assert_eq!(ds[field], 0, "{ds}");
        }
        assert_eq!(
            object_status("", "ReplicationController", (1, Revision(1)), &[]),
            Some(json!({ "replicas": 0 }))
        );
    }

    #[test]
    fn observed_generation_waits_for_every_cluster() {
        let mut s = Summary::expected(3);
        s.reporting = 3;
        s.health.available = 3;
        s.min_revision = Some(Revision(4));
        let sums = [("web".to_owned(), s.clone())];
        assert_eq!(observed_generation(2, Revision(5), &sums), Some(1));
        assert_eq!(observed_generation(2, Revision(4), &sums), Some(2));
        let mut s3 = s.clone();
        s3.numbers.insert(
            "replicas".into(),
            serde_json::from_value(json!({ "min": 2, "max": 2, "sum": 6, "count": 3 })).unwrap(),
        );
        s3.numbers.insert(
            "readyReplicas".into(),
            serde_json::from_value(json!({ "min": 1, "max": 2, "sum": 5, "count": 3 })).unwrap(),
        );
        let per = object_status(
            "apps",
            "Deployment",
            (2, Revision(4)),
            &[("web".into(), s3)],
        );
        let per = per.unwrap();
        assert_eq!(per["replicas"], 2, "{per}");
        assert_eq!(per["readyReplicas"], 1, "{per}");
        let st = object_status("apps", "Deployment", (2, Revision(4)), &sums).unwrap();
        assert_eq!(st["observedGeneration"], 2);
        assert_eq!(st["conditions"][1]["reason"], "NewReplicaSetAvailable");
        assert!(st.get("strata").is_none());
        let job = conditions("batch", "Job", &sums, 1);
        let job_status = object_status("batch", "Job", (1, Revision(1)), &sums).unwrap();
        assert!(
            job_status.get("observedGeneration").is_none(),
            "{job_status}"
        );
        assert_eq!(job_status["conditions"][1]["type"], "Complete");
        assert_eq!(job[1]["type"], "Complete");
        s.health.available = 2;
        s.health.progressing = 1;
        let running = conditions("batch", "Job", &[("web".to_owned(), s)], 1);
        assert_eq!(running, json!([]));
    }
}
