//! Figures, never asserted (ignored tests: `--ignored --nocapture`), on the fleet of
//! `volume_moves.rs`: a volume copy's throughput through three tiers against the same
//! chunks over one plain TLS connection, desired state's latency during the copy, and
//! the write downtime of ReadWriteOnce moves.

#![allow(clippy::unwrap_used)] // integration tests may unwrap
// Figures: timed with tokio's clock.
#![allow(clippy::disallowed_types)]

use std::time::Duration;

use crate::common::eventually;
use crate::common::hierarchy::Hierarchy;
use crate::volume_moves::{Fleet, app, apply, bytes, claim, fleet, volume_move};
use strata_agent::sim_volumes::{SimVolumes, VolumeAccessError};
use strata_relay::tier::core::volume_gate::VolumePhase;

/// The size of the figures' volumes in MiB: `STRATA_VOLUME_MIB`, else `default`.
fn figure_mib(default: usize) -> usize {
    std::env::var("STRATA_VOLUME_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The fleet with the app on eu-1 and its claim (`STRATA_VOLUME_MIB`, else
/// `default_mib`) written full; the claim's size in MiB.
async fn figure_fleet(default_mib: usize, seed: u64) -> (Fleet, usize) {
    let f = fleet().await;
    let mib = figure_mib(default_mib);
    let data = bytes(mib << 20, seed);
    f.place_and_write(&format!("{mib}Mi"), &data).await;
    (f, mib)
}

fn mib_per_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / took.as_secs_f64()
}

/// The same chunks as a volume copy (read with their sums from one simulated cluster,
/// checked and written into another) over one plain TLS 1.3 connection on loopback,
/// with the hierarchy's certificates: the baseline of the copy through the tiers.
async fn plain_tls_copy(h: &Hierarchy, src: &SimVolumes) -> (u64, Duration) {
    use strata_node::volume::{checksum, read_frame, write_frame};
    use strata_protocol::volume::VolumeFrame;
    let server = strata_node::tls::server_config(&h.identity("us-1")).unwrap();
    let client = strata_node::tls::client_config(&h.identity("eu-1")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_, dst) = strata_agent::sim_volumes::new_store();
    let receiver = {
        let dst = dst.clone();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut s = tokio_rustls::TlsAcceptor::from(server)
                .accept(tcp)
                .await
                .unwrap();
            let mut buf = Vec::new();
            dst.begin_restore(&claim()).await.unwrap();
            while let Some(f) = read_frame(&mut s, &mut buf).await.unwrap() {
                match f {
                    VolumeFrame::Chunk {
                        index, sum, data, ..
                    } => {
                        assert_eq!(checksum(&data), sum);
                        dst.restore_chunk(&claim(), index, data).await.unwrap();
                    }
                    VolumeFrame::End { size, sums } => {
                        assert_eq!(dst.end_restore(&claim(), size, &sums, false).await, Ok(0));
                        break;
                    }
                    other => panic!("{other:?}"),
                }
            }
        })
    };
    let started = tokio::time::Instant::now();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("us-1".to_owned()).unwrap();
    let mut s = tokio_rustls::TlsConnector::from(client)
        .connect(name, tcp)
        .await
        .unwrap();
    let (size, sums) = src.manifest(&claim()).await.unwrap();
    let mut buf = Vec::new();
    for index in 0..sums.len() as u32 {
        let (data, sum) = src.chunk(&claim(), index).await.unwrap().unwrap();
        write_frame(&mut s, &VolumeFrame::chunk(index, sum, data), &mut buf)
            .await
            .unwrap();
    }
    write_frame(&mut s, &VolumeFrame::End { size, sums }, &mut buf)
        .await
        .unwrap();
    receiver.await.unwrap();
    let took = started.elapsed();
    assert_eq!(dst.digest(&claim()).await, src.digest(&claim()).await);
    (size, took)
}

/// Applies `count` changes of a ConfigMap placed on us-1 (numbered from `first`), one
/// after the other; how long each took to reach us-1.
async fn probes(f: &Fleet, first: u64, count: u64) -> Vec<Duration> {
    let mut took = Vec::new();
    for n in first..first + count {
        let text = format!(
            "
apiVersion: v1
kind: ConfigMap
metadata: {{ name: probe, namespace: probe }}
data: {{ n: \"{n}\" }}
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: probe }}
spec:
  objects: [ {{ kinds: [ConfigMap], namespaces: [probe] }} ]
  clusters: {{ selector: {{ matchLabels: {{ region: us }} }} }}
"
        );
        let started = tokio::time::Instant::now();
        apply(&f.root, &text).await;
        let want = format!("\"n\":\"{n}\"");
        eventually("the probe arrives at us-1", || {
            let want = want.clone();
            async move {
                f.agents[1]
                    .query(move |a| {
                        a.log().live().any(|o| {
                            o.key().kind == "ConfigMap"
                                && String::from_utf8_lossy(&o.body).contains(&want)
                        })
                    })
                    .await
                    == Some(true)
            }
        })
        .await;
        took.push(started.elapsed());
    }
    took
}

