//! A model-based property test of the root's watch history: random writes (create,
//! update, label change, delete over a few keys, some in one revision) go through the
//! root's own write path ([`NodeCore::apply`]); random watches (from random revisions,
//! with random label selectors, through the API's own selector parser) must see
//! exactly what a simple model of kube-apiserver's watch semantics says: one event per
//! write the watch selects before or after it, in order, typed by whether the watch
//! selected the object before and after, and 410 below the history's floor.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use strata_manifest::selector::LabelQuery;
use strata_protocol::model::{
    Body, ContentHash, Labels, Object, ObjectKey, ObjectKeyParts, ObjectMeta, Revision, Space,
};
use strata_protocol::wire::Change;

use super::history::{EventType, WatchHistory};
use super::testing;

const KEYS: [&str; 3] = ["a", "b", "c"];
const SELECTORS: [&str; 6] = ["", "app=x", "app!=x", "app in (x,y)", "!app", "app"];

/// How many cases ran, for the report.
static CASES: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone)]
enum Write {
    /// Create or update `KEYS[k]` with the label `app` (none for `None`).
    Put(usize, Option<&'static str>),
    Delete(usize),
}

fn write() -> impl Strategy<Value = Write> {
    let label = prop_oneof![Just(None), Just(Some("x")), Just(Some("y"))];
    prop_oneof![
        3 => (0..KEYS.len(), label).prop_map(|(k, l)| Write::Put(k, l)),
        1 => (0..KEYS.len()).prop_map(Write::Delete),
    ]
}

fn key(i: usize) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: Space("default".into()),
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("ns".into()),
        name: KEYS[i].into(),
    })
}

fn labels(app: Option<&str>) -> Labels {
    app.map(|v| [("app".to_owned(), v.to_owned())].into())
        .unwrap_or_default()
}

/// The model: the state after each revision (index 0: empty), and which keys each
/// revision wrote.
#[derive(Debug, Default)]
struct Model {
    states: Vec<BTreeMap<usize, (Labels, u64)>>,
    wrote: Vec<Vec<usize>>,
}

/// What a model watch expects: type, revision, key and the labels of the object sent.
type Expected = (EventType, u64, usize, Labels);

impl Model {
    fn head(&self) -> u64 {
        self.states.len() as u64 - 1
    }

    /// kube-apiserver's watch from `rv` with `sel`: for every write after `rv`, in
    /// order, the object as the watch saw it before and after.
    fn watch(&self, rv: u64, sel: &LabelQuery) -> Vec<Expected> {
        let mut out = Vec::new();
        for r in rv + 1..=self.head() {
            let (before, after) = (&self.states[r as usize - 1], &self.states[r as usize]);
            for &k in &self.wrote[r as usize] {
                let b = before.get(&k).filter(|(l, _)| sel.matches(l));
                let a = after.get(&k).filter(|(l, _)| sel.matches(l));
                match (b, a) {
                    (None, Some((l, _))) => out.push((EventType::Added, r, k, l.clone())),
                    (Some(_), Some((l, _))) => out.push((EventType::Modified, r, k, l.clone())),
                    (Some((l, _)), None) => out.push((EventType::Deleted, r, k, l.clone())),
                    (None, None) => {}
                }
            }
        }
        out
    }
}

