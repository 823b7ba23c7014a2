//! The TLS/TCP transport on loopback: the same mutual TLS as QUIC, every class both
//! ways, refusals, and control messages overtaking a large bulk transfer.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use strata_node::dial::{Connector, TransportMode};
use strata_node::link::{Link, TransportKind};
use strata_node::tcp::{self, Listener};
use strata_node::tls::{self, Identity};
use strata_node::transport::{self, WireMessage};
use strata_protocol::wire::StreamClass;
use strata_topology::certs::Ca;
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);

/// A message of this test: heartbeats on control, big blobs on bulk, notes on reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Msg {
    Heartbeat(u32),
    Blob(u32, Vec<u8>),
    Note(String),
}

impl WireMessage for Msg {
    fn class(&self) -> StreamClass {
        match self {
            Msg::Heartbeat(_) => StreamClass::Control,
            Msg::Blob(..) => StreamClass::Bulk,
            Msg::Note(_) => StreamClass::Reports,
        }
    }
}

async fn listener(ca: &Ca) -> (Listener, SocketAddr) {
    let id = Identity::issue(ca, "center").unwrap();
    let l = Listener::bind(
        "127.0.0.1:0".parse().unwrap(),
        tls::server_config(&id).unwrap(),
    )
    .unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

fn connector(id: &Identity) -> Connector {
    Connector::new(
        TransportMode::Tcp,
        None,
        Some(tls::client_config(id).unwrap()),
        None,
    )
}

/// A connected pair: (child's link, parent's link).
async fn pair(ca: &Ca) -> (Link, Link) {
    let (l, addr) = listener(ca).await;
    let child = Identity::issue(ca, "site-1").unwrap();
    let c = connector(&child);
    let target = addr.into();
    let (up, down) = tokio::join!(c.connect_tcp(&target, "center"), async {
        let (stream, tls) = l.next().await.unwrap();
        tcp::accept(stream, tls).await.unwrap()
    });
    (up.unwrap(), Link::Tcp(down))
}

#[tokio::test]
async fn every_class_crosses_both_ways_and_each_side_knows_the_other() {
    let ca = Ca::generate("test").unwrap();
    let (up, down) = pair(&ca).await;
    assert_eq!(up.kind(), TransportKind::Tcp);
    let name = |l: &Link| tls::peer_node_name_in(&l.peer_chain().unwrap()).unwrap();
    assert_eq!(name(&down), "site-1");
    assert_eq!(name(&up), "center");
    let (up_tx, mut up_rx) = transport::split::<Msg, Msg>(up, 1 << 20);
    let (down_tx, mut down_rx) = transport::split::<Msg, Msg>(down.clone(), 1 << 20);
    let sent = [
        Msg::Heartbeat(1),
        Msg::Blob(1, vec![7; 100_000]),
        Msg::Note("ready".into()),
    ];
    for m in &sent {
        up_tx.send(m.clone()).unwrap();
        down_tx.send(m.clone()).unwrap();
    }
    for rx in [&mut down_rx, &mut up_rx] {
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(timeout(LIMIT, rx.recv()).await.unwrap().unwrap());
        }
        for m in &sent {
            assert!(got.contains(m), "{m:?} did not arrive");
        }
    }
    assert_eq!(
        up_tx.bytes().sent(StreamClass::Bulk),
        down_tx.bytes().sent(StreamClass::Bulk)
    );
    // A close reaches the other side with its reason.
    down.close(4, b"replaced by a newer connection");
    let err = timeout(LIMIT, up_rx.recv()).await.unwrap().unwrap_err();
    assert!(
        err.to_string().contains("replaced by a newer connection"),
        "{err}"
    );
}

