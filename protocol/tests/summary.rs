//! The summary algebra's laws, and summaries of known inputs.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use strata_protocol::model::{Health, Labels, Revision, Status};
use strata_protocol::summary::{ERROR_SAMPLES, ErrorSample, Summary};
use strata_protocol::time::UnixMillis;
use strata_protocol::user_summary::{SummarySpec, show_all};

fn health() -> impl Strategy<Value = Health> {
    prop::sample::select(Health::ALL.to_vec())
}

fn status() -> impl Strategy<Value = Status> {
    (
        health(),
        0u64..20,
        prop::option::of(prop::sample::select(vec![
            "ImagePullBackOff",
            "CrashLoopBackOff",
            "OOMKilled",
        ])),
        prop::collection::btree_map(
            prop::sample::select(vec!["ready", "replicas", "restarts"]),
            -5i64..100,
            0..3,
        ),
        0u64..50,
    )
        .prop_map(|(health, rev, message, numbers, at)| Status {
            health,
            revision: Revision(rev),
            observed_generation: None,
            message: message.map(str::to_owned),
            numbers: numbers
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            status: Vec::new(),
            observed_at: UnixMillis(at),
        })
}

/// Reports of distinct clusters.
fn reports() -> impl Strategy<Value = Vec<(String, Status)>> {
    prop::collection::vec(status(), 0..24).prop_map(|statuses| {
        statuses
            .into_iter()
            .enumerate()
            .map(|(i, s)| (format!("cluster-{i:02}"), s))
            .collect()
    })
}

fn summary_of(reports: &[(String, Status)]) -> Summary {
    reports.iter().fold(Summary::default(), |acc, (c, s)| {
        acc.merged(&Summary::of_status(c, s))
    })
}

fn any_summary() -> impl Strategy<Value = Summary> {
    (reports(), 0u64..5).prop_map(|(r, extra)| summary_of(&r).merged(&Summary::expected(extra)))
}

proptest! {
    #[test]
    fn merge_is_commutative(a in any_summary(), b in any_summary()) {
        prop_assert_eq!(a.clone().merged(&b), b.merged(&a));
    }

    #[test]
    fn merge_is_associative(a in any_summary(), b in any_summary(), c in any_summary()) {
        prop_assert_eq!(a.clone().merged(&b).merged(&c), a.merged(&b.merged(&c)));
    }

    #[test]
    fn the_empty_summary_is_the_identity(a in any_summary()) {
        prop_assert_eq!(a.clone().merged(&Summary::default()), a.clone());
        prop_assert_eq!(Summary::default().merged(&a), a);
    }

    /// However the clusters are split among tiers and merged back, the result is the
    /// summary of all of them.
    #[test]
    fn merging_parts_equals_summarizing_the_union(
        all in reports(),
        groups in prop::collection::vec(0usize..4, 24),
        order in prop::collection::vec(any::<prop::sample::Index>(), 4),
    ) {
        let mut parts: Vec<Vec<(String, Status)>> = vec![Vec::new(); 4];
        for (i, r) in all.iter().enumerate() {
            parts[groups[i]].push(r.clone());
        }
        let mut summaries: Vec<Summary> = parts.iter().map(|p| summary_of(p)).collect();
        // Merge in a shuffled order, nesting differently from a left fold.
        let mut merged = Summary::default();
        while !summaries.is_empty() {
            let i = order[summaries.len() - 1].index(summaries.len());
            let s = summaries.swap_remove(i);
            merged = s.merged(&merged);
        }
        let whole = summary_of(&all);
        prop_assert_eq!(&merged, &whole);
        prop_assert_eq!(whole.health.total(), whole.reporting);
        prop_assert_eq!(whole.reporting, all.len() as u64);
    }

    /// Adding statuses one by one gives what merging their one-cluster summaries
    /// gives, from any summary (the tiers add thousands without building those).
    #[test]
    fn adding_a_status_equals_merging_its_summary(start in any_summary(), all in reports()) {
        let mut added = start.clone();
        let mut merged = start;
        for (cluster, status) in &all {
            added.add_status(cluster, status);
            merged.merge(&Summary::of_status(cluster, status));
        }
        prop_assert_eq!(added, merged);
    }

    /// The samples are exactly the first k errors of the full list in sample order.
    #[test]
    fn error_samples_are_the_top_k_of_all_errors(all in reports()) {
        let mut every: Vec<ErrorSample> = all
            .iter()
            .filter(|(_, s)| matches!(s.health, Health::Degraded | Health::Failed))
            .filter_map(|(c, s)| s.message.as_ref().map(|m| ErrorSample {
                cluster: c.clone(),
                health: s.health,
                message: m.clone(),
                observed_at: s.observed_at,
            }))
            .collect();
        every.sort_by(ErrorSample::order);
        let s = summary_of(&all);
        prop_assert_eq!(s.errors, every.len() as u64);
        every.truncate(ERROR_SAMPLES);
        prop_assert_eq!(s.error_samples, every);
    }
}

