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

use std::collections::BTreeMap;
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{Map, Number, Value};

/// How deep messages may nest in a body (a CRD's schema is the deepest built-in shape).
pub const MAX_DEPTH: usize = 100;

/// Why a body does not decode: what was wrong, and where (byte offset in the body, and
/// the JSON path of the message being read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The body does not start with `k8s\0`.
    #[error("no k8s protobuf envelope: the body does not start with \"k8s\\0\"")]
    NoEnvelope,
    /// The envelope names no apiVersion or kind.
    #[error("the envelope's typeMeta names no apiVersion and kind")]
    NoTypeMeta,
    /// The envelope's object is compressed or otherwise encoded.
    #[error("content encoding {0:?} is not supported")]
    ContentEncoding(String),
    /// The envelope names a kind this server has no table for.
    #[error("unknown kind {api_version} {kind}")]
    UnknownKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// The body ends inside a varint, a length-delimited field or a fixed-size value.
    #[error("truncated {what} at byte {offset} in {path}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it starts in the body.
        offset: usize,
        /// The message it is in.
        path: String,
    },
    /// A varint of more than ten bytes.
    #[error("varint longer than 10 bytes at byte {offset} in {path}")]
    VarintTooLong {
        /// Where it starts in the body.
        offset: usize,
        /// The message it is in.
        path: String,
    },
    /// A tag with field number 0 or a wire type protobuf does not have (or the
    /// deprecated groups).
    #[error("bad tag (field {field}, wire type {wire}) at byte {offset} in {path}")]
    BadTag {
        /// The field number.
        field: u64,
        /// The wire type.
        wire: u8,
        /// Where the tag starts.
        offset: usize,
        /// The message it is in.
        path: String,
    },
    /// A known field with another wire type than its declared type has.
    #[error("wrong wire type {wire} for field {field} of {message} at byte {offset} in {path}")]
    WrongWireType {
        /// The field number.
        field: u32,
        /// The message's name (`io.k8s.api.core.v1.PodSpec`).
        message: String,
        /// The wire type found.
        wire: u8,
        /// Where the tag starts.
        offset: usize,
        /// The message's JSON path.
        path: String,
    },
    /// A string field that is not UTF-8.
    #[error("a string is not UTF-8 at byte {offset} in {path}")]
    NotUtf8 {
        /// Where the string starts.
        offset: usize,
        /// The field's JSON path.
        path: String,
    },
    /// Embedded JSON (RawExtension, JSON, FieldsV1) that does not parse.
    #[error("embedded JSON at byte {offset} in {path} does not parse: {reason}")]
    BadJson {
        /// Where it starts.
        offset: usize,
        /// The field's JSON path.
        path: String,
        /// serde_json's message.
        reason: String,
    },
    /// A double that JSON cannot hold (NaN, infinity).
    #[error("a number that is not finite at byte {offset} in {path}")]
    NotFinite {
        /// Where it starts.
        offset: usize,
        /// The field's JSON path.
        path: String,
    },
    /// Messages nested deeper than [`MAX_DEPTH`].
    #[error("messages nest deeper than {MAX_DEPTH} at {path}")]
    TooDeep {
        /// The message's JSON path.
        path: String,
    },
    /// The compiled-in table is malformed (a build defect, caught by the unit tests).
    #[error("the protobuf field table is malformed at line {0}")]
    Table(usize),
}

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

// ---- the table ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Struct,
    List,
    Time,
    MicroTime,
    Duration,
    Quantity,
    IntOrString,
    Raw,
    OrArray,
    OrBool,
    OrStringArray,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Double,
    Float,
    Message(usize),
}

#[derive(Debug)]
struct FieldDef {
    number: u32,
    /// None: inlined into the parent.
    json: Option<&'static str>,
    ty: Ty,
    map: bool,
    repeated: bool,
    pointer: bool,
    omitempty: bool,
}

