//! Rollouts in waves, with relay and agent cores wired in a tree in virtual time (the
//! fixture is `tree/`): a bad revision fails the canary's gate and every cluster goes
//! back to the previous revision, no cluster outside the canary ever running the bad
//! one; a good revision then reaches every cluster wave by wave; pause, resume and
//! undo through the Placement's annotation; a region cut off mid-rollout counts as
//! unreachable, keeps what it was released and gets no later wave while away (the
//! others go on); a root restarted mid-rollout resumes at its wave; `maxUnavailable`
//! batches.

#![allow(clippy::unwrap_used)]

use crate::tree;

use std::collections::BTreeSet;
use std::time::Duration;

use strata_protocol::model::{ObjectKey, ObjectKeyParts, Space};
use strata_protocol::rollout::Phase;
use tree::{Tree, labels};

const CLUSTERS: [&str; 4] = ["eu-1", "eu-2", "us-1", "us-2"];

/// The placement: a canary, then everything, with a gate held 1 s.
fn placement(annotation: &str) -> String {
    format!(
        "
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: web{annotation} }}
spec:
  objects: [ {{ selector: {{ matchLabels: {{ app: web }} }} }} ]
  clusters: {{ selector: {{ matchLabels: {{ role: pos }} }} }}
  rollout:
    waves: [ {{ name: canary, clusters: 1 }}, {{ percent: 100 }} ]
    gate: {{ available: 100%, maxFailed: 0, for: 1s, timeout: 20s }}
    onFailure: rollback
"
    )
}

