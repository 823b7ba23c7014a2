//! Agents that are not in the topology join a relay with a single-use token, in one
//! process over real QUIC on loopback: the joined agent receives what is placed on it
//! and is known at the root; a token works once (also after the relay restarts); a
//! wrong token and a taken name are refused; a connection without a certificate that
//! sends anything but a join is closed while a configured child stays connected; the
//! joined agent is admitted again after the relay restarts.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::eventually;
use common::hierarchy::Hierarchy;
use strata_node::join::{self, JoinError};
use strata_node::objects::parse_manifests;
use strata_node::store::MemStore;
use strata_node::tls::{self, Identity};
use strata_node::transport::{self, close_code};
use strata_protocol::model::Space;
use strata_relay::config::JoinFiles;
use strata_relay::join::Joining;
use strata_relay::tier::runtime::NodeHandle;

async fn connected(node: &NodeHandle, child: &'static str) -> bool {
    node.query(move |c| c.children().any(|(n, _)| n == child))
        .await
        .unwrap_or(false)
}

fn refusal(result: Result<join::Joined, JoinError>) -> (String, String) {
    match result {
        Err(JoinError::Refused { relay, reason, .. }) => (relay, reason),
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("expected a refusal, the join was granted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_joins_with_a_token_once_and_stays_admitted_across_a_relay_restart() {
    let h = Hierarchy::new();
    let (d, ca_path) = (h.dir(), h.ca_path());

    // site-1's join CA and tokens, as `relay topology certs` issues them.
    let join_ca = h.ca().issue_join_ca("site-1").unwrap();
    let files = JoinFiles {
        tokens: d.join("site-1.tokens"),
        ca_cert: d.join("site-1.ca.crt"),
        ca_key: d.join("site-1.ca.key"),
        node_days: 365,
        rate_per_source: 5,
        rate_global: 50,
    };
    std::fs::write(&files.tokens, "tok-one\ntok-two\n").unwrap();
    std::fs::write(&files.ca_cert, join_ca.cert_pem()).unwrap();
    std::fs::write(&files.ca_key, join_ca.key_pem()).unwrap();
    let joining = Arc::new(Joining::load("site-1", &files).unwrap());

    let root = h.relay("center").children(&["site-1"]).start().await;
    let site_store = MemStore::new(2);
    let site_1 = || {
        h.relay("site-1")
            .under("center")
            .children(&["pos-1"])
            .store(&site_store)
            .joining(joining.clone())
    };
    let site = site_1().start().await;
    let site_addr = h.addr("site-1");
    let pos = h.agent("pos-1").role("pos").under("site-1").start();
    eventually("pos-1 is connected", || connected(&site, "pos-1")).await;

    // A wrong token, and a good one asking for a configured child's name: refused,
    // naming the relay; the refusal does not use the token up.
    let (relay, reason) =
        refusal(join::join("site-1", site_addr, &ca_path, "joined-1", "nope").await);
    assert_eq!(
        (relay.as_str(), reason.as_str()),
        ("site-1", "unknown join token")
    );
    let (_, reason) = refusal(join::join("site-1", site_addr, &ca_path, "pos-1", "tok-one").await);
    assert_eq!(reason, "the name \"pos-1\" is already taken here");

    // The join: the agent's key and chain, then a normal connection with them.
    let joined = join::join("site-1", site_addr, &ca_path, "joined-1", "tok-one")
        .await
        .unwrap();
    let (cert, key) = (d.join("joined-1.crt"), d.join("joined-1.key"));
    std::fs::write(&cert, &joined.chain_pem).unwrap();
    std::fs::write(&key, &joined.key_pem).unwrap();
    let joined_id = Identity::load(&cert, &key, &ca_path).unwrap();
    let agent = h
        .agent("joined-1")
        .role("pos")
        .identity(joined_id)
        .under("site-1")
        .start();

    eventually("the root knows the joined cluster", || async {
        root.query(|c| c.reports().clusters().any(|c| c.name == "joined-1"))
            .await
            == Some(true)
    })
    .await;
    let manifests = parse_manifests(common::POS_APP, &Space::default_space()).unwrap();
    root.query(move |c| c.apply_manifests(&manifests).unwrap())
        .await
        .unwrap();
    eventually("the joined agent holds the placed deployment", || async {
        agent
            .query(|a| a.log().live().any(|o| o.key().kind == "Deployment"))
            .await
            == Some(true)
    })
    .await;

    // The same token again, for another name: refused.
    let (relay, reason) =
        refusal(join::join("site-1", site_addr, &ca_path, "joined-2", "tok-one").await);
    assert_eq!(relay, "site-1");
    assert_eq!(reason, "the join token was already used (by \"joined-1\")");

    // A connection without a certificate that sends anything but a join request is
    // closed with a reason; the configured child stays connected.
    let endpoint = transport::client_endpoint(
        "127.0.0.1:0".parse().unwrap(),
        tls::join_client_config(&ca_path).unwrap(),
    )
    .unwrap();
    let conn = transport::connect(&endpoint, site_addr, "site-1")
        .await
        .unwrap();
    let mut s = conn.open_uni().await.unwrap();
    s.write_all(b"\x00GET / HTTP/1.1\r\n\r\n").await.unwrap();
    s.finish().unwrap();
    match tokio::time::timeout(Duration::from_secs(15), conn.closed())
        .await
        .unwrap()
    {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(
                close.error_code,
                quinn::VarInt::from_u32(close_code::PROTOCOL)
            );
            let reason = String::from_utf8_lossy(&close.reason).into_owned();
            assert!(
                reason.starts_with("a connection without a client certificate may only join"),
                "{reason}"
            );
        }
        other => panic!("closed otherwise: {other}"),
    }
    assert!(
        connected(&site, "pos-1").await,
        "the healthy child was dropped"
    );
    assert!(
        connected(&site, "joined-1").await,
        "the joined child was dropped"
    );

    // The relay restarts on its store, its configuration naming only pos-1: the joined
    // agent is admitted again, and its token is still used up.
    site.shutdown().await.unwrap();
    let site = site_1().start().await;
    eventually("the joined agent is connected after the restart", || {
        connected(&site, "joined-1")
    })
    .await;
    let (_, reason) =
        refusal(join::join("site-1", site_addr, &ca_path, "joined-3", "tok-one").await);
    assert_eq!(reason, "the join token was already used (by \"joined-1\")");
    // The second token still works once.
    join::join("site-1", site_addr, &ca_path, "joined-3", "tok-two")
        .await
        .unwrap();

    agent.shutdown().await;
    pos.shutdown().await;
    site.shutdown().await.unwrap();
    root.shutdown().await.unwrap();
}

/// A certificate from another relay's join CA is refused on a node link even when it
/// names a configured child: an agent that joined one relay cannot pose as a node
/// elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_relays_join_ca_is_refused() {
    let h = Hierarchy::new();
    let (d, ca_path) = (h.dir(), h.ca_path());
    let site = h.relay("site-1").children(&["pos-1"]).start().await;
    // Another relay's join CA signs a certificate naming site-1's configured child.
    let other = h.ca().issue_join_ca("site-2").unwrap();
    let (key_pem, csr) = strata_relay::certs::join_request("pos-1").unwrap();
    let chain = other.issue_for_csr("pos-1", &csr).unwrap();
    let (cert, key) = (d.join("forged.crt"), d.join("forged.key"));
    std::fs::write(&cert, chain).unwrap();
    std::fs::write(&key, key_pem).unwrap();
    let forged = Identity::load(&cert, &key, &ca_path).unwrap();
    let agent = h
        .agent("pos-1")
        .role("pos")
        .identity(forged)
        .under("site-1")
        .start();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !connected(&site, "pos-1").await,
        "a certificate of another relay's join CA was admitted"
    );
    agent.shutdown().await;
    site.shutdown().await.unwrap();
}

