//! `metadata.generation` as kube-apiserver keeps it: 1 when an object is created, one
//! more each time its spec (anything but `metadata` and `status`) changes, never on a
//! change of labels, annotations or other metadata.
//!
//! The root stamps it into the stored body at each write, from the version it replaces,
//! so every read shows the same value. With it goes the revision of the write that set
//! it, in the annotation [`GENERATION_REVISION`]: a cluster that reports a revision at
//! or after that one has observed the generation, which is what
//! `status.observedGeneration` says (the annotation is the root's bookkeeping; reads
//! do not show it).

use serde_json::{Value, json};
use strata_protocol::model::Revision;

/// The annotation holding the revision at which the generation was last set.
pub const GENERATION_REVISION: &str = "strata.dev/generation-revision";

/// Everything in a manifest but `metadata` and `status`: what a generation counts.
fn spec_of(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "metadata" && *k != "status")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The generation a stored body carries, and the revision that set it (1 at 0 when it
/// carries none: written before the root kept generations).
pub fn of_body(v: &Value) -> (u64, Revision) {
    let generation = v["metadata"]["generation"].as_u64().unwrap_or(1).max(1);
    let at = v["metadata"]["annotations"][GENERATION_REVISION]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (generation, Revision(at))
}

/// Stamps `value`, about to be written at `revision` over `previous` (the stored body,
/// if any), with its generation: the previous one when the spec is the same, one more
/// when it changed, 1 for a new object.
pub fn stamp(value: &mut Value, previous: Option<&Value>, revision: Revision) {
    let (generation, at) = match previous {
        Some(p) if spec_of(p) == spec_of(value) => of_body(p),
        Some(p) => (of_body(p).0 + 1, revision),
        None => (1, revision),
    };
    if !value["metadata"].is_object() {
        return;
    }
    value["metadata"]["generation"] = json!(generation);
    if !value["metadata"]["annotations"].is_object() {
        value["metadata"]["annotations"] = json!({});
    }
    value["metadata"]["annotations"][GENERATION_REVISION] = json!(at.0.to_string());
}

/// Drops the root's bookkeeping from a body a client reads.
pub fn hide(value: &mut Value) {
    if let Some(a) = value
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove(GENERATION_REVISION);
        if a.is_empty()
            && let Some(m) = value["metadata"].as_object_mut()
        {
            m.remove("annotations");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_moves_with_the_spec_only() {
        let mut first = json!({ "metadata": { "name": "web" }, "spec": { "replicas": 1 } });
        stamp(&mut first, None, Revision(4));
        assert_eq!(of_body(&first), (1, Revision(4)));
        let mut labelled = json!({ "metadata": { "name": "web", "labels": { "a": "b" } }, "spec": { "replicas": 1 } });
        stamp(&mut labelled, Some(&first), Revision(7));
        assert_eq!(of_body(&labelled), (1, Revision(4)));
        let mut scaled = json!({ "metadata": { "name": "web" }, "spec": { "replicas": 2 } });
        stamp(&mut scaled, Some(&labelled), Revision(9));
        assert_eq!(of_body(&scaled), (2, Revision(9)));
        hide(&mut scaled);
        assert!(scaled["metadata"]["annotations"].is_null(), "{scaled}");
        assert_eq!(scaled["metadata"]["generation"], 2);
    }
}
