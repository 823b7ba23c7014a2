//! `GET /openapi/v2`: the Swagger 2.0 document older clients read, as JSON or as the
//! protobuf form kubectl asks for (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`:
//! gnostic's `openapi.v2.Document`, encoded here by hand).
//!
//! It holds `definitions` (every kind of the space, with
//! `x-kubernetes-group-version-kind`), enough for kubectl's client-side validation and
//! `explain`; and, for every kind, the path of one object with its `patch` operation,
//! carrying the kind's `x-kubernetes-group-version-kind` and the `dryRun` and
//! `fieldManager` parameters, as kube-apiserver lists them: older kubectl (1.20) looks
//! there to learn whether a kind supports server-side dry run (`diff`,
//! `apply --dry-run=server`).

use serde_json::{Map, Value, json};

use crate::catalog::Catalog;
use crate::discovery::KUBE_MINOR;

/// The protobuf form's media type as answered: clients ask for the `@v1.0` spelling,
/// which Go's media type parser refuses in a `Content-Type`, so kube-apiserver answers
/// with this one.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Whether the client asks for the protobuf form (either spelling).
pub fn wants_protobuf(accept: &str) -> bool {
    accept.contains("com.github.proto-openapi.spec.v2")
}

/// The document, as JSON.
pub fn document(catalog: &Catalog) -> Value {
    json!({
        "swagger": "2.0",
        "info": { "title": "Strata", "version": format!("v1.{KUBE_MINOR}") },
        "paths": paths(catalog),
        "definitions": crate::openapi::definitions_v2(catalog),
    })
}

/// The path of one object of each kind, with its `patch` operation.
fn paths(catalog: &Catalog) -> Value {
    let mut out = Map::new();
    for t in catalog.types() {
        let base = if t.group.is_empty() {
            format!("/api/{}", t.version)
        } else {
            format!("/apis/{}/{}", t.group, t.version)
        };
        let path = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{base}/{}/{{name}}", t.plural)
        };
        let query = |name: &str, description: &str| json!({ "name": name, "in": "query", "type": "string", "uniqueItems": true, "description": description });
        // What the PATCH takes; kubectl computes its patch by this list. Strategic
        // merge needs the type's patch strategies, which only the built-in types have:
        // custom resources take JSON and merge patches, as kube-apiserver's do.
        let mut consumes = vec![
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ];
        if t.check.is_some() {
            consumes.push("application/strategic-merge-patch+json");
        }
        let operation = json!({
            "operationId": format!("patch{}", t.kind),
            "consumes": consumes,
            "produces": ["application/json", "application/yaml"],
            "parameters": [
                query("dryRun", "When present, the modification is not persisted: All runs every stage but storing it."),
                query("fieldManager", "The name of the actor making the change."),
            ],
            "responses": { "200": { "description": "OK" } },
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": { "group": t.group, "version": t.version, "kind": t.kind },
        });
        out.insert(path, json!({ "patch": operation }));
    }
    Value::Object(out)
}

