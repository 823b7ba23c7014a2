//! `relay demo` runs the whole demo hierarchy as processes and exits 0, having seen the
//! app available on every cluster of one region, then of the other.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

mod common;

use std::process::Command;

#[test]
fn the_demo_rolls_out_moves_the_app_and_exits_cleanly() {
    let out = Command::new(common::bin("relay"))
        .arg("demo")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("all 24 clusters registered at the root"),
        "{stdout}"
    );
    // After the rollout to eu, then after the move to us.
    assert!(
        stdout.contains("    eu: clusters 12 available 12\n    us: holds nothing of it"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    eu: holds nothing of it\n    us: clusters 12 available 12"),
        "{stdout}"
    );
    assert!(stdout.contains("stopped every process"), "{stdout}");
}
