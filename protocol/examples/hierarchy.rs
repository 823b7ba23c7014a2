//! Drives the sync core through a four-tier hierarchy in virtual time and prints what
//! happened: the same state machines the relay and agent will run, joined by the test
//! harness's simulated links (not real QUIC: that is the relay issue's work).
//!
//! `cargo run --release -p strata-protocol --example hierarchy [SEED]`

#[path = "../tests/harness/mod.rs"]
mod harness;

use std::time::Duration;

use harness::{Faults, World};

/// center -> {eu, us} -> two sites each -> two clusters per site.
const SHAPE: &[(&str, Option<usize>)] = &[
    ("center", None),
    ("eu", Some(0)),
    ("us", Some(0)),
    ("eu-site-1", Some(1)),
    ("eu-site-2", Some(1)),
    ("us-site-1", Some(2)),
    ("us-site-2", Some(2)),
    ("eu-1a", Some(3)),
    ("eu-1b", Some(3)),
    ("eu-2a", Some(4)),
    ("eu-2b", Some(4)),
    ("us-1a", Some(5)),
    ("us-1b", Some(5)),
    ("us-2a", Some(6)),
    ("us-2b", Some(6)),
];

// Objects carry a `dest` label: d0 = placed in eu, d1 = placed in us, d2 = everywhere.
const EU: u8 = 0;
const US: u8 = 1;
const ALL: u8 = 2;

fn main() {
    let seed = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let eu: &[&str] = &["d0", "d2"];
    let us: &[&str] = &["d1", "d2"];
    let wants: Vec<(usize, &[&str])> = (7..15).map(|i| (i, if i < 11 { eu } else { us })).collect();
    let mut world = World::new(seed, SHAPE, &wants);
    println!("strata sync core, virtual time, seed {seed}");
    println!("hierarchy: center -> eu, us -> 2 sites each -> 2 clusters per site\n");

    step(
        &mut world,
        "apply 10 objects for eu, 6 for us, 4 for everyone",
        |w| {
            for k in 0..20u8 {
                let dest = match k {
                    0..10 => EU,
                    10..16 => US,
                    _ => ALL,
                };
                w.apply(&[(k, dest, vec![k; 2048])]);
            }
        },
    );

    let before = world.delivered_changes(2);
    step(
        &mut world,
        "cut us off (100% loss) while 3 us objects change 5 times each",
        |w| {
            w.set_faults(
                2,
                Faults {
                    loss: 100,
                    dup: 0,
                    jitter_ms: 0,
                },
            );
            for round in 0..5u8 {
                for k in 10..13u8 {
                    w.apply(&[(k, US, vec![round; 2048])]);
                }
                w.run(Duration::from_secs(1));
            }
            w.heal();
        },
    );
    println!(
        "  objects resent to us after the partition: {} (3 changed; intermediate versions coalesced)\n",
        world.delivered_changes(2) - before
    );

    step(
        &mut world,
        "flaky links everywhere (20% loss, duplicates, reordering) during 30 changes",
        |w| {
            for c in 1..15 {
                w.set_faults(
                    c,
                    Faults {
                        loss: 20,
                        dup: 10,
                        jitter_ms: 200,
                    },
                );
            }
            for k in 0..30u8 {
                w.apply(&[(k % 20, [EU, US, ALL][usize::from(k % 3)], vec![k; 1024])]);
                w.run(Duration::from_millis(300));
            }
            w.heal();
        },
    );

    step(&mut world, "move the eu objects to us (relabel)", |w| {
        for k in 0..10u8 {
            w.apply(&[(k, US, vec![k; 2048])]);
        }
    });

    match world.check_converged() {
        Ok(()) => println!(
            "every node holds exactly its placed objects; the center holds every cluster's status"
        ),
        Err(e) => {
            println!("NOT CONVERGED: {e}");
            std::process::exit(1);
        }
    }
}

fn step(world: &mut World, what: &str, act: impl FnOnce(&mut World)) {
    println!("== {what}");
    act(world);
    world.run(Duration::from_secs(10));
    println!(
        "  {:<10} {:>7} {:>9} {:>8}",
        "node", "objects", "received", "cursor"
    );
    for i in 1..world.nodes.len() {
        let n = &world.nodes[i];
        let objects = world.view_of(i).len();
        println!(
            "  {:<10} {:>7} {:>9} {:>8}",
            n.name,
            objects,
            world.delivered_changes(i),
            world.cursor_of(i).position
        );
    }
    let converged = world.check_converged().is_ok();
    println!(
        "  converged: {}   center head: {}   virtual time: {:?}\n",
        if converged { "yes" } else { "no" },
        world.head_of(0),
        world.now.since_origin()
    );
}
