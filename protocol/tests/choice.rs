//! The cluster choice: stable (one cluster added or removed changes at most one
//! decision; the same inputs give the same output, whatever their order), `count` and
//! `spreadBy` honoured, `prefer` first, capacity first-admitted-first-kept, and
//! tolerations matching Kubernetes' table of cases.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use strata_protocol::choice::{
    Candidate, Exclusion, Room, Seconds, Taint, TaintEffect, Toleration, TolerationOperator, plan,
};
use strata_protocol::model::{Labels, Space};
use strata_protocol::placement::{ClusterSelector, MovePolicy, Placement};
use strata_protocol::selector::LabelSelector;
use strata_protocol::time::UnixMillis;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: labels(pairs),
        match_expressions: vec![],
    }
}

fn placement(clusters: ClusterSelector) -> Placement {
    Placement {
        space: Space::default_space(),
        name: "app".into(),
        objects: vec![],
        clusters,
        upsync: vec![],
        moves: MovePolicy::default(),
        customize: vec![],
        status_summary: vec![],
        rollout: None,
    }
}

fn counted(count: u32, spread_by: Option<&str>) -> Placement {
    placement(ClusterSelector {
        selector: selector(&[("role", "pos")]),
        count: Some(count),
        spread_by: spread_by.map(str::to_owned),
        ..ClusterSelector::default()
    })
}

fn cluster(name: &str, region: &str) -> Candidate {
    Candidate {
        name: name.into(),
        labels: labels(&[("role", "pos"), ("region", region)]),
        taints: vec![],
        unreachable_since: None,
    }
}

fn fleet(n: usize, regions: usize) -> Vec<Candidate> {
    (0..n)
        .map(|i| cluster(&format!("c{i:03}"), &format!("r{}", i % regions.max(1))))
        .collect()
}

fn choose(p: &Placement, cs: &[Candidate], previous: &BTreeSet<String>) -> BTreeSet<String> {
    plan(p, cs, previous, UnixMillis(0), &mut Room::new()).chosen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Planning again with its own result changes nothing; and the first choice does
    /// not depend on the order clusters are listed in.
    #[test]
    fn the_same_inputs_give_the_same_choice(n in 1usize..40, count in 1u32..12, regions in 1usize..5, spread in any::<bool>(), seed in any::<u64>()) {
        let p = counted(count, spread.then_some("region"));
        let cs = fleet(n, regions);
        let first = choose(&p, &cs, &BTreeSet::new());
        prop_assert_eq!(&choose(&p, &cs, &first), &first);
        let mut shuffled = cs.clone();
        let k = shuffled.len();
        shuffled.rotate_left((seed as usize) % k);
        shuffled.reverse();
        prop_assert_eq!(choose(&p, &shuffled, &BTreeSet::new()), first);
    }

    /// One cluster added changes at most one decision (it fills a vacancy or nothing);
    /// one removed changes at most one other (its replacement).
    #[test]
    fn one_cluster_more_or_less_changes_at_most_one_decision(n in 2usize..40, count in 1u32..12) {
        let p = counted(count, None);
        let cs = fleet(n, 3);
        let before = choose(&p, &cs, &BTreeSet::new());

        let mut more = cs.clone();
        more.push(cluster("new", "r0"));
        let after = choose(&p, &more, &before);
        prop_assert!(after.symmetric_difference(&before).count() <= 1, "{before:?} -> {after:?}");

        let gone = before.iter().next().cloned().unwrap();
        let fewer: Vec<Candidate> = cs.iter().filter(|c| c.name != gone).cloned().collect();
        let after = choose(&p, &fewer, &before);
        let kept: BTreeSet<String> = before.iter().filter(|c| **c != gone).cloned().collect();
        prop_assert!(kept.is_subset(&after));
        prop_assert!(after.difference(&kept).count() <= 1, "{before:?} -> {after:?}");
    }

    /// `count` is honoured, and `spreadBy` spreads it evenly (±1) over the label's
    /// values, as far as each value has clusters.
    #[test]
    fn count_and_spread_are_honoured(n in 1usize..60, count in 1u32..20, regions in 1usize..6) {
        let cs = fleet(n, regions);
        let chosen = choose(&counted(count, None), &cs, &BTreeSet::new());
        prop_assert_eq!(chosen.len(), (count as usize).min(n));

        let chosen = choose(&counted(count, Some("region")), &cs, &BTreeSet::new());
        prop_assert_eq!(chosen.len(), (count as usize).min(n));
        let mut per: BTreeMap<String, usize> = BTreeMap::new();
        let mut size: BTreeMap<String, usize> = BTreeMap::new();
        for c in &cs {
            *size.entry(c.labels["region"].clone()).or_default() += 1;
            if chosen.contains(&c.name) {
                *per.entry(c.labels["region"].clone()).or_default() += 1;
            }
        }
        // Every region not full holds at least as many as any other region minus one.
        let most = per.values().copied().max().unwrap_or(0);
        for (region, total) in &size {
            let got = per.get(region).copied().unwrap_or(0);
            prop_assert!(got == *total || got + 1 >= most, "{per:?} of {size:?}");
        }
    }
}

