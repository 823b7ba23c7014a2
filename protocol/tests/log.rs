//! The object log: persistence through dirty keys, coalescing and compaction.

use std::collections::BTreeMap;

use proptest::prelude::*;
use strata_protocol::model::{
    ContentHash, LogId, Object, ObjectKey, ObjectKeyParts, ObjectMeta, Position, Revision, Space,
};
use strata_protocol::sync::{KeyEntry, ObjectLog};
use strata_protocol::wire::Change;

fn key(k: u8) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: Space::default_space(),
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: None,
        name: format!("k{k}"),
    })
}

fn object(k: u8, label: u8, rev: u64) -> Object {
    Object {
        meta: std::sync::Arc::new(ObjectMeta {
            key: key(k),
            labels: [("l".to_owned(), label.to_string())].into(),
        }),
        revision: Revision(rev),
        hash: ContentHash([rev as u8; 32]),
        body: vec![k; 3].into(),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Upsert(u8, u8),
    Delete(u8),
    Commit,
    Compact(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, 0u8..3).prop_map(|(k, l)| Op::Upsert(k, l)),
        2 => (0u8..8).prop_map(Op::Delete),
        3 => Just(Op::Commit),
        1 => (0u8..10).prop_map(Op::Compact),
    ]
}

proptest! {
    /// Persisting the dirty entries after every operation, and the meta only when it
    /// changed, then restoring gives back the same log: same entries, same meta, same
    /// answers to range scans.
    #[test]
    fn restore_from_dirty_entries_rebuilds_the_same_log(ops in prop::collection::vec(op(), 0..60)) {
        let mut log = ObjectLog::new(LogId(7));
        log.mark_serving();
        let mut disk: BTreeMap<ObjectKey, KeyEntry> = BTreeMap::new();
        let mut disk_meta = log.take_meta_change();
        prop_assert!(disk_meta.is_some(), "a new log's meta is never written");
        for op in ops {
            let pos = log.head().next();
            match op {
                Op::Upsert(k, l) => { log.stage(pos, Change::Upsert(object(k, l, pos.0))).unwrap(); }
                Op::Delete(k) => { log.stage(pos, Change::Delete(key(k))).unwrap(); }
                Op::Commit => log.commit(pos),
                Op::Compact(back) => log.compact(Position(log.head().0.saturating_sub(u64::from(back)))),
            }
            for k in log.take_dirty() {
                match log.entry(&k) {
                    Some(e) => { disk.insert(k, e.clone()); }
                    None => { disk.remove(&k); }
                }
            }
            if let Some(meta) = log.take_meta_change() {
                disk_meta = Some(meta);
            }
            prop_assert_eq!(log.take_meta_change(), None, "an unchanged meta was given again");
        }
        let restored = ObjectLog::restore(disk_meta.unwrap(), disk);
        prop_assert_eq!(restored.meta(), log.meta());
        let a: Vec<_> = restored.entries().collect();
        let b: Vec<_> = log.entries().collect();
        prop_assert_eq!(a, b);
        for from in 0..=log.head().0 {
            prop_assert_eq!(
                restored.keys_changed(Position(from), log.head()),
                log.keys_changed(Position(from), log.head())
            );
        }
    }
}

proptest! {
    /// `visible_at` answers, for every position from the floor to the head, what was
    /// committed there (a watch from that position relies on it), whatever was
    /// staged, committed and compacted on the way.
    #[test]
    fn visible_at_is_the_state_committed_at_that_position(ops in prop::collection::vec(op(), 0..60)) {
        let mut log = ObjectLog::new(LogId(7));
        log.mark_serving();
        // The model: each key's (label, revision) while live; the state at each commit.
        let mut current: BTreeMap<u8, Option<(u8, u64)>> = BTreeMap::new();
        let mut committed: Vec<BTreeMap<u8, Option<(u8, u64)>>> = vec![BTreeMap::new()];
        for op in ops {
            let pos = log.head().next();
            match op {
                Op::Upsert(k, l) => {
                    log.stage(pos, Change::Upsert(object(k, l, pos.0))).unwrap();
                    let slot = current.entry(k).or_insert(None);
                    if slot.is_none_or(|(_, rev)| rev < pos.0) {
                        *slot = Some((l, pos.0));
                    }
                }
                Op::Delete(k) => {
                    log.stage(pos, Change::Delete(key(k))).unwrap();
                    current.insert(k, None);
                }
                Op::Commit => {
                    log.commit(pos);
                    committed.push(current.clone());
                }
                Op::Compact(back) => log.compact(Position(log.head().0.saturating_sub(u64::from(back)))),
            }
        }
        for at in log.floor().0..=log.head().0 {
            for k in 0..8u8 {
                let got = log
                    .entry(&key(k))
                    .and_then(|e| e.visible_at(Position(at)))
                    .map(|m| m.labels["l"].clone());
                let want = committed[at as usize]
                    .get(&k)
                    .copied()
                    .flatten()
                    .map(|(l, _)| l.to_string());
                prop_assert_eq!(got, want, "key {} at {}", k, at);
            }
        }
    }
}

