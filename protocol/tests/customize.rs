//! Customization rendering: substitution, merge patch (RFC 7386), JSON patch (RFC 6902)
//! and missing variables, on known cases and as properties.

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use serde_json::{Value, json};
use strata_protocol::customize::{
    ClusterVars, CustomizeError, CustomizeRule, PatchOp, json_patch, merge_patch, render,
    substitute,
};

fn vars(name: &str) -> ClusterVars {
    ClusterVars {
        name: name.into(),
        labels: [("region".to_owned(), "eu".to_owned())].into(),
        properties: [("replicas".to_owned(), "4".to_owned())].into(),
    }
}

fn ops(v: Value) -> Vec<PatchOp> {
    serde_json::from_value(v).unwrap()
}

#[test]
fn every_json_patch_operation_does_what_rfc_6902_says() {
    let mut doc = json!({ "a": [1, 2], "b": { "c": "x" } });
    json_patch(
        &mut doc,
        &ops(json!([
            { "op": "add", "path": "/a/-", "value": 3 },
            { "op": "add", "path": "/a/0", "value": 0 },
            { "op": "replace", "path": "/b/c", "value": "y" },
            { "op": "copy", "from": "/b", "path": "/d" },
            { "op": "move", "from": "/a/1", "path": "/e" },
            { "op": "remove", "path": "/a/0" },
            { "op": "test", "path": "/d/c", "value": "y" },
            { "op": "add", "path": "/f~1g", "value": true },
        ])),
    )
    .unwrap();
    assert_eq!(
        doc,
        json!({ "a": [2, 3], "b": { "c": "y" }, "d": { "c": "y" }, "e": 1, "f/g": true })
    );
}

#[test]
fn failing_operations_name_why_and_change_nothing() {
    let doc = json!({ "a": [1], "b": {} });
    for (op, why) in [
        (json!({ "op": "remove", "path": "/zz" }), "no value at /zz"),
        (
            json!({ "op": "replace", "path": "/a/3", "value": 1 }),
            "out of bounds",
        ),
        (
            json!({ "op": "add", "path": "/a/2", "value": 1 }),
            "out of bounds",
        ),
        (
            json!({ "op": "add", "path": "/x/y", "value": 1 }),
            "parent of /x/y",
        ),
        (
            json!({ "op": "test", "path": "/a/0", "value": 2 }),
            "test failed",
        ),
        (
            json!({ "op": "move", "from": "/b", "path": "/b/c" }),
            "own child",
        ),
        (
            json!({ "op": "add", "path": "/a/01", "value": 1 }),
            "not an array index",
        ),
        (
            json!({ "op": "add", "path": "a", "value": 1 }),
            "must start with '/'",
        ),
    ] {
        let mut d = doc.clone();
        let (i, reason) = json_patch(&mut d, &ops(json!([op]))).unwrap_err();
        assert_eq!(i, 0);
        assert!(reason.contains(why), "{op}: {reason}");
        assert_eq!(d, doc, "{op} changed the document");
    }
}

#[test]
fn a_rule_renders_variables_into_both_patches() {
    let rule: CustomizeRule = serde_json::from_value(json!({
        "mergePatch": { "metadata": { "labels": { "region": "${cluster.labels.region}", "drop": null } } },
        "jsonPatch": [
            { "op": "replace", "path": "/spec/replicas", "value": "${cluster.properties.replicas}" },
            { "op": "add", "path": "/spec/env/-", "value": { "name": "ID", "value": "${cluster.name}" } },
        ],
    }))
    .unwrap();
    let doc =
        json!({ "metadata": { "labels": { "drop": "me" } }, "spec": { "replicas": 1, "env": [] } });
    let out = render(&doc, &[("r".into(), &rule)], &vars("store-7")).unwrap();
    assert_eq!(
        out,
        json!({
            "metadata": { "labels": { "region": "eu" } },
            "spec": { "replicas": 4, "env": [ { "name": "ID", "value": "store-7" } ] },
        })
    );
    let mut bare = vars("store-8");
    bare.properties.clear();
    match render(&doc, &[("placement p customize[0]".into(), &rule)], &bare) {
        Err(e @ CustomizeError::Variable { .. }) => assert_eq!(
            e.to_string(),
            "placement p customize[0] jsonPatch[0]: cluster store-8 has no property \"replicas\" (in ${cluster.properties.replicas})"
        ),
        other => panic!("{other:?}"),
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(|n| json!(n)),
        "[a-c]{0,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// RFC 7386: applying the same merge patch twice is applying it once, and a patch
    /// without nulls leaves every value it names in the result.
    #[test]
    fn merge_patch_is_idempotent(doc in json_value(), patch in json_value()) {
        let mut once = doc.clone();
        merge_patch(&mut once, &patch);
        let mut twice = once.clone();
        merge_patch(&mut twice, &patch);
        prop_assert_eq!(&once, &twice);
    }

    /// Rendering is a function: the same inputs, the same bytes.
    #[test]
    fn rendering_is_deterministic(doc in json_value(), patch in json_value(), name in "[a-z]{1,8}") {
        let rule = CustomizeRule { merge_patch: Some(patch), ..CustomizeRule::default() };
        let a = render(&doc, &[("r".into(), &rule)], &vars(&name));
        let b = render(&doc, &[("r".into(), &rule)], &vars(&name));
        prop_assert_eq!(a, b);
    }

    /// A string without `${` is never touched; `${cluster.name}` anywhere is the name.
    #[test]
    fn substitution_touches_only_variables(text in "[a-z $}{]{0,12}", name in "[a-z]{1,8}") {
        let v = vars(&name);
        if !text.contains("${") {
            prop_assert_eq!(substitute(&json!(text), &v, false).unwrap(), json!(text));
        }
        let templated = format!("{text}-${{cluster.name}}");
        if !text.contains('$') {
            prop_assert_eq!(
                substitute(&json!(templated), &v, false).unwrap(),
                json!(format!("{text}-{name}"))
            );
        }
    }

    /// `add` then `remove` at the same object key restores the document, and `-` appends.
    #[test]
    fn add_then_remove_round_trips(doc in prop::collection::btree_map("[a-c]", json_value(), 0..3), v in json_value()) {
        let doc = Value::Object(doc.into_iter().collect());
        prop_assume!(doc.get("z").is_none());
        let mut d = doc.clone();
        json_patch(&mut d, &ops(json!([
            { "op": "add", "path": "/z", "value": [] },
            { "op": "add", "path": "/z/-", "value": v.clone() },
            { "op": "test", "path": "/z/0", "value": v },
            { "op": "remove", "path": "/z" },
        ]))).unwrap();
        prop_assert_eq!(d, doc);
    }
}
