//! Unit tests of one session's rules, message by message: handshake, bad input, flow
//! control, liveness, and the report stream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strata_protocol::model::{
    ContentHash, Cursor, LogId, Object, ObjectKey, ObjectKeyParts, ObjectMeta, Position, Revision,
    Space,
};
use strata_protocol::sync::{
    ChildSession, EverythingRoute, LinkConfig, LinkEvent, ObjectLog, ParentLink, ReportInbox,
    ReportOutbox, ReportsConfig, SessionConfig, SessionEvent,
};
use strata_protocol::time::Instant;
use strata_protocol::wire::{
    Change, ChildToParent, Delta, ErrorCode, Hello, LinkPath, MAX_PROTOCOL_VERSION, PATH_VERSION,
    ParentToChild, RENEW_VERSION, Report, ReportKey, ReportValue, Reports, Role, RouteId,
    StreamClass, Welcome,
};

fn at(ms: u64) -> Instant {
    Instant::from_origin(Duration::from_millis(ms))
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: Space::default_space(),
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("default".into()),
        name: name.into(),
    })
}

fn object(name: &str, rev: u64, size: usize) -> Object {
    Object {
        meta: std::sync::Arc::new(ObjectMeta {
            key: key(name),
            labels: BTreeMap::new(),
        }),
        revision: Revision(rev),
        hash: ContentHash([rev as u8; 32]),
        body: vec![7; size].into(),
    }
}

fn root_log(objects: usize, size: usize) -> ObjectLog {
    let mut log = ObjectLog::new(LogId(42));
    log.mark_serving();
    for i in 0..objects {
        let pos = log.head().next();
        log.stage(pos, Change::Upsert(object(&format!("cm-{i}"), pos.0, size)))
            .expect("stage above head");
        log.commit(pos);
    }
    log
}

fn hello(node: &str, min: u16, max: u16) -> ChildToParent {
    ChildToParent::Hello(Hello {
        min_version: min,
        max_version: max,
        node: node.into(),
        role: Role::Agent,
        run: 1,
    })
}

fn session(config: SessionConfig) -> ChildSession {
    ChildSession::new(at(0), "site-1".into(), Arc::new(EverythingRoute), config)
}

fn drain(s: &mut ChildSession, now: Instant, log: &ObjectLog) -> Vec<ParentToChild> {
    std::iter::from_fn(|| s.poll_transmit(now, log)).collect()
}

fn events(s: &mut ChildSession) -> Vec<SessionEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn closed_with(events: &[SessionEvent]) -> Option<ErrorCode> {
    events.iter().find_map(|e| match e {
        SessionEvent::Closed(err) => Some(err.code),
        _ => None,
    })
}

#[test]
fn a_hello_naming_another_node_is_refused() {
    let log = root_log(0, 0);
    let mut s = session(SessionConfig::default());
    s.handle_message(at(1), hello("site-2", 1, 1));
    assert_eq!(closed_with(&events(&mut s)), Some(ErrorCode::UnknownChild));
    let out = drain(&mut s, at(1), &log);
    assert!(matches!(
        out.as_slice(),
        [ParentToChild::Goodbye {
            code: ErrorCode::UnknownChild,
            ..
        }]
    ));
    assert!(s.is_closed());
}