/// Figures, not a check: a copy's throughput through three tiers (eu-1 → eu-site → eu
/// → center → us → us-site → us-1, QUIC on loopback) against the same chunks over one
/// plain TLS connection. `STRATA_VOLUME_MIB` sets the size (256 MiB by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures: run with --ignored --nocapture"]
async fn volume_copy_throughput_figures() {
    let (f, mib) = figure_fleet(256, 60).await;
    let claim = claim();
    // Desired state for us-1 (the writing end) while the copy runs: how long each change
    // of a ConfigMap placed there takes to arrive, idle and during the copy.
    let idle = probes(&f, 0, 10).await;
    let started = tokio::time::Instant::now();
    let copying = {
        let (node, claim) = (f.root.client(), claim.clone());
        tokio::spawn(async move {
            let r = strata_relay::tier::volume::copy_volume(&node, "eu-1", "us-1", &claim, false)
                .await
                .unwrap();
            (r, started.elapsed())
        })
    };
    let mut during = Vec::new();
    let mut n = 100;
    while !copying.is_finished() {
        during.extend(probes(&f, n, 1).await);
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (r, tiers) = copying.await.unwrap();
    assert_eq!(r.by, "center");
    assert_eq!(
        f.us_vols.digest(&claim).await.unwrap(),
        f.eu_vols.digest(&claim).await.unwrap()
    );
    let ms = |v: &[Duration]| {
        let mut v: Vec<u128> = v.iter().map(Duration::as_millis).collect();
        v.sort_unstable();
        format!(
            "median {} ms, max {} ms over {}",
            v.get(v.len() / 2).copied().unwrap_or(0),
            v.last().copied().unwrap_or(0),
            v.len()
        )
    };
    println!(
        "a change placed on us-1 arrives: idle {}; during the copy {}",
        ms(&idle),
        ms(&during)
    );
    let (size, plain) = plain_tls_copy(&f.h, &f.eu_vols).await;
    println!(
        "volume copy of {mib} MiB: through 3 tiers via {} {:.1} MiB/s ({} ms); plain TLS on loopback {:.1} MiB/s ({} ms)",
        r.by,
        mib_per_s(r.bytes, tiers),
        tiers.as_millis(),
        mib_per_s(size, plain),
        plain.as_millis()
    );
    f.shutdown().await;
}

/// The app's writes during a move, 4 KiB every 2 ms until its writers are stopped:
/// `spread` over the whole claim (each in another chunk: 128 MiB/s of chunks dirtied), or
/// appended one after the other (2 MiB/s). How many were acknowledged.
fn app_writes(vols: SimVolumes, size: u64, spread: bool) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut acked = 0u64;
        for i in 0..1_000_000u64 {
            let at = if spread {
                (i * 1_048_583) % (size - 4096)
            } else {
                (i * 4096) % (size - 4096)
            };
            match vols.write(&claim(), at, &bytes(4096, i + 3)).await {
                Ok(()) => acked += 1,
                Err(VolumeAccessError::Frozen(_)) => return acked,
                Err(e) => panic!("{e}"),
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        acked
    })
}

/// Figures, not a check: the write downtime of a ReadWriteOnce move (phase 2) through
/// the root, eu-1 → us-1 with the app's writes spread over the claim, then back with
/// its writes appended (eu-1 kept its data: only what changed is copied), then to us-2
/// (a fresh claim) with its writes appended. `STRATA_VOLUME_MIB` sets the size (1 GiB by
/// default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures: run with --ignored --nocapture"]
async fn rwo_move_downtime_figures() {
    let (f, mib) = figure_fleet(1024, 61).await;
    let size = (mib as u64) << 20;
    let all = [&f.eu_vols, &f.us_vols, &f.us2_vols];
    for (from, to, region, spread) in [
        (0, 1, "us", true),
        (1, 0, "eu", false),
        (0, 2, "us2", false),
    ] {
        let vols = all[from];
        let writer = app_writes(vols.clone(), size, spread);
        let started = tokio::time::Instant::now();
        apply(&f.root, &app(region, &format!("{mib}Mi"))).await;
        f.wait_moved_between(from, to).await;
        let took = started.elapsed();
        let acked = writer.await.unwrap();
        let m = volume_move(&f.root).await.unwrap();
        assert_eq!(m.phase, VolumePhase::Restored);
        println!(
            "ReadWriteOnce move of {mib} MiB {} through the root, {acked} writes of 4 KiB {} during phase 1: write downtime (phase 2) {} ms, whole move {} ms; {}",
            m.pairs[0].0.clone() + " -> " + &m.pairs[0].1,
            if spread {
                "spread over the claim"
            } else {
                "appended"
            },
            m.downtime_ms.unwrap(),
            took.as_millis(),
            m.detail
        );
    }
    f.shutdown().await;
}
