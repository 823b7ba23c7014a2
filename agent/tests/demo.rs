//! `relay demo` runs the whole demo hierarchy as processes and exits 0, having seen the
//! app available on every cluster of one region, then of the other; piped, its progress
//! is plain appended lines (no terminal escapes).

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
    assert!(stdout.contains("links connected: 32/32"), "{stdout}");
    assert!(
        stdout.contains("all 24 clusters registered at the root"),
        "{stdout}"
    );
    assert!(
        !stdout.contains('\x1b'),
        "terminal escapes in piped output:\n{stdout}"
    );
    // Progress lines per region while it rolls out.
    assert!(
        stdout.contains("  eu   [") && stdout.contains("available 12/12"),
        "{stdout}"
    );
    // After the rollout to eu, then after the move to us.
    assert!(
        stdout.contains("    eu: clusters 12 available 12\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    eu: holds nothing of it\n    us: clusters 12 available 12\n"),
        "{stdout}"
    );
    // Every cluster is named available (those of eu after the first rollout, those of
    // us after the move, in the final summary).
    let (_, final_summary) = stdout.split_once("final summary:").unwrap();
    for region in ["eu", "us"] {
        for site in 1..=3 {
            for c in 1..=4 {
                let cluster = format!("{region}-site-{site}-c{c}");
                let text = if region == "us" {
                    final_summary
                } else {
                    &stdout
                };
                assert!(
                    text.lines()
                        .any(|l| l.contains("available:") && l.contains(&cluster)),
                    "{cluster} not named available:\n{stdout}"
                );
            }
        }
    }
    assert!(stdout.contains("stopped every process"), "{stdout}");
}
