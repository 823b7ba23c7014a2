//! `GET /openapi/v2`: the Swagger 2.0 document older clients read, as JSON or as the
//! protobuf form kubectl asks for (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`:
//! gnostic's `openapi.v2.Document`, encoded here by hand).
//!
//! It holds `definitions` only (every kind of the space, with
//! `x-kubernetes-group-version-kind`): enough for kubectl's client-side validation and
//! `explain`. It lists no paths, so kubectl does not learn patch types from it and
//! computes patches from the types it was built with, as it does today.

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
        "paths": {},
        "definitions": crate::openapi::definitions_v2(catalog),
    })
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

/// The document in gnostic's `openapi.v2.Document` protobuf form.
pub fn encode(doc: &Value) -> Vec<u8> {
    let mut d = Message::default();
    d.string(1, doc["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Message::default();
    info.string(1, doc["info"]["title"].as_str().unwrap_or_default());
    info.string(2, doc["info"]["version"].as_str().unwrap_or_default());
    d.message(2, info);
    d.message(8, Message::default());
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
}
