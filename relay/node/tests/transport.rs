//! Real QUIC with mutual TLS on loopback: identities, refusals, and framed messages on
//! their class streams.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::net::SocketAddr;
use std::time::Duration;

use strata_node::tls::{self, Identity};
use strata_node::transport::{self, TransportError, close_code};
use strata_protocol::codec::FrameDecoder;
use strata_protocol::wire::{ChildToParent, Hello, ParentToChild, Reports, Role, StreamClass};
use strata_topology::certs::Ca;
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);

struct Parent {
    endpoint: transport::QuicListener,
    addr: SocketAddr,
}

fn parent(ca: &Ca) -> Parent {
    let id = Identity::issue(ca, "center").unwrap();
    let endpoint = transport::server_endpoint(
        "127.0.0.1:0".parse().unwrap(),
        tls::server_config(&id).unwrap(),
        [7; 32],
    )
    .unwrap();
    let addr = endpoint.local_addr().unwrap();
    Parent { endpoint, addr }
}

fn child_endpoint(ca: &Ca, name: &str) -> quinn::Endpoint {
    let id = Identity::issue(ca, name).unwrap();
    transport::client_endpoint(
        "127.0.0.1:0".parse().unwrap(),
        tls::client_config(&id).unwrap(),
    )
    .unwrap()
}

/// An endpoint that trusts `ca` (so it accepts the parent) but whose own certificate,
/// naming `name`, comes from another CA.
fn intruder(ca: &Ca, name: &str) -> quinn::Endpoint {
    let foreign = Ca::generate("foreign").unwrap();
    let cert = foreign.issue(name).unwrap();
    let id = Identity::from_pem(
        cert.cert_pem.as_bytes(),
        cert.key_pem.as_bytes(),
        ca.cert_pem().as_bytes(),
    )
    .unwrap();
    transport::client_endpoint(
        "127.0.0.1:0".parse().unwrap(),
        tls::client_config(&id).unwrap(),
    )
    .unwrap()
}

/// A child `site-1` connected to a parent `center`: (the child's end, the parent's).
async fn connected(ca: &Ca) -> (quinn::Connection, quinn::Connection) {
    let p = parent(ca);
    let child = child_endpoint(ca, "site-1");
    let (conn, incoming) = tokio::join!(transport::connect(&child, p.addr, "center"), async {
        p.endpoint.accept().await.unwrap().await.unwrap()
    });
    (conn.unwrap(), incoming)
}

fn hello(node: &str) -> ChildToParent {
    ChildToParent::Hello(Hello {
        min_version: 1,
        max_version: 1,
        node: node.into(),
        role: Role::Relay,
        run: 1,
    })
}

#[tokio::test]
async fn messages_of_every_class_cross_both_ways_and_the_parent_knows_the_child() {
    let ca = Ca::generate("test").unwrap();
    let (conn, incoming) = connected(&ca).await;
    assert_eq!(tls::peer_node_name(&incoming).unwrap(), "site-1");
    assert_eq!(tls::peer_node_name(&conn).unwrap(), "center");

    let (up_tx, mut up_rx) = transport::split::<ChildToParent, ParentToChild>(conn, 1 << 20);
    let (down_tx, mut down_rx) =
        transport::split::<ParentToChild, ChildToParent>(incoming, 1 << 20);
    up_tx.send(hello("site-1")).unwrap();
    up_tx
        .send(ChildToParent::Reports(Reports {
            epoch: 1,
            epoch_start: 0,
            seq: 0,
            items: vec![],
        }))
        .unwrap();
    let mut got = [
        timeout(LIMIT, down_rx.recv()).await.unwrap().unwrap(),
        timeout(LIMIT, down_rx.recv()).await.unwrap().unwrap(),
    ];
    got.sort_by_key(|m| matches!(m, ChildToParent::Reports(_)));
    assert_eq!(got[0], hello("site-1"));
    assert!(matches!(got[1], ChildToParent::Reports(_)));

    down_tx.send(ParentToChild::Pong { nonce: 9 }).unwrap();
    assert_eq!(
        timeout(LIMIT, up_rx.recv()).await.unwrap().unwrap(),
        ParentToChild::Pong { nonce: 9 }
    );
}

