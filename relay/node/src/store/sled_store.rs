//! The sled store: one tree, records under prefixed keys, each commit one atomic
//! `apply_batch` followed by a flush.

use std::path::{Path, PathBuf};

use super::records::{
    FORMAT, NODE_ID, PROBE, STORE_FORMAT, batch_writes, fixed, stored_from, write_err,
};
use super::{Batch, Store, StoreError, Stored};
use crate::process::random_bytes;

/// A store in a sled database on disk.
#[derive(Debug)]
pub struct SledStore {
    db: sled::Db,
    path: PathBuf,
    /// [`COMMIT_DELAY_VAR`], if set.
    commit_delay: Option<std::time::Duration>,
}

/// For tests of crash safety only: an environment variable naming milliseconds every
/// commit waits before it writes, so that a test's `kill -9` lands between a change
/// and its commit more often than by chance (the window a crash must never turn into a
/// lost acknowledgement). Unset in production.
pub(crate) const COMMIT_DELAY_VAR: &str = "STRATA_TEST_COMMIT_DELAY_MS";

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
            Some(v) => u32::from_be_bytes(fixed("store format", v)?),
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
        let commit_delay = std::env::var(COMMIT_DELAY_VAR)
            .ok()
            .and_then(|v| v.parse().ok())
            .map(std::time::Duration::from_millis);
        Ok(SledStore {
            db,
            path: dir.to_owned(),
            commit_delay,
        })
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Opens the bare database in `dir` (the store opens it so; tools and tests that edit
/// records directly should too), waiting up to five seconds for a lock held by a `Db`
/// this process just dropped: sled releases it from a background thread. A lock another
/// process holds is still refused, after those seconds.
#[allow(clippy::disallowed_methods)] // a short wait at startup, before any runtime work
pub fn open_db(dir: &Path) -> sled::Result<sled::Db> {
    let mut attempts = 0;
    loop {
        // No background flusher: every commit flushes before it returns (nothing is
        // acknowledged before it is durable), and sled's flusher otherwise fsyncs the
        // log twice a second with nothing to write, on every idle relay and agent.
        let config = sled::Config::new().path(dir).flush_every_ms(None);
        match config.open() {
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
        stored_from(self.db.iter().map(|r| r.map_err(read_err)))
    }

    fn commit(&self, batch: &Batch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(delay) = self.commit_delay {
            // A test's slow disk (COMMIT_DELAY_VAR); commits run off the async workers.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(delay);
        }
        let mut b = sled::Batch::default();
        for (k, v) in batch_writes(batch)? {
            match v {
                Some(v) => b.insert(k, v),
                None => b.remove(k),
            }
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