fn run(batches: Vec<Vec<Write>>, watches: Vec<(u64, usize)>, capacity: usize) {
    let mut core = testing::root();
    core.set_watch_events(capacity);
    let mut model = Model {
        states: vec![BTreeMap::new()],
        wrote: vec![Vec::new()],
    };
    let mut body = 0u64;
    for batch in batches {
        let rev = core.log().head().0 + 1;
        let mut state = model.states.last().cloned().unwrap_or_default();
        let mut changes = Vec::new();
        let mut wrote = Vec::new();
        for w in batch {
            let k = match &w {
                Write::Put(k, _) | Write::Delete(k) => *k,
            };
            if wrote.contains(&k) {
                continue; // one write per key and revision, as the API's writes
            }
            match w {
                Write::Put(k, app) => {
                    body += 1;
                    changes.push(Change::Upsert(Object {
                        meta: Arc::new(ObjectMeta {
                            key: key(k),
                            labels: labels(app),
                        }),
                        revision: Revision(rev),
                        hash: ContentHash([(body % 251) as u8; 32]),
                        body: Body::from(format!("{{\"n\":{body}}}").into_bytes()),
                    }));
                    state.insert(k, (labels(app), rev));
                    wrote.push(k);
                }
                Write::Delete(k) if state.contains_key(&k) => {
                    changes.push(Change::Delete(key(k)));
                    state.remove(&k);
                    wrote.push(k);
                }
                Write::Delete(_) => {}
            }
        }
        if changes.is_empty() {
            continue;
        }
        let pos = core.apply(changes).expect("applied");
        assert_eq!(pos.0, rev);
        // The history holds the API's writes in the order they were staged; the
        // model the same order.
        model.states.push(state);
        model.wrote.push(wrote);
    }
    let head = model.head();
    assert_eq!(core.log().head().0, head);
    let history: &WatchHistory = core.history();
    // Every event is one write: the floor is the revision below the oldest kept.
    let held: u64 = model.wrote.iter().map(|w| w.len() as u64).sum();
    for (rv, s) in watches {
        let rv = rv % (head + 1);
        let sel = LabelQuery::parse(SELECTORS[s]).expect("a valid selector");
        let got = history.events_after(rv, |o| sel.matches(&o.meta.labels));
        if held as usize <= capacity {
            assert_eq!(history.floor(), 0);
        }
        let Ok(got) = got else {
            assert!(rv < history.floor(), "410 for {rv} above the floor");
            continue;
        };
        let got: Vec<Expected> = got
            .iter()
            .map(|e| {
                let k = KEYS
                    .iter()
                    .position(|n| *n == e.object.key().name)
                    .expect("a model key");
                (e.kind, e.revision, k, e.object.meta.labels.clone())
            })
            .collect();
        let want = model.watch(rv, &sel);
        assert_eq!(
            got, want,
            "watch from {rv} with {:?}; writes {:?}",
            SELECTORS[s], model.wrote
        );
        // An informer that listed at `rv` and applied the events holds the selected
        // state at the head.
        let mut cache: BTreeMap<usize, Labels> = model.states[rv as usize]
            .iter()
            .filter(|(_, (l, _))| sel.matches(l))
            .map(|(k, (l, _))| (*k, l.clone()))
            .collect();
        for (kind, _, k, l) in got {
            match kind {
                EventType::Added => assert!(cache.insert(k, l).is_none()),
                EventType::Modified => assert!(cache.insert(k, l).is_some()),
                EventType::Deleted => assert!(cache.remove(&k).is_some()),
            }
        }
        let at_head: BTreeMap<usize, Labels> = model.states[head as usize]
            .iter()
            .filter(|(_, (l, _))| sel.matches(l))
            .map(|(k, (l, _))| (*k, l.clone()))
            .collect();
        assert_eq!(cache, at_head);
        // A list at `rv` from the history (the state now, with later writes undone)
        // is the model's state at `rv`.
        let undone = history.state_at(rv).expect("in the window");
        let mut listed: BTreeMap<usize, Labels> = BTreeMap::new();
        for i in 0..KEYS.len() {
            let k = key(i);
            let o = match undone.get(&k) {
                Some(o) => o.cloned(),
                None => core.log().get(&k).cloned(),
            };
            if let Some(o) = o {
                listed.insert(i, o.meta.labels.clone());
            }
        }
        let want: BTreeMap<usize, Labels> = model.states[rv as usize]
            .iter()
            .map(|(k, (l, _))| (*k, l.clone()))
            .collect();
        assert_eq!(listed, want);
    }
    CASES.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn watches_replay_every_write_as_kube_apiserver() {
    let cases = 256;
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
    let strategy = (
        prop::collection::vec(prop::collection::vec(write(), 1..3), 0..40),
        prop::collection::vec((0u64..64, 0..SELECTORS.len()), 1..12),
        prop_oneof![Just(10_000usize), 3usize..30],
    );
    let result = runner.run(&strategy, |(batches, watches, capacity)| {
        run(batches, watches, capacity);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let ran = CASES.load(Ordering::Relaxed);
    println!("watch history property: {ran} cases passed");
    assert!(ran >= u64::from(cases));
}

/// The root's driver wakes it when the oldest write passes the retention, and the
/// history then lets it go: a watch from before it lists again, one from the head
/// still starts.
#[test]
fn the_root_lets_writes_go_once_they_pass_the_retention() {
    use super::history::WATCH_RETENTION;
    use strata_protocol::time::Instant;
    let mut core = testing::root();
    let put = |k: usize| {
        Change::Upsert(Object {
            meta: Arc::new(ObjectMeta {
                key: key(k),
                labels: labels(Some("x")),
            }),
            revision: Revision(1),
            hash: ContentHash([k as u8; 32]),
            body: Body::from(b"{}".to_vec()),
        })
    };
    let first = core.apply(vec![put(0), put(1)]).expect("applied");
    assert_eq!(core.history().len(), 2);
    let expiry = Instant::ZERO + WATCH_RETENTION;
    assert!(
        core.poll_timeout().is_some_and(|t| t <= expiry),
        "the core asks to be woken by the time the writes expire"
    );
    core.handle_timeout(expiry);
    assert_eq!(core.history().len(), 2, "kept for exactly the retention");
    core.handle_timeout(expiry + std::time::Duration::from_secs(1));
    assert_eq!(core.history().len(), 0);
    assert_eq!(core.history().floor(), first.0);
    assert!(core.history().events_after(first.0 - 1, |_| true).is_err());
    assert!(core.history().events_after(first.0, |_| true).is_ok());
}
