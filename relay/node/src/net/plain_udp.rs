//! The UDP socket of a connecting endpoint: one datagram per receive, no offloads.
//!
//! quinn's own socket reads up to 32 datagrams per system call, each into a slot large
//! enough for 64 coalesced (GRO) segments: 3 MiB of receive buffer per endpoint, and the
//! kernel writes every burst into it, so the pages a burst touched stay resident for
//! the endpoint's life. That pays off on a relay's listening socket, which takes the
//! datagrams of all its children. A node that connects has one connection, to its
//! parent, and receives a handful of datagrams per update: it reads them one at a time
//! into the start of quinn's first slot, so an idle agent keeps a page or two of receive
//! buffer rather than whatever its largest burst touched (see [`RECEIVE_SLOT_SEGMENTS`]
//! for how the buffer is sized).

use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::ReadBuf;

/// A UDP socket read and written one datagram per call (see the module doc).
#[derive(Debug)]
pub(crate) struct PlainUdp {
    io: Arc<tokio::net::UdpSocket>,
}

impl PlainUdp {
    /// Binds `addr`, dual-stack where `addr` is IPv6 and the host allows it (quinn maps
    /// an IPv4 parent's address for such a socket); needs a tokio runtime.
    pub(crate) fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if addr.is_ipv6()
            && let Err(e) = socket.set_only_v6(false)
        {
            tracing::debug!(error = %e, "cannot make the socket dual-stack; IPv6 parents only");
        }
        socket.bind(&addr.into())?;
        socket.set_nonblocking(true)?;
        Ok(Self {
            io: Arc::new(tokio::net::UdpSocket::from_std(socket.into())?),
        })
    }
}

impl AsyncUdpSocket for PlainUdp {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable {
            io: self.io.clone(),
            waiting: None,
        })
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        // `max_transmit_segments` is 1, so quinn hands one datagram at a time; split
        // a batch all the same rather than send it as one oversized datagram.
        let size = transmit
            .segment_size
            .unwrap_or(transmit.contents.len())
            .max(1);
        for datagram in transmit.contents.chunks(size) {
            self.io.try_send_to(datagram, transmit.destination)?;
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let (Some(buf), Some(meta)) = (bufs.first_mut(), meta.first_mut()) else {
            return Poll::Ready(Ok(0));
        };
        let mut read = ReadBuf::new(buf);
        let addr = std::task::ready!(self.io.poll_recv_from(cx, &mut read))?;
        let len = read.filled().len();
        *meta = RecvMeta {
            addr,
            len,
            stride: len,
            ecn: None,
            dst_ip: None,
        };
        Poll::Ready(Ok(1))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    fn max_receive_segments(&self) -> usize {
        RECEIVE_SLOT_SEGMENTS
    }
}

/// What quinn sizes its receive slots by, though only the first slot's first datagram is
/// ever written: chosen so that quinn's zeroed receive buffer (slots x segments x the
/// largest datagram) is at least [`ALWAYS_MAPPED`], which the allocator always maps
/// fresh and unmaps on drop. Fresh pages cost nothing until written, so the buffer
/// costs the page or two a datagram lands in. A smaller buffer comes from the heap
/// once the allocator has raised its threshold for mapping (glibc raises it to the
/// size of the largest mapped block freed, up to 32 MiB) and is then cleared page by
/// page. Measured at 10,000 agents restarted at once: quinn's own 3 MiB buffers, taken
/// from the heap after the first endpoints were dropped, added 1.2 GiB to the peak; a
/// buffer of 32 single datagrams (47 KiB) made every idle agent 37 KiB larger.
const RECEIVE_SLOT_SEGMENTS: usize =
    ALWAYS_MAPPED.div_ceil(LARGEST_DATAGRAM * quinn::udp::BATCH_SIZE);

/// Above glibc's largest threshold for mapping a block (32 MiB on 64-bit hosts), which
/// the simulator and the benchmarks allocate with. The `relay` and `agent` binaries use
/// jemalloc, which takes every block above 8 MiB from an arena that gives its pages
/// back as soon as the block is freed: the same holds there.
const ALWAYS_MAPPED: usize = 40 << 20;

/// The largest UDP payload quinn's default endpoint configuration receives.
const LARGEST_DATAGRAM: usize = 1472;

const _: () =
    assert!(RECEIVE_SLOT_SEGMENTS * LARGEST_DATAGRAM * quinn::udp::BATCH_SIZE >= ALWAYS_MAPPED);

type WritableFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send + Sync>>;

/// Waits until the socket can be written. Several may wait at once (the endpoint and
/// each connection have their own); tokio's readiness wakes them all.
struct Writable {
    io: Arc<tokio::net::UdpSocket>,
    waiting: Option<WritableFuture>,
}

impl fmt::Debug for Writable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writable")
            .field("waiting", &self.waiting.is_some())
            .finish()
    }
}

impl UdpPoller for Writable {
    fn poll_writable(mut self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let waiting = this.waiting.get_or_insert_with(|| {
            let io = this.io.clone();
            Box::pin(async move { io.writable().await })
        });
        let result = std::task::ready!(waiting.as_mut().poll(cx));
        this.waiting = None;
        Poll::Ready(result)
    }
}