#[test]
fn three_clusters_one_failed() {
    let ok = |ready| Status {
        health: Health::Available,
        revision: Revision(7),
        observed_generation: Some(2),
        message: None,
        numbers: BTreeMap::from([("readyReplicas".to_owned(), ready)]),
        status: Vec::new(),
        observed_at: UnixMillis(1_000),
    };
    let failed = Status {
        health: Health::Failed,
        revision: Revision(6),
        message: Some("ImagePullBackOff".into()),
        numbers: BTreeMap::from([("readyReplicas".to_owned(), 0)]),
        observed_at: UnixMillis(400),
        ..ok(0)
    };
    let s = Summary::expected(1)
        .merged(&Summary::of_status("a", &ok(3)))
        .merged(&Summary::of_status("b", &ok(2)))
        .merged(&Summary::of_status("c", &failed));
    assert_eq!(s.expected, 4);
    assert_eq!(s.reporting, 3);
    assert_eq!(s.silent(), 1);
    assert_eq!((s.health.available, s.health.failed), (2, 1));
    let ready = s.numbers["readyReplicas"];
    assert_eq!((ready.min, ready.max, ready.sum, ready.count), (0, 3, 5, 3));
    assert_eq!(s.errors, 1);
    assert_eq!(s.error_samples[0].cluster, "c");
    assert_eq!(s.error_samples[0].message, "ImagePullBackOff");
    assert_eq!(s.oldest_report, Some(UnixMillis(400)));
    assert_eq!(s.newest_report, Some(UnixMillis(1_000)));
    assert_eq!(
        (s.min_revision, s.max_revision),
        (Some(Revision(6)), Some(Revision(7)))
    );
}

#[test]
fn samples_keep_the_most_recent_errors() {
    let err = |at| Status {
        health: Health::Degraded,
        revision: Revision(1),
        observed_generation: None,
        message: Some(format!("slow at {at}")),
        numbers: BTreeMap::new(),
        status: Vec::new(),
        observed_at: UnixMillis(at),
    };
    let s: Summary = (0..10u64)
        .map(|i| Summary::of_status(&format!("c{i}"), &err(i)))
        .collect::<Vec<_>>()
        .iter()
        .collect();
    assert_eq!(s.errors, 10);
    let times: Vec<u64> = s.error_samples.iter().map(|e| e.observed_at.0).collect();
    assert_eq!(times, [9, 8, 7, 6, 5]);
}

