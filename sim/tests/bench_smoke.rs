//! The benchmark harness on a tiny tree (2 regions x 2 sites x 2 agents on loopback,
//! every link TLS 1.3 over TCP: the bench's QUIC path is the one every other test
//! uses): every figure is produced and consistent. Nothing about speed is asserted.

use strata_node::dial::TransportMode;
use strata_sim::bench::{self, Options, Phase};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_tree_yields_every_figure() {
    let opts = Options {
        fanout: vec![2, 2, 2],
        object_bytes: 512,
        rounds: 2,
        changed: 3,
        flat: false,
        nats: None,
        customize: true,
        transport: TransportMode::Tcp,
    };
    let t = bench::topology(&opts, Phase::Tree).await.expect("the run");
    assert_eq!(t.leaves, 8);
    assert_eq!(t.p1.n, 16, "every leaf seen once per round");
    assert_eq!(t.p3.n, 16);
    assert_eq!(t.p2.len(), 3, "root, regions, sites");
    assert_eq!(
        t.p2.iter().map(|b| b.links).collect::<Vec<_>>(),
        vec![2, 4, 8]
    );
    for tier in &t.p2 {
        // Every link carried the object at least once per update.
        assert!(
            tier.ratio >= 1.0,
            "tier {} sent less than the object: {tier:?}",
            tier.tier
        );
        // TCP links carry no datagrams: the figure is QUIC's (the CI bench prints it).
        assert_eq!(
            (
                tier.datagrams_sent_per_link,
                tier.datagrams_received_per_link
            ),
            (0.0, 0.0),
            "tier {} counted datagrams on TCP links: {tier:?}",
            tier.tier
        );
    }
    // Every relay tier's pushed summaries showed all of its leaves, in every round.
    assert_eq!(t.p3_hops.len(), 2, "one line of hops per round");
    for hops in &t.p3_hops {
        let relays: Vec<(usize, usize, usize)> = hops
            .tiers
            .iter()
            .map(|h| (h.level, h.relays, h.incomplete))
            .collect();
        assert_eq!(relays, vec![(1, 2, 0), (2, 4, 0)], "{hops:?}");
    }
    assert!(t.encoded_object_bytes > 512);
    let p4 = t.p4.expect("a region was cut off");
    assert_eq!(p4.leaves_below, 4);
    assert!(p4.resync_bytes >= p4.changed_bytes, "{p4:?}");
    assert_eq!(t.storm.missing, 0);
    assert_eq!(t.storm.applied.n, 8);
    assert!(t.memory.rss_idle > 0);
    // The machine's speed was timed on both sides of the updates.
    let (before, after) = t.calibration_ms;
    assert!(before > 0.0 && after > 0.0, "{:?}", t.calibration_ms);
}
