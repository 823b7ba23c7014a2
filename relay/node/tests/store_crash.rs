//! kill -9 while committing: everything whose commit returned is there after a restart.
//!
//! The test runs itself again as a writer process (the ignored test below, selected by
//! an environment variable), reads the writer's "acked N" lines, kills it with SIGKILL
//! at varying points, reopens the store and checks every acknowledged batch.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use strata_node::store::{Batch, SledStore, Store, UpstreamState};
use strata_protocol::model::{Cursor, LogId, Position};
use strata_protocol::wire::{ReportKey, ReportValue};

const DIR_VAR: &str = "STRATA_CRASH_STORE_DIR";

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
        .upstream
        .map_or(0, |u| u.cursor.position.0);
    for n in start + 1..start + 100_000 {
        let mut batch = Batch {
            upstream: Some(UpstreamState {
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
        batch.reports.push((
            (
                "x".to_owned(),
                ReportKey::Cluster {
                    name: format!("c{n}"),
                },
            ),
            Some(ReportValue::Removed),
        ));
        store.commit(&batch).unwrap();
        println!("acked {n}");
    }
}

#[test]
fn acknowledged_commits_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut last_acked = 0u64;
    for (round, kill_after) in [20u64, 150, 400, 60, 250].into_iter().enumerate() {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_writer",
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
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let stored = SledStore::open(dir.path()).unwrap().load().unwrap();
        let durable = stored.upstream.map_or(0, |u| u.cursor.position.0);
        assert!(
            durable >= last_acked,
            "round {round}: acked {last_acked} but only {durable} survived kill -9"
        );
        for n in 1..=last_acked {
            assert!(
                stored.reports.contains_key(&(
                    "x".to_owned(),
                    ReportKey::Cluster {
                        name: format!("c{n}")
                    }
                )),
                "round {round}: acknowledged batch {n} lost"
            );
        }
    }
}
