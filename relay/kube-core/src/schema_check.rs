//! Custom resources checked against their CRD version's `openAPIV3Schema`, as
//! kube-apiserver checks them: the structural subset (`type`, `properties`, `required`,
//! `items`, `additionalProperties`, `enum`, `minimum`/`maximum` and their exclusive
//! forms, `minLength`/`maxLength`, `minItems`/`maxItems`, `pattern`, `nullable`,
//! `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-int-or-string`,
//! `x-kubernetes-embedded-resource`).
//!
//! Fields the schema does not know are reported (a strict request refuses them) and
//! pruned (what kube-apiserver stores otherwise). Each fault is a [`Cause`] worded as
//! kube-apiserver words it, e.g. `spec.replicas: Invalid value: "string": spec.replicas
//! in body must be of type integer: "string"`.

use serde_json::{Map, Value, json};

use crate::catalog::ResourceType;
use crate::{Answer, Status};

pub use crate::status::Cause;

/// What checking an object found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings {
    /// Fields the schema does not know (already pruned from the object).
    pub unknown: Vec<String>,
    /// Values the schema refuses.
    pub causes: Vec<Cause>,
}

/// Checks `object` (a whole custom resource) against `schema`, pruning unknown fields.
/// `apiVersion`, `kind` and `metadata` are the API's to check, not the schema's.
pub fn check(schema: &Value, object: &mut Value) -> Findings {
    let mut out = Findings::default();
    let Some(fields) = object.as_object_mut() else {
        out.causes.push(Cause {
            reason: "FieldValueTypeInvalid",
            field: String::new(),
            message: "must be an object".into(),
        });
        return out;
    };
    let mut rest: Map<String, Value> = Map::new();
    for (k, v) in std::mem::take(fields) {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            fields.insert(k, v);
        } else {
            rest.insert(k, v);
        }
    }
    let mut rest = Value::Object(rest);
    walk(schema, &mut rest, "", &mut out);
    if let Value::Object(rest) = rest {
        fields.extend(rest);
    }
    out
}

/// What a write does with fields its type does not know (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop them (custom resources) or keep them (built-in types), silently.
    Ignore,
    /// The same, with a `Warning` header per field (kube-apiserver's default).
    Warn,
    /// Refuse the write (400), what kubectl asks by default.
    Strict,
}

impl FieldValidation {
    /// The query parameter's value; absent or unknown is `Warn`, as in kube-apiserver.
    pub fn parse(value: Option<&str>) -> FieldValidation {
        match value {
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            _ => FieldValidation::Warn,
        }
    }
}

/// The 400 refusing a strict write with `unknown` fields.
pub fn strict_refusal(unknown: &[String]) -> Answer {
    let causes: Vec<Value> = unknown
        .iter()
        .map(|f| json!({ "reason": "FieldValueInvalid", "message": format!("unknown field {f:?}"), "field": f }))
        .collect();
    let list: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect();
    let mut status = Status::bad_request(format!("strict decoding error: {}", list.join(", ")));
    status.details = Some(Box::new(json!({ "causes": causes })));
    status.into()
}

