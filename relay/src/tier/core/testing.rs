//! What the core's unit tests share: a root whose only child is the relay `eu`, and
//! that child's messages.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_node::store::ParentState;
use strata_protocol::sync::{ParentLink, SessionConfig};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{
    ChildToParent, ErrorCode, Hello, MAX_PROTOCOL_VERSION, REPLICA_VERSION, Report, Reports, Role,
};

use super::{CoreSetup, NodeCore, new_log};
use crate::tier::reports::SubtreeReports;
use crate::tier::testing;

/// A root whose only allowed child is the relay `eu`.
pub(crate) fn root() -> NodeCore {
    NodeCore::new(
        Instant::ZERO,
        CoreSetup {
            log: new_log(1, true),
            summary_interval: Duration::from_millis(200),
            ..setup("center", &["eu"], None)
        },
    )
}

/// The set-up of a node `name` that admits `children`, below `parent` (none: a
/// root), with an empty store: log 2, not serving, summaries every 100 ms.
pub(super) fn setup(name: &str, children: &[&str], parent: Option<ParentLink>) -> CoreSetup {
    CoreSetup {
        name: name.into(),
        labels: BTreeMap::new(),
        children: children.iter().map(|&c| c.to_owned()).collect(),
        sessions: SessionConfig::default(),
        log: new_log(2, false),
        reports: SubtreeReports::new(),
        acked: BTreeMap::new(),
        child_runs: BTreeMap::new(),
        parent_link: parent,
        parent_state: ParentState::default(),
        summary_interval: Duration::from_millis(100),
        run: 1,
        wall_origin: UnixMillis(0),
        watch_history: 0,
        standby: false,
        admission_hold: Duration::ZERO,
    }
}

/// The relay `eu`'s hello in its run `run`, or its replica `replica`'s.
pub(super) fn hello(run: u64, replica: Option<&str>) -> ChildToParent {
    let hello = hello_of("eu", Role::Relay, run);
    match replica {
        None => ChildToParent::Hello(hello),
        Some(r) => ChildToParent::ReplicaHello {
            hello: Hello {
                min_version: REPLICA_VERSION,
                ..hello
            },
            replica: r.into(),
        },
    }
}

/// The hello of `node`, a child in the role `role`, in its run `run`.
pub(super) fn hello_from(node: &str, role: Role, run: u64) -> ChildToParent {
    ChildToParent::Hello(hello_of(node, role, run))
}

fn hello_of(node: &str, role: Role, run: u64) -> Hello {
    Hello {
        min_version: 1,
        max_version: MAX_PROTOCOL_VERSION,
        node: node.into(),
        role,
        run,
    }
}

/// The link of the agent `node` below `eu`.
pub(super) fn link(node: &str, connected: bool, since: u64) -> Report {
    let record = testing::link(Role::Agent, &["eu"], connected, since);
    testing::link_report(node, record)
}

/// The cluster `name` below `eu`.
pub(super) fn cluster(name: &str) -> Report {
    testing::cluster_report(name, &["eu"])
}

/// Drives the root once: process, transmit; returns what it closed.
pub(super) fn turn(core: &mut NodeCore, now: Instant) -> Vec<(String, u64, ErrorCode)> {
    let _ = core.process(now);
    let out = core.transmit(now);
    out.close_children
        .into_iter()
        .map(|(n, c, e)| (n, c, e.code))
        .collect()
}

/// Sends one batch of reports on a connection (the report stream starts at 0 per
/// session).
pub(super) fn report(core: &mut NodeCore, now: Instant, conn: u64, seq: u64, items: Vec<Report>) {
    report_from(core, now, "eu", conn, seq, items);
}

/// [`report`] from the child `child`.
pub(super) fn report_from(
    core: &mut NodeCore,
    now: Instant,
    child: &str,
    conn: u64,
    seq: u64,
    items: Vec<Report>,
) {
    core.child_message(
        now,
        child,
        conn,
        ChildToParent::Reports(Reports {
            epoch: 0,
            epoch_start: 0,
            seq,
            items,
        }),
    );
}