#[tokio::test]
async fn a_certificate_from_a_foreign_ca_is_refused() {
    let ca = Ca::generate("test").unwrap();
    let p = parent(&ca);
    let intruder = intruder(&ca, "site-1");
    let accept = tokio::spawn(async move {
        let incoming = p.endpoint.accept().await.unwrap();
        incoming.await.map(|_| ())
    });
    let outcome = timeout(LIMIT, async {
        let conn = transport::connect(&intruder, p.addr, "center").await?;
        // TLS 1.3: the refusal shows on first use.
        let (tx, mut rx) = transport::split::<ChildToParent, ParentToChild>(conn, 1 << 20);
        tx.send(hello("site-1"))?;
        rx.recv().await.map(|_| ())
    })
    .await
    .unwrap();
    assert!(outcome.is_err(), "the intruder got an answer");
    assert!(
        timeout(LIMIT, accept).await.unwrap().unwrap().is_err(),
        "the parent accepted it"
    );
}

#[tokio::test]
async fn a_parent_whose_certificate_names_another_node_is_refused() {
    let ca = Ca::generate("test").unwrap();
    let p = parent(&ca);
    let child = child_endpoint(&ca, "site-1");
    tokio::spawn(async move {
        if let Some(i) = p.endpoint.accept().await {
            let _ = i.await;
        }
    });
    let err = timeout(LIMIT, transport::connect(&child, p.addr, "elsewhere"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, TransportError::Connect { .. }), "{err}");
}

#[tokio::test]
async fn garbage_closes_only_that_connection() {
    let ca = Ca::generate("test").unwrap();
    let p = parent(&ca);
    let good = child_endpoint(&ca, "site-1");
    let bad = child_endpoint(&ca, "site-2");

    let (good_conn, good_in) = tokio::join!(transport::connect(&good, p.addr, "center"), async {
        p.endpoint.accept().await.unwrap().await.unwrap()
    });
    let (good_tx, _good_rx) =
        transport::split::<ChildToParent, ParentToChild>(good_conn.unwrap(), 1 << 20);
    let (_to_good, mut from_good) =
        transport::split::<ParentToChild, ChildToParent>(good_in, 1 << 20);

    let (bad_conn, bad_in) = tokio::join!(transport::connect(&bad, p.addr, "center"), async {
        p.endpoint.accept().await.unwrap().await.unwrap()
    });
    let bad_conn = bad_conn.unwrap();
    let (_to_bad, mut from_bad) = transport::split::<ParentToChild, ChildToParent>(bad_in, 1 << 20);
    let mut raw = bad_conn.open_uni().await.unwrap();
    raw.write_all(&[0, 0, 0, 0, 3, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    let err = timeout(LIMIT, from_bad.recv()).await.unwrap().unwrap_err();
    assert!(matches!(err, TransportError::Malformed { .. }), "{err}");
    let reason = timeout(LIMIT, bad_conn.closed()).await.unwrap();
    assert!(
        matches!(&reason, quinn::ConnectionError::ApplicationClosed(c) if c.error_code == quinn::VarInt::from_u32(close_code::MALFORMED)),
        "{reason}"
    );

    good_tx.send(ChildToParent::Ping { nonce: 1 }).unwrap();
    assert_eq!(
        timeout(LIMIT, from_good.recv()).await.unwrap().unwrap(),
        ChildToParent::Ping { nonce: 1 }
    );
}

/// A stream whose first byte names no class is the peer not speaking our protocol: the
/// receiver says which byte it was, and the connection closes as malformed.
#[tokio::test]
async fn a_stream_of_an_unknown_class_closes_the_connection() {
    let ca = Ca::generate("test").unwrap();
    let (child, parent_side) = connected(&ca).await;
    let (_to_child, mut from_child) =
        transport::split::<ParentToChild, ChildToParent>(parent_side, 1 << 20);
    let mut raw = child.open_uni().await.unwrap();
    raw.write_all(&[9, 0, 0, 0, 1, 0]).await.unwrap();
    let err = timeout(LIMIT, from_child.recv())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, TransportError::Malformed { class: None, detail } if detail.contains("unknown stream class 9")),
        "{err}"
    );
    let reason = timeout(LIMIT, child.closed()).await.unwrap();
    assert!(
        matches!(&reason, quinn::ConnectionError::ApplicationClosed(c) if c.error_code == quinn::VarInt::from_u32(close_code::MALFORMED)),
        "{reason}"
    );
    // Nothing more comes from a connection closed over what its peer sent.
    let after = timeout(LIMIT, from_child.recv())
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(after, TransportError::Closed(_)), "{after}");
}

