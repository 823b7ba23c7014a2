use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::model::Space;
use crate::rollout::{Gate, OnFailure, RolloutSpec, Wave};
use crate::selector::LabelSelector;

fn candidates(n: usize) -> Vec<WaveCandidate> {
    (0..n)
        .map(|i| WaveCandidate {
            name: format!("c{i:04}"),
            labels: [(
                "country".to_owned(),
                if i % 3 == 0 { "fr" } else { "de" }.to_owned(),
            )]
            .into(),
        })
        .collect()
}

fn spec(waves: Vec<Wave>) -> RolloutSpec {
    RolloutSpec {
        waves,
        gate: Gate::default(),
        max_unavailable: None,
        on_failure: OnFailure::Rollback,
    }
}

fn count(n: u32) -> Wave {
    Wave {
        clusters: Some(n),
        ..Wave::default()
    }
}

fn percent(p: u32) -> Wave {
    Wave {
        percent: Some(p),
        ..Wave::default()
    }
}

fn france() -> Wave {
    Wave {
        selector: Some(LabelSelector {
            match_labels: [("country".to_owned(), "fr".to_owned())].into(),
            match_expressions: vec![],
        }),
        ..Wave::default()
    }
}

#[test]
fn percentages_are_cumulative_and_round_up() {
    assert_eq!(percent_of(1, 3), 1);
    assert_eq!(percent_of(25, 10), 3);
    assert_eq!(percent_of(100, 7), 7);
    let s = spec(vec![count(1), percent(25), percent(50), percent(100)]);
    let waves = assign_waves(&s, "default/web", &candidates(10), &BTreeSet::new());
    let sizes: Vec<usize> = waves.iter().map(BTreeSet::len).collect();
    // 1, then up to ⌈2.5⌉ = 3 in total, then 5, then the rest.
    assert_eq!(sizes, vec![1, 2, 2, 5]);
}

#[test]
fn a_selector_wave_takes_every_matching_cluster_left() {
    let s = spec(vec![count(1), france(), percent(100)]);
    let all = candidates(9);
    let waves = assign_waves(&s, "default/web", &all, &BTreeSet::new());
    let fr: BTreeSet<String> = all
        .iter()
        .filter(|c| c.labels["country"] == "fr")
        .map(|c| c.name.clone())
        .collect();
    let canary_in_fr = usize::from(fr.contains(waves[0].iter().next().unwrap()));
    assert_eq!(waves[1].len(), fr.len() - canary_in_fr);
    assert!(waves[1].iter().all(|c| fr.contains(c)));
}

#[test]
fn the_last_wave_takes_every_cluster_left() {
    let s = spec(vec![count(1), count(2)]);
    let waves = assign_waves(&s, "default/web", &candidates(10), &BTreeSet::new());
    assert_eq!(waves[1].len(), 9);
}

#[test]
fn a_batch_keeps_what_was_released_and_adds_at_most_room_more() {
    let set =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| (*n).to_owned()).collect() };
    let target = set(&["a", "b", "c", "d", "e"]);
    let (out, waiting) = release_batch(target.clone(), &set(&["c"]), 2);
    assert_eq!(out, set(&["a", "b", "c"]));
    assert_eq!(waiting, 2);
    let (out, waiting) = release_batch(target.clone(), &out, 0);
    assert_eq!((out.len(), waiting), (3, 2), "no room: nothing more");
    let (out, waiting) = release_batch(target.clone(), &out, 9);
    assert_eq!((out, waiting), (target, 0));
}

#[test]
fn pin_keys_name_the_object_they_copy() {
    let key = ObjectKey::new(ObjectKeyParts {
        space: Space::default_space(),
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("shop".into()),
        name: "web".into(),
    });
    let pin = pin_key(&key);
    assert_eq!(pin.kind, PIN_KIND);
    assert_eq!(pinned_key(&pin), Some(key.clone()));
    assert_eq!(pinned_key(&key), None);
    let meta = ObjectMeta {
        key: pin,
        labels: BTreeMap::from([(PIN_PLACEMENT_LABEL.to_owned(), "web".to_owned())]),
    };
    assert_eq!(pin_placement(&meta), Some("web"));
}

fn any_wave() -> impl Strategy<Value = Wave> {
    prop_oneof![
        (1u32..5).prop_map(count),
        (1u32..=100).prop_map(percent),
        Just(france()),
    ]
}

proptest! {
    #[test]
    fn waves_never_overlap_and_cover_every_cluster(
        waves in proptest::collection::vec(any_wave(), 1..6),
        n in 0usize..60,
    ) {
        let s = spec(waves);
        let all = candidates(n);
        let assigned = assign_waves(&s, "default/web", &all, &BTreeSet::new());
        prop_assert_eq!(assigned.len(), s.waves.len());
        let mut seen = BTreeSet::new();
        for w in &assigned {
            for c in w {
                prop_assert!(seen.insert(c.clone()), "{} in two waves", c);
            }
        }
        prop_assert_eq!(seen.len(), n);
    }

    #[test]
    fn a_cluster_added_mid_rollout_gets_the_revision_of_its_wave(
        waves in proptest::collection::vec(any_wave(), 2..6),
        n in 1usize..60,
        current in 0usize..5,
    ) {
        let s = spec(waves);
        let current = current.min(s.waves.len() - 1);
        let before = candidates(n);
        let first = assign_waves(&s, "default/web", &before, &BTreeSet::new());
        let released = released_through(&first, current, &BTreeSet::new(), &before);
        // One more cluster arrives; the waves are planned again.
        let after = candidates(n + 1);
        let again = assign_waves(&s, "default/web", &after, &released);
        let now = released_through(&again, current, &released, &after);
        // Nothing released is taken back.
        prop_assert!(released.is_subset(&now));
        // The newcomer is released exactly when its wave is.
        let newcomer = &after[n].name;
        let wave = again.iter().position(|w| w.contains(newcomer)).unwrap();
        prop_assert_eq!(now.contains(newcomer), wave <= current || released.contains(newcomer));
        // Waves still never overlap.
        let total: usize = again.iter().map(BTreeSet::len).sum();
        prop_assert_eq!(total, n + 1);
    }
}