/// A token may carry a use count and an expiry; join attempts over the per-source rate
/// are refused with a refusal saying so, and the relay keeps serving its child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_expire_and_count_uses_and_a_join_flood_is_refused() {
    let h = Hierarchy::new();
    let (d, ca_path) = (h.dir(), h.ca_path());
    let join_ca = h.ca().issue_join_ca("site-1").unwrap();
    let files = JoinFiles {
        tokens: d.join("site-1.tokens"),
        ca_cert: d.join("site-1.ca.crt"),
        ca_key: d.join("site-1.ca.key"),
        node_days: 365,
        rate_per_source: 2,
        rate_global: 50,
    };
    std::fs::write(
        &files.tokens,
        "# two agents may join with the first, none with the second\ntok-twice uses=2\ntok-old expires=2020-01-01\n",
    )
    .unwrap();
    std::fs::write(&files.ca_cert, join_ca.cert_pem()).unwrap();
    std::fs::write(&files.ca_key, join_ca.key_pem()).unwrap();
    let joining = Arc::new(Joining::load("site-1", &files).unwrap());
    let site = h
        .relay("site-1")
        .children(&["pos-1"])
        .joining(joining)
        .start()
        .await;
    let addr = h.addr("site-1");
    let pos = h.agent("pos-1").role("pos").under("site-1").start();
    eventually("pos-1 is connected", || connected(&site, "pos-1")).await;

    for name in ["joined-1", "joined-2"] {
        join::join("site-1", addr, &ca_path, name, "tok-twice")
            .await
            .unwrap();
    }
    let (_, reason) = refusal(join::join("site-1", addr, &ca_path, "joined-3", "tok-twice").await);
    assert_eq!(
        reason,
        "the join token was already used 2 times (by \"joined-1\", \"joined-2\")"
    );
    let (_, reason) = refusal(join::join("site-1", addr, &ca_path, "joined-3", "tok-old").await);
    assert_eq!(reason, "the join token expired on 2020-01-01");

    // A burst of bogus joins from one address: beyond twice the rate, refused as such.
    let mut flood = tokio::task::JoinSet::new();
    for i in 0..12 {
        let ca_path = ca_path.clone();
        flood.spawn(async move {
            join::join("site-1", addr, &ca_path, &format!("bogus-{i}"), "nope").await
        });
    }
    let reasons: Vec<String> = flood
        .join_all()
        .await
        .into_iter()
        .map(|r| refusal(r).1)
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("too many join attempts from 127.0.0.1 (at most 2/s): retry in")),
        "{reasons:?}"
    );
    assert!(connected(&site, "pos-1").await, "the child was dropped");
    pos.shutdown().await;
    site.shutdown().await.unwrap();
}