/// A connecting endpoint reads one datagram at a time from its own socket: a dual-stack
/// one (as nodes bind) reaches an IPv4 parent, and a megabyte crosses each way, in
/// bursts of many datagrams, intact.
#[tokio::test]
async fn a_dual_stack_child_moves_a_megabyte_each_way_to_an_ipv4_parent() {
    let ca = Ca::generate("test").unwrap();
    let p = parent(&ca);
    let id = Identity::issue(&ca, "site-1").unwrap();
    let Ok(child) =
        transport::client_endpoint("[::]:0".parse().unwrap(), tls::client_config(&id).unwrap())
    else {
        // A host without IPv6 binds IPv4 only, as the node's connector does.
        return a_megabyte_each_way(&p, child_endpoint(&ca, "site-1")).await;
    };
    a_megabyte_each_way(&p, child).await;
}

async fn a_megabyte_each_way(p: &Parent, child: quinn::Endpoint) {
    let (conn, incoming) = tokio::join!(transport::connect(&child, p.addr, "center"), async {
        p.endpoint.accept().await.unwrap().await.unwrap()
    });
    let conn = conn.unwrap();
    let payload: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    for (from, to) in [(&conn, &incoming), (&incoming, &conn)] {
        let mut send = from.open_uni().await.unwrap();
        let writer = {
            let payload = payload.clone();
            tokio::spawn(async move {
                send.write_all(&payload).await.unwrap();
                send.finish().unwrap();
            })
        };
        let mut recv = timeout(LIMIT, to.accept_uni()).await.unwrap().unwrap();
        let got = timeout(LIMIT, recv.read_to_end(2 << 20))
            .await
            .unwrap()
            .unwrap();
        writer.await.unwrap();
        assert_eq!(got.len(), payload.len());
        assert!(got == payload, "the bytes arrived changed");
    }
}

/// Waits (bounded) until `conn`'s path MTU search has reached `mtu`.
async fn mtu_reaches(conn: &quinn::Connection, mtu: u16) {
    for _ in 0..200 {
        if conn.stats().path.current_mtu >= mtu {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the path MTU stayed at {} (wanted {mtu})",
        conn.stats().path.current_mtu
    );
}

#[tokio::test]
async fn a_reconnect_from_the_same_address_starts_at_the_path_mtu_found_before() {
    let ca = Ca::generate("test").unwrap();
    let p = parent(&ca);
    // quinn's search stops at 1,452 bytes (its default upper bound); loopback carries
    // far more.
    const FOUND: u16 = 1452;
    let connect = |name: &'static str| {
        let child = child_endpoint(&ca, name);
        let listener = p.endpoint.clone();
        async move {
            let (conn, incoming) =
                tokio::join!(transport::connect(&child, p.addr, "center"), async {
                    let i = listener.accept().await.unwrap();
                    listener.handshake(i).await.unwrap()
                });
            (child, conn.unwrap(), incoming)
        }
    };

    // First connection: the parent searches, probing.
    let (_first_child, first, first_in) = connect("site-1").await;
    assert_eq!(first_in.stats().path.current_mtu, 1200);
    mtu_reaches(&first_in, FOUND).await;
    assert!(first_in.stats().path.sent_plpmtud_probes > 0);
    first.close(0u32.into(), b"bye");
    first_in.closed().await;
    p.endpoint.remember(&first_in);
    let ip = first_in.remote_address().ip();
    assert_eq!(p.endpoint.remembered(ip), Some(FOUND));

    // The next one, from another port of the same address, starts there and probes
    // nothing, though both sides have sent since (a child's own endpoint does not
    // search: its socket may fragment).
    assert_eq!(p.endpoint.started_at_remembered_mtu(), 0);
    let (_second_child, second, second_in) = connect("site-1").await;
    assert_eq!(second_in.stats().path.current_mtu, FOUND);
    assert_eq!(p.endpoint.started_at_remembered_mtu(), 1);
    let (up, mut down) = transport::split::<ChildToParent, ParentToChild>(second, 1 << 20);
    let (to_child, mut from_child) =
        transport::split::<ParentToChild, ChildToParent>(second_in.clone(), 1 << 20);
    up.send(hello("site-1")).unwrap();
    timeout(LIMIT, from_child.recv()).await.unwrap().unwrap();
    to_child.send(ParentToChild::Pong { nonce: 1 }).unwrap();
    timeout(LIMIT, down.recv()).await.unwrap().unwrap();
    assert_eq!(second_in.stats().path.sent_plpmtud_probes, 0);
    assert_eq!(second_in.stats().path.current_mtu, FOUND);

    // A failed handshake from there forgets it: the next search starts from the base.
    let intruder = intruder(&ca, "site-2");
    let listener = p.endpoint.clone();
    let accept = tokio::spawn(async move {
        let i = listener.accept().await.unwrap();
        listener.handshake(i).await.map(|_| ())
    });
    if let Ok(conn) = transport::connect(&intruder, p.addr, "center").await {
        let (tx, mut rx) = transport::split::<ChildToParent, ParentToChild>(conn, 1 << 20);
        let _ = tx.send(hello("site-2"));
        let _ = timeout(LIMIT, rx.recv()).await;
    }
    assert!(timeout(LIMIT, accept).await.unwrap().unwrap().is_err());
    assert_eq!(p.endpoint.remembered(ip), None);
}

