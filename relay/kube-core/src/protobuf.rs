//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! for the clients that send them for built-in types: Helm stores its releases as
//! Secrets written this way. Decoded: the `k8s\0` envelope (`runtime.Unknown`), and
//! `v1.Secret` and `v1.ConfigMap` with the object metadata a client sets (name,
//! namespace, labels, annotations, finalizers), into the JSON the rest of the API
//! reads. Other kinds are refused by the caller with 415.

use serde_json::{Map, Value, json};

use crate::kubeconfig::base64;

/// Why a body does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("protobuf body: {0}")]
pub struct DecodeError(String);

fn err(what: &str) -> DecodeError {
    DecodeError(what.to_owned())
}

/// One field of a message: its number and its payload.
#[derive(Debug)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or_else(|| err("truncated varint"))?;
            self.buf = rest;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(err("varint too long"))
    }

    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, DecodeError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let field = match tag & 7 {
            0 => Field::Varint(self.varint()?),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| err("length"))?;
                if len > self.buf.len() {
                    return Err(err("truncated field"));
                }
                let (bytes, rest) = self.buf.split_at(len);
                self.buf = rest;
                Field::Bytes(bytes)
            }
            1 => {
                self.buf = self.buf.get(8..).ok_or_else(|| err("truncated fixed64"))?;
                Field::Varint(0)
            }
            5 => {
                self.buf = self.buf.get(4..).ok_or_else(|| err("truncated fixed32"))?;
                Field::Varint(0)
            }
            w => return Err(DecodeError(format!("unsupported wire type {w}"))),
        };
        Ok(Some((tag >> 3, field)))
    }
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, DecodeError> {
    let mut r = Reader { buf };
    let mut out = Vec::new();
    while let Some(f) = r.next()? {
        out.push(f);
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| err("a string is not UTF-8"))
}

/// A map entry message: key (1) and value (2).
fn entry(bytes: &[u8]) -> Result<(String, &[u8]), DecodeError> {
    let mut key = String::new();
    let mut value: &[u8] = &[];
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) => value = b,
            _ => {}
        }
    }
    Ok((key, value))
}

fn metadata(bytes: &[u8]) -> Result<Value, DecodeError> {
    let mut m = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = Vec::new();
    for (n, f) in fields(bytes)? {
        // gogo-protobuf writes empty strings too: they mean unset.
        let Field::Bytes(b) = f else { continue };
        if b.is_empty() {
            continue;
        }
        match n {
            1 => {
                m.insert("name".into(), json!(text(b)?));
            }
            2 => {
                m.insert("generateName".into(), json!(text(b)?));
            }
            3 => {
                m.insert("namespace".into(), json!(text(b)?));
            }
            6 => {
                m.insert("resourceVersion".into(), json!(text(b)?));
            }
            11 => {
                let (k, v) = entry(b)?;
                labels.insert(k, json!(text(v)?));
            }
            12 => {
                let (k, v) = entry(b)?;
                annotations.insert(k, json!(text(v)?));
            }
            14 => finalizers.push(json!(text(b)?)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        m.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(m))
}

/// The object's own bytes inside the `k8s\0` envelope (`runtime.Unknown`, field 2).
fn unwrap_envelope(body: &[u8]) -> Result<&[u8], DecodeError> {
    let unknown = body
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| err("no k8s envelope"))?;
    let mut raw: &[u8] = &[];
    for (n, f) in fields(unknown)? {
        if let (2, Field::Bytes(b)) = (n, f) {
            raw = b;
        }
    }
    Ok(raw)
}

/// Decodes an enveloped Secret or ConfigMap; `kind` is the type the request path names.
pub fn decode(body: &[u8], kind: &str) -> Result<Value, DecodeError> {
    let raw = unwrap_envelope(body)?;
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!(kind));
    let mut data = Map::new();
    let mut other = Map::new();
    for (n, f) in fields(raw)? {
        match (kind, n, f) {
            (_, 1, Field::Bytes(b)) => {
                out.insert("metadata".into(), metadata(b)?);
            }
            ("Secret", 2, Field::Bytes(b)) => {
                let (k, v) = entry(b)?;
                data.insert(k, json!(base64(v)));
            }
            ("Secret", 3, Field::Bytes(b)) => {
                out.insert("type".into(), json!(text(b)?));
            }
            ("Secret", 4, Field::Bytes(b)) => {
                let (k, v) = entry(b)?;
                other.insert(k, json!(text(v)?));
            }
            ("Secret", 5, Field::Varint(v)) | ("ConfigMap", 4, Field::Varint(v)) => {
                out.insert("immutable".into(), json!(v != 0));
            }
            ("ConfigMap", 2, Field::Bytes(b)) => {
                let (k, v) = entry(b)?;
                data.insert(k, json!(text(v)?));
            }
            ("ConfigMap", 3, Field::Bytes(b)) => {
                let (k, v) = entry(b)?;
                other.insert(k, json!(base64(v)));
            }
            _ => {}
        }
    }
    if !data.is_empty() {
        out.insert("data".into(), Value::Object(data));
    }
    if !other.is_empty() {
        let name = if kind == "Secret" {
            "stringData"
        } else {
            "binaryData"
        };
        out.insert(name.into(), Value::Object(other));
    }
    Ok(Value::Object(out))
}

