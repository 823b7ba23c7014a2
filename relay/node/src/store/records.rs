//! How a node's records are keyed and encoded, whatever keeps them: the sled store keys
//! them as they are, the etcd store under its prefix. One layout, one [`STORE_FORMAT`].

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use strata_protocol::codec::{decode_value, encode_value};
use strata_protocol::wire::ReportKey;

use super::{Batch, ReportSlot, StoreError, Stored};

pub(super) const FORMAT: &[u8] = b"format";
pub(super) const PROBE: &[u8] = b"probe";
pub(super) const NODE_ID: &[u8] = b"id";
const LOG_META: &[u8] = b"m";
const PARENT: &[u8] = b"u";
const ENTRY: &[u8] = b"o/";
const ACK: &[u8] = b"a/";
const RUN: &[u8] = b"n/";
const REPORT: &[u8] = b"r/";
const JOINED: &[u8] = b"j/";

/// The format of the records this build reads and writes, recorded in every store (a
/// big-endian u32 under `format`). Raise it with any change to how a record is keyed or
/// encoded, and add the step from the previous format to the stores' `migrate`.
///
/// Format 1 is the layout of the first builds, which recorded no format: a store
/// without the record but with a node id is taken as format 1 and stamped.
pub const STORE_FORMAT: u32 = 1;

pub(super) fn write_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Write {
        detail: e.to_string(),
    }
}

fn enc<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    encode_value(v).map_err(write_err)
}

fn dec<T: DeserializeOwned>(
    record: impl FnOnce() -> String,
    bytes: &[u8],
) -> Result<T, StoreError> {
    decode_value(bytes).map_err(|e| StoreError::Corrupt {
        record: record(),
        detail: e.to_string(),
    })
}

fn prefixed(prefix: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + rest.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(rest);
    k
}

/// A fixed-size big-endian number record (`what` names it in errors).
pub(super) fn fixed<const N: usize>(what: &str, v: &[u8]) -> Result<[u8; N], StoreError> {
    v.try_into().map_err(|_| StoreError::Corrupt {
        record: what.into(),
        detail: format!("{} bytes, expected {N}", v.len()),
    })
}

/// Everything stored, from every record in key order (unknown keys are skipped).
pub(super) fn stored_from<K, V>(
    records: impl IntoIterator<Item = Result<(K, V), StoreError>>,
) -> Result<Stored, StoreError>
where
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let mut stored = Stored::default();
    let name = |k: &[u8], p: &[u8]| String::from_utf8_lossy(&k[p.len()..]).into_owned();
    for record in records {
        let (k, v) = record?;
        let (k, v) = (k.as_ref(), v.as_ref());
        if k == NODE_ID {
            stored.node_id = u64::from_be_bytes(fixed("node id", v)?);
        } else if k == LOG_META {
            stored.log_meta = Some(dec(|| "log meta".into(), v)?);
        } else if k == PARENT {
            stored.parent = Some(dec(|| "parent cursor".into(), v)?);
        } else if let Some(rest) = k.strip_prefix(ENTRY) {
            let key = dec(|| format!("object key {k:?}"), rest)?;
            let entry = dec(|| format!("object entry {key:?}"), v)?;
            stored.entries.push((key, entry));
        } else if k.starts_with(ACK) {
            let child = name(k, ACK);
            let ack = dec(|| format!("ack of child {child:?}"), v)?;
            stored.child_acks.insert(child, ack);
        } else if k.starts_with(RUN) {
            let child = name(k, RUN);
            let run = dec(|| format!("run of child {child:?}"), v)?;
            stored.child_runs.insert(child, run);
        } else if let Some(rest) = k.strip_prefix(REPORT) {
            let slot: ReportSlot = dec(|| format!("report key {k:?}"), rest)?;
            match dec(|| format!("report {slot:?}"), v) {
                Ok(report) => {
                    stored.reports.insert(slot, report);
                }
                // A link record is soft state its child reports again when it
                // reconnects; one written before records carried the certificate's
                // expiry does not decode, and is dropped rather than refusing the store.
                Err(_) if matches!(slot.1, ReportKey::Link { .. }) => {}
                Err(e) => return Err(e),
            }
        } else if k.starts_with(JOINED) {
            let token = name(k, JOINED);
            let agent = dec(|| format!("joined agent of token {token:?}"), v)?;
            stored.joined.insert(token, agent);
        }
    }
    Ok(stored)
}

