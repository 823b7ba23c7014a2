use proptest::prelude::*;
use strata_protocol::time::UnixMillis;
use strata_protocol::wire::{LinkRecord, LinkTransport, Role};

use super::*;
use crate::tier::testing::{cluster, link};

/// The relays of a small hierarchy: `root` above `eu` and `us`, `eu` above `paris`.
const PATHS: [&[&str]; 5] = [
    &["root"],
    &["root", "eu"],
    &["root", "us"],
    &["root", "eu", "paris"],
    &[],
];
const RELAYS: [(&str, &[&str]); 3] = [
    ("eu", &["root"]),
    ("us", &["root"]),
    ("paris", &["root", "eu"]),
];
const CLUSTERS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
/// Who reports: two replicas of `eu`, and `us`.
const FROM: [&str; 3] = ["eu#1", "eu#2", "us"];

#[derive(Debug, Clone)]
enum Change {
    /// A cluster record stored (path index, agent reaches its API server) or dropped.
    Cluster {
        from: usize,
        name: usize,
        record: Option<(usize, bool, u8)>,
    },
    /// An agent's link reported (up, lag) or dropped.
    AgentLink {
        from: usize,
        name: usize,
        record: Option<(bool, Option<u64>, bool)>,
    },
    /// A relay's link reported (up) or dropped.
    RelayLink {
        from: usize,
        relay: usize,
        record: Option<bool>,
    },
    /// This node's own links: for each relay, up, down, or not a child now.
    Own(Vec<Option<bool>>),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (
            0..FROM.len(),
            0..CLUSTERS.len(),
            proptest::option::weighted(0.8, (0..PATHS.len(), any::<bool>(), 0u8..3))
        )
            .prop_map(|(from, name, record)| Change::Cluster { from, name, record }),
        (
            0..FROM.len(),
            0..CLUSTERS.len(),
            proptest::option::weighted(
                0.8,
                (any::<bool>(), proptest::option::of(0u64..3), any::<bool>())
            )
        )
            .prop_map(|(from, name, record)| Change::AgentLink { from, name, record }),
        (
            0..FROM.len(),
            0..RELAYS.len(),
            proptest::option::weighted(0.8, any::<bool>())
        )
            .prop_map(|(from, relay, record)| Change::RelayLink {
                from,
                relay,
                record
            }),
        proptest::collection::vec(proptest::option::of(any::<bool>()), RELAYS.len())
            .prop_map(Change::Own),
    ]
}

fn apply(counts: &mut TierCounts, c: &Change) {
    match c {
        Change::Cluster { from, name, record } => {
            let record = record.map(|(path, reaches, label)| {
                let mut c = cluster(CLUSTERS[*name], PATHS[path]);
                c.labels.insert("tier".into(), label.to_string());
                if !reaches {
                    c.set_backend_unreachable(Some(("refused", UnixMillis(3))));
                }
                c
            });
            counts.set_cluster(FROM[*from], CLUSTERS[*name], record.as_ref());
        }
        Change::AgentLink { from, name, record } => {
            let record = record.map(|(up, lag, tcp)| LinkRecord {
                lag,
                transport: tcp.then_some(LinkTransport::Tcp),
                ..link(Role::Agent, &["root", "eu"], up, 1)
            });
            counts.set_reported_link(FROM[*from], CLUSTERS[*name], record.as_ref());
        }
        Change::RelayLink {
            from,
            relay,
            record,
        } => {
            let (name, path) = RELAYS[*relay];
            let record = record.map(|up| link(Role::Relay, path, up, 2));
            counts.set_reported_link(FROM[*from], name, record.as_ref());
        }
        Change::Own(own) => {
            let links = RELAYS
                .iter()
                .zip(own)
                .filter_map(|((name, path), up)| {
                    up.map(|up| (name.to_string(), link(Role::Relay, path, up, 4)))
                })
                .collect();
            counts.set_own_links(links);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the order of changes, the counts kept incrementally are those a full
    /// recount over every cluster finds.
    #[test]
    fn the_counts_kept_as_changes_arrive_equal_a_full_recount(
        changes in proptest::collection::vec(change(), 1..60)
    ) {
        let mut counts = TierCounts::default();
        for (i, c) in changes.iter().enumerate() {
            apply(&mut counts, c);
            prop_assert_eq!(counts.tally(), &counts.recount(), "after change {}: {:?}", i, c);
        }
    }
}

#[test]
fn a_relay_link_that_goes_down_makes_its_subtree_unreachable_and_back() {
    let mut counts = TierCounts::default();
    counts.set_own_links(vec![("eu".into(), link(Role::Relay, &["root"], true, 1))]);
    counts.set_reported_link(
        "eu",
        "a",
        Some(&link(Role::Agent, &["root", "eu"], true, 1)),
    );
    counts.set_cluster("eu", "a", Some(&cluster("a", &["root", "eu"])));
    let eu = |c: &TierCounts| c.tally().below.get("eu").copied().unwrap_or_default();
    assert_eq!(eu(&counts).available, 1);
    counts.set_own_links(vec![("eu".into(), link(Role::Relay, &["root"], false, 2))]);
    assert_eq!(eu(&counts).unreachable, 1);
    assert_eq!(counts.tally().total.unreachable, 1);
    counts.set_own_links(vec![("eu".into(), link(Role::Relay, &["root"], true, 3))]);
    assert_eq!(eu(&counts).available, 1);
    counts.set_cluster("eu", "a", None);
    assert_eq!(counts.tally(), &Tally::default());
}

#[test]
fn the_reports_feed_the_counts_as_they_are_stored_dropped_and_restored() {
    use crate::tier::reports::SubtreeReports;
    use crate::tier::testing::{cluster_report, link_report};
    use strata_protocol::wire::{Report, ReportKey, ReportValue};

    let mut reports = SubtreeReports::new();
    reports.accept(
        "eu",
        link_report("a", link(Role::Agent, &["root", "eu"], true, 1)),
    );
    reports.accept(
        "eu",
        link_report("b", link(Role::Agent, &["root", "eu"], false, 1)),
    );
    reports.accept("eu", cluster_report("a", &["root", "eu"]));
    reports.accept("eu", cluster_report("b", &["root", "eu"]));
    let own = || vec![("eu".to_owned(), link(Role::Relay, &["root"], true, 1))];
    let tally = reports.tier_counts(own()).tally().clone();
    assert_eq!(tally.total.available, 1);
    assert_eq!(tally.total.unreachable, 1);
    assert_eq!(tally.own.get(&Some("eu".to_owned())), Some(&2));
    // A store's contents make the same counts when the node starts again.
    let mut restored = SubtreeReports::restore(reports.iter().map(|(s, v)| (s.clone(), v.clone())));
    assert_eq!(restored.tier_counts(own()).tally(), &tally);
    // A cluster that left is counted no more; a link removed leaves its cluster unknown.
    reports.accept(
        "eu",
        Report {
            key: ReportKey::Cluster { name: "b".into() },
            value: ReportValue::Removed,
        },
    );
    reports.accept(
        "eu",
        Report {
            key: ReportKey::Link { node: "a".into() },
            value: ReportValue::Removed,
        },
    );
    let counts = reports.tier_counts(own());
    assert_eq!(counts.tally().total.clusters, 1);
    assert_eq!(counts.tally().total.unreachable, 1);
    assert_eq!(counts.tally(), &counts.recount());
}
