//! Both stores pass the same suite; the sled store also survives reopening.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::collections::BTreeMap;

use strata_node::store::{Batch, MemStore, ParentState, SledStore, Store};
use strata_protocol::model::{
    Cluster, ContentHash, Cursor, LogId, Object, ObjectKey, ObjectKeyParts, ObjectMeta, Position,
    Revision, Space,
};
use strata_protocol::sync::ObjectLog;
use strata_protocol::wire::{Change, ReportKey, ReportValue, RouteId};

fn key(n: u8) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: Space::default_space(),
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("a".into()),
        name: format!("cm-{n}"),
    })
}

fn object(n: u8, rev: u64) -> Object {
    Object {
        meta: std::sync::Arc::new(ObjectMeta {
            key: key(n),
            labels: BTreeMap::new(),
        }),
        revision: Revision(rev),
        hash: ContentHash([n; 32]),
        body: vec![n; 10].into(),
    }
}

fn cursor(p: u64) -> Cursor {
    Cursor {
        log: LogId(9),
        position: Position(p),
    }
}

fn suite(store: &dyn Store) {
    let empty = store.load().unwrap();
    assert!(empty.log_meta.is_none() && empty.entries.is_empty() && empty.parent.is_none());

    let mut log = ObjectLog::new(LogId(empty.node_id));
    log.mark_serving();
    for (i, n) in [1u8, 2, 3].iter().enumerate() {
        let pos = Position(i as u64 + 1);
        log.stage(pos, Change::Upsert(object(*n, pos.0))).unwrap();
        log.commit(pos);
    }
    log.stage(Position(4), Change::Delete(key(2))).unwrap();
    log.commit(Position(4));
    log.compact(Position(4));
    let mut batch = Batch::log_changes(&mut log);
    batch.parent = Some(ParentState {
        cursor: cursor(7),
        route: Some(RouteId(5)),
        parent_incarnation: Some(11),
        inherited: BTreeMap::new(),
    });
    batch.child_acks.push(("site-1".into(), cursor(3)));
    batch.child_runs.push(("site-1".into(), 77));
    let report = (
        "site-1".to_owned(),
        ReportKey::Cluster { name: "c1".into() },
    );
    batch.reports.push((
        report.clone(),
        Some(ReportValue::Cluster(Cluster {
            name: "c1".into(),
            labels: BTreeMap::new(),
            properties: BTreeMap::new(),
            path: vec!["site-1".into()],
        })),
    ));
    store.commit(&batch).unwrap();

    let loaded = store.load().unwrap();
    let restored = ObjectLog::restore(loaded.log_meta.unwrap(), loaded.entries);
    assert_eq!(restored.meta(), log.meta());
    assert_eq!(
        restored.entries().collect::<Vec<_>>(),
        log.entries().collect::<Vec<_>>()
    );
    assert!(
        restored.get(&key(2)).is_none(),
        "the deleted object stays deleted"
    );
    assert_eq!(loaded.parent.unwrap().cursor, cursor(7));
    assert_eq!(loaded.child_acks["site-1"], cursor(3));
    assert_eq!(loaded.child_runs["site-1"], 77);
    assert!(matches!(loaded.reports[&report], ReportValue::Cluster(_)));

    // Removal.
    let mut batch = Batch::default();
    batch.reports.push((report.clone(), None));
    store.commit(&batch).unwrap();
    assert!(store.load().unwrap().reports.is_empty());
}

#[test]
fn the_memory_store_keeps_everything() {
    suite(&MemStore::new(3));
}

#[test]
fn the_sled_store_keeps_everything_across_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let node_id = {
        let store = SledStore::open(dir.path()).unwrap();
        suite(&store);
        store.load().unwrap().node_id
    };
    assert_ne!(node_id, 0);
    let store = SledStore::open(dir.path()).unwrap();
    let loaded = store.load().unwrap();
    assert_eq!(loaded.node_id, node_id, "the node id survives a restart");
    assert_eq!(loaded.entries.len(), 2);
}

#[test]
fn a_store_held_by_another_process_is_refused_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let _held = SledStore::open(dir.path()).unwrap();
    let err = SledStore::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
}

#[test]
fn a_corrupt_record_is_named() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        let mut batch = Batch::default();
        batch.child_acks.push(("site-1".into(), cursor(3)));
        store.commit(&batch).unwrap();
    }
    {
        let db = strata_node::store::open_sled_db(dir.path()).unwrap();
        db.insert(b"a/site-1", &b"\xff\xff\xff"[..]).unwrap();
        db.flush().unwrap();
    }
    let err = SledStore::open(dir.path())
        .unwrap()
        .load()
        .unwrap_err()
        .to_string();
    assert!(err.contains("ack of child \"site-1\""), "{err}");
}

#[test]
fn a_full_store_refuses_a_batch_whole_and_takes_it_when_there_is_room() {
    let store = MemStore::new(5);
    let mut batch = Batch::default();
    batch.child_acks.push(("site-1".into(), cursor(4)));
    store.set_full(true);
    let err = store.commit(&batch).unwrap_err().to_string();
    assert!(err.contains("no space left"), "{err}");
    assert!(
        store.load().unwrap().child_acks.is_empty(),
        "half a batch was written"
    );
    store.set_full(false);
    store.commit(&batch).unwrap();
    assert_eq!(store.load().unwrap().child_acks["site-1"], cursor(4));
}