#[test]
fn no_common_version_is_refused() {
    let log = root_log(0, 0);
    let mut s = session(SessionConfig::default());
    s.handle_message(
        at(1),
        hello("site-1", MAX_PROTOCOL_VERSION + 1, MAX_PROTOCOL_VERSION + 2),
    );
    assert_eq!(
        closed_with(&events(&mut s)),
        Some(ErrorCode::UnsupportedVersion)
    );
    assert!(matches!(
        drain(&mut s, at(1), &log).as_slice(),
        [ParentToChild::Goodbye {
            code: ErrorCode::UnsupportedVersion,
            ..
        }]
    ));
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn labels_that_change_reach_an_open_child_and_a_waiting_one_in_its_welcome() {
    let log = root_log(0, 0);
    let mut open = session(SessionConfig::default());
    open.handle_message(at(1), hello("site-1", 1, 2));
    events(&mut open);
    drain(&mut open, at(1), &log);
    let mut waiting = session(SessionConfig::default());

    let new = labels(&[("continent", "emea")]);
    open.set_labels(new.clone());
    waiting.set_labels(new.clone());
    // Setting the same labels again sends nothing more.
    open.set_labels(new.clone());
    assert_eq!(
        drain(&mut open, at(2), &log),
        vec![ParentToChild::Labels {
            labels: new.clone()
        }]
    );
    assert!(!open.is_closed());

    waiting.handle_message(at(3), hello("site-1", 1, 2));
    match drain(&mut waiting, at(3), &log).as_slice() {
        [ParentToChild::Welcome(w)] => {
            assert_eq!(w.labels, new);
            assert_eq!(w.version, 2);
        }
        other => panic!("expected a welcome, got {other:?}"),
    }
}

#[test]
fn a_version_1_child_is_closed_when_labels_change_so_that_it_learns_them_again() {
    let log = root_log(0, 0);
    let mut s = session(SessionConfig::default());
    s.handle_message(at(1), hello("site-1", 1, 1));
    events(&mut s);
    drain(&mut s, at(1), &log);
    s.set_labels(labels(&[("continent", "emea")]));
    assert_eq!(closed_with(&events(&mut s)), Some(ErrorCode::Replaced));
    assert!(matches!(
        drain(&mut s, at(2), &log).as_slice(),
        [ParentToChild::Goodbye {
            code: ErrorCode::Replaced,
            ..
        }]
    ));
}

#[test]
fn a_link_hands_out_labels_sent_after_the_welcome() {
    let mut link = open_link();
    std::iter::from_fn(|| link.poll_event()).for_each(drop);
    let new = labels(&[("country", "fr")]);
    link.handle_message(
        at(2),
        ParentToChild::Labels {
            labels: new.clone(),
        },
    );
    let evs: Vec<LinkEvent> = std::iter::from_fn(|| link.poll_event()).collect();
    assert_eq!(evs, vec![LinkEvent::Labels(new)]);
    assert!(link.is_open());
}

#[test]
fn anything_before_hello_is_a_violation() {
    let mut s = session(SessionConfig::default());
    s.handle_message(at(1), ChildToParent::Ping { nonce: 1 });
    assert_eq!(
        closed_with(&events(&mut s)),
        Some(ErrorCode::ProtocolViolation)
    );
}

#[test]
fn an_ack_of_a_frame_never_sent_is_a_violation() {
    let log = root_log(1, 10);
    let mut s = session(SessionConfig::default());
    s.handle_message(at(1), hello("site-1", 1, 1));
    s.handle_message(
        at(1),
        ChildToParent::Subscribe {
            epoch: 1,
            after: Cursor::default(),
            route: None,
        },
    );
    let sent = drain(&mut s, at(1), &log);
    assert_eq!(sent.len(), 2, "welcome and one snapshot frame: {sent:?}");
    s.handle_message(
        at(2),
        ChildToParent::Ack {
            epoch: 1,
            seq: 5,
            cursor: Cursor::default(),
        },
    );
    assert_eq!(
        closed_with(&events(&mut s)),
        Some(ErrorCode::ProtocolViolation)
    );
}

#[test]
fn the_window_bounds_unacked_bytes_and_acks_reopen_it() {
    let log = root_log(20, 300);
    let config = SessionConfig {
        window_bytes: 1000,
        part_bytes: 400,
        ..SessionConfig::default()
    };
    let mut s = session(config);
    s.handle_message(at(1), hello("site-1", 1, 1));
    s.handle_message(
        at(1),
        ChildToParent::Subscribe {
            epoch: 1,
            after: Cursor::default(),
            route: None,
        },
    );
    let first = drain(&mut s, at(1), &log);
    let frames = first
        .iter()
        .filter(|m| matches!(m, ParentToChild::Snapshot(_)))
        .count();
    assert!(
        (2..=3).contains(&frames),
        "window let {frames} frames through"
    );
    assert!(drain(&mut s, at(2), &log).is_empty(), "window is full");
    s.handle_message(
        at(3),
        ChildToParent::Ack {
            epoch: 1,
            seq: frames as u64 - 1,
            cursor: Cursor::default(),
        },
    );
    assert!(
        !drain(&mut s, at(3), &log).is_empty(),
        "ack reopened the window"
    );
}

#[test]
fn silence_closes_the_session_and_heartbeats_carry_the_stream_mark() {
    let log = root_log(1, 10);
    let config = SessionConfig {
        heartbeat: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(3),
        ..SessionConfig::default()
    };
    let mut s = session(config);
    s.handle_message(at(0), hello("site-1", 1, 1));
    s.handle_message(
        at(0),
        ChildToParent::Subscribe {
            epoch: 7,
            after: Cursor::default(),
            route: None,
        },
    );
    drain(&mut s, at(0), &log);
    assert_eq!(s.poll_timeout(), Some(at(1000)));
    s.handle_timeout(at(1000));
    let out = drain(&mut s, at(1000), &log);
    assert!(out.iter().any(|m| matches!(
        m,
        ParentToChild::Ping { mark: Some(mark), .. } if mark.epoch == 7 && mark.next_seq == 1
    )));
    s.handle_timeout(at(3000));
    assert_eq!(closed_with(&events(&mut s)), Some(ErrorCode::IdleTimeout));
    assert_eq!(s.poll_timeout(), None);
}

/// Found by the simulation (sim/scenarios/lossy-slow-network.yaml, seed 1): with 500 ms
/// latency the welcome or hello took longer than a heartbeat, the heartbeat deadline
/// passed, `handle_timeout` sent nothing (no ping before the session is open) and
/// `poll_timeout` kept returning that past deadline: the driver spun at full CPU until
/// the welcome came.
#[test]
fn before_the_handshake_completes_no_timer_stays_due_after_handling_it() {
    let config = SessionConfig {
        heartbeat: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(3),
        ..SessionConfig::default()
    };
    let mut s = session(config);
    s.handle_timeout(at(1500));
    assert!(
        s.poll_timeout().is_some_and(|t| t > at(1500)),
        "parent side spins"
    );

    let mut link = ParentLink::new(
        at(0),
        LinkConfig::new("site-1", Role::Agent),
        Cursor::default(),
        None,
    );
    link.handle_connected(at(0), LinkPath::Direct);
    let heartbeat = LinkConfig::new("site-1", Role::Agent).heartbeat;
    let late = at(u64::try_from(heartbeat.as_millis()).unwrap() + 1);
    link.handle_timeout(late);
    assert!(
        link.poll_timeout().is_some_and(|t| t > late),
        "child side spins"
    );
}

fn open_link() -> ParentLink {
    let mut link = ParentLink::new(
        at(0),
        LinkConfig::new("site-1", Role::Agent),
        Cursor {
            log: LogId(42),
            position: Position(3),
        },
        Some(RouteId(0)),
    );
    link.handle_connected(at(0), LinkPath::Direct);
    link.handle_message(
        at(1),
        ParentToChild::Welcome(Welcome {
            version: 1,
            parent: "center".into(),
            heartbeat_ms: 1000,
            idle_timeout_ms: 3000,
            incarnation: 9,
            labels: BTreeMap::new(),
        }),
    );
    link
}

#[test]
fn a_child_tells_a_version_5_parent_how_its_link_reached_it_and_an_older_one_nothing() {
    for (version, told) in [(PATH_VERSION, true), (RENEW_VERSION, false), (1, false)] {
        let mut link = ParentLink::new(
            at(0),
            LinkConfig::new("site-1", Role::Agent),
            Cursor::default(),
            None,
        );
        link.handle_connected(at(0), LinkPath::Proxied);
        let hello = sent(&mut link, at(0));
        assert!(matches!(hello.as_slice(), [ChildToParent::Hello(_)]));
        link.handle_message(
            at(1),
            ParentToChild::Welcome(Welcome {
                version,
                parent: "center".into(),
                heartbeat_ms: 1000,
                idle_timeout_ms: 3000,
                incarnation: 9,
                labels: BTreeMap::new(),
            }),
        );
        let out = sent(&mut link, at(1));
        let path = out
            .iter()
            .position(|m| matches!(m, ChildToParent::LinkPath(LinkPath::Proxied)));
        let subscribe = out
            .iter()
            .position(|m| matches!(m, ChildToParent::Subscribe { .. }));
        assert_eq!(path.is_some(), told, "version {version}: {out:?}");
        assert!(subscribe.is_some());
        if told {
            assert!(path < subscribe, "the path goes before the subscription");
        }
    }
}

#[test]
fn a_parent_hands_on_the_path_its_child_tells() {
    let log = root_log(0, 0);
    let mut s = session(SessionConfig::default());
    s.handle_message(at(0), hello("site-1", 1, MAX_PROTOCOL_VERSION));
    let welcome = drain(&mut s, at(0), &log);
    assert!(matches!(
        welcome.as_slice(),
        [ParentToChild::Welcome(w)] if w.version == MAX_PROTOCOL_VERSION
    ));
    s.handle_message(at(1), ChildToParent::LinkPath(LinkPath::Proxied));
    let ev = events(&mut s);
    assert!(
        ev.contains(&SessionEvent::LinkPath(LinkPath::Proxied)),
        "{ev:?}"
    );
    assert_eq!(closed_with(&ev), None);
}

fn delta(epoch: u32, seq: u64, from: u64, to: u64, changes: Vec<Change>) -> ParentToChild {
    ParentToChild::Delta(Delta {
        epoch,
        seq,
        part: 0,
        log: LogId(42),
        from: Position(from),
        to: Position(to),
        last: true,
        changes,
    })
}

fn sent(link: &mut ParentLink, now: Instant) -> Vec<ChildToParent> {
    std::iter::from_fn(|| link.poll_transmit(now)).collect()
}

#[test]
fn a_child_subscribes_from_its_cursor_and_applies_in_order() {
    let mut link = open_link();
    let out = sent(&mut link, at(1));
    assert!(out.iter().any(|m| matches!(
        m,
        ChildToParent::Subscribe { epoch: 1, after, route: Some(RouteId(0)) }
            if after.position == Position(3)
    )));
    link.handle_message(
        at(2),
        delta(1, 0, 3, 5, vec![Change::Upsert(object("a", 5, 1))]),
    );
    // A duplicate of the same frame changes nothing.
    link.handle_message(
        at(2),
        delta(1, 0, 3, 5, vec![Change::Upsert(object("a", 5, 1))]),
    );
    // A frame of an older epoch is ignored.
    link.handle_message(at(2), delta(0, 1, 5, 6, vec![Change::Delete(key("a"))]));
    let evs: Vec<LinkEvent> = std::iter::from_fn(|| link.poll_event()).collect();
    assert_eq!(evs.len(), 3, "connected, one apply, one advance: {evs:?}");
    assert_eq!(link.cursor().position, Position(5));
    let acks: Vec<_> = sent(&mut link, at(2))
        .into_iter()
        .filter(|m| matches!(m, ChildToParent::Ack { .. }))
        .collect();
    assert_eq!(
        acks,
        vec![ChildToParent::Ack {
            epoch: 1,
            seq: 0,
            cursor: Cursor {
                log: LogId(42),
                position: Position(5)
            }
        }]
    );
}

#[test]
fn a_status_pushed_before_the_ack_goes_out_rides_with_it_and_a_lone_one_waits() {
    let mut link = open_link();
    sent(&mut link, at(1));
    link.handle_message(
        at(2),
        delta(1, 0, 3, 5, vec![Change::Upsert(object("a", 5, 1))]),
    );
    while link.poll_event().is_some() {}
    // The agent applied "a" and has its status before this turn's transmit.
    link.push_report(
        at(2),
        Report {
            key: status("c1", "a"),
            value: ReportValue::Removed,
        },
    );
    let out = sent(&mut link, at(2));
    assert!(
        matches!(
            out.as_slice(),
            [ChildToParent::Ack { .. }, ChildToParent::Reports(r)] if r.items.len() == 1
        ),
        "the ack and the status, in one transmit: {out:?}"
    );
    // A status with no ack going out waits the flush interval to coalesce.
    link.push_report(
        at(3),
        Report {
            key: status("c1", "b"),
            value: ReportValue::Removed,
        },
    );
    assert_eq!(sent(&mut link, at(3)), vec![], "coalescing");
}

#[test]
fn a_flushed_outbox_sends_at_once_and_waits_again_afterwards() {
    let mut o = outbox();
    o.flush();
    assert_eq!(
        o.poll_timeout(),
        None,
        "nothing pending: flush does nothing"
    );
    o.push(
        at(0),
        Report {
            key: status("c1", "a"),
            value: ReportValue::Removed,
        },
    );
    assert_eq!(o.poll_timeout(), Some(at(100)));
    o.flush();
    assert_eq!(o.poll_timeout(), Some(at(0)), "due at once");
    let batch = o.poll_transmit(at(1)).expect("flushed");
    assert_eq!(batch.items.len(), 1);
    o.handle_ack(batch.epoch, batch.seq);
    o.push(
        at(5),
        Report {
            key: status("c1", "b"),
            value: ReportValue::Removed,
        },
    );
    assert_eq!(
        o.poll_transmit(at(6)),
        None,
        "the next report coalesces again"
    );
    assert!(o.poll_transmit(at(105)).is_some());
}

#[test]
fn a_gap_makes_the_child_subscribe_again_from_its_cursor() {
    let mut link = open_link();
    sent(&mut link, at(1));
    link.handle_message(at(2), delta(1, 1, 3, 5, vec![Change::Delete(key("a"))]));
    assert_eq!(
        link.cursor().position,
        Position(3),
        "nothing applied across a gap"
    );
    let out = sent(&mut link, at(2));
    assert!(out.iter().any(|m| matches!(
        m,
        ChildToParent::Subscribe { epoch: 2, after, .. } if after.position == Position(3)
    )));
}

#[test]
fn a_delta_that_does_not_start_at_the_cursor_is_not_applied() {
    let mut link = open_link();
    sent(&mut link, at(1));
    link.handle_message(at(2), delta(1, 0, 4, 5, vec![Change::Delete(key("a"))]));
    let evs: Vec<LinkEvent> = std::iter::from_fn(|| link.poll_event()).collect();
    assert!(!evs.iter().any(|e| matches!(e, LinkEvent::Apply(_))));
    assert!(
        sent(&mut link, at(2))
            .iter()
            .any(|m| matches!(m, ChildToParent::Subscribe { epoch: 2, .. }))
    );
}

fn status(cluster: &str, name: &str) -> ReportKey {
    ReportKey::Status {
        cluster: cluster.into(),
        object: key(name),
    }
}

fn outbox() -> ReportOutbox {
    let mut o = ReportOutbox::new(ReportsConfig {
        flush_interval: Duration::from_millis(100),
        max_batch_items: 10,
        max_inflight_batches: 1,
        retransmit_after: Duration::from_secs(5),
    });
    o.on_connected();
    o
}

#[test]
fn unsent_reports_coalesce_to_the_latest_per_key() {
    let mut o = outbox();
    o.push(
        at(0),
        Report {
            key: status("c1", "a"),
            value: ReportValue::Removed,
        },
    );
    o.push(
        at(10),
        Report {
            key: status("c1", "b"),
            value: ReportValue::Removed,
        },
    );
    o.push(
        at(20),
        Report {
            key: status("c1", "a"),
            value: ReportValue::Cluster(strata_protocol::model::Cluster {
                name: "c1".into(),
                labels: BTreeMap::new(),
                properties: BTreeMap::new(),
                path: vec![],
            }),
        },
    );
    assert_eq!(o.poll_transmit(at(50)), None, "still coalescing");
    let batch = o.poll_transmit(at(100)).expect("due");
    assert_eq!(batch.items.len(), 2);
    assert!(
        matches!(batch.items[0].value, ReportValue::Cluster(_)),
        "latest value of a"
    );
}

#[test]
fn an_overdue_ack_resends_in_a_new_epoch_that_a_stale_batch_cannot_overtake() {
    let mut o = outbox();
    let mut inbox = ReportInbox::new();
    o.push(
        at(0),
        Report {
            key: status("c1", "a"),
            value: ReportValue::Removed,
        },
    );
    let first = o.poll_transmit(at(100)).expect("first batch");
    assert_eq!((first.epoch, first.seq), (1, 0));
    // The batch is lost; nothing more goes out until the ack is overdue.
    o.push(
        at(200),
        Report {
            key: status("c1", "b"),
            value: ReportValue::Removed,
        },
    );
    assert_eq!(
        o.poll_transmit(at(300)),
        None,
        "one batch in flight at most"
    );
    let resent = o.poll_transmit(at(5100)).expect("resent after timeout");
    assert_eq!((resent.epoch, resent.epoch_start, resent.seq), (2, 0, 0));
    assert_eq!(resent.items.len(), 2);
    assert!(inbox.handle(resent.clone()).is_some());
    // The lost batch shows up late: an older epoch is never accepted again.
    assert!(inbox.handle(first).is_none());
    assert_eq!(inbox.poll_ack(), Some((2, 0)));
    o.handle_ack(2, 0);
    assert_eq!(o.unacked_len(), 0);
}

#[test]
fn the_inbox_accepts_only_the_next_batch_of_an_epoch() {
    let mut inbox = ReportInbox::new();
    let batch = |epoch, epoch_start, seq| Reports {
        epoch,
        epoch_start,
        seq,
        items: vec![],
    };
    assert!(
        inbox.handle(batch(1, 0, 1)).is_none(),
        "a new epoch starts at its start"
    );
    assert!(inbox.handle(batch(1, 0, 0)).is_some());
    assert!(inbox.handle(batch(1, 0, 0)).is_none(), "duplicate");
    assert!(inbox.handle(batch(1, 0, 2)).is_none(), "gap");
    assert!(inbox.handle(batch(1, 0, 1)).is_some());
    assert_eq!(inbox.poll_ack(), Some((1, 1)));
}

#[test]
fn a_lone_batch_waits_for_a_message_to_ride_with_and_a_second_is_acked_at_once() {
    let mut inbox = ReportInbox::new();
    let batch = |seq| Reports {
        epoch: 1,
        epoch_start: 0,
        seq,
        items: vec![],
    };
    assert!(inbox.handle(batch(0)).is_some());
    assert_eq!(inbox.poll_ack(), None, "one batch: its ack waits");
    assert!(inbox.handle(batch(1)).is_some());
    assert_eq!(inbox.poll_ack(), Some((1, 1)), "two batches: acked at once");
    assert_eq!(inbox.poll_deferred_ack(), None, "nothing left due");
    assert!(inbox.handle(batch(2)).is_some());
    assert_eq!(
        inbox.poll_deferred_ack(),
        Some((1, 2)),
        "a message going anyway takes it"
    );
    assert_eq!(
        inbox.take_or_repeat_ack(),
        Some((1, 2)),
        "heartbeats repeat it"
    );
    assert!(inbox.handle(batch(2)).is_none());
    assert_eq!(inbox.poll_ack(), Some((1, 2)), "a duplicate: at once");
}

/// A status that answers an update is acknowledged with the parent's next message, at
/// the latest its heartbeat, not in a packet of its own.
#[test]
fn a_sessions_report_ack_rides_with_the_next_message_or_the_heartbeat() {
    let log = root_log(1, 10);
    let mut s = session(SessionConfig::default());
    s.handle_message(at(0), hello("site-1", 1, 1));
    s.handle_message(
        at(0),
        ChildToParent::Subscribe {
            epoch: 1,
            after: Cursor::default(),
            route: None,
        },
    );
    drain(&mut s, at(0), &log);
    let reports = |seq| {
        ChildToParent::Reports(Reports {
            epoch: 1,
            epoch_start: 0,
            seq,
            items: vec![Report {
                key: status("site-1", "a"),
                value: ReportValue::Removed,
            }],
        })
    };
    let acks = |out: &[ParentToChild]| {
        out.iter()
            .filter_map(|m| match m {
                ParentToChild::ReportsAck { epoch, seq } => Some((*epoch, *seq)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    s.handle_message(at(100), reports(0));
    assert!(drain(&mut s, at(100), &log).is_empty(), "the ack waits");
    // A pong goes out anyway: the ack rides with it.
    s.handle_message(at(200), ChildToParent::Ping { nonce: 1 });
    assert_eq!(acks(&drain(&mut s, at(200), &log)), vec![(1, 0)]);
    s.handle_message(at(300), reports(1));
    assert!(drain(&mut s, at(300), &log).is_empty(), "the ack waits");
    let heartbeat = s.poll_timeout().expect("a heartbeat is due");
    assert!(heartbeat <= at(300) + SessionConfig::default().heartbeat);
    s.handle_timeout(heartbeat);
    let out = drain(&mut s, heartbeat, &log);
    assert!(out.iter().any(|m| matches!(m, ParentToChild::Ping { .. })));
    assert_eq!(acks(&out), vec![(1, 1)], "the heartbeat carries it");
    s.handle_message(heartbeat, reports(2));
    s.handle_message(heartbeat, reports(3));
    assert_eq!(
        acks(&drain(&mut s, heartbeat, &log)),
        vec![(1, 3)],
        "two: at once"
    );
}

#[test]
fn a_parent_goodbye_carries_its_retry_hint_to_the_driver() {
    let mut link = open_link();
    sent(&mut link, at(1));
    link.handle_message(
        at(2),
        ParentToChild::Goodbye {
            code: ErrorCode::ShuttingDown,
            reason: "restarting".into(),
            retry_after_ms: Some(1500),
        },
    );
    let closed = std::iter::from_fn(|| link.poll_event()).find_map(|e| match e {
        LinkEvent::Closed { error, retry_after } => Some((error.code, retry_after)),
        _ => None,
    });
    assert_eq!(
        closed,
        Some((ErrorCode::ShuttingDown, Some(Duration::from_millis(1500))))
    );
    assert!(!link.is_open());
}

#[test]
fn an_old_childs_hello_is_welcomed_and_a_replica_hello_needs_version_three() {
    let log = root_log(0, 0);
    // A version-2 child (no replica id) still opens a session.
    let mut s = session(SessionConfig::default());
    s.handle_message(at(1), hello("site-1", 1, 2));
    assert_eq!(closed_with(&events(&mut s)), None);
    assert!(matches!(
        drain(&mut s, at(1), &log).as_slice(),
        [ParentToChild::Welcome(Welcome { version: 2, .. }), ..]
    ));
    // A replica hello from a child that claims no version 3 is refused by name.
    let mut s = session(SessionConfig::default());
    s.handle_message(
        at(1),
        ChildToParent::ReplicaHello {
            hello: Hello {
                min_version: 1,
                max_version: 2,
                node: "site-1".into(),
                role: Role::Relay,
                run: 1,
            },
            replica: "a".into(),
        },
    );
    assert_eq!(
        closed_with(&events(&mut s)),
        Some(ErrorCode::UnsupportedVersion)
    );
    // The new variant comes last: a hello encodes as before (variant 0), so a
    // version-1 or -2 parent still decodes an unreplicated child's hello.
    let hello = Hello {
        min_version: 1,
        max_version: MAX_PROTOCOL_VERSION,
        node: "site-1".into(),
        role: Role::Relay,
        run: 1,
    };
    let plain = strata_protocol::codec::encode_value(&ChildToParent::Hello(hello.clone())).unwrap();
    assert_eq!(plain[0], 0);
    let replica = strata_protocol::codec::encode_value(&ChildToParent::ReplicaHello {
        hello,
        replica: "a".into(),
    })
    .unwrap();
    assert_eq!(replica[0], 7);
}

/// The hello of replica `a` of relay `site-1`, speaking every version this build does.
fn replica_hello() -> ChildToParent {
    ChildToParent::ReplicaHello {
        hello: Hello {
            min_version: 1,
            max_version: MAX_PROTOCOL_VERSION,
            node: "site-1".into(),
            role: Role::Relay,
            run: 1,
        },
        replica: "a".into(),
    }
}

#[test]
fn a_new_child_is_sent_a_snapshot_by_a_replica_even_when_it_names_a_grandparent_cursor() {
    // A replica of a replicated tier that followed its parent (log 9) with deltas, so
    // its index translates parent cursors into positions of its own log (42).
    let mut log = root_log(3, 8);
    log.parent_index_mut().enable();
    log.parent_index_mut().record(
        Position(1),
        Cursor {
            log: LogId(9),
            position: Position(10),
        },
        false,
    );
    log.parent_index_mut().record(
        Position(3),
        Cursor {
            log: LogId(9),
            position: Position(12),
        },
        true,
    );
    // A child with no view (no route: it never completed a snapshot) is sent every
    // object in a snapshot, whatever cursor it names: an empty cursor, a position of
    // this very log, or a grandparent cursor that would translate here. Only a view cut
    // with this route can be brought up to date by a delta.
    for (after, grandparent) in [
        (Cursor::default(), None),
        (
            Cursor {
                log: LogId(42),
                position: Position(0),
            },
            None,
        ),
        (
            Cursor {
                log: LogId(7),
                position: Position(5),
            },
            Some(Cursor {
                log: LogId(9),
                position: Position(12),
            }),
        ),
    ] {
        let mut s = session(SessionConfig::default());
        s.handle_message(at(1), replica_hello());
        if let Some(grandparent) = grandparent {
            s.handle_message(at(1), ChildToParent::Resume { grandparent });
        }
        s.handle_message(
            at(1),
            ChildToParent::Subscribe {
                epoch: 1,
                after,
                route: None,
            },
        );
        let sent = drain(&mut s, at(1), &log);
        assert!(
            !sent.iter().any(|m| matches!(m, ParentToChild::Delta(_))),
            "{after:?} {grandparent:?}: {sent:?}"
        );
        let objects: usize = sent
            .iter()
            .filter_map(|m| match m {
                ParentToChild::Snapshot(snap) => Some(snap.objects.len()),
                _ => None,
            })
            .sum();
        assert_eq!(objects, 3, "{after:?} {grandparent:?}: {sent:?}");
    }
}

#[test]
fn a_replicas_grandparent_cursor_hint_precedes_the_frame_reaching_its_position_on_the_same_stream()
{
    // A replica that followed its parent (log 9): position 3 of its log stands for the
    // parent's position 12.
    let mut log = root_log(3, 8);
    log.parent_index_mut().enable();
    log.parent_index_mut().record(
        Position(3),
        Cursor {
            log: LogId(9),
            position: Position(12),
        },
        false,
    );
    let mut s = session(SessionConfig::default());
    s.handle_message(at(1), replica_hello());
    s.handle_message(
        at(1),
        ChildToParent::Subscribe {
            epoch: 1,
            after: Cursor::default(),
            route: None,
        },
    );
    let bulk: Vec<ParentToChild> = drain(&mut s, at(1), &log)
        .into_iter()
        .filter(|m| m.class() == StreamClass::Bulk)
        .collect();
    // A child that applied the frame reaching position 3 holds the hint for it even if
    // the replica dies right after sending it: the hint went first, on the same
    // ordered stream.
    let hint = bulk
        .iter()
        .position(
            |m| matches!(m, ParentToChild::GrandparentCursor { position, .. } if *position == Position(3)),
        )
        .unwrap_or_else(|| panic!("no hint on the bulk stream: {bulk:?}"));
    let frame = bulk
        .iter()
        .position(|m| matches!(m, ParentToChild::Snapshot(snap) if snap.last))
        .unwrap_or_else(|| panic!("no last snapshot part: {bulk:?}"));
    assert_eq!(hint + 1, frame, "{bulk:?}");
}
