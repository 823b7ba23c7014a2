//! Property and scenario tests of the sync state machines, driven through the in-crate
//! harness (`tests/harness`): real `ChildSession`s and `ParentLink`s, a virtual clock,
//! and a network that drops, duplicates, reorders and disconnects.

mod harness;

use std::collections::BTreeSet;
use std::time::Duration;

use harness::{Faults, World};
use proptest::prelude::*;

/// root -> leaf.
const PAIR: &[(&str, Option<usize>)] = &[("root", None), ("leaf", Some(0))];

/// root -> relay-a -> relay-b -> {leaf-1, leaf-2}; relay-a -> leaf-3; root -> leaf-4.
/// Contains the chain root -> relay -> relay -> leaf.
const TREE: &[(&str, Option<usize>)] = &[
    ("root", None),
    ("relay-a", Some(0)),
    ("relay-b", Some(1)),
    ("leaf-1", Some(2)),
    ("leaf-2", Some(2)),
    ("leaf-3", Some(1)),
    ("leaf-4", Some(0)),
];
const TREE_LEAVES: [usize; 4] = [3, 4, 5, 6];

#[derive(Debug, Clone)]
enum Op {
    Apply(Vec<(u8, u8, Vec<u8>)>),
    Delete(u8),
    Wait(u64),
    Faults {
        child: usize,
        loss: u8,
        dup: u8,
        jitter_ms: u64,
    },
    Disconnect(usize),
    Compact(usize),
    Wants {
        leaf: usize,
        dests: BTreeSet<u8>,
    },
    Crash {
        node: usize,
        keep_disk: bool,
    },
}

/// Operations on a world of `nodes` nodes; `with_log` are the nodes that hold a log
/// (root and relays).
fn op(nodes: usize, leaves: Vec<usize>, with_log: Vec<usize>) -> impl Strategy<Value = Op> {
    let object = (0u8..10, 0u8..4, prop::collection::vec(any::<u8>(), 0..160));
    let leaf = prop::sample::select(leaves);
    let with_log = prop::sample::select(with_log);
    prop_oneof![
        6 => prop::collection::vec(object, 1..4).prop_map(Op::Apply),
        2 => (0u8..10).prop_map(Op::Delete),
        4 => (0u64..2500).prop_map(Op::Wait),
        2 => (1..nodes, 0u8..40, 0u8..30, 0u64..80)
            .prop_map(|(child, loss, dup, jitter_ms)| Op::Faults { child, loss, dup, jitter_ms }),
        1 => (1..nodes).prop_map(Op::Disconnect),
        1 => with_log.prop_map(Op::Compact),
        1 => (leaf, prop::collection::btree_set(0u8..4, 0..4))
            .prop_map(|(leaf, dests)| Op::Wants { leaf, dests }),
        // The root never loses its disk: revisions would start over (a root that outgrows
        // one machine keeps its state in a replicated store instead).
        1 => (0..nodes, any::<bool>())
            .prop_map(|(node, keep_disk)| Op::Crash { node, keep_disk: keep_disk || node == 0 }),
    ]
}

fn dests(set: &BTreeSet<u8>) -> BTreeSet<String> {
    set.iter().map(|d| format!("d{d}")).collect()
}

/// Runs the schedule, then heals the network and gives the hierarchy a bounded time to
/// converge; returns the first violated invariant.
fn run(world: &mut World, ops: &[Op]) -> Result<(), String> {
    for op in ops {
        match op {
            Op::Apply(objects) => world.apply(objects),
            Op::Delete(k) => world.delete(*k),
            Op::Wait(ms) => world.run(Duration::from_millis(*ms)),
            Op::Faults {
                child,
                loss,
                dup,
                jitter_ms,
            } => world.set_faults(
                *child,
                Faults {
                    loss: *loss,
                    dup: *dup,
                    jitter_ms: *jitter_ms,
                },
            ),
            Op::Disconnect(c) => world.disconnect(*c),
            Op::Compact(n) => world.compact(*n),
            Op::Wants { leaf, dests: d } => world.set_wants(*leaf, dests(d)),
            Op::Crash { node, keep_disk } => world.crash(*node, *keep_disk),
        }
        world.run(Duration::from_millis(10));
        if let Some(v) = world.violations.first() {
            return Err(v.clone());
        }
    }
    world.heal();
    // Bounded: reconnect backoff (< 1 s), idle timeout (3 s), resubscription (1 s) and
    // report retransmission (2 s) all fit many times over.
    world.run(Duration::from_secs(30));
    world.check_converged()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// A single child under loss, duplication, reordering and disconnects converges to
    /// exactly its routed view at the parent's head, never moving an object backwards,
    /// and the parent ends up with exactly the child's statuses.
    #[test]
    fn a_child_converges_whatever_the_network_does(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(2, vec![1], vec![0]), 1..40),
    ) {
        let mut world = World::new(seed, PAIR, &[(1, &["d0", "d1"])]);
        let result = run(&mut world, &ops);
        prop_assert!(result.is_ok(), "seed {seed}: {}\ntrace: {:?}", result.unwrap_err(), world.trace);
    }

    /// The same through a tree that contains root -> relay -> relay -> leaf, with route
    /// changes, compaction (forcing snapshots), and relays crashing with or without
    /// their disk.
    #[test]
    fn a_hierarchy_converges_whatever_the_network_does(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(7, TREE_LEAVES.to_vec(), vec![0, 1, 2]), 1..60),
    ) {
        let mut world = World::new(
            seed,
            TREE,
            &[(3, &["d0"]), (4, &["d0", "d1"]), (5, &["d2"]), (6, &["d1", "d3"])],
        );
        let result = run(&mut world, &ops);
        prop_assert!(result.is_ok(), "seed {seed}: {}\ntrace: {:?}", result.unwrap_err(), world.trace);
    }
}

