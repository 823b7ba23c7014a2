//! The table of every message the built-in kinds reference (`protobuf_table.txt`, see
//! the parent module): each message's fields, their types and JSON names, and which
//! message each (apiVersion, kind) is; parsed once.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::error::DecodeError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum How {
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
pub(super) enum Ty {
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
pub(super) struct FieldDef {
    pub(super) number: u32,
    /// None: inlined into the parent.
    pub(super) json: Option<&'static str>,
    pub(super) ty: Ty,
    pub(super) map: bool,
    pub(super) repeated: bool,
    pub(super) pointer: bool,
    pub(super) omitempty: bool,
}

#[derive(Debug)]
pub(super) struct Message {
    pub(super) name: &'static str,
    pub(super) how: How,
    pub(super) fields: Vec<FieldDef>,
}

#[derive(Debug)]
pub(super) struct Table {
    pub(super) kinds: BTreeMap<(&'static str, &'static str), usize>,
    pub(super) messages: Vec<Message>,
}

const TABLE: &str = include_str!("../protobuf_table.txt");

pub(super) fn table() -> Result<&'static Table, DecodeError> {
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
