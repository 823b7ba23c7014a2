use super::*;
use crate::placement_spec::Seconds;

fn spec(on_failure: OnFailure) -> RolloutSpec {
    RolloutSpec {
        waves: vec![
            Wave {
                name: Some("canary".into()),
                clusters: Some(1),
                ..Wave::default()
            },
            Wave {
                percent: Some(100),
                ..Wave::default()
            },
        ],
        gate: Gate {
            available: Percent(100),
            max_failed: 0,
            hold: Seconds(5),
            timeout: Seconds(60),
        },
        max_unavailable: None,
        on_failure,
    }
}

fn healthy(n: u64) -> GateHealth {
    GateHealth {
        released: n,
        available: n,
        failed: 0,
        ..Default::default()
    }
}

#[test]
fn a_healthy_gate_held_long_enough_opens_the_next_wave_then_completes() {
    let s = spec(OnFailure::Rollback);
    let mut r = RolloutState::new(1, 0);
    assert!(r.handle_template(2, Some(1), 1000));
    assert_eq!((r.phase, r.wave, r.revision), (Phase::Progressing, 0, 2));
    assert_eq!(r.handle_gate(&s, healthy(1), 2000), GateOutcome::Holding);
    assert_eq!(r.poll_timeout(&s), Some(7000));
    assert_eq!(r.handle_gate(&s, healthy(1), 6999), GateOutcome::Holding);
    assert_eq!(r.handle_gate(&s, healthy(1), 7000), GateOutcome::NextWave);
    assert_eq!(r.wave, 1);
    // Not healthy: the hold starts again.
    r.handle_gate(
        &s,
        GateHealth {
            released: 5,
            available: 4,
            failed: 0,
            ..Default::default()
        },
        8000,
    );
    assert_eq!(r.healthy_since, None);
    r.handle_gate(&s, healthy(5), 9000);
    assert_eq!(
        r.handle_gate(&s, healthy(5), 14_000),
        GateOutcome::Completed
    );
    assert_eq!(r.phase, Phase::Complete);
    assert_eq!(r.gated(), None);
}

#[test]
fn a_failure_rolls_back_or_pauses_as_asked() {
    let bad = GateHealth {
        released: 1,
        available: 0,
        failed: 1,
        ..Default::default()
    };
    let mut r = RolloutState::new(1, 0);
    r.handle_template(2, Some(1), 0);
    assert!(matches!(
        r.handle_gate(&spec(OnFailure::Rollback), bad, 10),
        GateOutcome::Failed(_)
    ));
    assert_eq!(r.phase, Phase::RolledBack);
    assert_eq!(r.gated(), Some(false));
    assert_eq!(
        r.message.as_deref(),
        Some("gate failed: wave canary: 1 of 1 clusters failed (at most 0 allowed)")
    );
    let mut p = RolloutState::new(1, 0);
    p.handle_template(2, Some(1), 0);
    p.handle_gate(&spec(OnFailure::Pause), bad, 10);
    assert_eq!(p.phase, Phase::Paused);
    assert_eq!(p.gated(), Some(true));
}

#[test]
fn a_gate_that_never_passes_times_out() {
    let s = spec(OnFailure::Rollback);
    let mut r = RolloutState::new(1, 0);
    r.handle_template(2, Some(1), 0);
    let slow = GateHealth {
        released: 1,
        available: 0,
        failed: 0,
        ..Default::default()
    };
    assert_eq!(r.handle_gate(&s, slow, 59_999), GateOutcome::Holding);
    assert!(matches!(
        r.handle_gate(&s, slow, 60_000),
        GateOutcome::Failed(_)
    ));
    assert_eq!(r.phase, Phase::RolledBack);
}