#[test]
fn a_single_expected_cluster_keeps_its_exact_status_up_the_tiers() {
    let status = Status {
        health: Health::Available,
        revision: Revision(3),
        observed_generation: Some(1),
        message: None,
        numbers: BTreeMap::new(),
        status: br#"{"readyReplicas":2}"#.to_vec(),
        observed_at: UnixMillis(5),
    };
    let site = Summary::of_status("store-1", &status);
    // A region adds its silent-but-unselected nothing, the root merges the region.
    let root = Summary::default().merged(&site.clone().merged(&Summary::expected(0)));
    let exact = root
        .exact
        .clone()
        .expect("singleton keeps its exact status");
    assert_eq!(exact.cluster, "store-1");
    assert_eq!(exact.status, status);
    // A second expected cluster makes it a summary like any other.
    assert!(root.merged(&Summary::expected(1)).exact.is_none());
}

/// User summaries (`statusSummary`): one cluster's object, its tier label, and what it
/// reports.
#[derive(Debug, Clone)]
struct Edge {
    ready: Option<i64>,
    images: Vec<&'static str>,
    up: Option<bool>,
    tier: &'static str,
}

fn edges() -> impl Strategy<Value = Vec<Edge>> {
    let edge = (
        prop::option::of(-3i64..50),
        prop::collection::vec(prop::sample::select(vec!["pos:1", "pos:2", "a/b%2F"]), 0..3),
        prop::option::of(any::<bool>()),
        prop::sample::select(vec!["gold", "basic", ""]),
    )
        .prop_map(|(ready, images, up, tier)| Edge {
            ready,
            images,
            up,
            tier,
        });
    prop::collection::vec(edge, 0..16)
}

fn user_specs() -> Vec<SummarySpec> {
    serde_json::from_value(serde_json::json!([
        { "name": "ready", "path": ".status.readyReplicas", "op": "sum" },
        { "name": "low", "path": ".status.readyReplicas", "op": "min" },
        { "name": "high", "path": ".status.readyReplicas", "op": "max" },
        { "name": "images", "path": ".spec.containers[*].image", "op": "countBy", "top": 2 },
        { "name": "containers", "path": ".spec.containers[*]", "op": "count" },
        { "name": "anyUp", "path": ".status.up", "op": "any" },
        { "name": "allUp", "path": ".status.up", "op": "all" },
        { "name": "readyByTier", "path": ".status.readyReplicas", "op": "sum", "groupBy": "tier" },
    ]))
    .unwrap()
}

fn edge_status(e: &Edge) -> Status {
    let mut doc = serde_json::json!({
        "spec": { "containers": e.images.iter().map(|i| serde_json::json!({ "image": i })).collect::<Vec<_>>() },
        "status": {},
    });
    if let Some(r) = e.ready {
        doc["status"]["readyReplicas"] = r.into();
    }
    if let Some(u) = e.up {
        doc["status"]["up"] = u.into();
    }
    let labels = if e.tier.is_empty() {
        Labels::new()
    } else {
        [("tier".to_owned(), e.tier.to_owned())].into()
    };
    let mut numbers = BTreeMap::from([("readyReplicas".to_owned(), 1)]);
    for s in user_specs() {
        numbers.extend(s.numbers("pos", &doc, &labels));
    }
    Status {
        health: Health::Available,
        revision: Revision(1),
        observed_generation: None,
        message: None,
        numbers,
        status: Vec::new(),
        observed_at: UnixMillis(1),
    }
}

