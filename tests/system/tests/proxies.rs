//! Links through real proxies and without UDP: relays and agents in this process over
//! real sockets on loopback, tinyproxy and squid (Debian's, installed by
//! `.ci/install-proxies` the first time a test needs them) as processes.
//!
//! How "UDP is blocked" is made here: the child is given an address where only TCP
//! answers (the parent's TLS/TCP listener on a port of its own, nothing on that UDP
//! port), or where a [`UdpGate`] the test shuts and opens forwards UDP to the parent's
//! QUIC port. No network namespace is needed, so the tests run unprivileged.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use crate::common;

use std::time::Duration;

use common::balancers;
use common::hierarchy::{Hierarchy, LinkSpec};
use common::proxies::{self, UdpGate};
use common::{APP, eventually};
use strata_node::dial::{Connector, TransportMode};
use strata_node::link::TransportKind;
use strata_node::objects::parse_manifests;
use strata_node::proxy::Proxy;
use strata_node::tls;
use strata_protocol::model::Space;
use strata_relay::tier::runtime::NodeHandle;
use strata_test_tools::{Tool, require};

async fn apply(root: &NodeHandle, text: &str) {
    let manifests = parse_manifests(text, &Space::default_space()).unwrap();
    root.query(move |c| c.apply_manifests(&manifests).unwrap().revision.unwrap())
        .await
        .unwrap();
}

/// The transports of `relay`'s children's links, by name.
async fn child_transports(relay: &NodeHandle) -> Vec<(String, TransportKind)> {
    relay.client().link_stats().await.unwrap().child_transports
}

async fn root_knows(root: &NodeHandle, cluster: &'static str) -> bool {
    root.query(move |c| c.reports().clusters().any(|c| c.name == cluster))
        .await
        == Some(true)
}

async fn holds_deployment(agent: &strata_agent::runtime::AgentHandle) -> bool {
    agent
        .query(|a| a.log().live().any(|o| o.key().kind == "Deployment"))
        .await
        == Some(true)
}

async fn holds_newer(
    agent: &strata_agent::runtime::AgentHandle,
    than: strata_protocol::model::Revision,
) -> bool {
    agent
        .query(move |a| a.log().live().any(|o| o.revision > than))
        .await
        == Some(true)
}