#[test]
fn preferred_clusters_are_chosen_first() {
    let mut cs = fleet(10, 2);
    cs[7].labels.insert("tier".into(), "gold".into());
    cs[3].labels.insert("tier".into(), "gold".into());
    let p = placement(ClusterSelector {
        selector: selector(&[("role", "pos")]),
        count: Some(2),
        prefer: vec![selector(&[("tier", "gold")])],
        ..ClusterSelector::default()
    });
    let chosen = choose(&p, &cs, &BTreeSet::new());
    assert_eq!(chosen, ["c003".to_owned(), "c007".to_owned()].into());
}

#[test]
fn exclusions_say_why() {
    let mut cs = fleet(4, 1);
    cs[0].taints.push(Taint {
        key: "maintenance".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
        time_added: None,
    });
    let mut room: Room = [("c001".to_owned(), 0)].into();
    let p = counted(1, None);
    let out = plan(&p, &cs, &BTreeSet::new(), UnixMillis(0), &mut room);
    assert_eq!(out.matching, 4);
    assert_eq!(out.chosen.len(), 1);
    assert_eq!(
        out.excluded["c000"],
        Exclusion::Tainted {
            key: "maintenance".into(),
            effect: TaintEffect::NoSchedule
        }
    );
    assert_eq!(out.excluded["c001"], Exclusion::Capacity);
    assert!(
        out.excluded
            .values()
            .filter(|e| **e == Exclusion::Count)
            .count()
            == 1
    );
}

#[test]
fn capacity_keeps_the_first_admitted() {
    // Capacity 1, already taken by another placement (room 0): a new placement
    // without a count is refused there; the one holding it keeps it.
    let cs = fleet(2, 1);
    let p = placement(ClusterSelector {
        selector: selector(&[("role", "pos")]),
        ..ClusterSelector::default()
    });
    let mut room: Room = [("c000".to_owned(), 0)].into();
    let fresh = plan(&p, &cs, &BTreeSet::new(), UnixMillis(0), &mut room);
    assert_eq!(fresh.chosen, ["c001".to_owned()].into());
    assert_eq!(fresh.excluded["c000"], Exclusion::Capacity);
    let held: BTreeSet<String> = ["c000".to_owned(), "c001".to_owned()].into();
    let mut room: Room = [("c000".to_owned(), 0)].into();
    let kept = plan(&p, &cs, &held, UnixMillis(0), &mut room);
    assert_eq!(kept.chosen, held);
}