/// Checks a custom resource about to be stored against its schema: a strict request
/// with unknown fields is refused (400, `strict decoding error`); otherwise unknown fields
/// are pruned from `object`, and named in the answer; refused values answer 422
/// `Invalid` with a cause per field.
pub fn enforce(
    t: &ResourceType,
    schema: &Value,
    object: &mut Value,
    validation: FieldValidation,
) -> Result<Vec<String>, Answer> {
    let found = check(schema, object);
    if validation == FieldValidation::Strict && !found.unknown.is_empty() {
        return Err(strict_refusal(&found.unknown));
    }
    if found.causes.is_empty() {
        return Ok(found.unknown);
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    Err(Status::invalid(&t.kind, &t.group, name, &found.causes).into())
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as kube-apiserver prints it in a message (Go's `%#v`-like quoting).
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn invalid(out: &mut Findings, path: &str, value: &Value, detail: String) {
    out.causes.push(Cause {
        reason: "FieldValueInvalid",
        field: path.to_owned(),
        message: format!("Invalid value: {}: {detail}", shown(value)),
    });
}

fn flag(schema: &Value, name: &str) -> bool {
    schema[name] == Value::Bool(true)
}

fn walk(schema: &Value, value: &mut Value, path: &str, out: &mut Findings) {
    if !schema.is_object() {
        return;
    }
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    let actual = type_name(value);
    if value.is_null() {
        if !flag(schema, "nullable") && schema["type"].is_string() {
            type_error(
                out,
                path,
                schema["type"].as_str().unwrap_or_default(),
                actual,
            );
        }
        return;
    }
    if int_or_string {
        if actual != "integer" && actual != "string" {
            type_error(out, path, "integer or string", actual);
            return;
        }
    } else if let Some(want) = schema["type"].as_str() {
        let fits = want == actual || (want == "number" && actual == "integer");
        if !fits {
            type_error(out, path, want, actual);
            return;
        }
    }
    values(schema, value, path, out);
    match value {
        Value::Object(fields) => object(schema, fields, path, out),
        Value::Array(items) => {
            let n = items.len();
            if let Some(max) = schema["maxItems"].as_u64()
                && n as u64 > max
            {
                out.causes.push(Cause {
                    reason: "FieldValueTooMany",
                    field: path.to_owned(),
                    message: format!("Too many: {n}: must have at most {max} items"),
                });
            }
            if let Some(min) = schema["minItems"].as_u64()
                && (n as u64) < min
            {
                invalid(
                    out,
                    path,
                    value,
                    format!("{path} in body should have at least {min} items"),
                );
            }
            if let Value::Array(items) = value {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(&schema["items"], item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn type_error(out: &mut Findings, path: &str, want: &str, actual: &str) {
    out.causes.push(Cause {
        reason: "FieldValueTypeInvalid",
        field: path.to_owned(),
        message: format!(
            "Invalid value: {actual:?}: {path} in body must be of type {want}: {actual:?}"
        ),
    });
}

/// `enum`, bounds, lengths and `pattern`.
fn values(schema: &Value, value: &Value, path: &str, out: &mut Findings) {
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(shown).collect();
        out.causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: path.to_owned(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                shown(value),
                list.join(", ")
            ),
        });
    }
    if let Some(n) = value.as_f64() {
        let exclusive = |k: &str| flag(schema, k);
        if let Some(max) = schema["maximum"].as_f64() {
            if exclusive("exclusiveMaximum") && n >= max {
                invalid(
                    out,
                    path,
                    value,
                    format!("{path} in body should be less than {}", schema["maximum"]),
                );
            } else if n > max {
                invalid(
                    out,
                    path,
                    value,
                    format!(
                        "{path} in body should be less than or equal to {}",
                        schema["maximum"]
                    ),
                );
            }
        }
        if let Some(min) = schema["minimum"].as_f64() {
            if exclusive("exclusiveMinimum") && n <= min {
                invalid(
                    out,
                    path,
                    value,
                    format!(
                        "{path} in body should be greater than {}",
                        schema["minimum"]
                    ),
                );
            } else if n < min {
                invalid(
                    out,
                    path,
                    value,
                    format!(
                        "{path} in body should be greater than or equal to {}",
                        schema["minimum"]
                    ),
                );
            }
        }
    }
    if let Some(s) = value.as_str() {
        let chars = s.chars().count() as u64;
        if let Some(max) = schema["maxLength"].as_u64()
            && chars > max
        {
            out.causes.push(Cause {
                reason: "FieldValueTooLong",
                field: path.to_owned(),
                message: format!("Too long: may not be more than {max} bytes"),
            });
        }
        if let Some(min) = schema["minLength"].as_u64()
            && chars < min
        {
            invalid(
                out,
                path,
                value,
                format!("{path} in body should be at least {min} chars long"),
            );
        }
        if let Some(p) = schema["pattern"].as_str() {
            match regex::Regex::new(p) {
                Ok(re) if !re.is_match(s) => {
                    invalid(
                        out,
                        path,
                        value,
                        format!("{path} in body should match '{p}'"),
                    );
                }
                Ok(_) => {}
                Err(_) => invalid(
                    out,
                    path,
                    value,
                    format!("the schema's pattern {p:?} does not compile"),
                ),
            }
        }
    }
}

fn object(schema: &Value, fields: &mut Map<String, Value>, path: &str, out: &mut Findings) {
    let empty = Map::new();
    let props = schema["properties"].as_object().unwrap_or(&empty);
    for name in schema["required"].as_array().into_iter().flatten() {
        if let Some(name) = name.as_str()
            && !fields.contains_key(name)
        {
            out.causes.push(Cause {
                reason: "FieldValueRequired",
                field: child(path, name),
                message: "Required value".into(),
            });
        }
    }
    let embedded = flag(schema, "x-kubernetes-embedded-resource");
    let keeps_unknown = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let additional = &schema["additionalProperties"];
    let mut pruned = Vec::new();
    for (name, v) in fields.iter_mut() {
        let here = child(path, name);
        if let Some(s) = props.get(name) {
            walk(s, v, &here, out);
        } else if additional.is_object() {
            walk(additional, v, &here, out);
        } else if additional == &Value::Bool(true)
            || keeps_unknown
            || (embedded && matches!(name.as_str(), "apiVersion" | "kind" | "metadata"))
        {
        } else {
            pruned.push(name.clone());
            out.unknown.push(here);
        }
    }
    for name in pruned {
        fields.remove(&name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn menu_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["dishes"],
                    "properties": {
                        "dishes": { "type": "integer", "minimum": 1, "maximum": 10 },
                        "name": { "type": "string", "maxLength": 5, "pattern": "^[a-z]+$" },
                        "size": { "type": "string", "enum": ["S", "M"] },
                        "port": { "x-kubernetes-int-or-string": true },
                        "note": { "type": "string", "nullable": true },
                        "tags": { "type": "array", "maxItems": 2, "items": { "type": "string" } },
                        "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                        "extra": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                        "template": { "type": "object", "x-kubernetes-embedded-resource": true, "properties": { "spec": { "type": "object" } } },
                        "items": { "type": "array", "items": { "type": "object", "properties": { "n": { "type": "number" } } } },
                    }
                }
            }
        })
    }

    fn run(spec: Value) -> (Findings, Value) {
        let mut object = json!({ "apiVersion": "example.com/v1", "kind": "Menu", "metadata": { "name": "m" }, "spec": spec });
        let found = check(&menu_schema(), &mut object);
        (found, object)
    }

    fn messages(f: &Findings) -> Vec<String> {
        f.causes.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn each_rule_names_its_field_as_kube_apiserver_does() {
        let table: Vec<(Value, Vec<&str>)> = vec![
            (
                json!({ "dishes": 3, "port": "http", "note": null, "labels": { "a": "b" } }),
                vec![],
            ),
            (
                json!({ "dishes": 3, "port": 80, "extra": { "any": { "thing": 1 } } }),
                vec![],
            ),
            (
                json!({ "dishes": "string" }),
                vec![
                    r#"spec.dishes: Invalid value: "string": spec.dishes in body must be of type integer: "string""#,
                ],
            ),
            (json!({}), vec!["spec.dishes: Required value"]),
            (
                json!({ "dishes": 11 }),
                vec![
                    "spec.dishes: Invalid value: 11: spec.dishes in body should be less than or equal to 10",
                ],
            ),
            (
                json!({ "dishes": 0 }),
                vec![
                    "spec.dishes: Invalid value: 0: spec.dishes in body should be greater than or equal to 1",
                ],
            ),
            (
                json!({ "dishes": 1, "size": "L" }),
                vec![r#"spec.size: Unsupported value: "L": supported values: "S", "M""#],
            ),
            (
                json!({ "dishes": 1, "name": "Soup!" }),
                vec![
                    r#"spec.name: Invalid value: "Soup!": spec.name in body should match '^[a-z]+$'"#,
                ],
            ),
            (
                json!({ "dishes": 1, "name": "abcdef" }),
                vec!["spec.name: Too long: may not be more than 5 bytes"],
            ),
            (
                json!({ "dishes": 1, "port": true }),
                vec![
                    r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer or string: "boolean""#,
                ],
            ),
            (
                json!({ "dishes": 1, "name": null }),
                vec![
                    r#"spec.name: Invalid value: "null": spec.name in body must be of type string: "null""#,
                ],
            ),
            (
                json!({ "dishes": 1, "tags": ["a", "b", 3] }),
                vec![
                    "spec.tags: Too many: 3: must have at most 2 items",
                    r#"spec.tags[2]: Invalid value: "integer": spec.tags[2] in body must be of type string: "integer""#,
                ],
            ),
            (
                json!({ "dishes": 1, "labels": { "a": 1 }, "items": [ { "n": 1.5 }, { "n": "x" } ] }),
                vec![
                    r#"spec.items[1].n: Invalid value: "string": spec.items[1].n in body must be of type number: "string""#,
                    r#"spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer""#,
                ],
            ),
        ];
        for (spec, want) in table {
            let (found, _) = run(spec.clone());
            let mut got = messages(&found);
            got.sort();
            assert_eq!(got, want, "for {spec}");
            assert!(found.unknown.is_empty(), "for {spec}: {:?}", found.unknown);
        }
    }

    #[test]
    fn unknown_fields_are_reported_and_pruned() {
        let (found, object) = run(json!({
            "dishes": 2, "foo": 1,
            "items": [ { "n": 1, "m": 2 } ],
            "template": { "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" }, "spec": { "x": 1 }, "bar": 0 },
        }));
        assert_eq!(
            found.unknown,
            [
                "spec.foo",
                "spec.items[0].m",
                "spec.template.spec.x",
                "spec.template.bar"
            ]
        );
        assert!(found.causes.is_empty());
        assert_eq!(
            object["spec"],
            json!({ "dishes": 2, "items": [ { "n": 1 } ], "template": { "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" }, "spec": {} } })
        );
        // A field beside spec at the top is unknown too; metadata is not the schema's.
        let mut top = json!({ "apiVersion": "example.com/v1", "kind": "Menu", "metadata": { "name": "m", "labels": { "a": "b" } }, "spec": { "dishes": 1 }, "sepc": {} });
        assert_eq!(check(&menu_schema(), &mut top).unknown, ["sepc"]);
        assert_eq!(top["metadata"]["labels"]["a"], "b");
    }

    #[test]
    fn refusals_are_statuses_as_kube_apiserver_sends_them() {
        let log = strata_protocol::sync::ObjectLog::new(strata_protocol::model::LogId(1));
        let catalog = crate::catalog::Catalog::of_space(
            &log,
            &strata_protocol::model::Space::default_space(),
        );
        let mut t = catalog.by_kind("", "v1", "ConfigMap").unwrap().clone();
        t.group = "example.com".into();
        t.kind = "Menu".into();
        let object = |spec: Value| json!({ "apiVersion": "example.com/v1", "kind": "Menu", "metadata": { "name": "lunch" }, "spec": spec });
        let (code, status) = enforce(
            &t,
            &menu_schema(),
            &mut object(json!({ "dishes": "x", "size": "L" })),
            FieldValidation::Strict,
        )
        .unwrap_err();
        assert_eq!(code, 422);
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(
            status["message"],
            r#"Menu.example.com "lunch" is invalid: [spec.dishes: Invalid value: "string": spec.dishes in body must be of type integer: "string", spec.size: Unsupported value: "L": supported values: "S", "M"]"#
        );
        assert_eq!(status["details"]["causes"][0]["field"], "spec.dishes");
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueTypeInvalid"
        );
        let (code, status) = enforce(
            &t,
            &menu_schema(),
            &mut object(json!({ "dishes": 1, "foo": 1 })),
            FieldValidation::Strict,
        )
        .unwrap_err();
        assert_eq!(code, 400);
        assert_eq!(
            status["message"],
            r#"strict decoding error: unknown field "spec.foo""#
        );
        let mut lenient = object(json!({ "dishes": 1, "foo": 1 }));
        let pruned = enforce(&t, &menu_schema(), &mut lenient, FieldValidation::Warn).unwrap();
        assert_eq!(pruned, ["spec.foo"]);
        assert_eq!(lenient["spec"], json!({ "dishes": 1 }));
    }

    #[test]
    fn a_schema_that_keeps_everything_checks_nothing() {
        let schema = json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
        let mut object = json!({ "apiVersion": "example.com/v1", "kind": "Menu", "metadata": {}, "spec": { "dishes": 3 } });
        assert_eq!(check(&schema, &mut object), Findings::default());
        assert_eq!(object["spec"]["dishes"], 3);
    }
}