#[derive(Debug)]
struct Message {
    name: &'static str,
    how: How,
    fields: Vec<FieldDef>,
}

#[derive(Debug)]
struct Table {
    kinds: BTreeMap<(&'static str, &'static str), usize>,
    messages: Vec<Message>,
}

const TABLE: &str = include_str!("protobuf_table.txt");

fn table() -> Result<&'static Table, DecodeError> {
    static T: OnceLock<Result<Table, DecodeError>> = OnceLock::new();
    T.get_or_init(|| parse_table(TABLE))
        .as_ref()
        .map_err(Clone::clone)
}

fn parse_table(text: &'static str) -> Result<Table, DecodeError> {
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    let mut messages = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut w = line.split(' ');
        if w.next() == Some("M") {
            let (Some(name), Some(how)) = (w.next(), w.next()) else {
                return Err(DecodeError::Table(i + 1));
            };
            let how = match how {
                "struct" => How::Struct,
                "list" => How::List,
                "time" => How::Time,
                "microtime" => How::MicroTime,
                "duration" => How::Duration,
                "quantity" => How::Quantity,
                "intorstring" => How::IntOrString,
                "raw" => How::Raw,
                "orarray" => How::OrArray,
                "orbool" => How::OrBool,
                "orstringarray" => How::OrStringArray,
                _ => return Err(DecodeError::Table(i + 1)),
            };
            ids.insert(name, messages.len());
            messages.push(Message {
                name,
                how,
                fields: Vec::new(),
            });
        }
    }
    let mut kinds = BTreeMap::new();
    let mut current: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let bad = || DecodeError::Table(i + 1);
        let w: Vec<&'static str> = line.split(' ').collect();
        match w.as_slice() {
            ["K", version, kind, name] => {
                kinds.insert((*version, *kind), *ids.get(name).ok_or_else(bad)?);
            }
            ["M", name, _] => current = Some(*ids.get(name).ok_or_else(bad)?),
            ["F", number, json, ty, flags] => {
                let (map, ty) = match ty.strip_prefix("map:") {
                    Some(v) => (true, v),
                    None => (false, *ty),
                };
                let ty = match ty {
                    "string" => Ty::String,
                    "bytes" => Ty::Bytes,
                    "bool" => Ty::Bool,
                    "int32" => Ty::Int32,
                    "int64" => Ty::Int64,
                    "uint32" => Ty::Uint32,
                    "uint64" => Ty::Uint64,
                    "double" => Ty::Double,
                    "float" => Ty::Float,
                    name => Ty::Message(*ids.get(name).ok_or_else(bad)?),
                };
                let field = FieldDef {
                    number: number.parse().map_err(|_| bad())?,
                    json: (*json != "-").then_some(*json),
                    ty,
                    map,
                    repeated: flags.contains('r'),
                    pointer: flags.contains('p'),
                    omitempty: flags.contains('o'),
                };
                messages[current.ok_or_else(bad)?].fields.push(field);
            }
            [] | [""] => {}
            [first, ..] if first.starts_with('#') => {}
            _ => return Err(bad()),
        }
    }
    Ok(Table { kinds, messages })
}

// ---- the wire ----

#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    /// The bytes and their offset in the body.
    Len(&'a [u8], usize),
}

impl Wire<'_> {
    fn wire(&self) -> u8 {
        match self {
            Wire::Varint(_) => 0,
            Wire::Fixed64(_) => 1,
            Wire::Len(..) => 2,
            Wire::Fixed32(_) => 5,
        }
    }
}

struct Reader<'a, 'p> {
    buf: &'a [u8],
    /// The offset of `buf[0]` in the body.
    at: usize,
    path: &'p str,
}

impl<'a, 'p> Reader<'a, 'p> {
    fn new(buf: &'a [u8], at: usize, path: &'p str) -> Self {
        Reader { buf, at, path }
    }