#[test]
fn no_schedule_keeps_what_was_chosen_and_no_execute_moves_off() {
    let mut cs = fleet(3, 1);
    let p = counted(1, None);
    let first = choose(&p, &cs, &BTreeSet::new());
    let on = first.iter().next().unwrap().clone();
    let c = cs.iter_mut().find(|c| c.name == on).unwrap();
    c.taints.push(Taint {
        key: "cordoned".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
        time_added: None,
    });
    assert_eq!(choose(&p, &cs, &first), first, "cordoned: stays");
    let c = cs.iter_mut().find(|c| c.name == on).unwrap();
    c.taints[0].effect = TaintEffect::NoExecute;
    c.taints[0].time_added = Some(1_000);
    let moved = choose(&p, &cs, &first);
    assert_eq!(moved.len(), 1);
    assert!(!moved.contains(&on), "drained: moves off");

    // Tolerated for 60 s from the taint: stays until then.
    let mut tolerant = p.clone();
    tolerant.clusters.tolerations.push(Toleration {
        key: "cordoned".into(),
        operator: TolerationOperator::Exists,
        effect: Some(TaintEffect::NoExecute),
        toleration_seconds: Some(60),
        ..Toleration::default()
    });
    let at = |ms| plan(&tolerant, &cs, &first, UnixMillis(ms), &mut Room::new()).chosen;
    assert_eq!(at(60_999), first);
    assert!(!at(61_000).contains(&on));
}

#[test]
fn failover_replaces_a_cluster_unreachable_too_long() {
    let mut cs = fleet(3, 1);
    let mut p = counted(1, None);
    p.clusters.failover_after = Some(Seconds(600));
    let first = choose(&p, &cs, &BTreeSet::new());
    let on = first.iter().next().unwrap().clone();
    cs.iter_mut()
        .find(|c| c.name == on)
        .unwrap()
        .unreachable_since = Some(UnixMillis(1_000));
    let at = |ms| plan(&p, &cs, &first, UnixMillis(ms), &mut Room::new());
    assert_eq!(at(600_999).chosen, first);
    let later = at(601_000);
    assert!(!later.chosen.contains(&on));
    assert_eq!(later.chosen.len(), 1);
    assert_eq!(later.excluded[&on], Exclusion::Unreachable);
}

/// Kubernetes' toleration semantics, case by case (from `ToleratesTaint` and the
/// taint/toleration documentation).
#[test]
fn tolerations_match_as_kubernetes_does() {
    let taint = |key: &str, value: &str, effect| Taint {
        key: key.into(),
        value: value.into(),
        effect,
        time_added: None,
    };
    let tol = |key: &str, op, value: &str, effect| Toleration {
        key: key.into(),
        operator: op,
        value: value.into(),
        effect,
        toleration_seconds: None,
    };
    use TaintEffect::*;
    use TolerationOperator::*;
    let cases = [
        // (toleration, taint, tolerated)
        (
            tol("k", Equal, "v", Some(NoSchedule)),
            taint("k", "v", NoSchedule),
            true,
        ),
        (
            tol("k", Equal, "v", Some(NoSchedule)),
            taint("k", "w", NoSchedule),
            false,
        ),
        (
            tol("k", Equal, "v", Some(NoSchedule)),
            taint("k", "v", NoExecute),
            false,
        ),
        (tol("k", Equal, "v", None), taint("k", "v", NoExecute), true),
        (
            tol("k", Exists, "", None),
            taint("k", "anything", PreferNoSchedule),
            true,
        ),
        (
            tol("k", Exists, "", Some(NoExecute)),
            taint("k", "", NoSchedule),
            false,
        ),
        (
            tol("", Exists, "", None),
            taint("any", "thing", NoExecute),
            true,
        ),
        (
            tol("", Exists, "", Some(NoSchedule)),
            taint("any", "", NoExecute),
            false,
        ),
        (
            tol("other", Exists, "", None),
            taint("k", "", NoSchedule),
            false,
        ),
        (tol("k", Equal, "", None), taint("k", "", NoSchedule), true),
    ];
    for (i, (t, x, want)) in cases.iter().enumerate() {
        assert_eq!(t.tolerates(x), *want, "case {i}: {t:?} vs {x:?}");
    }
    assert!(tol("", Equal, "", None).validate().is_err());
    assert!(tol("k", Exists, "v", None).validate().is_err());
    let mut timed = tol("k", Exists, "", Some(NoSchedule));
    timed.toleration_seconds = Some(5);
    assert!(timed.validate().is_err());
}