/// A message of the test below: heartbeats on control, blobs on bulk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Msg {
    Heartbeat(u32),
    Blob(u32, Vec<u8>),
}

impl transport::WireMessage for Msg {
    fn class(&self) -> StreamClass {
        match self {
            Msg::Heartbeat(_) => StreamClass::Control,
            Msg::Blob(..) => StreamClass::Bulk,
        }
    }
}

/// A peer that reads its control stream and never its bulk stream: the bulk stream's
/// flow control stops the blobs after its window (1.25 MB of the 4 MiB sent), and a
/// heartbeat sent after them still arrives. One writer task serves every class of a
/// link; a class held back must hold back only itself.
#[tokio::test]
async fn a_heartbeat_passes_a_bulk_stream_its_peer_does_not_read() {
    let ca = Ca::generate("test").unwrap();
    let (conn, incoming) = connected(&ca).await;
    let (down_tx, _down_rx) = transport::split::<Msg, Msg>(incoming, 1 << 20);
    const BLOBS: u32 = 16;
    for i in 0..BLOBS {
        down_tx.send(Msg::Blob(i, vec![1; 256 * 1024])).unwrap();
    }
    // The heartbeat goes once the blobs have filled the bulk stream's window, so the
    // writer is already waiting on that stream.
    timeout(LIMIT, async {
        while down_tx.bytes().sent(StreamClass::Bulk) < 1_000_000 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the first megabyte of blobs was never written");
    down_tx.send(Msg::Heartbeat(42)).unwrap();

    // The child: every stream's first byte is its class's tag (0 control, 1 bulk). The
    // bulk stream is kept, unread; the control stream is read frame by frame.
    let heartbeat = timeout(LIMIT, async {
        let mut unread_bulk = Vec::new();
        loop {
            let mut stream = conn.accept_uni().await.unwrap();
            let mut tag = [0u8; 1];
            stream.read_exact(&mut tag).await.unwrap();
            if tag[0] != 0 {
                unread_bulk.push(stream);
                continue;
            }
            let mut decoder = FrameDecoder::new(1 << 20);
            let mut buf = [0u8; 4096];
            loop {
                if let Some(msg) = decoder.next_message::<Msg>().unwrap() {
                    return msg;
                }
                let n = stream.read(&mut buf).await.unwrap().unwrap();
                decoder.extend(&buf[..n]);
            }
        }
    })
    .await
    .expect("the heartbeat waited behind the blobs the peer does not read");
    assert_eq!(heartbeat, Msg::Heartbeat(42));
    let sent_bulk = down_tx.bytes().sent(StreamClass::Bulk);
    assert!(
        sent_bulk < u64::from(BLOBS) * 256 * 1024,
        "every blob was written ({sent_bulk} bytes): the peer's flow control held nothing back"
    );
}