#[test]
fn commands_act_once_and_only_where_they_apply() {
    let s = spec(OnFailure::Rollback);
    let mut r = RolloutState::new(1, 0);
    r.handle_template(2, Some(1), 0);
    assert_eq!(r.handle_command(Some("pause"), 5), Ok(true));
    assert_eq!(r.phase, Phase::Paused);
    assert_eq!(r.handle_gate(&s, healthy(1), 100_000), GateOutcome::Holding);
    assert_eq!(r.handle_command(Some("pause"), 6), Ok(false));
    assert_eq!(r.handle_command(Some("resume"), 10), Ok(true));
    assert_eq!((r.phase, r.wave_since), (Phase::Progressing, 10));
    assert_eq!(r.handle_command(Some("abort"), 20), Ok(true));
    assert_eq!(r.phase, Phase::RolledBack);
    assert_eq!(r.handle_command(Some("resume@2"), 30), Ok(true));
    assert_eq!((r.phase, r.wave), (Phase::Progressing, 0));
    assert!(r.handle_command(Some("explode"), 40).is_err());
    assert_eq!(r.phase, Phase::Progressing);
    // Undo after completion goes back to the previous revision.
    r.phase = Phase::Complete;
    assert_eq!(r.handle_command(Some("undo"), 50), Ok(true));
    assert_eq!(r.phase, Phase::RolledBack);
}

#[test]
fn going_back_to_the_previous_template_completes_at_once() {
    let mut r = RolloutState::new(1, 0);
    r.handle_template(2, Some(1), 0);
    r.roll_back("test");
    assert!(r.handle_template(1, Some(1), 5));
    assert_eq!(r.phase, Phase::Complete);
}

#[test]
fn specs_are_checked_field_by_field() {
    let mut s = spec(OnFailure::Rollback);
    assert_eq!(s.validate(), Ok(()));
    s.waves[1].clusters = Some(3);
    assert_eq!(
        s.validate(),
        Err((
            "waves[1]".into(),
            "needs exactly one of clusters, percent, selector".into()
        ))
    );
    s.waves[1].percent = None;
    s.waves[0].clusters = Some(0);
    assert_eq!(
        s.validate(),
        Err(("waves[0].clusters".into(), "must be at least 1".into()))
    );
    s.waves.clear();
    assert_eq!(
        s.validate(),
        Err(("waves".into(), "needs at least one wave".into()))
    );
    let parsed: Result<Gate, _> =
        serde_json::from_value(serde_json::json!({ "available": "95%", "for": "1m" }));
    assert_eq!(parsed.unwrap().available, Percent(95));
    let over: Result<Gate, _> = serde_json::from_value(serde_json::json!({ "available": "150%" }));
    assert!(
        over.unwrap_err()
            .to_string()
            .contains("150% is more than 100%")
    );
}

#[test]
fn a_wave_not_wholly_released_or_with_unreachable_clusters_holds_and_says_so() {
    let s = spec(OnFailure::Rollback);
    let mut r = RolloutState::new(1, 0);
    r.handle_template(2, Some(1), 0);
    let batching = GateHealth {
        pending: 3,
        ..healthy(2)
    };
    // Healthy so far, but the wave is not wholly released: no hold starts.
    assert_eq!(r.handle_gate(&s, batching, 10_000), GateOutcome::Holding);
    assert_eq!(r.healthy_since, None);
    let cut = GateHealth {
        released: 4,
        available: 2,
        unreachable: 2,
        ..Default::default()
    };
    match r.handle_gate(&s, cut, 60_000) {
        GateOutcome::Failed(why) => assert!(why.ends_with(", 2 unreachable"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn max_unavailable_sizes_a_batch_of_a_wave() {
    let mut s = spec(OnFailure::Rollback);
    assert_eq!(
        RolloutState::batch_size(&s, 40),
        40,
        "no maxUnavailable: all"
    );
    s.max_unavailable = Some(Amount::Percent(10));
    assert_eq!(RolloutState::batch_size(&s, 41), 5, "10% of 41, rounded up");
    s.max_unavailable = Some(Amount::Count(0));
    assert_eq!(RolloutState::batch_size(&s, 41), 1, "at least one");
}
