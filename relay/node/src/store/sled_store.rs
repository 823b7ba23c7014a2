//! The sled store: one tree, records under prefixed keys, each commit one atomic
//! `apply_batch` followed by a flush.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use strata_protocol::codec::{decode_value, encode_value};

use super::{Batch, Store, StoreError, Stored};
use crate::process::random_bytes;

const FORMAT: &[u8] = b"format";
const PROBE: &[u8] = b"probe";
const NODE_ID: &[u8] = b"id";
const LOG_META: &[u8] = b"m";
const UPSTREAM: &[u8] = b"u";
const ENTRY: &[u8] = b"o/";
const ACK: &[u8] = b"a/";
const RUN: &[u8] = b"n/";
const REPORT: &[u8] = b"r/";
const JOINED: &[u8] = b"j/";

/// The format of the records this build reads and writes, recorded in every store (a
/// big-endian u32 under `format`). Raise it with any change to how a record is keyed or
/// encoded, and add the step from the previous format to [`migrate`].
///
/// Format 1 is the layout of the first builds, which recorded no format: a store
/// without the record but with a node id is taken as format 1 and stamped.
pub const STORE_FORMAT: u32 = 1;

/// A store in a sled database on disk.
#[derive(Debug)]
pub struct SledStore {
    db: sled::Db,
    path: PathBuf,
}

fn write_err(e: impl std::fmt::Display) -> StoreError {
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

impl SledStore {
    /// Opens (creating if needed) the store in `dir`. A directory another process holds
    /// open is refused with its path.
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        let open_err = |detail: String| StoreError::Open {
            path: dir.to_owned(),
            detail,
        };
        std::fs::create_dir_all(dir).map_err(|e| open_err(e.to_string()))?;
        let db = open_db(dir).map_err(|e| open_err(e.to_string()))?;
        let recorded = db.get(FORMAT).map_err(|e| open_err(e.to_string()))?;
        let existing = db
            .get(NODE_ID)
            .map_err(|e| open_err(e.to_string()))?
            .is_some();
        let format = match &recorded {
            Some(v) => {
                let bytes: [u8; 4] = v.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                    record: "store format".into(),
                    detail: format!("{} bytes, expected 4", v.len()),
                })?;
                u32::from_be_bytes(bytes)
            }
            // Written before stores recorded their format: format 1's layout.
            None if existing => 1,
            None => STORE_FORMAT,
        };
        if format != STORE_FORMAT {
            migrate(&db, format).map_err(|()| StoreError::Format {
                path: dir.to_owned(),
                found: format,
                supported: STORE_FORMAT,
            })?;
        }
        if !existing {
            // Zero means "no log" on the wire; never use it.
            let id = random_bytes()
                .map(|b| u64::from_be_bytes(b).max(1))
                .map_err(|e| open_err(e.to_string()))?;
            db.insert(NODE_ID, &id.to_be_bytes())
                .map_err(|e| open_err(e.to_string()))?;
        }
        if recorded.is_none() || !existing {
            db.insert(FORMAT, &STORE_FORMAT.to_be_bytes())
                .map_err(|e| open_err(e.to_string()))?;
            db.flush().map_err(|e| open_err(e.to_string()))?;
        }
        Ok(SledStore {
            db,
            path: dir.to_owned(),
        })
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record under `prefix`, by the name its key ends with (a child's, a
    /// token's); `what` names such a record in errors.
    fn by_name<T: DeserializeOwned>(
        &self,
        prefix: &[u8],
        what: &str,
    ) -> Result<BTreeMap<String, T>, StoreError> {
        let mut out = BTreeMap::new();
        for item in self.db.scan_prefix(prefix) {
            let (k, v) = item.map_err(read_err)?;
            let name = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
            let value = dec(|| format!("{what} {name:?}"), &v)?;
            out.insert(name, value);
        }
        Ok(out)
    }
}

