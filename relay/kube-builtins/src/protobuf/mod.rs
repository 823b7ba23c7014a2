//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! which kubectl and client-go send for built-in kinds: the `k8s\0` envelope
//! (`runtime.Unknown`) and the object inside it, decoded into the JSON kube-apiserver
//! would show for it.
//!
//! The decoder is generic: it walks a table of every message the built-in kinds
//! reference (`protobuf_table.txt`, generated from Kubernetes' own `generated.proto` and
//! Go struct tags by `gen/protobuf_table.py`; see that script for the format). Fields
//! come out in Go's struct order with their JSON names; `,inline` fields merge into the
//! parent; a non-pointer `omitempty` scalar left at its zero value is dropped, as Go's
//! JSON encoder drops it. The special types take their JSON form: `metav1.Time` and
//! `MicroTime` (RFC 3339), `Duration` (Go's `1h2m3s`), `Quantity` (its string),
//! `IntOrString` (a number or a string), `RawExtension`, apiextensions `JSON` and
//! `FieldsV1` (the JSON they carry), and the JSONSchemaProps `Or*` unions.
//!
//! Bounded: lengths are checked against the bytes that remain before anything is
//! sliced, nothing is reserved ahead of what the input holds, and messages nest at most
//! [`MAX_DEPTH`] deep.

mod error;
mod special;
mod table;
mod wire;

use base64::Engine as _;
use serde_json::{Map, Number, Value};

pub use self::error::{DecodeError, MAX_DEPTH};
use self::special::{go_duration, time};
use self::table::{FieldDef, How, Message, Table, Ty, table};
use self::wire::{Reader, Wire, text};