/// 16 MiB of bulk queued before one heartbeat: the heartbeat arrives after at most a
/// window's worth of blobs, not after all of them.
#[tokio::test]
async fn a_heartbeat_overtakes_a_large_bulk_transfer() {
    let ca = Ca::generate("test").unwrap();
    let (up, down) = pair(&ca).await;
    let (down_tx, _down_rx) = transport::split::<Msg, Msg>(down, 1 << 20);
    let (_up_tx, mut up_rx) = transport::split::<Msg, Msg>(up, 1 << 20);
    const BLOBS: u32 = 64;
    for i in 0..BLOBS {
        down_tx.send(Msg::Blob(i, vec![1; 256 * 1024])).unwrap();
    }
    down_tx.send(Msg::Heartbeat(42)).unwrap();
    let mut blobs_before = 0;
    loop {
        match timeout(LIMIT, up_rx.recv()).await.unwrap().unwrap() {
            Msg::Heartbeat(42) => break,
            Msg::Blob(..) => blobs_before += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    println!("blobs delivered before the heartbeat: {blobs_before} of {BLOBS}");
    assert!(
        blobs_before < 8,
        "the heartbeat waited behind {blobs_before} blobs of 256 KiB"
    );
    // The bulk transfer is still whole afterwards.
    let mut rest = 0;
    while rest < BLOBS - blobs_before {
        match timeout(LIMIT, up_rx.recv()).await.unwrap().unwrap() {
            Msg::Blob(..) => rest += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_certificate_from_a_foreign_ca_is_refused_over_tcp() {
    let ca = Ca::generate("test").unwrap();
    let foreign = Ca::generate("foreign").unwrap();
    let (l, addr) = listener(&ca).await;
    let cert = foreign.issue("site-1").unwrap();
    let intruder = Identity::from_pem(
        cert.cert_pem.as_bytes(),
        cert.key_pem.as_bytes(),
        ca.cert_pem().as_bytes(),
    )
    .unwrap();
    let accept = tokio::spawn(async move {
        let (stream, tls) = l.next().await.unwrap();
        tcp::accept(stream, tls).await.map(|_| ())
    });
    let outcome = timeout(LIMIT, async {
        let link = connector(&intruder)
            .connect_tcp(&addr.into(), "center")
            .await
            .map_err(|e| e.to_string())?;
        // TLS 1.3: the refusal may show on first use.
        let (tx, mut rx) = transport::split::<Msg, Msg>(link, 1 << 20);
        tx.send(Msg::Heartbeat(1)).map_err(|e| e.to_string())?;
        rx.recv().await.map(|_| ()).map_err(|e| e.to_string())
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
async fn a_parent_whose_certificate_names_another_node_is_refused_over_tcp() {
    let ca = Ca::generate("test").unwrap();
    let (l, addr) = listener(&ca).await;
    tokio::spawn(async move {
        if let Ok((stream, tls)) = l.next().await {
            let _ = tcp::accept(stream, tls).await;
        }
    });
    let child = Identity::issue(&ca, "site-1").unwrap();
    let err = connector(&child)
        .connect_tcp(&addr.into(), "eu-west")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("eu-west"), "{err}");
}

/// The parent's side of a TLS/TCP pair once the child's announcement arrived.
async fn tunnels_carried(down: &Link) -> &tcp::TcpLink {
    let Link::Tcp(t) = down else {
        panic!("not a TCP link")
    };
    timeout(LIMIT, async {
        while !t.carries_tunnels() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the child never announced tunnel streams");
    t
}

/// Two tunnel streams on one link: one whose reader stalls with 4 MiB to deliver, and
/// one that keeps answering; heartbeats and a bulk blob cross meanwhile; the stalled
/// stream's bytes all arrive, in order, once read; dropping a stream resets it.
#[tokio::test]
async fn a_stalled_tunnel_stream_stops_only_itself() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ca = Ca::generate("test").unwrap();
    let (up, down) = pair(&ca).await;
    let (down_tx, mut down_rx) = transport::split::<Msg, Msg>(down.clone(), 1 << 20);
    let (up_tx, mut up_rx) = transport::split::<Msg, Msg>(up.clone(), 1 << 20);
    let parent = tunnels_carried(&down).await;
    let Link::Tcp(child) = &up else { panic!() };
    assert!(!child.carries_tunnels(), "a child opens no tunnels");
    let mut a = parent.open_tunnel().await.unwrap();
    let mut b = parent.open_tunnel().await.unwrap();
    let mut a_child = timeout(LIMIT, child.accept_tunnel())
        .await
        .unwrap()
        .unwrap();
    let mut b_child = timeout(LIMIT, child.accept_tunnel())
        .await
        .unwrap()
        .unwrap();
    const TOTAL: usize = 4 << 20;
    let writer = tokio::spawn(async move {
        let data: Vec<u8> = (0..TOTAL).map(|i| (i % 251) as u8).collect();
        a_child.write_all(&data).await.unwrap();
        a_child.shutdown().await.unwrap();
        a_child
    });
    // a's writer is stalled (nobody reads a); b, control and bulk still cross.
    for i in 0..3u8 {
        b.write_all(&[i; 100]).await.unwrap();
        let mut got = [0u8; 100];
        timeout(LIMIT, b_child.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        b_child.write_all(&got).await.unwrap();
        timeout(LIMIT, b.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, [i; 100]);
        down_tx.send(Msg::Heartbeat(u32::from(i))).unwrap();
        up_tx
            .send(Msg::Blob(u32::from(i), vec![i; 300_000]))
            .unwrap();
        let hb = timeout(LIMIT, up_rx.recv()).await.unwrap().unwrap();
        assert_eq!(hb, Msg::Heartbeat(u32::from(i)));
        let blob = timeout(LIMIT, down_rx.recv()).await.unwrap().unwrap();
        assert!(matches!(blob, Msg::Blob(n, _) if n == u32::from(i)));
    }
    assert!(!writer.is_finished(), "4 MiB went through an unread stream");
    let mut all = Vec::new();
    timeout(LIMIT, a.read_to_end(&mut all))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(all.len(), TOTAL);
    assert!(all.iter().enumerate().all(|(i, &v)| v == (i % 251) as u8));
    let _a_child = timeout(LIMIT, writer).await.unwrap().unwrap();

    // The parent drops b: the child's writes soon fail (reset), and the link lives on.
    drop(b);
    let failed = timeout(LIMIT, async {
        loop {
            if b_child.write_all(&[1; 1024]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(failed.is_ok(), "writes on a dropped stream kept succeeding");
    down_tx.send(Msg::Heartbeat(99)).unwrap();
    assert_eq!(
        timeout(LIMIT, up_rx.recv()).await.unwrap().unwrap(),
        Msg::Heartbeat(99)
    );
}

/// A TCP stream that counts the writes made on it.
struct CountingWrites {
    inner: tokio::net::TcpStream,
    writes: Arc<AtomicUsize>,
}

impl CountingWrites {
    fn counted<T>(&self, r: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        if matches!(r, Poll::Ready(Ok(_))) {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

impl tokio::io::AsyncRead for CountingWrites {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for CountingWrites {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.counted(r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.counted(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Messages queued together leave in a few writes to the socket, not two per message
/// (tokio-rustls writes through: each write is a TLS record and a system call).
#[tokio::test]
async fn messages_queued_together_leave_in_a_few_writes() {
    let ca = Ca::generate("test").unwrap();
    let (l, addr) = listener(&ca).await;
    let child = Identity::issue(&ca, "site-1").unwrap();
    let writes = Arc::new(AtomicUsize::new(0));
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let io: tcp::BoxIo = Box::new(CountingWrites {
        inner: stream,
        writes: writes.clone(),
    });
    let (up, down) = tokio::join!(
        tcp::connect(
            (io, addr),
            tls::client_config(&child).unwrap(),
            "center",
            Duration::from_secs(60),
        ),
        async {
            let (stream, tls) = l.next().await.unwrap();
            tcp::accept(stream, tls).await.unwrap()
        }
    );
    let (up_tx, _up_rx) = transport::split::<Msg, Msg>(Link::Tcp(up.unwrap()), 1 << 20);
    let (_down_tx, mut down_rx) = transport::split::<Msg, Msg>(Link::Tcp(down), 1 << 20);
    // The handshake's writes, and the first ping's, are not the messages'.
    let first = timeout(LIMIT, async {
        up_tx.send(Msg::Note("first".into())).unwrap();
        down_rx.recv().await.unwrap()
    })
    .await
    .unwrap();
    assert_eq!(first, Msg::Note("first".into()));
    let before = writes.load(Ordering::Relaxed);
    const MESSAGES: usize = 50;
    for i in 0..MESSAGES {
        up_tx.send(Msg::Note(format!("note {i}"))).unwrap();
    }
    for i in 0..MESSAGES {
        let got = timeout(LIMIT, down_rx.recv()).await.unwrap().unwrap();
        assert_eq!(got, Msg::Note(format!("note {i}")));
    }
    let made = writes.load(Ordering::Relaxed) - before;
    println!("{MESSAGES} messages queued together took {made} writes");
    assert!(made <= 5, "{MESSAGES} messages took {made} writes");
}