/// The writes of `batch` as (key, value or `None` to remove), each key once (a later
/// write of a key in the batch wins), in key order.
pub(super) fn batch_writes(
    batch: &Batch,
) -> Result<BTreeMap<Vec<u8>, Option<Vec<u8>>>, StoreError> {
    let mut out = BTreeMap::new();
    if let Some(meta) = &batch.log_meta {
        out.insert(LOG_META.to_vec(), Some(enc(meta)?));
    }
    for (key, entry) in &batch.entries {
        let value = entry.as_ref().map(enc).transpose()?;
        out.insert(prefixed(ENTRY, &enc(key)?), value);
    }
    if let Some(u) = &batch.parent {
        out.insert(PARENT.to_vec(), Some(enc(u)?));
    }
    for (child, cursor) in &batch.child_acks {
        out.insert(prefixed(ACK, child.as_bytes()), Some(enc(cursor)?));
    }
    for (child, run) in &batch.child_runs {
        out.insert(prefixed(RUN, child.as_bytes()), Some(enc(run)?));
    }
    for (key, report) in &batch.reports {
        let value = report.as_ref().map(enc).transpose()?;
        out.insert(prefixed(REPORT, &enc(key)?), value);
    }
    for (token, name) in &batch.joined {
        out.insert(prefixed(JOINED, token.as_bytes()), Some(enc(name)?));
    }
    Ok(out)
}

/// One record another replica wrote (or removed) in a shared store, as a follower of
/// that store takes it.
#[derive(Debug, Clone)]
pub enum Replicated {
    /// The log's scalar state.
    LogMeta(strata_protocol::sync::LogMeta),
    /// A log entry (`None`: removed).
    Entry(
        strata_protocol::model::ObjectKey,
        Option<strata_protocol::sync::KeyEntry>,
    ),
    /// A child's report (`None`: removed).
    Report(ReportSlot, Option<Box<strata_protocol::wire::ReportValue>>),
}

/// What a record's key and value (`None`: the key was removed) mean to a follower;
/// `None` for records a follower has no use for (acks, runs, the writer key).
pub(super) fn replicated(k: &[u8], v: Option<&[u8]>) -> Result<Option<Replicated>, StoreError> {
    Ok(if k == LOG_META {
        match v {
            Some(v) => Some(Replicated::LogMeta(dec(|| "log meta".into(), v)?)),
            None => None,
        }
    } else if let Some(rest) = k.strip_prefix(ENTRY) {
        let key: strata_protocol::model::ObjectKey = dec(|| format!("object key {k:?}"), rest)?;
        let entry = match v {
            Some(v) => Some(dec(|| format!("object entry {key:?}"), v)?),
            None => None,
        };
        Some(Replicated::Entry(key, entry))
    } else if let Some(rest) = k.strip_prefix(REPORT) {
        let slot: ReportSlot = dec(|| format!("report key {k:?}"), rest)?;
        let value = match v {
            Some(v) => Some(Box::new(dec(|| format!("report {slot:?}"), v)?)),
            None => None,
        };
        Some(Replicated::Report(slot, value))
    } else {
        None
    })
}

/// `batch` without the log's records: what a replica that does not write the log
/// (a standby root replica) still writes.
pub(super) fn without_log(batch: &Batch) -> Batch {
    Batch {
        log_meta: None,
        entries: Vec::new(),
        parent: batch.parent.clone(),
        child_acks: batch.child_acks.clone(),
        child_runs: batch.child_runs.clone(),
        reports: batch.reports.clone(),
        joined: batch.joined.clone(),
    }
}
