//! `relay demo` runs the whole demo hierarchy as processes and exits 0, having seen the
//! app available on every cluster of one region, then of the other; piped, its progress
//! is plain appended lines (no terminal escapes). With kubectl on the PATH (the one
//! `.ci/install-kube-clients` installs), its last step shows the fleet as kubectl sees
//! it at the root, through the kubeconfig it wrote, then a simulated cluster's Pods and
//! a Pod's log three tiers down, through the debug tunnel. Its root answers DNS, and
//! during the move never without an address nor with a gone cluster's.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use crate::common;

use std::process::Command;

#[test]
fn the_demo_rolls_out_moves_the_app_and_exits_cleanly() {
    let path = std::env::join_paths(std::iter::once(common::kube_clients()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let out = Command::new(common::bin("relay"))
        .arg("demo")
        .env("RUST_LOG", "warn")
        .env("PATH", path)
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
    // kubectl, with the kubeconfig the demo wrote, sees the app on the 12 us clusters.
    let (_, kubectl) = stdout
        .split_once("the fleet as kubectl sees it (kubectl --kubeconfig ")
        .unwrap_or_else(|| panic!("no kubectl step:\n{stdout}"));
    assert!(
        kubectl
            .lines()
            .any(|l| l.starts_with("retail ") && l.contains(" shop ") && l.contains("12/12")),
        "{kubectl}"
    );
    // Then, through the debug tunnel, the Pods of a simulated cluster three tiers down
    // and the last lines of one Pod's log, with kubectl.
    let (_, debug) = stdout
        .split_once("debugging us-site-1-c1 through the tiers (center -> us -> us-site-1 -> us-site-1-c1) with kubectl")
        .unwrap_or_else(|| panic!("no debug step:\n{stdout}"));
    let (pods, log) = debug
        .split_once("$ kubectl logs -n retail shop-")
        .unwrap_or_else(|| panic!("no kubectl logs:\n{debug}"));
    assert_eq!(
        pods.lines()
            .filter(|l| l.starts_with("shop-") && l.contains(" Running "))
            .count(),
        3,
        "{pods}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains(" shop-") && l.ends_with("(simulated)")),
        "{log}"
    );
    assert!(stdout.contains("stopped every process"), "{stdout}");
    // DNS at the root followed the move: never no address, never a gone cluster's.
    let dns = stdout
        .lines()
        .find(|l| l.starts_with("DNS at the root (shop.retail.demo.strata.)"))
        .unwrap_or_else(|| panic!("no DNS figures:\n{stdout}"));
    println!("{dns}");
    assert!(
        dns.contains("no address for 0 ms at most")
            && dns.contains("no longer held the app for 0 ms at most"),
        "{dns}"
    );
}