/// A protobuf message being written.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u64, wire: u64) {
        self.varint(field << 3 | wire);
    }

    fn bytes(&mut self, field: u64, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, field: u64, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn message(&mut self, field: u64, m: Message) {
        self.bytes(field, &m.0);
    }

    fn boolean(&mut self, field: u64, b: bool) {
        if b {
            self.key(field, 0);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u64, v: i64) {
        self.key(field, 0);
        self.varint(v as u64);
    }

    fn double(&mut self, field: u64, v: f64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

/// `openapi.v2.Any`: a value as YAML text (JSON is YAML).
fn any(v: &Value) -> Message {
    let mut m = Message::default();
    m.string(2, &v.to_string());
    m
}

fn named_any(name: &str, v: &Value) -> Message {
    let mut m = Message::default();
    m.string(1, name);
    m.message(2, any(v));
    m
}

fn named_schema(name: &str, v: &Value) -> Message {
    let mut m = Message::default();
    m.string(1, name);
    m.message(2, schema(v));
    m
}

/// `openapi.v2.Schema` (field numbers from gnostic's OpenAPIv2.proto).
fn schema(v: &Value) -> Message {
    let mut m = Message::default();
    let Some(o) = v.as_object() else {
        return m;
    };
    let text = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or_default();
    let number = |k: &str| o.get(k).and_then(Value::as_f64);
    let int = |k: &str| o.get(k).and_then(Value::as_i64);
    let flag = |k: &str| o.get(k).and_then(Value::as_bool).unwrap_or(false);
    m.string(1, text("$ref"));
    m.string(2, text("format"));
    m.string(3, text("title"));
    m.string(4, text("description"));
    if let Some(d) = o.get("default") {
        m.message(5, any(d));
    }
    for (field, k) in [(6, "multipleOf"), (7, "maximum"), (9, "minimum")] {
        if let Some(n) = number(k) {
            m.double(field, n);
        }
    }
    m.boolean(8, flag("exclusiveMaximum"));
    m.boolean(10, flag("exclusiveMinimum"));
    for (field, k) in [(11, "maxLength"), (12, "minLength")] {
        if let Some(n) = int(k) {
            m.int64(field, n);
        }
    }
    m.string(13, text("pattern"));
    for (field, k) in [(14, "maxItems"), (15, "minItems")] {
        if let Some(n) = int(k) {
            m.int64(field, n);
        }
    }
    m.boolean(16, flag("uniqueItems"));
    for (field, k) in [(17, "maxProperties"), (18, "minProperties")] {
        if let Some(n) = int(k) {
            m.int64(field, n);
        }
    }
    for r in o
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.string(19, r.as_str().unwrap_or_default());
    }
    for e in o
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(20, any(e));
    }
    match o.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut item = Message::default();
            item.key(2, 0);
            item.varint(u64::from(*b));
            m.message(21, item);
        }
        Some(s @ Value::Object(_)) => {
            let mut item = Message::default();
            item.message(1, schema(s));
            m.message(21, item);
        }
        _ => {}
    }
    let types: Vec<&str> = match o.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() {
        let mut item = Message::default();
        for t in types {
            item.string(1, t);
        }
        m.message(22, item);
    }
    match o.get("items") {
        Some(s @ Value::Object(_)) => {
            let mut item = Message::default();
            item.message(1, schema(s));
            m.message(23, item);
        }
        Some(Value::Array(ss)) => {
            let mut item = Message::default();
            for s in ss {
                item.message(1, schema(s));
            }
            m.message(23, item);
        }
        _ => {}
    }
    for s in o
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(24, schema(s));
    }
    if let Some(props) = o.get("properties").and_then(Value::as_object) {
        let mut p = Message::default();
        for (name, s) in props {
            p.message(1, named_schema(name, s));
        }
        m.message(25, p);
    }
    m.boolean(27, flag("readOnly"));
    if let Some(e) = o.get("example") {
        m.message(30, any(e));
    }
    for (k, v) in o.iter().filter(|(k, _)| k.starts_with("x-")) {
        m.message(31, named_any(k, v));
    }
    m
}