fn replicas(n: u32) -> String {
    APP.replace("replicas: 2", &format!("replicas: {n}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_and_an_agent_reach_their_parents_through_tinyproxy_without_udp() {
    let h = Hierarchy::new();
    let proxy = proxies::tinyproxy(h.dir(), 600).await;
    let via = Proxy::parse(&proxy.url(None)).unwrap();
    // The root's TCP listener has a port of its own: nothing answers UDP there.
    let root = h
        .relay("center")
        .children(&["site-1"])
        .tcp_at("127.0.0.1:0".parse().unwrap())
        .start()
        .await;
    let site = h
        .relay("site-1")
        .under("center")
        .children(&["pos-1"])
        .tcp_at("127.0.0.1:0".parse().unwrap())
        .link(LinkSpec {
            mode: TransportMode::Auto,
            address: Some(h.tcp_addr("center").to_string()),
            proxy: Some(via.clone()),
            probe: None,
            keep_alive: None,
        })
        .start()
        .await;
    let pos = h
        .agent("pos-1")
        .role("pos")
        .under("site-1")
        .link(LinkSpec {
            mode: TransportMode::Tcp,
            address: Some(h.tcp_addr("site-1").to_string()),
            proxy: Some(via),
            probe: None,
            keep_alive: None,
        })
        .start();
    apply(&root, APP).await;
    eventually(
        "the Deployment reaches pos-1 and its status the root",
        || async {
            pos.query(|a| a.log().live().any(|o| o.key().kind == "Deployment"))
                .await
                == Some(true)
                && root_knows(&root, "pos-1").await
        },
    )
    .await;
    assert_eq!(
        child_transports(&root).await,
        [("site-1".to_owned(), TransportKind::Tcp)]
    );
    assert_eq!(
        child_transports(&site).await,
        [("pos-1".to_owned(), TransportKind::Tcp)]
    );
    let log = proxy.log_text();
    for parent in ["center", "site-1"] {
        let tunnel = format!("CONNECT {}", h.tcp_addr(parent));
        assert!(log.contains(&tunnel), "tinyproxy saw no {tunnel:?}:\n{log}");
    }
    pos.shutdown().await;
    site.shutdown().await.unwrap();
    root.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn squid_with_basic_auth_carries_the_link_and_a_wrong_password_is_named() {
    let h = Hierarchy::new();
    let proxy = proxies::squid(h.dir(), "alice", "s3cret").await;
    let root = h.relay("center").children(&["pos-1"]).tcp().start().await;
    // A wrong password: the proxy's refusal, named with its address, the password not
    // shown.
    let id = h.identity("pos-1");
    let wrong = Connector::new(
        TransportMode::Tcp,
        None,
        Some(tls::client_config(&id).unwrap()),
        Some(Proxy::parse(&proxy.url(Some(("alice", "wrong-pw")))).unwrap()),
    );
    let err = wrong
        .connect_tcp(&h.tcp_addr("center").into(), "center")
        .await
        .unwrap_err()
        .to_string();
    let at = format!("127.0.0.1:{}", proxy.port);
    assert!(
        err.contains("407") && err.contains(&at) && !err.contains("wrong-pw"),
        "{err}"
    );

    let pos = h
        .agent("pos-1")
        .role("pos")
        .under("center")
        .link(LinkSpec {
            mode: TransportMode::Tcp,
            address: Some(h.tcp_addr("center").to_string()),
            proxy: Some(Proxy::parse(&proxy.url(Some(("alice", "s3cret")))).unwrap()),
            probe: None,
            keep_alive: None,
        })
        .start();
    apply(&root, APP).await;
    eventually("the Deployment reaches pos-1 through squid", || async {
        pos.query(|a| a.log().live().any(|o| o.key().kind == "Deployment"))
            .await
            == Some(true)
            && root_knows(&root, "pos-1").await
    })
    .await;
    assert_eq!(
        child_transports(&root).await,
        [("pos-1".to_owned(), TransportKind::Tcp)]
    );
    let log = proxy.log_text();
    assert!(
        log.contains("alice") && log.contains("CONNECT"),
        "squid logged no authenticated tunnel:\n{log}"
    );
    pos.shutdown().await;
    root.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_tcp_while_udp_is_blocked_and_returns_to_quic() {
    let h = Hierarchy::new();
    let root = h
        .relay("center")
        .children(&["pos-1"])
        .tcp_at("127.0.0.1:0".parse().unwrap())
        .start()
        .await;
    // UDP to the TCP listener's port number goes through a gate to the QUIC port.
    let gate = UdpGate::new(h.tcp_addr("center"), h.addr("center"), false).await;
    assert_eq!(gate.addr, h.tcp_addr("center"));
    let pos = h
        .agent("pos-1")
        .role("pos")
        .under("center")
        .link(LinkSpec {
            mode: TransportMode::Auto,
            address: Some(gate.addr.to_string()),
            proxy: None,
            probe: Some(Duration::from_millis(300)),
            keep_alive: None,
        })
        .start();
    apply(&root, APP).await;
    eventually("pos-1 is served over TCP while UDP is blocked", || async {
        pos.query(|a| a.log().live().any(|o| o.key().kind == "Deployment"))
            .await
            == Some(true)
            && child_transports(&root).await == [("pos-1".to_owned(), TransportKind::Tcp)]
    })
    .await;
    let first = pos
        .query(|a| a.log().live().map(|o| o.revision).max())
        .await
        .flatten()
        .unwrap();
    gate.set_open(true);
    eventually("the link moves to QUIC once UDP passes", || async {
        child_transports(&root).await == [("pos-1".to_owned(), TransportKind::Quic)]
    })
    .await;
    // And carries the next change.
    apply(&root, &replicas(5)).await;
    eventually("the change reaches pos-1 over QUIC", || async {
        pos.query(move |a| a.log().live().any(|o| o.revision > first))
            .await
            == Some(true)
    })
    .await;
    pos.shutdown().await;
    root.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_given_by_name_is_resolved_and_its_node_name_checked() {
    let h = Hierarchy::new();
    let root = h
        .relay("center")
        .children(&["pos-1", "pos-2"])
        .tcp()
        .start()
        .await;
    let port = h.addr("center").port();
    // `localhost` may resolve to ::1 first: nothing listens there, the next address
    // (127.0.0.1) is tried.
    let by_name = |mode| LinkSpec {
        mode,
        address: Some(format!("localhost:{port}")),
        proxy: None,
        probe: None,
        keep_alive: None,
    };
    let quic = h
        .agent("pos-1")
        .role("pos")
        .under("center")
        .link(by_name(TransportMode::Quic))
        .start();
    let tcp = h
        .agent("pos-2")
        .role("pos")
        .under("center")
        .link(by_name(TransportMode::Tcp))
        .start();
    apply(&root, APP).await;
    eventually(
        "both agents, one per transport, hold the Deployment",
        || async { root_knows(&root, "pos-1").await && root_knows(&root, "pos-2").await },
    )
    .await;
    let mut transports = child_transports(&root).await;
    transports.sort();
    assert_eq!(
        transports,
        [
            ("pos-1".to_owned(), TransportKind::Quic),
            ("pos-2".to_owned(), TransportKind::Tcp)
        ]
    );
    // A name that resolves, but to a node whose certificate names another: refused.
    let id = h.identity("pos-1");
    let c = Connector::new(
        TransportMode::Tcp,
        None,
        Some(tls::client_config(&id).unwrap()),
        None,
    );
    let err = c
        .connect_tcp(&format!("localhost:{port}").parse().unwrap(), "eu-west")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("eu-west") && err.contains("TLS"), "{err}");
    quic.shutdown().await;
    tcp.shutdown().await;
    root.shutdown().await.unwrap();
}

/// tinyproxy closing tunnels idle for 1 s (its `Timeout`): pos-1's link, pinging every
/// 5 s (the default), is cut, notices, tunnels again and resumes from its cursor (a
/// later change arrives; the Deployment is not sent again); pos-2's, pinging every
/// 300 ms (`keepalive_ms`) through a tinyproxy of its own, is never cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_the_proxy_cuts_is_tunnelled_again_and_keepalives_keep_one_open() {
    let h = Hierarchy::new();
    let cutting = proxies::tinyproxy(&h.dir().join("a"), 1).await;
    let kept = proxies::tinyproxy(&h.dir().join("b"), 1).await;
    let root = h
        .relay("center")
        .children(&["pos-1", "pos-2"])
        .tcp()
        .start()
        .await;
    let via = |proxy: &proxies::ProxyProc, keep_alive| LinkSpec {
        mode: TransportMode::Tcp,
        address: Some(h.tcp_addr("center").to_string()),
        proxy: Some(Proxy::parse(&proxy.url(None)).unwrap()),
        probe: None,
        keep_alive,
    };
    let pos = h
        .agent("pos-1")
        .role("pos")
        .under("center")
        .link(via(&cutting, None))
        .start();
    let pinging = h
        .agent("pos-2")
        .role("pos")
        .under("center")
        .link(via(&kept, Some(Duration::from_millis(300))))
        .start();
    apply(&root, APP).await;
    eventually("the Deployment reaches both agents", || async {
        holds_deployment(&pos).await && holds_deployment(&pinging).await
    })
    .await;
    // The first session's (a new agent's view starts from a snapshot or a delta).
    let snapshots = pos.query(|a| a.snapshots_received()).await.unwrap();
    let tunnels = |p: &proxies::ProxyProc| p.log_text().matches("Request (file descriptor").count();
    eventually(
        "the proxy cuts pos-1's idle tunnel and pos-1 tunnels again",
        || async { tunnels(&cutting) >= 2 },
    )
    .await;
    let first = pos
        .query(|a| a.log().live().map(|o| o.revision).max())
        .await
        .flatten()
        .unwrap();
    apply(&root, &replicas(7)).await;
    eventually("the change made after the cut reaches pos-1", || async {
        pos.query(move |a| a.log().live().any(|o| o.revision > first))
            .await
            == Some(true)
    })
    .await;
    assert_eq!(
        pos.query(|a| a.snapshots_received()).await.unwrap(),
        snapshots,
        "every tunnel after the first resumed with a delta"
    );
    assert_eq!(
        tunnels(&kept),
        1,
        "pos-2's keepalives should have kept its one tunnel open"
    );
    println!(
        "tunnels: pos-1 {}, pos-2 {}; snapshots to pos-1: {snapshots}",
        tunnels(&cutting),
        tunnels(&kept),
    );
    pos.shutdown().await;
    pinging.shutdown().await;
    root.shutdown().await.unwrap();
}

/// Runs `nft` with `args` (inside the test's own network namespace).
fn nft(args: &str) {
    let out = std::process::Command::new(require(Tool::Nft))
        .args(args.split_whitespace())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nft {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `auto` in a network namespace of its own (`unshare -rn`, no privilege needed where
/// user namespaces are allowed), where an nftables rule drops UDP to the parent's port:
/// the agent falls back to TLS/TCP, and once the rule is deleted its probe finds QUIC
/// and the link moves back. Where no namespace can be made, it says so and skips (the
/// [`UdpGate`] test above covers the same logic without one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_in_a_network_namespace_where_nftables_drops_udp() {
    // libtest's name of this test: its path below the crate root.
    let name = format!(
        "{}::auto_in_a_network_namespace_where_nftables_drops_udp",
        module_path!().split_once("::").map_or("", |(_, m)| m)
    );
    if std::env::var_os("STRATA_IN_NETNS").is_none() {
        let unshare = std::process::Command::new("unshare")
            .args(["-rn", "true"])
            .status();
        if !unshare.is_ok_and(|s| s.success()) {
            eprintln!("SKIPPED: this machine cannot make a network namespace (unshare -rn)");
            return;
        }
        // Installed out here: the namespace has no network to fetch them.
        require(Tool::Nft);
        require(Tool::Ip);
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("unshare")
            .args([
                "-rn",
                exe.to_str().unwrap(),
                "--exact",
                &name,
                "--nocapture",
            ])
            .env("STRATA_IN_NETNS", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "the test inside the namespace failed");
        // A filter matching nothing passes too: the test must have run in there.
        assert!(
            stdout.contains("test result: ok. 1 passed"),
            "the namespace ran no test named {name}"
        );
        return;
    }
    let lo = std::process::Command::new(require(Tool::Ip))
        .args(["link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(lo.success());
    let h = Hierarchy::new();
    let root = h.relay("center").children(&["pos-1"]).tcp().start().await;
    let port = h.addr("center").port();
    nft("add table inet strata");
    nft("add chain inet strata out { type filter hook output priority 0 ; }");
    nft(&format!("add rule inet strata out udp dport {port} drop"));
    let pos = h
        .agent("pos-1")
        .role("pos")
        .under("center")
        .link(LinkSpec {
            mode: TransportMode::Auto,
            address: None,
            proxy: None,
            probe: Some(Duration::from_millis(300)),
            keep_alive: None,
        })
        .start();
    apply(&root, APP).await;
    eventually("pos-1 is served over TCP while UDP is dropped", || async {
        pos.query(|a| a.log().live().any(|o| o.key().kind == "Deployment"))
            .await
            == Some(true)
            && child_transports(&root).await == [("pos-1".to_owned(), TransportKind::Tcp)]
    })
    .await;
    nft("delete table inet strata");
    eventually("the link moves to QUIC once UDP passes", || async {
        child_transports(&root).await == [("pos-1".to_owned(), TransportKind::Quic)]
    })
    .await;
    pos.shutdown().await;
    root.shutdown().await.unwrap();
}

/// A parent behind one balancer address, as replicated parents will be: haproxy in TCP
/// mode and nginx's stream module for UDP listen on the same port number; an agent on
/// QUIC reaches the parent through nginx, one on TLS/TCP through haproxy, both by that
/// one address, and a later change reaches both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_behind_haproxy_for_tcp_and_nginx_stream_for_quic() {
    // Installed first: an install must not stall the hierarchy halfway through its start.
    require(Tool::Haproxy);
    require(Tool::Nginx);
    let h = Hierarchy::new();
    let root = h
        .relay("center")
        .children(&["pos-1", "pos-2"])
        .tcp()
        .start()
        .await;
    let front = common::free_port();
    let tcp_lb = balancers::haproxy(h.dir(), front, &[h.tcp_addr("center")]).await;
    let _udp_lb = balancers::nginx_udp(h.dir(), front, &[h.addr("center")]).await;
    let through = |mode| LinkSpec {
        mode,
        address: Some(format!("127.0.0.1:{front}")),
        proxy: None,
        probe: None,
        keep_alive: None,
    };
    let quic = h
        .agent("pos-1")
        .role("pos")
        .under("center")
        .link(through(TransportMode::Quic))
        .start();
    let tcp = h
        .agent("pos-2")
        .role("pos")
        .under("center")
        .link(through(TransportMode::Tcp))
        .start();
    apply(&root, APP).await;
    eventually("both agents hold the Deployment", || async {
        holds_deployment(&quic).await && holds_deployment(&tcp).await
    })
    .await;
    let mut transports = child_transports(&root).await;
    transports.sort();
    assert_eq!(
        transports,
        [
            ("pos-1".to_owned(), TransportKind::Quic),
            ("pos-2".to_owned(), TransportKind::Tcp)
        ]
    );
    let first = quic
        .query(|a| a.log().live().map(|o| o.revision).max())
        .await
        .flatten()
        .unwrap();
    apply(&root, &replicas(3)).await;
    eventually("the change reaches both through the balancers", || async {
        holds_newer(&quic, first).await && holds_newer(&tcp, first).await
    })
    .await;
    drop(tcp_lb);
    quic.shutdown().await;
    tcp.shutdown().await;
    root.shutdown().await.unwrap();
}