    fn path(&self) -> String {
        if self.path.is_empty() {
            ".".into()
        } else {
            self.path.into()
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Truncated {
                what,
                offset: self.at,
                path: self.path(),
            });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        self.at += n;
        Ok(head)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let start = self.at;
        let mut out = 0u64;
        for i in 0..10 {
            let Some((&b, rest)) = self.buf.split_first() else {
                return Err(DecodeError::Truncated {
                    what: "varint",
                    offset: start,
                    path: self.path(),
                });
            };
            self.buf = rest;
            self.at += 1;
            out |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(DecodeError::VarintTooLong {
            offset: start,
            path: self.path(),
        })
    }

    /// The next field: its number, where its tag starts, its payload.
    fn next(&mut self) -> Result<Option<(u64, usize, Wire<'a>)>, DecodeError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let start = self.at;
        let tag = self.varint()?;
        let (field, wire) = (tag >> 3, (tag & 7) as u8);
        if field == 0 || field > u64::from(u32::MAX >> 3) {
            return Err(DecodeError::BadTag {
                field,
                wire,
                offset: start,
                path: self.path(),
            });
        }
        let value = match wire {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let b = self.take(8, "fixed64")?;
                Wire::Fixed64(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            }
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                let at = self.at;
                Wire::Len(self.take(len, "length-delimited field")?, at)
            }
            5 => {
                let b = self.take(4, "fixed32")?;
                Wire::Fixed32(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
            }
            _ => {
                return Err(DecodeError::BadTag {
                    field,
                    wire,
                    offset: start,
                    path: self.path(),
                });
            }
        };
        Ok(Some((field, start, value)))
    }
}

fn text(b: &[u8], offset: usize, path: &str) -> Result<String, DecodeError> {
    std::str::from_utf8(b)
        .map(str::to_owned)
        .map_err(|_| DecodeError::NotUtf8 {
            offset,
            path: path.to_owned(),
        })
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

// ---- the special types ----

/// `metav1.Time` (seconds; kube-apiserver drops the nanoseconds) and `MicroTime`
/// (microseconds), in UTC, as RFC 3339; the zero time (an empty message) is `null`.
fn time(buf: &[u8], at: usize, path: &str, micro: bool) -> Result<Value, DecodeError> {
    if buf.is_empty() {
        return Ok(Value::Null);
    }
    let (mut secs, mut nanos) = (0i64, 0i64);
    let mut r = Reader::new(buf, at, path);
    while let Some((n, _, f)) = r.next()? {
        match (n, f) {
            (1, Wire::Varint(v)) => secs = v as i64,
            (2, Wire::Varint(v)) => nanos = i64::from(v as i32),
            _ => {}
        }
    }
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil(days);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    Ok(Value::String(if micro {
        let us = nanos.clamp(0, 999_999_999) / 1000;
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}Z")
    } else {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    }))
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let neg = nanos < 0;
    let u = nanos.unsigned_abs();
    let frac = |v: u64, unit: u64, digits: usize| {
        let whole = v / unit;
        let f = v % unit;
        if f == 0 {
            whole.to_string()
        } else {
            let s = format!("{f:0digits$}");
            format!("{whole}.{}", s.trim_end_matches('0'))
        }
    };
    let body = if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}µs", frac(u, 1_000, 3))
    } else if u < 1_000_000_000 {
        format!("{}ms", frac(u, 1_000_000, 6))
    } else {
        let secs = u / 1_000_000_000;
        let sub = u % 1_000_000_000;
        let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
        let s = frac(s * 1_000_000_000 + sub, 1_000_000_000, 9);
        if h > 0 {
            format!("{h}h{m}m{s}s")
        } else if m > 0 {
            format!("{m}m{s}s")
        } else {
            format!("{s}s")
        }
    };
    if neg { format!("-{body}") } else { body }
}

#[cfg(all(test, feature = "types"))]
mod tests;