/// Decodes an enveloped protobuf body into the JSON object kube-apiserver would show,
/// with `apiVersion` and `kind` from the envelope.
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let inner = body.strip_prefix(b"k8s\0").ok_or(DecodeError::NoEnvelope)?;
    let base = 4;
    let (mut api_version, mut kind, mut raw, mut raw_at) =
        (String::new(), String::new(), &[][..], 0);
    let mut r = Reader::new(inner, base, ".");
    while let Some((n, at, f)) = r.next()? {
        match (n, f) {
            (1, Wire::Len(b, off)) => {
                let mut t = Reader::new(b, off, ".typeMeta");
                while let Some((n, _, f)) = t.next()? {
                    match (n, f) {
                        (1, Wire::Len(s, off)) => api_version = text(s, off, ".apiVersion")?,
                        (2, Wire::Len(s, off)) => kind = text(s, off, ".kind")?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Len(b, off)) => (raw, raw_at) = (b, off),
            (3, Wire::Len(b, off)) if !b.is_empty() => {
                return Err(DecodeError::ContentEncoding(text(
                    b,
                    off,
                    ".contentEncoding",
                )?));
            }
            // kubectl writes an empty contentEncoding: none.
            (3, Wire::Len(..)) => {}
            (1..=3, f) => {
                return Err(DecodeError::WrongWireType {
                    field: n as u32,
                    message: "io.k8s.apimachinery.pkg.runtime.Unknown".into(),
                    wire: f.wire(),
                    offset: at,
                    path: ".".into(),
                });
            }
            _ => {}
        }
    }
    if api_version.is_empty() || kind.is_empty() {
        return Err(DecodeError::NoTypeMeta);
    }
    let table = table()?;
    let id = match table.kinds.get(&(api_version.as_str(), kind.as_str())) {
        Some(&id) => id,
        // A delete's options come in the version of the resource's group (`apps/v1`),
        // each the same message.
        None if kind == "DeleteOptions" => {
            match table.kinds.get(&("meta.k8s.io/v1", "DeleteOptions")) {
                Some(&id) => id,
                None => return Err(DecodeError::UnknownKind { api_version, kind }),
            }
        }
        None => return Err(DecodeError::UnknownKind { api_version, kind }),
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    if let Value::Object(fields) = message(table, id, raw, raw_at, "", 0)? {
        out.extend(fields);
    }
    Ok(Value::Object(out))
}

/// The kinds [`decode`] knows: (apiVersion, kind, message name).
pub fn kinds() -> Result<Vec<(&'static str, &'static str, &'static str)>, DecodeError> {
    let t = table()?;
    let mut out: Vec<_> = t
        .kinds
        .iter()
        .map(|(&(v, k), &id)| (v, k, t.messages[id].name))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Every message in the table: its name and its fields' JSON names (inlined fields
/// listed under the message they inline). For the check against the OpenAPI schemas.
pub fn messages() -> Result<Vec<(&'static str, Vec<&'static str>)>, DecodeError> {
    let t = table()?;
    Ok(t.messages
        .iter()
        .filter(|m| m.how == How::Struct)
        .map(|m| (m.name, m.fields.iter().filter_map(|f| f.json).collect()))
        .collect())
}

// ---- messages ----

fn join(path: &str, name: &str) -> String {
    format!("{path}.{name}")
}

/// Decodes one message into its JSON form.
fn message(
    t: &Table,
    id: usize,
    buf: &[u8],
    at: usize,
    path: &str,
    depth: usize,
) -> Result<Value, DecodeError> {
    if depth >= MAX_DEPTH {
        return Err(DecodeError::TooDeep {
            path: if path.is_empty() {
                ".".into()
            } else {
                path.into()
            },
        });
    }
    let m = &t.messages[id];
    match m.how {
        How::Struct | How::List | How::OrArray | How::OrBool | How::OrStringArray => {}
        How::Time | How::MicroTime => return time(buf, at, path, m.how == How::MicroTime),
        How::Duration => {
            let mut nanos = 0;
            let mut r = Reader::new(buf, at, path);
            while let Some((n, off, f)) = r.next()? {
                match (n, f) {
                    (1, Wire::Varint(v)) => nanos = v as i64,
                    (1, f) => return Err(wrong(m, 1, f, off, path)),
                    _ => {}
                }
            }
            return Ok(Value::String(go_duration(nanos)));
        }
        How::Quantity => {
            let mut s = String::from("0");
            let mut r = Reader::new(buf, at, path);
            while let Some((n, off, f)) = r.next()? {
                match (n, f) {
                    (1, Wire::Len(b, o)) => s = text(b, o, path)?,
                    (1, f) => return Err(wrong(m, 1, f, off, path)),
                    _ => {}
                }
            }
            return Ok(Value::String(s));
        }
        How::IntOrString => {
            let (mut ty, mut int, mut string) = (0, 0i64, String::new());
            let mut r = Reader::new(buf, at, path);
            while let Some((n, off, f)) = r.next()? {
                match (n, f) {
                    (1, Wire::Varint(v)) => ty = v,
                    (2, Wire::Varint(v)) => int = i64::from(v as i32),
                    (3, Wire::Len(b, o)) => string = text(b, o, path)?,
                    (1..=3, f) => return Err(wrong(m, n as u32, f, off, path)),
                    _ => {}
                }
            }
            return Ok(if ty == 1 {
                Value::String(string)
            } else {
                Value::from(int)
            });
        }
        How::Raw => {
            let mut raw: Option<(&[u8], usize)> = None;
            let mut r = Reader::new(buf, at, path);
            while let Some((n, off, f)) = r.next()? {
                match (n, f) {
                    (1, Wire::Len(b, o)) => raw = Some((b, o)),
                    (1, f) => return Err(wrong(m, 1, f, off, path)),
                    _ => {}
                }
            }
            return match raw {
                None | Some((&[], _)) => Ok(Value::Null),
                Some((b, o)) => serde_json::from_slice(b).map_err(|e| DecodeError::BadJson {
                    offset: o,
                    path: path.into(),
                    reason: e.to_string(),
                }),
            };
        }
    }
    // One slot per declared field, filled in wire order, emitted in declaration order.
    let mut slots: Vec<Option<Value>> = Vec::new();
    slots.resize_with(m.fields.len(), || None);
    let mut r = Reader::new(buf, at, path);
    while let Some((n, off, f)) = r.next()? {
        let Some(i) = m.fields.iter().position(|d| u64::from(d.number) == n) else {
            continue; // unknown fields are skipped, as gogo-protobuf skips them
        };
        let d = &m.fields[i];
        let here = match d.json {
            Some(name) => join(path, name),
            None => path.to_owned(),
        };
        if d.map {
            let Wire::Len(b, o) = f else {
                return Err(wrong(m, d.number, f, off, path));
            };
            let (k, v) = entry(t, m, d, b, o, &here, depth)?;
            let slot = slots[i].get_or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = slot {
                map.insert(k, v);
            }
        } else if d.repeated {
            let slot = slots[i].get_or_insert_with(|| Value::Array(Vec::new()));
            let Value::Array(items) = slot else { continue };
            // Packed numbers: one length-delimited run of them.
            match (f, d.ty) {
                (Wire::Len(b, o), Ty::Bool | Ty::Int32 | Ty::Int64 | Ty::Uint32 | Ty::Uint64) => {
                    let mut p = Reader::new(b, o, &here);
                    while !p.buf.is_empty() {
                        let v = p.varint()?;
                        items.push(scalar(m, d, Wire::Varint(v), o, &here)?);
                    }
                }
                _ => {
                    let item_path = format!("{here}[{}]", items.len());
                    items.push(value(t, m, d, f, off, &item_path, depth)?);
                }
            }
        } else {
            slots[i] = Some(value(t, m, d, f, off, &here, depth)?);
        }
    }
    let mut out = Map::new();
    for (d, slot) in m.fields.iter().zip(slots) {
        let Some(v) = slot else { continue };
        if v.is_null() || (d.omitempty && !d.pointer && is_zero(&v, d)) {
            continue;
        }
        match (d.json, v) {
            (None, Value::Object(inner)) => out.extend(inner),
            (None, _) => {}
            (Some(name), v) => {
                out.insert(name.to_owned(), v);
            }
        }
    }
    let field = |name: &str| out.get(name).cloned();
    Ok(match m.how {
        How::List => field("items").unwrap_or(Value::Array(Vec::new())),
        How::OrArray => field("jSONSchemas")
            .or_else(|| field("schema"))
            .unwrap_or(Value::Null),
        How::OrBool => field("schema")
            .unwrap_or_else(|| Value::Bool(field("allows") == Some(Value::Bool(true)))),
        How::OrStringArray => field("property")
            .or_else(|| field("schema"))
            .unwrap_or(Value::Null),
        _ => Value::Object(out),
    })
}

/// The zero values Go's `omitempty` drops.
fn is_zero(v: &Value, d: &FieldDef) -> bool {
    match v {
        Value::String(s) => s.is_empty() && !matches!(d.ty, Ty::Message(_)),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty() && (d.map || d.repeated),
        Value::Null => true,
    }
}

fn wrong(m: &Message, field: u32, f: Wire<'_>, offset: usize, path: &str) -> DecodeError {
    DecodeError::WrongWireType {
        field,
        message: m.name.to_owned(),
        wire: f.wire(),
        offset,
        path: if path.is_empty() {
            ".".into()
        } else {
            path.into()
        },
    }
}

/// One value of field `d` (a single value of a repeated field).
fn value(
    t: &Table,
    m: &Message,
    d: &FieldDef,
    f: Wire<'_>,
    off: usize,
    path: &str,
    depth: usize,
) -> Result<Value, DecodeError> {
    match d.ty {
        Ty::Message(id) => match f {
            Wire::Len(b, o) => message(t, id, b, o, path, depth + 1),
            f => Err(wrong(m, d.number, f, off, path)),
        },
        _ => scalar(m, d, f, off, path),
    }
}

fn scalar(
    m: &Message,
    d: &FieldDef,
    f: Wire<'_>,
    off: usize,
    path: &str,
) -> Result<Value, DecodeError> {
    Ok(match (d.ty, f) {
        (Ty::String, Wire::Len(b, o)) => Value::String(text(b, o, path)?),
        (Ty::Bytes, Wire::Len(b, _)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        (Ty::Bool, Wire::Varint(v)) => Value::Bool(v != 0),
        (Ty::Int32, Wire::Varint(v)) => Value::from(v as i32),
        (Ty::Int64, Wire::Varint(v)) => Value::from(v as i64),
        (Ty::Uint32, Wire::Varint(v)) => Value::from(v as u32),
        (Ty::Uint64, Wire::Varint(v)) => Value::from(v),
        (Ty::Double, Wire::Fixed64(v)) => finite(f64::from_bits(v), off, path)?,
        (Ty::Float, Wire::Fixed32(v)) => finite(f64::from(f32::from_bits(v)), off, path)?,
        (_, f) => return Err(wrong(m, d.number, f, off, path)),
    })
}

/// A double as Go's JSON encoder writes it: integral values without a fraction (`1`,
/// not `1.0`).
fn finite(x: f64, offset: usize, path: &str) -> Result<Value, DecodeError> {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        return Ok(Value::from(x as i64));
    }
    Number::from_f64(x)
        .map(Value::Number)
        .ok_or_else(|| DecodeError::NotFinite {
            offset,
            path: path.into(),
        })
}

/// A map entry: key (1, a string) and value (2, of the field's type; its zero value if
/// absent).
fn entry(
    t: &Table,
    m: &Message,
    d: &FieldDef,
    buf: &[u8],
    at: usize,
    path: &str,
    depth: usize,
) -> Result<(String, Value), DecodeError> {
    let mut key = String::new();
    let mut val = None;
    let mut r = Reader::new(buf, at, path);
    while let Some((n, off, f)) = r.next()? {
        match (n, f) {
            (1, Wire::Len(b, o)) => key = text(b, o, path)?,
            (1, f) => return Err(wrong(m, d.number, f, off, path)),
            (2, f) => val = Some((f, off)),
            _ => {}
        }
    }
    let here = join(path, &key);
    let v = match (val, d.ty) {
        (Some((f, off)), _) => value(t, m, d, f, off, &here, depth)?,
        (None, Ty::Message(id)) => message(t, id, &[], at, &here, depth + 1)?,
        (None, Ty::String | Ty::Bytes) => Value::String(String::new()),
        (None, Ty::Bool) => Value::Bool(false),
        (None, _) => Value::from(0),
    };
    Ok((key, v))
}

#[cfg(all(test, feature = "types"))]
mod tests;