proptest! {
    /// However the clusters are split among tiers and merged, the user summaries shown
    /// at the root are those computed directly over every cluster's object.
    #[test]
    fn user_summaries_merged_in_any_grouping_equal_the_direct_computation(
        all in edges(),
        groups in prop::collection::vec(0usize..3, 16),
    ) {
        let mut parts = vec![Summary::default(); 3];
        for (i, e) in all.iter().enumerate() {
            parts[groups[i]].merge(&Summary::of_status(&format!("c{i}"), &edge_status(e)));
        }
        let merged = parts[2].clone().merged(&parts[0].clone().merged(&parts[1]));
        let shown = show_all(&user_specs(), "pos", &merged.numbers);

        let ready: Vec<i64> = all.iter().filter_map(|e| e.ready).collect();
        let ups: Vec<bool> = all.iter().filter_map(|e| e.up).collect();
        let mut hist: BTreeMap<&str, i64> = BTreeMap::new();
        for i in all.iter().flat_map(|e| e.images.iter()) {
            *hist.entry(i).or_default() += 1;
        }
        let mut top: Vec<(&str, i64)> = hist.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        top.truncate(2);
        let mut by_tier: BTreeMap<&str, i64> = BTreeMap::new();
        for e in all.iter().filter(|e| e.ready.is_some()) {
            *by_tier.entry(e.tier).or_default() += e.ready.unwrap_or(0);
        }
        let expected = serde_json::json!({
            "ready": ready.iter().sum::<i64>(),
            "low": ready.iter().min(),
            "high": ready.iter().max(),
            "images": top.into_iter().map(|(k, v)| (k.to_owned(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "containers": all.iter().map(|e| e.images.len() as i64).sum::<i64>(),
            "anyUp": if ups.is_empty() { serde_json::Value::Null } else { ups.iter().any(|u| *u).into() },
            "allUp": if ups.is_empty() { serde_json::Value::Null } else { ups.iter().all(|u| *u).into() },
            "readyByTier": by_tier,
        });
        prop_assert_eq!(shown, expected);
        // The standard status fields are untouched by user entries.
        prop_assert_eq!(merged.numbers.get("readyReplicas").map(|n| n.sum), (!all.is_empty()).then_some(all.len() as i128));
    }
}

fn at(health: Health, rev: u64) -> Status {
    Status {
        health,
        revision: Revision(rev),
        observed_generation: None,
        message: None,
        numbers: BTreeMap::new(),
        status: Vec::new(),
        observed_at: UnixMillis(rev),
    }
}

/// Three clusters expected, with the statuses given (the rest silent).
fn of_three(statuses: &[Status]) -> Summary {
    statuses.iter().enumerate().fold(
        Summary::expected(3 - statuses.len() as u64),
        |acc, (i, s)| acc.merged(&Summary::of_status(&format!("c{i}"), s)),
    )
}

#[test]
fn a_rollout_is_progress_until_it_settles_and_bad_news_never_waits() {
    use Health::{Applied, Available, Degraded, Failed, Progressing};
    let old = of_three(&[at(Available, 1), at(Available, 1), at(Available, 1)]);
    assert!(old.is_settled());
    // Leaving a settled state is progress, as are the steps after it.
    let started = of_three(&[at(Applied, 2), at(Available, 1), at(Available, 1)]);
    assert!(!started.is_settled());
    assert!(!started.is_news_after(&old));
    let halfway = of_three(&[at(Available, 2), at(Progressing, 2), at(Available, 1)]);
    assert!(!halfway.is_settled(), "two revisions, one progressing");
    assert!(!halfway.is_news_after(&started));
    let all_new = of_three(&[at(Available, 2), at(Available, 2), at(Available, 2)]);
    assert!(all_new.is_settled());
    assert!(all_new.is_news_after(&halfway));
    // A degraded or failed cluster settles too: nothing more is on its way.
    assert!(of_three(&[at(Available, 2), at(Degraded, 2), at(Failed, 2)]).is_settled());
    // Worse news goes at once, settled or not.
    let failing = of_three(&[at(Failed, 2), at(Progressing, 2), at(Available, 1)]);
    assert!(!failing.is_settled());
    assert!(failing.is_news_after(&halfway));
    // A cluster not reporting keeps it unsettled; one going silent is news.
    let silent = of_three(&[at(Available, 2), at(Progressing, 2)]);
    assert!(!silent.is_settled());
    assert!(silent.is_news_after(&halfway));
    // A change of the clusters expected is news.
    let grown = halfway.clone().merged(&Summary::expected(1));
    assert!(grown.is_news_after(&halfway));
}
