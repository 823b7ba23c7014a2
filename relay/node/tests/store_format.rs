//! Every sled store records the format of its records: a store of another format is
//! refused at open with both versions named and what to do, before anything is read.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use strata_node::store::{Batch, STORE_FORMAT, SledStore, Store, StoreError, open_sled_db};

/// Sets the recorded format of the (closed) store in `dir`; `None` removes the record,
/// as in a store written before formats were recorded.
fn set_format(dir: &Path, format: Option<u32>) {
    let db = open_sled_db(dir).unwrap();
    match format {
        Some(f) => db.insert(b"format", &f.to_be_bytes()).unwrap(),
        None => db.remove(b"format").unwrap(),
    };
    db.flush().unwrap();
}

fn recorded_format(dir: &Path) -> Option<u32> {
    let db = open_sled_db(dir).unwrap();
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

mod fixture {
    //! `tests/fixtures/store-format-1/`: a sled store written by the build that
    //! introduced format 1. Every later build must open it (migrating it if the format
    //! moved on) and read back what it holds; the test below fails otherwise.

    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use strata_node::store::{Batch, ParentState, SledStore, Store};
    use strata_protocol::model::{
        Cluster, ContentHash, Cursor, LogId, Object, ObjectKey, ObjectKeyParts, ObjectMeta,
        Position, Revision, Space,
    };
    use strata_protocol::sync::ObjectLog;
    use strata_protocol::wire::{Change, ReportKey, ReportValue, RouteId};

    fn dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-format-1")
    }

    fn key(n: u8) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
            space: Space::default_space(),
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            namespace: Some("pos".into()),
            name: format!("pos-{n}"),
        })
    }

    fn cursor(p: u64) -> Cursor {
        Cursor {
            log: LogId(9),
            position: Position(p),
        }
    }

    fn contents(node_id: u64) -> (ObjectLog, Batch) {
        let mut log = ObjectLog::new(LogId(node_id));
        log.mark_serving();
        for n in [1u8, 2] {
            let object = Object {
                meta: std::sync::Arc::new(ObjectMeta {
                    key: key(n),
                    labels: BTreeMap::from([("app".into(), "pos".into())]),
                }),
                revision: Revision(u64::from(n)),
                hash: ContentHash([n; 32]),
                body: format!("{{\"kind\":\"Deployment\",\"n\":{n}}}").into(),
            };
            log.stage(Position(u64::from(n)), Change::Upsert(object))
                .unwrap();
            log.commit(Position(u64::from(n)));
        }
        let mut batch = Batch::log_changes(&mut log);
        batch.parent = Some(ParentState {
            cursor: cursor(7),
            route: Some(RouteId(5)),
            parent_incarnation: Some(11),
            inherited: BTreeMap::from([("region".into(), "eu".into())]),
        });
        batch.child_acks.push(("site-1".into(), cursor(3)));
        batch.child_runs.push(("site-1".into(), 77));
        batch.reports.push((
            ("site-1".into(), ReportKey::Cluster { name: "c1".into() }),
            Some(ReportValue::Cluster(Cluster {
                name: "c1".into(),
                labels: BTreeMap::from([("role".into(), "pos".into())]),
                properties: BTreeMap::new(),
                path: vec!["site-1".into()],
            })),
        ));
        batch.joined.push(("ab12".into(), "store-9001".into()));
        (log, batch)
    }

    /// Writes the fixture again: `STRATA_WRITE_STORE_FIXTURE=1 cargo test -p
    /// strata-node --test integration store_format:: -- --ignored`. Only ever for a new format's
    /// fixture, next to the old ones, never over one.
    #[test]
    #[ignore]
    fn write_the_fixture() {
        if std::env::var_os("STRATA_WRITE_STORE_FIXTURE").is_none() {
            return;
        }
        assert!(!dir().exists(), "{} exists: keep it", dir().display());
        let store = SledStore::open(&dir()).unwrap();
        let (_, batch) = contents(store.load().unwrap().node_id);
        store.commit(&batch).unwrap();
    }

    #[test]
    fn the_format_1_fixture_opens_and_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        for file in std::fs::read_dir(dir()).unwrap() {
            let file = file.unwrap();
            if file.file_type().unwrap().is_file() {
                std::fs::copy(file.path(), tmp.path().join(file.file_name())).unwrap();
            }
        }
        let store = SledStore::open(tmp.path()).unwrap();
        let loaded = store.load().unwrap();
        let (log, _) = contents(loaded.node_id);
        let restored = ObjectLog::restore(loaded.log_meta.unwrap(), loaded.entries);
        assert_eq!(restored.meta(), log.meta());
        assert_eq!(
            restored.entries().collect::<Vec<_>>(),
            log.entries().collect::<Vec<_>>()
        );
        let parent = loaded.parent.unwrap();
        assert_eq!((parent.cursor, parent.route), (cursor(7), Some(RouteId(5))));
        assert_eq!(parent.inherited["region"], "eu");
        assert_eq!(
            (loaded.child_acks["site-1"], loaded.child_runs["site-1"]),
            (cursor(3), 77)
        );
        assert_eq!(loaded.reports.len(), 1);
        assert_eq!(loaded.joined["ab12"], "store-9001");
    }
}