/// The app at `image`; a bad one fails on the simulated cluster.
fn app(image: &str, bad: bool) -> String {
    let failure = if bad {
        ", strata.dev/simulate-failure: CrashLoopBackOff"
    } else {
        ""
    };
    format!(
        "
apiVersion: apps/v1
kind: Deployment
metadata: {{ name: web, namespace: shop, labels: {{ app: web{failure} }} }}
spec: {{ replicas: 2, template: {{ spec: {{ containers: [ {{ name: web, image: \"{image}\" }} ] }} }} }}
"
    )
}

fn fleet() -> Tree {
    let mut t = Tree::builder()
        .root("center")
        .relay("eu", "center", labels! { region: eu })
        .relay("us", "center", labels! { region: us })
        .agent("eu-1", "eu", labels! { role: pos })
        .agent("eu-2", "eu", labels! { role: pos })
        .agent("us-1", "us", labels! { role: pos })
        .agent("us-2", "us", labels! { role: pos })
        .build();
    t.connect_all();
    t.advance(Duration::from_millis(500));
    t
}

fn web() -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: Space::default_space(),
        group: "apps".into(),
        version: "v1".into(),
        kind: "Deployment".into(),
        namespace: Some("shop".into()),
        name: "web".into(),
    })
}

/// The image each cluster runs (what its simulated cluster holds).
fn images(t: &Tree) -> Vec<(String, String)> {
    CLUSTERS
        .iter()
        .map(|c| {
            let image = t
                .agent(c)
                .cluster_manifest(&web())
                .map(|body| {
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    v.pointer("/spec/template/spec/containers/0/image")
                        .and_then(|i| i.as_str())
                        .unwrap_or("")
                        .to_owned()
                })
                .unwrap_or_default();
            ((*c).to_owned(), image)
        })
        .collect()
}

fn running(t: &Tree, image: &str) -> BTreeSet<String> {
    images(t)
        .into_iter()
        .filter(|(_, i)| i == image)
        .map(|(c, _)| c)
        .collect()
}

fn phase(t: &Tree) -> Phase {
    t.relay("center").rollouts().values().next().unwrap().phase
}

fn released(t: &Tree) -> BTreeSet<String> {
    t.relay("center")
        .rollouts()
        .values()
        .next()
        .unwrap()
        .released
        .clone()
}

#[test]
fn a_bad_revision_fails_the_canary_gate_and_is_rolled_back() {
    let mut t = fleet();
    t.apply(&format!("{}---{}", app("web:1", false), placement("")));
    t.advance(Duration::from_secs(2));
    assert_eq!(running(&t, "web:1").len(), 4, "{:?}", images(&t));
    assert_eq!(phase(&t), Phase::Complete);

    // A bad revision: only the canary ever runs it, and the gate sends it back.
    t.apply(&app("web:2", true));
    let mut canaries = BTreeSet::new();
    for _ in 0..400 {
        t.advance(Duration::from_millis(25));
        let bad = running(&t, "web:2");
        assert!(bad.len() <= 1, "outside the canary: {bad:?}");
        canaries.extend(bad);
        if phase(&t) == Phase::RolledBack && running(&t, "web:1").len() == 4 {
            break;
        }
    }
    assert_eq!(canaries.len(), 1, "the canary ran the bad revision");
    assert_eq!(phase(&t), Phase::RolledBack);
    assert_eq!(running(&t, "web:1").len(), 4, "{:?}", images(&t));
    let state = t
        .relay("center")
        .rollouts()
        .values()
        .next()
        .unwrap()
        .clone();
    assert!(
        state
            .message
            .as_deref()
            .unwrap()
            .starts_with("gate failed: wave canary: 1 of 1 clusters failed"),
        "{:?}",
        state.message
    );

    // A good revision then goes wave by wave: never beyond what was released.
    t.apply(&app("web:3", false));
    let mut saw_canary_alone = false;
    for _ in 0..400 {
        t.advance(Duration::from_millis(25));
        let good = running(&t, "web:3");
        if phase(&t) == Phase::Progressing {
            let released = released(&t);
            assert!(good.is_subset(&released), "{good:?} beyond {released:?}");
        }
        saw_canary_alone |= good.len() == 1;
        if phase(&t) == Phase::Complete && good.len() == 4 {
            break;
        }
    }
    assert!(saw_canary_alone, "the canary ran it alone first");
    assert_eq!(
        phase(&t),
        Phase::Complete,
        "{:?}",
        t.relay("center").rollouts()
    );
    assert_eq!(running(&t, "web:3").len(), 4, "{:?}", images(&t));
}

#[test]
fn pause_resume_and_undo_through_the_annotation() {
    let mut t = fleet();
    t.apply(&format!("{}---{}", app("web:1", false), placement("")));
    t.advance(Duration::from_secs(2));
    t.apply(&app("web:2", false));
    t.apply(&placement(", annotations: { strata.dev/rollout: pause }"));
    t.advance(Duration::from_secs(5));
    assert_eq!(phase(&t), Phase::Paused);
    assert_eq!(running(&t, "web:2").len(), 1, "paused after the canary");
    t.apply(&placement(", annotations: { strata.dev/rollout: resume }"));
    t.advance(Duration::from_secs(5));
    assert_eq!(phase(&t), Phase::Complete);
    assert_eq!(running(&t, "web:2").len(), 4);
    // Undo after completion: every cluster back on the previous revision.
    t.apply(&placement(", annotations: { strata.dev/rollout: undo }"));
    t.advance(Duration::from_secs(2));
    assert_eq!(phase(&t), Phase::RolledBack);
    assert_eq!(running(&t, "web:1").len(), 4, "{:?}", images(&t));
}

/// A placement of `waves` and `gate` (YAML flow text), with `extra` rollout fields.
fn placement_with(waves: &str, gate: &str, extra: &str) -> String {
    format!(
        "
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: web }}
spec:
  objects: [ {{ selector: {{ matchLabels: {{ app: web }} }} }} ]
  clusters: {{ selector: {{ matchLabels: {{ role: pos }} }} }}
  rollout:
    waves: {waves}
    gate: {gate}
    onFailure: rollback{extra}
"
    )
}

fn state(t: &Tree) -> strata_protocol::rollout::RolloutState {
    t.relay("center")
        .rollouts()
        .values()
        .next()
        .unwrap()
        .clone()
}

#[test]
fn a_region_cut_off_counts_as_unreachable_and_a_restarted_root_resumes_where_it_was() {
    let mut t = fleet();
    let p = placement_with(
        "[ { name: canary, clusters: 1 }, { clusters: 1 }, { percent: 100 } ]",
        "{ available: 100%, for: 1s, timeout: 60s }",
        "",
    );
    t.apply(&format!("{}---{p}", app("web:1", false)));
    t.advance(Duration::from_secs(2));
    t.apply(&app("web:2", false));
    for _ in 0..400 {
        t.advance(Duration::from_millis(25));
        if state(&t).wave == 1 && running(&t, "web:2").len() == 2 {
            break;
        }
    }
    let before = state(&t);
    assert_eq!(
        (before.phase, before.wave, before.released.len()),
        (Phase::Progressing, 1, 2)
    );

    // The root restarts: it reads its rollout back from its log and goes on from there.
    t.crash("center");
    t.advance(Duration::from_millis(300));
    t.restart("center");
    let after = state(&t);
    assert_eq!(
        (after.revision, after.wave, &after.released),
        (before.revision, 1, &before.released)
    );

    // A region with a released cluster is cut off: those clusters count as unreachable
    // and not available, whatever they reported last, and the gate holds.
    let region = if before.released.iter().any(|c| c.starts_with("us")) {
        "us"
    } else {
        "eu"
    };
    let away: BTreeSet<String> = before
        .released
        .iter()
        .filter(|c| c.starts_with(region))
        .cloned()
        .collect();
    t.advance(Duration::from_millis(500));
    t.cut(region);
    for _ in 0..40 {
        t.advance(Duration::from_millis(250));
        let s = state(&t);
        assert_eq!((s.phase, s.wave), (Phase::Progressing, 1), "{s:?}");
        let core = t.relay("center");
        let p = core.placements().iter().find(|p| p.name == "web").unwrap();
        let health = core.gate_health(p, &s);
        assert_eq!(health.unreachable, away.len() as u64, "{health:?}");
        assert!(
            health.available <= health.released - health.unreachable,
            "{health:?}"
        );
        // The region receives nothing later while away.
        for c in CLUSTERS.iter().filter(|c| c.starts_with(region)) {
            assert_eq!(
                running(&t, "web:2").contains(*c),
                away.contains(*c),
                "{c} while {region} is away"
            );
        }
    }
    t.restore(region);
    for _ in 0..400 {
        t.advance(Duration::from_millis(25));
        if phase(&t) == Phase::Complete && running(&t, "web:2").len() == 4 {
            break;
        }
    }
    assert_eq!(phase(&t), Phase::Complete, "{:?}", state(&t));
    assert_eq!(running(&t, "web:2").len(), 4, "{:?}", images(&t));
}

#[test]
fn max_unavailable_releases_a_wave_a_batch_at_a_time() {
    use strata_protocol::model::Health;
    let mut t = fleet();
    let p = placement_with(
        "[ { percent: 100 } ]",
        "{ available: 100%, for: 1s, timeout: 60s }",
        "\n    maxUnavailable: 1",
    );
    t.apply(&format!("{}---{p}", app("web:1", false)));
    t.advance(Duration::from_secs(2));
    t.apply(&app("web:2", false));
    let mut sizes = BTreeSet::new();
    for _ in 0..800 {
        t.advance(Duration::from_millis(25));
        let updating: Vec<&str> = CLUSTERS
            .iter()
            .copied()
            .filter(|c| {
                running(&t, "web:2").contains(*c)
                    && t.agent(c).status(&web()).map(|s| s.health) != Some(Health::Available)
            })
            .collect();
        assert!(
            updating.len() <= 1,
            "more than maxUnavailable updating: {updating:?}"
        );
        let s = state(&t);
        if s.phase == Phase::Progressing {
            sizes.insert(s.released.len());
        }
        if s.phase == Phase::Complete && running(&t, "web:2").len() == 4 {
            break;
        }
    }
    assert_eq!(phase(&t), Phase::Complete, "{:?}", state(&t));
    assert_eq!(sizes, BTreeSet::from([1, 2, 3, 4]), "one more at a time");
}

#[test]
fn a_region_cut_off_keeps_its_release_and_gets_no_later_wave_while_away() {
    let mut t = fleet();
    // Half the released clusters available passes the gate: the rollout goes on
    // without the region cut off.
    let p = placement_with(
        "[ { name: first, clusters: 2 }, { percent: 100 } ]",
        "{ available: 50%, for: 1s, timeout: 60s }",
        "",
    );
    t.apply(&format!("{}---{p}", app("web:1", false)));
    t.advance(Duration::from_secs(2));
    t.apply(&app("web:2", false));
    for _ in 0..400 {
        t.advance(Duration::from_millis(25));
        if released(&t).len() == 2 && running(&t, "web:2") == released(&t) {
            break;
        }
    }
    let first = released(&t);
    assert_eq!(running(&t, "web:2"), first, "{:?}", state(&t));
    // The region holding one released and one unreleased cluster is cut off.
    let region = ["eu", "us"]
        .into_iter()
        .find(|r| first.iter().filter(|c| c.starts_with(r)).count() == 1)
        .unwrap_or_else(|| panic!("no region with one of {first:?}"));
    let away: Vec<&str> = CLUSTERS
        .iter()
        .copied()
        .filter(|c| c.starts_with(region))
        .collect();
    t.cut(region);
    let mut moved_on = false;
    for _ in 0..400 {
        t.advance(Duration::from_millis(25));
        // What the region holds while away: its release, nothing later.
        for c in &away {
            assert_eq!(
                running(&t, "web:2").contains(*c),
                first.contains(*c),
                "{c} while {region} is away: {:?} {:?}",
                images(&t),
                state(&t)
            );
            assert!(
                running(&t, "web:1").contains(*c) || first.contains(*c),
                "{c} keeps the previous revision: {:?}",
                images(&t)
            );
        }
        let s = state(&t);
        assert_ne!(s.phase, Phase::RolledBack, "{s:?}");
        moved_on |= s.phase == Phase::Complete || s.wave == 1;
    }
    // Meanwhile the rollout went on through the last wave at the root, and the other
    // region got it.
    assert!(moved_on, "{:?}", state(&t));
    for c in CLUSTERS.iter().filter(|c| !c.starts_with(region)) {
        assert!(running(&t, "web:2").contains(*c), "{c}: {:?}", images(&t));
    }
    // Back, the region catches up.
    t.restore(region);
    for _ in 0..400 {
        t.advance(Duration::from_millis(25));
        if phase(&t) == Phase::Complete && running(&t, "web:2").len() == 4 {
            break;
        }
    }
    assert_eq!(phase(&t), Phase::Complete, "{:?}", state(&t));
    assert_eq!(running(&t, "web:2").len(), 4, "{:?}", images(&t));
}

/// The placement with a `customize` rule setting the image to `image`.
fn customized(image: &str, annotation: &str) -> String {
    format!(
        "
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: web{annotation} }}
spec:
  objects: [ {{ selector: {{ matchLabels: {{ app: web }} }} }} ]
  clusters: {{ selector: {{ matchLabels: {{ role: pos }} }} }}
  customize:
    - jsonPatch: [ {{ op: replace, path: /spec/template/spec/containers/0/image, value: \"{image}\" }} ]
  rollout:
    waves: [ {{ name: canary, clusters: 1 }}, {{ percent: 100 }} ]
    gate: {{ available: 100%, for: 1s, timeout: 20s }}
"
    )
}

#[test]
fn a_change_of_customize_rules_alone_rolls_out_in_waves_and_is_undone() {
    let mut t = fleet();
    t.apply(&format!(
        "{}---{}",
        app("web:1", false),
        customized("web:a", "")
    ));
    t.advance(Duration::from_secs(2));
    assert_eq!(running(&t, "web:a").len(), 4, "{:?}", images(&t));
    // Only the rule changes: a new revision of the template, in waves.
    t.apply(&customized("web:b", ""));
    let mut saw_canary_alone = false;
    for _ in 0..400 {
        t.advance(Duration::from_millis(25));
        let new = running(&t, "web:b");
        if phase(&t) == Phase::Progressing {
            let released = released(&t);
            assert!(new.is_subset(&released), "{new:?} beyond {released:?}");
        }
        // Every other cluster keeps the previous rule's rendering.
        assert_eq!(
            new.len() + running(&t, "web:a").len(),
            4,
            "{:?}",
            images(&t)
        );
        saw_canary_alone |= new.len() == 1;
        if phase(&t) == Phase::Complete && new.len() == 4 {
            break;
        }
    }
    assert!(saw_canary_alone, "the canary ran the new rule alone first");
    assert_eq!(phase(&t), Phase::Complete, "{:?}", state(&t));
    assert_eq!(running(&t, "web:b").len(), 4, "{:?}", images(&t));
    // Undone: every cluster renders the pins with the previous rule again.
    t.apply(&customized(
        "web:b",
        ", annotations: { strata.dev/rollout: undo }",
    ));
    t.advance(Duration::from_secs(2));
    assert_eq!(phase(&t), Phase::RolledBack);
    assert_eq!(running(&t, "web:a").len(), 4, "{:?}", images(&t));
}
