//! Every sled store records the format of its records: a store of another format is
//! refused at open with both versions named and what to do, before anything is read.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use strata_node::store::{Batch, STORE_FORMAT, SledStore, Store, StoreError};

/// Sets the recorded format of the (closed) store in `dir`; `None` removes the record,
/// as in a store written before formats were recorded.
fn set_format(dir: &Path, format: Option<u32>) {
    let db = sled::open(dir).unwrap();
    match format {
        Some(f) => db.insert(b"format", &f.to_be_bytes()).unwrap(),
        None => db.remove(b"format").unwrap(),
    };
    db.flush().unwrap();
}

fn recorded_format(dir: &Path) -> Option<u32> {
    let db = sled::open(dir).unwrap();
    let v = db.get(b"format").unwrap()?;
    Some(u32::from_be_bytes(v.as_ref().try_into().unwrap()))
}

fn a_store_with_a_node_id(dir: &Path) -> u64 {
    let store = SledStore::open(dir).unwrap();
    store
        .commit(&Batch {
            child_runs: vec![("eu".into(), 7)],
            ..Batch::default()
        })
        .unwrap();
    store.load().unwrap().node_id
}

#[test]
fn a_new_store_records_this_builds_format_and_opens_again() {
    let tmp = tempfile::tempdir().unwrap();
    let id = a_store_with_a_node_id(tmp.path());
    assert_eq!(recorded_format(tmp.path()), Some(STORE_FORMAT));
    let store = SledStore::open(tmp.path()).unwrap();
    let stored = store.load().unwrap();
    assert_eq!((stored.node_id, stored.child_runs["eu"]), (id, 7));
    store.probe_write().unwrap();
}

#[test]
fn a_newer_format_is_refused_naming_both_and_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    a_store_with_a_node_id(tmp.path());
    set_format(tmp.path(), Some(STORE_FORMAT + 1));
    let err = SledStore::open(tmp.path()).unwrap_err();
    assert!(
        matches!(err, StoreError::Format { found, supported, .. } if found == STORE_FORMAT + 1 && supported == STORE_FORMAT),
        "{err:?}"
    );
    let message = err.to_string();
    let expected = format!(
        "the store at {} has format {}, written by a newer build; this build reads format {} and cannot downgrade it: run the newer build again, or move the directory away",
        tmp.path().display(),
        STORE_FORMAT + 1,
        STORE_FORMAT
    );
    assert!(message.starts_with(&expected), "{message}");
    // Refused before anything was written: the record is unchanged.
    assert_eq!(recorded_format(tmp.path()), Some(STORE_FORMAT + 1));
}

#[test]
fn an_older_format_without_a_migration_is_refused_naming_both_and_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    a_store_with_a_node_id(tmp.path());
    set_format(tmp.path(), Some(0));
    let message = SledStore::open(tmp.path()).unwrap_err().to_string();
    let expected = format!(
        "the store at {} has format 0, older than format {STORE_FORMAT} that this build reads, and this build has no migration from it: run a build between the two first",
        tmp.path().display()
    );
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("move the directory away"), "{message}");
    assert_eq!(recorded_format(tmp.path()), Some(0));
}

#[test]
fn a_store_from_before_formats_were_recorded_opens_as_format_1_and_is_stamped() {
    let tmp = tempfile::tempdir().unwrap();
    let id = a_store_with_a_node_id(tmp.path());
    set_format(tmp.path(), None);
    let store = SledStore::open(tmp.path()).unwrap();
    assert_eq!(store.load().unwrap().node_id, id);
    drop(store);
    assert_eq!(recorded_format(tmp.path()), Some(1));
}
