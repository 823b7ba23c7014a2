//! kill -9 while committing, 300 times (in three chains side by side): after every kill
//! the store is exactly at some batch at or after the last acknowledged one. Everything
//! whose commit returned is there, and no batch is there in part.
//!
//! The test runs itself again as a writer process (the ignored test below, selected by
//! an environment variable), reads the writer's "acked N" lines, kills it with SIGKILL
//! at varying points, reopens the store and checks it. Each batch N moves the parent
//! cursor to N and writes [`KEYS_PER_BATCH`] reports, so a partial batch shows as a
//! cursor without all its reports, or reports beyond the cursor.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use strata_node::store::{Batch, ParentState, SledStore, Store};
use strata_protocol::model::{Cursor, LogId, Position};
use strata_protocol::wire::{ReportKey, ReportValue};

const DIR_VAR: &str = "STRATA_CRASH_STORE_DIR";

/// Reports each batch writes beside its cursor.
const KEYS_PER_BATCH: u64 = 4;

/// Kill rounds (`STRATA_CRASH_ROUNDS` overrides, for a longer run).
const ROUNDS: u64 = 300;

fn report_key(n: u64, i: u64) -> (String, ReportKey) {
    (
        "x".to_owned(),
        ReportKey::Cluster {
            name: format!("c{n}-{i}"),
        },
    )
}

#[test]
#[ignore = "the writer half of acknowledged_commits_survive_kill_9; run by that test"]
fn crash_writer() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let store = SledStore::open(std::path::Path::new(&dir)).unwrap();
    let start = store
        .load()
        .unwrap()
        .parent
        .map_or(0, |u| u.cursor.position.0);
    for n in start + 1..start + 100_000 {
        let mut batch = Batch {
            parent: Some(ParentState {
                cursor: Cursor {
                    log: LogId(1),
                    position: Position(n),
                },
                route: None,
                parent_incarnation: None,
                inherited: Default::default(),
            }),
            ..Batch::default()
        };
        for i in 0..KEYS_PER_BATCH {
            batch
                .reports
                .push((report_key(n, i), Some(ReportValue::Removed)));
        }
        store.commit(&batch).unwrap();
        println!("acked {n}");
    }
}

#[test]
fn acknowledged_commits_survive_kill_9_and_no_batch_is_partial() {
    let rounds = std::env::var("STRATA_CRASH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(ROUNDS);
    // The rounds run as independent chains side by side, each on a store of its own:
    // a round mostly waits on a process starting and on the disk, so the chains take a
    // third of one chain's time, and every round is still one kill of one writer.
    std::thread::scope(|scope| {
        for chain in 0..CHAINS {
            let rounds = rounds / CHAINS + u64::from(chain < rounds % CHAINS);
            scope.spawn(move || kill_rounds(chain, rounds));
        }
    });
}

/// Chains of kill rounds run side by side.
const CHAINS: u64 = 3;

/// `rounds` rounds of write, kill -9 and check on one store; `chain` picks the kill
/// points and names the chain in failures.
fn kill_rounds(chain: u64, rounds: u64) {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    // libtest's name of the writer: its path below the crate root.
    let writer = format!(
        "{}::crash_writer",
        module_path!().split_once("::").map_or("", |(_, m)| m)
    );
    let mut last_acked = 0u64;
    // Kill points vary (a fixed sequence per chain, so a failure repeats): after 1 to
    // 40 acks.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ chain;
    for round in 0..rounds {
        let round = format!("chain {chain}, round {round}");
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let kill_after = 1 + seed % 40;
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                &writer,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VAR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut seen = 0;
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("acked ") {
                last_acked = n.parse().unwrap();
                seen += 1;
                if seen == kill_after {
                    break;
                }
            }
        }
        // A writer that acknowledged nothing (a name matching no test) proves nothing.
        assert_eq!(
            seen, kill_after,
            "{round}: the writer ({writer}) acknowledged {seen} commits, not {kill_after}"
        );
        child.kill().unwrap(); // SIGKILL, while the next commit is under way
        child.wait().unwrap();
        let stored = SledStore::open(dir.path()).unwrap().load().unwrap();
        let durable = stored.parent.map_or(0, |u| u.cursor.position.0);
        assert!(
            durable >= last_acked,
            "{round}: acked {last_acked} but only {durable} survived kill -9"
        );
        // Exactly batches 1..=durable: every report of each, none of any later one.
        let expected = durable * KEYS_PER_BATCH;
        let present = stored
            .reports
            .keys()
            .filter(|(owner, _)| owner == "x")
            .count();
        for n in [durable, durable.saturating_sub(1)]
            .into_iter()
            .filter(|n| *n > 0)
        {
            for i in 0..KEYS_PER_BATCH {
                assert!(
                    stored.reports.contains_key(&report_key(n, i)),
                    "{round}: batch {n} (at or before the cursor {durable}) is partial"
                );
            }
        }
        for i in 0..KEYS_PER_BATCH {
            assert!(
                !stored.reports.contains_key(&report_key(durable + 1, i)),
                "{round}: batch {} is partly there beyond the cursor {durable}",
                durable + 1
            );
        }
        assert_eq!(
            u64::try_from(present).unwrap(),
            expected,
            "{round}: the store holds {present} reports, not the {expected} of batches 1..={durable}"
        );
    }
}