/// `openapi.v2.Operation`: its id, media types, query parameters, responses and
/// extensions.
fn operation(v: &Value) -> Message {
    let mut m = Message::default();
    let strings = |k: &str| {
        v[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    m.string(5, v["operationId"].as_str().unwrap_or_default());
    for s in strings("produces") {
        m.string(6, &s);
    }
    for s in strings("consumes") {
        m.string(7, &s);
    }
    for p in v["parameters"].as_array().into_iter().flatten() {
        let mut query = Message::default();
        query.boolean(1, p["required"].as_bool().unwrap_or(false));
        query.string(2, p["in"].as_str().unwrap_or_default());
        query.string(3, p["description"].as_str().unwrap_or_default());
        query.string(4, p["name"].as_str().unwrap_or_default());
        query.string(6, p["type"].as_str().unwrap_or_default());
        query.boolean(20, p["uniqueItems"].as_bool().unwrap_or(false));
        let mut non_body = Message::default();
        non_body.message(3, query);
        let mut parameter = Message::default();
        parameter.message(2, non_body);
        let mut item = Message::default();
        item.message(1, parameter);
        m.message(8, item);
    }
    let mut responses = Message::default();
    for (code, r) in v["responses"].as_object().into_iter().flatten() {
        let mut response = Message::default();
        response.string(1, r["description"].as_str().unwrap_or_default());
        let mut value = Message::default();
        value.message(1, response);
        let mut named = Message::default();
        named.string(1, code);
        named.message(2, value);
        responses.message(1, named);
    }
    m.message(9, responses);
    for (k, x) in v.as_object().into_iter().flatten() {
        if k.starts_with("x-") {
            m.message(13, named_any(k, x));
        }
    }
    m
}

/// The document in gnostic's `openapi.v2.Document` protobuf form.
pub fn encode(doc: &Value) -> Vec<u8> {
    let mut d = Message::default();
    d.string(1, doc["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Message::default();
    info.string(1, doc["info"]["title"].as_str().unwrap_or_default());
    info.string(2, doc["info"]["version"].as_str().unwrap_or_default());
    d.message(2, info);
    let mut paths = Message::default();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let mut p = Message::default();
        // PathItem's operations by method, as gnostic numbers them.
        for (field, method) in [
            (2, "get"),
            (3, "put"),
            (4, "post"),
            (5, "delete"),
            (8, "patch"),
        ] {
            if item[method].is_object() {
                p.message(field, operation(&item[method]));
            }
        }
        let mut named = Message::default();
        named.string(1, path);
        named.message(2, p);
        paths.message(2, named);
    }
    d.message(8, paths);
    let mut defs = Message::default();
    let empty = Map::new();
    for (name, s) in doc["definitions"].as_object().unwrap_or(&empty) {
        defs.message(1, named_schema(name, s));
    }
    d.message(9, defs);
    d.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads one level of a message: (field, wire type, payload or varint).
    fn fields(mut b: &[u8]) -> Vec<(u64, Vec<u8>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let mut out = 0;
            for shift in (0..64).step_by(7) {
                let byte = b[0];
                *b = &b[1..];
                out |= u64::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            out
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            let payload = match key & 7 {
                0 => varint(&mut b).to_le_bytes().to_vec(),
                1 => {
                    let (x, rest) = b.split_at(8);
                    b = rest;
                    x.to_vec()
                }
                2 => {
                    let n = varint(&mut b) as usize;
                    let (x, rest) = b.split_at(n);
                    b = rest;
                    x.to_vec()
                }
                w => panic!("wire type {w}"),
            };
            out.push((key >> 3, payload));
        }
        out
    }

    fn field(b: &[u8], n: u64) -> Vec<u8> {
        fields(b).into_iter().find(|(f, _)| *f == n).unwrap().1
    }

    #[test]
    fn a_definition_encodes_as_gnostic_reads_it() {
        let doc = json!({
            "swagger": "2.0", "info": { "title": "T", "version": "v1" },
            "definitions": { "io.k8s.api.apps.v1.Deployment": {
                "type": "object", "description": "D", "required": ["metadata"],
                "properties": { "spec": { "$ref": "#/definitions/S" }, "n": { "type": "integer", "minimum": 1.0 } },
                "x-kubernetes-group-version-kind": [ { "group": "apps", "version": "v1", "kind": "Deployment" } ],
            } },
        });
        let b = encode(&doc);
        assert_eq!(field(&b, 1), b"2.0");
        let named = field(&field(&b, 9), 1);
        assert_eq!(field(&named, 1), b"io.k8s.api.apps.v1.Deployment");
        let s = field(&named, 2);
        assert_eq!(field(&s, 4), b"D");
        assert_eq!(field(&s, 19), b"metadata");
        assert_eq!(field(&field(&s, 22), 1), b"object");
        let props = fields(&field(&s, 25));
        assert_eq!(props.len(), 2);
        let prop = |name: &[u8]| {
            let named = props.iter().find(|(_, p)| field(p, 1) == name).unwrap();
            field(&named.1, 2)
        };
        assert_eq!(field(&prop(b"n"), 9), 1.0f64.to_le_bytes());
        let spec = prop(b"spec");
        assert_eq!(field(&spec, 1), b"#/definitions/S");
        let ext = field(&s, 31);
        assert_eq!(field(&ext, 1), b"x-kubernetes-group-version-kind");
        let yaml = field(&field(&ext, 2), 2);
        let back: Value = serde_json::from_slice(&yaml).unwrap();
        assert_eq!(back[0]["kind"], "Deployment");
    }

    /// What kubectl 1.20's dry-run verifier reads: among `paths`, the `patch` whose
    /// `x-kubernetes-group-version-kind` extension names the kind, and whether that
    /// operation has a `dryRun` query parameter.
    fn supports_dry_run(b: &[u8], gvk: (&str, &str, &str)) -> Option<bool> {
        let paths = field(b, 8);
        for (_, named) in fields(&paths).into_iter().filter(|(f, _)| *f == 2) {
            let item = field(&named, 2);
            let Some((_, patch)) = fields(&item).into_iter().find(|(f, _)| *f == 8) else {
                continue;
            };
            let ops = fields(&patch);
            let names_kind = ops.iter().filter(|(f, _)| *f == 13).any(|(_, ext)| {
                let value: Value = serde_json::from_slice(&field(&field(ext, 2), 2)).unwrap();
                field(ext, 1) == b"x-kubernetes-group-version-kind"
                    && (
                        value["group"].as_str(),
                        value["version"].as_str(),
                        value["kind"].as_str(),
                    ) == (Some(gvk.0), Some(gvk.1), Some(gvk.2))
            });
            if !names_kind {
                continue;
            }
            let dry_run = ops.iter().filter(|(f, _)| *f == 8).any(|(_, item)| {
                let query = field(&field(&field(item, 1), 2), 3);
                field(&query, 4) == b"dryRun" && field(&query, 2) == b"query"
            });
            return Some(dry_run);
        }
        None
    }

    #[test]
    fn every_kind_has_a_patch_path_that_says_it_supports_dry_run() {
        let catalog = Catalog::of_space(
            &strata_protocol::sync::ObjectLog::new(strata_protocol::model::LogId(1)),
            &strata_protocol::model::Space::default_space(),
        );
        let doc = document(&catalog);
        assert!(
            doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
                .is_object()
        );
        assert!(doc["paths"]["/api/v1/namespaces/{name}"]["patch"].is_object());
        let b = encode(&doc);
        for t in catalog.types() {
            assert_eq!(
                supports_dry_run(&b, (&t.group, &t.version, &t.kind)),
                Some(true),
                "{}/{} {}",
                t.group,
                t.version,
                t.kind
            );
        }
        assert_eq!(supports_dry_run(&b, ("apps", "v1", "Nothing")), None);
        // Strategic merge patches for built-in types only (kubectl picks its patch
        // type from this list): a Deployment takes them, a Placement does not.
        let consumes = |path: &str| doc["paths"][path]["patch"]["consumes"].to_string();
        assert!(
            consumes("/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
                .contains("strategic-merge-patch")
        );
        let placement = catalog
            .types()
            .iter()
            .find(|t| t.check.is_none())
            .expect("a type without a built-in schema (Strata's own)");
        let path = format!(
            "/apis/{}/{}/{}/{{name}}",
            placement.group, placement.version, placement.plural
        );
        let path = if placement.namespaced {
            path.replacen(
                &format!("/{}/", placement.plural),
                &format!("/namespaces/{{namespace}}/{}/", placement.plural),
                1,
            )
        } else {
            path
        };
        assert!(doc["paths"][&path]["patch"].is_object(), "{path}");
        assert!(!consumes(&path).contains("strategic-merge-patch"), "{path}");
    }
}