fn settle(world: &mut World) {
    world.run(Duration::from_secs(5));
    world.check_converged().expect("converged");
}

#[test]
fn unselected_children_receive_no_objects() {
    let mut world = World::new(
        1,
        TREE,
        &[(3, &["d0"]), (4, &["d0"]), (5, &["d0"]), (6, &["d1"])],
    );
    settle(&mut world);
    for k in 0..5 {
        world.apply(&[(k, 0, vec![k; 40])]);
    }
    settle(&mut world);
    assert_eq!(world.store_len(3), 5);
    assert_eq!(world.delivered_changes(6), 0, "leaf-4 wants only d1");
    world.apply(&[(9, 1, vec![9; 40])]);
    settle(&mut world);
    assert_eq!(world.delivered_changes(6), 1);
    assert_eq!(
        world.delivered_changes(3),
        5,
        "leaf-1 heard nothing of the d1 object"
    );
}

#[test]
fn resync_after_a_partition_sends_only_what_changed() {
    let mut world = World::new(
        2,
        TREE,
        &[(3, &["d0"]), (4, &["d0"]), (5, &["d0"]), (6, &["d0"])],
    );
    for k in 0..10 {
        world.apply(&[(k, 0, vec![k; 100])]);
    }
    settle(&mut world);
    let before = world.delivered_changes(1);
    assert_eq!(before, 10);
    // Cut relay-a off (100% loss) while three objects change, each several times.
    world.set_faults(
        1,
        Faults {
            loss: 100,
            dup: 0,
            jitter_ms: 0,
        },
    );
    for round in 0..4u8 {
        for k in 0..3 {
            world.apply(&[(k, 0, vec![round; 100])]);
        }
        world.run(Duration::from_secs(1));
    }
    world.delete(9);
    world.heal();
    settle(&mut world);
    // Three latest versions and one delete: intermediate versions coalesced, the
    // seven unchanged objects not resent.
    assert_eq!(world.delivered_changes(1) - before, 4);
}

#[test]
fn a_relay_rebuilt_from_nothing_never_empties_its_children() {
    let mut world = World::new(
        3,
        TREE,
        &[(3, &["d0"]), (4, &["d0"]), (5, &["d0"]), (6, &["d0"])],
    );
    for k in 0..8 {
        world.apply(&[(k, 0, vec![k; 300])]);
    }
    settle(&mut world);
    // relay-a loses its disk while the root is unreachable for it.
    world.set_faults(
        1,
        Faults {
            loss: 100,
            dup: 0,
            jitter_ms: 0,
        },
    );
    world.crash(1, false);
    for _ in 0..50 {
        world.run(Duration::from_millis(100));
        assert_eq!(
            world.store_len(5),
            8,
            "leaf-3 lost objects while its relay rebuilt"
        );
    }
    world.heal();
    settle(&mut world);
}

#[test]
fn compaction_past_a_child_forces_a_snapshot_that_removes_deleted_objects() {
    let mut world = World::new(4, PAIR, &[(1, &["d0"])]);
    for k in 0..6 {
        world.apply(&[(k, 0, vec![k; 10])]);
    }
    settle(&mut world);
    world.disconnect(1);
    world.set_faults(
        1,
        Faults {
            loss: 100,
            dup: 0,
            jitter_ms: 0,
        },
    );
    world.delete(0);
    world.delete(1);
    world.apply(&[(7, 0, vec![7; 10])]);
    world.compact(0);
    let log = world.log_of(0).expect("root log");
    assert_eq!(log.floor(), log.head(), "nothing holds compaction back");
    world.heal();
    settle(&mut world);
    assert_eq!(world.store_len(1), 5);
}

#[test]
fn route_changes_move_objects_between_subtrees() {
    let mut world = World::new(
        5,
        TREE,
        &[(3, &["d0"]), (4, &["d0"]), (5, &["d1"]), (6, &["d1"])],
    );
    for k in 0..4 {
        world.apply(&[(k, 0, vec![1; 20]), (k + 4, 1, vec![2; 20])]);
    }
    settle(&mut world);
    assert_eq!(world.store_len(3), 4);
    // leaf-1 moves from d0 to d1: relay-b's view changes too.
    world.set_wants(3, BTreeSet::from(["d1".to_owned()]));
    settle(&mut world);
    assert_eq!(world.store_len(3), 4);
    assert_eq!(world.store_len(4), 4);
    world.set_wants(4, BTreeSet::new());
    settle(&mut world);
    assert_eq!(world.store_len(4), 0);
}

#[test]
fn relabelled_objects_leave_children_that_no_longer_select_them() {
    let mut world = World::new(
        6,
        TREE,
        &[(3, &["d0"]), (4, &["d0"]), (5, &["d0"]), (6, &["d1"])],
    );
    world.apply(&[(1, 0, vec![1; 20])]);
    settle(&mut world);
    assert_eq!(world.store_len(3), 1);
    // The same object now carries dest=d1: it leaves leaf-1..3 and reaches leaf-4.
    world.apply(&[(1, 1, vec![2; 20])]);
    settle(&mut world);
    assert_eq!(world.store_len(3), 0);
    assert_eq!(world.store_len(6), 1);
}