proptest! {
    /// A compaction visits only the keys that settled since the last one, and leaves
    /// the same entries as one that visits every key (what a restored log's first
    /// compaction does), after every step.
    #[test]
    fn compacting_the_settled_keys_equals_compacting_every_key(ops in prop::collection::vec(op(), 0..60)) {
        let mut log = ObjectLog::new(LogId(7));
        log.mark_serving();
        for op in ops {
            let pos = log.head().next();
            match op {
                Op::Upsert(k, l) => { log.stage(pos, Change::Upsert(object(k, l, pos.0))).unwrap(); }
                Op::Delete(k) => { log.stage(pos, Change::Delete(key(k))).unwrap(); }
                Op::Commit => log.commit(pos),
                Op::Compact(back) => {
                    let floor = Position(log.head().0.saturating_sub(u64::from(back)));
                    let entries: Vec<_> = log.entries().map(|(k, e)| (k.clone(), e.clone())).collect();
                    let mut every_key = ObjectLog::restore(log.meta(), entries);
                    log.compact(floor);
                    every_key.compact(floor);
                    let a: Vec<_> = log.entries().collect();
                    let b: Vec<_> = every_key.entries().collect();
                    prop_assert_eq!(a, b);
                }
            }
        }
    }
}

/// A restored log's entries come as they were written: its first compaction visits
/// every key, and drops a tombstone that lies below the floor it was restored with.
#[test]
fn a_restored_log_compacts_what_lies_below_its_floor() {
    let mut log = ObjectLog::new(LogId(1));
    log.mark_serving();
    log.stage(Position(1), Change::Upsert(object(1, 0, 1)))
        .unwrap();
    log.commit(Position(1));
    log.stage(Position(2), Change::Delete(key(1))).unwrap();
    log.commit(Position(2));
    log.stage(Position(3), Change::Upsert(object(2, 0, 3)))
        .unwrap();
    log.commit(Position(3));
    let mut meta = log.meta();
    meta.floor = Position(2);
    let entries: Vec<_> = log.entries().map(|(k, e)| (k.clone(), e.clone())).collect();
    let mut restored = ObjectLog::restore(meta, entries);
    assert!(restored.entry(&key(1)).is_some(), "the tombstone came back");
    restored.compact(Position(3));
    assert!(
        restored.entry(&key(1)).is_none(),
        "the tombstone is dropped"
    );
    assert!(restored.get(&key(2)).is_some());
}

#[test]
fn only_the_latest_change_of_a_key_is_served() {
    let mut log = ObjectLog::new(LogId(1));
    for rev in 1..=5 {
        log.stage(Position(rev), Change::Upsert(object(1, 0, rev)))
            .unwrap();
        log.commit(Position(rev));
    }
    assert_eq!(log.keys_changed(Position(0), log.head()), vec![key(1)]);
    assert_eq!(log.keys_changed(Position(4), log.head()), vec![key(1)]);
    assert!(log.keys_changed(Position(5), log.head()).is_empty());
    assert_eq!(log.get(&key(1)).unwrap().revision, Revision(5));
}

#[test]
fn older_versions_and_repeats_are_no_ops() {
    let mut log = ObjectLog::new(LogId(1));
    assert!(
        log.stage(Position(1), Change::Upsert(object(1, 0, 5)))
            .unwrap()
    );
    log.commit(Position(1));
    assert!(
        !log.stage(Position(2), Change::Upsert(object(1, 0, 4)))
            .unwrap(),
        "older"
    );
    assert!(
        !log.stage(Position(2), Change::Upsert(object(1, 0, 5)))
            .unwrap(),
        "same"
    );
    assert!(
        !log.stage(Position(2), Change::Delete(key(9))).unwrap(),
        "absent"
    );
    assert!(
        log.stage(Position(1), Change::Delete(key(1))).is_err(),
        "at or below head"
    );
}

#[test]
fn compaction_drops_tombstones_and_keeps_what_children_still_need() {
    let mut log = ObjectLog::new(LogId(1));
    log.stage(Position(1), Change::Upsert(object(1, 0, 1)))
        .unwrap();
    log.stage(Position(1), Change::Upsert(object(2, 0, 1)))
        .unwrap();
    log.commit(Position(1));
    log.stage(Position(2), Change::Delete(key(1))).unwrap();
    log.commit(Position(2));
    log.stage(Position(3), Change::Upsert(object(2, 1, 3)))
        .unwrap();
    log.commit(Position(3));
    log.compact(Position(2));
    assert_eq!(log.floor(), Position(2));
    assert!(
        log.entry(&key(1)).is_none(),
        "tombstone at or below the floor is gone"
    );
    // key 2 was selected under label 0 before the floor and under 1 after: a child at
    // the floor may hold the label-0 version, so both stay visible to routing.
    let e = log.entry(&key(2)).unwrap();
    assert!(e.ever_selected(|m| m.labels["l"] == "0"));
    assert!(e.ever_selected(|m| m.labels["l"] == "1"));
    log.compact(Position(3));
    assert!(
        !log.entry(&key(2))
            .unwrap()
            .ever_selected(|m| m.labels["l"] == "0")
    );
}