/// Decodes an enveloped `authorization.k8s.io/v1` SelfSubjectAccessReview (what
/// `kubectl auth can-i` sends): its resource attributes.
pub fn access_review(body: &[u8]) -> Result<Value, DecodeError> {
    let raw = unwrap_envelope(body)?;
    let mut attributes = Map::new();
    for (n, f) in fields(raw)? {
        let (2, Field::Bytes(spec)) = (n, f) else {
            continue;
        };
        for (n, f) in fields(spec)? {
            let (1, Field::Bytes(attrs)) = (n, f) else {
                continue;
            };
            for (n, f) in fields(attrs)? {
                let Field::Bytes(b) = f else { continue };
                let name = match n {
                    1 => "namespace",
                    2 => "verb",
                    3 => "group",
                    4 => "version",
                    5 => "resource",
                    6 => "subresource",
                    7 => "name",
                    _ => continue,
                };
                attributes.insert(name.into(), json!(text(b)?));
            }
        }
    }
    Ok(json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "metadata": {},
        "spec": { "resourceAttributes": attributes },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_field(n: u64, b: &[u8]) -> Vec<u8> {
        let mut out = vec![((n << 3) | 2) as u8, b.len() as u8];
        out.extend_from_slice(b);
        out
    }

    fn map_entry(n: u64, k: &str, v: &[u8]) -> Vec<u8> {
        let mut e = bytes_field(1, k.as_bytes());
        e.extend(bytes_field(2, v));
        bytes_field(n, &e)
    }

    #[test]
    fn a_helm_release_secret_decodes() {
        let mut meta = bytes_field(1, b"sh.helm.release.v1.shop.v1");
        meta.extend(bytes_field(3, b"helmtest"));
        meta.extend(map_entry(11, "owner", b"helm"));
        let mut secret = bytes_field(1, &meta);
        secret.extend(map_entry(2, "release", b"foo"));
        secret.extend(bytes_field(3, b"helm.sh/release.v1"));
        let mut unknown = bytes_field(2, &secret);
        unknown.extend(bytes_field(4, b"application/vnd.kubernetes.protobuf"));
        let mut body = b"k8s\0".to_vec();
        body.extend(unknown);
        let v = decode(&body, "Secret").unwrap();
        assert_eq!(v["metadata"]["name"], "sh.helm.release.v1.shop.v1");
        assert_eq!(v["metadata"]["namespace"], "helmtest");
        assert_eq!(v["metadata"]["labels"]["owner"], "helm");
        assert_eq!(v["data"]["release"], "Zm9v");
        assert_eq!(v["type"], "helm.sh/release.v1");
        assert!(decode(b"k8s\0\x12\x05ab", "Secret").is_err(), "truncated");
        assert!(decode(b"{}", "Secret").is_err(), "no envelope");
    }
}