/// Opens the database, waiting up to five seconds for a lock held by a `Db` this process
/// just dropped: sled releases it from a background thread. A lock another process
/// holds is still refused, after those seconds.
#[allow(clippy::disallowed_methods)] // a short wait at startup, before any runtime work
fn open_db(dir: &Path) -> sled::Result<sled::Db> {
    let mut attempts = 0;
    loop {
        match sled::Config::new().path(dir).open() {
            Err(sled::Error::Io(e)) if lock_busy(&e) && attempts < 100 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Brings a store of an older `format` to [`STORE_FORMAT`], or refuses (`Err`) a
/// format it has no step from: there is none yet, format 1 being the first. A newer
/// format is always refused: downgrades are not supported.
fn migrate(_db: &sled::Db, _format: u32) -> Result<(), ()> {
    Err(())
}

/// A read of the store failed.
fn read_err(e: sled::Error) -> StoreError {
    StoreError::Corrupt {
        record: "(read)".into(),
        detail: e.to_string(),
    }
}

impl Store for SledStore {
    fn load(&self) -> Result<Stored, StoreError> {
        let node_id = match self.db.get(NODE_ID).map_err(read_err)? {
            Some(v) => {
                let bytes: [u8; 8] = v.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                    record: "node id".into(),
                    detail: format!("{} bytes, expected 8", v.len()),
                })?;
                u64::from_be_bytes(bytes)
            }
            None => 0,
        };
        let mut stored = Stored {
            node_id,
            ..Stored::default()
        };
        if let Some(v) = self.db.get(LOG_META).map_err(read_err)? {
            stored.log_meta = Some(dec(|| "log meta".into(), &v)?);
        }
        if let Some(v) = self.db.get(UPSTREAM).map_err(read_err)? {
            stored.upstream = Some(dec(|| "upstream cursor".into(), &v)?);
        }
        for item in self.db.scan_prefix(ENTRY) {
            let (k, v) = item.map_err(read_err)?;
            let key = dec(|| format!("object key {:?}", &k[..]), &k[ENTRY.len()..])?;
            let entry = dec(|| format!("object entry {key:?}"), &v)?;
            stored.entries.push((key, entry));
        }
        stored.child_acks = self.by_name(ACK, "ack of child")?;
        stored.child_runs = self.by_name(RUN, "run of child")?;
        for item in self.db.scan_prefix(REPORT) {
            let (k, v) = item.map_err(read_err)?;
            let slot: super::ReportSlot =
                dec(|| format!("report key {:?}", &k[..]), &k[REPORT.len()..])?;
            let report = dec(|| format!("report {slot:?}"), &v)?;
            stored.reports.insert(slot, report);
        }
        stored.joined = self.by_name(JOINED, "joined agent of token")?;
        Ok(stored)
    }

    fn commit(&self, batch: &Batch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut b = sled::Batch::default();
        if let Some(meta) = &batch.log_meta {
            b.insert(LOG_META, enc(meta)?);
        }
        for (key, entry) in &batch.entries {
            let k = prefixed(ENTRY, &enc(key)?);
            match entry {
                Some(e) => b.insert(k, enc(e)?),
                None => b.remove(k),
            }
        }
        if let Some(u) = &batch.upstream {
            b.insert(UPSTREAM, enc(u)?);
        }
        for (child, cursor) in &batch.child_acks {
            b.insert(prefixed(ACK, child.as_bytes()), enc(cursor)?);
        }
        for (child, run) in &batch.child_runs {
            b.insert(prefixed(RUN, child.as_bytes()), enc(run)?);
        }
        for (key, report) in &batch.reports {
            let k = prefixed(REPORT, &enc(key)?);
            match report {
                Some(r) => b.insert(k, enc(r)?),
                None => b.remove(k),
            }
        }
        for (token, name) in &batch.joined {
            b.insert(prefixed(JOINED, token.as_bytes()), enc(name)?);
        }
        self.db.apply_batch(b).map_err(write_err)?;
        self.db.flush().map_err(write_err)?;
        Ok(())
    }

    fn size_bytes(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }

    fn probe_write(&self) -> Result<(), StoreError> {
        self.db.insert(PROBE, &[1u8][..]).map_err(write_err)?;
        self.db.flush().map_err(write_err)?;
        Ok(())
    }
}

/// sled reports a held lock as an `Other` error wrapping the `WouldBlock` of `flock`.
fn lock_busy(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("could not acquire lock")
}
