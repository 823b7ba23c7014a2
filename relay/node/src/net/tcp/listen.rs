//! The relay's side of TLS/TCP links before their handshake: a [`Listener`] on a bound
//! socket or on another source of connections (the simulator's TCP), and the TLS
//! configuration it accepts with.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{BoxFuture, BoxIo, from_tokio};
use crate::net::message::TransportError;

/// Where a [`Listener`] takes connections from, other than a bound tokio socket: the
/// simulator's TCP.
pub trait Accept: Send + Sync + std::fmt::Debug {
    /// The next connection and its peer's address.
    fn accept(&self) -> BoxFuture<'_, std::io::Result<(BoxIo, SocketAddr)>>;
    /// Where it listens.
    fn local_addr(&self) -> std::io::Result<SocketAddr>;
}

#[derive(Debug)]
enum Source {
    Tokio(tokio::net::TcpListener),
    Other(Box<dyn Accept>),
}

/// A relay's TLS/TCP listener: the bound socket and the same TLS configuration as its
/// QUIC endpoint's.
#[derive(Debug)]
pub struct Listener {
    source: Source,
    tls: ServerTls,
}

/// The TLS configuration a [`Listener`] accepts with, replaceable while it runs (a
/// renewed certificate is presented from the next handshake on).
pub type ServerTls = Arc<std::sync::RwLock<Arc<rustls::ServerConfig>>>;

impl Listener {
    /// Binds `addr` (from a runtime: the socket is registered with it).
    pub fn bind(
        addr: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
    ) -> Result<Listener, TransportError> {
        let bind_err = |source| TransportError::Bind { addr, source };
        let socket = std::net::TcpListener::bind(addr).map_err(bind_err)?;
        socket.set_nonblocking(true).map_err(bind_err)?;
        let socket = tokio::net::TcpListener::from_std(socket).map_err(bind_err)?;
        Ok(Listener {
            source: Source::Tokio(socket),
            tls: Arc::new(std::sync::RwLock::new(tls)),
        })
    }

    /// A listener taking its connections from `source`.
    pub fn from_source(source: Box<dyn Accept>, tls: Arc<rustls::ServerConfig>) -> Listener {
        Listener {
            source: Source::Other(source),
            tls: Arc::new(std::sync::RwLock::new(tls)),
        }
    }

    /// Where to put a new TLS configuration for the connections accepted from now on.
    pub fn tls(&self) -> ServerTls {
        self.tls.clone()
    }

    /// Where it listens.
    pub fn local_addr(&self) -> Result<SocketAddr, std::io::Error> {
        match &self.source {
            Source::Tokio(s) => s.local_addr(),
            Source::Other(s) => s.local_addr(),
        }
    }

    /// The next TCP connection (its TLS handshake is [`accept`](super::accept)'s, in the
    /// connection's own task), with the TLS configuration to accept it with.
    pub async fn next(&self) -> std::io::Result<((BoxIo, SocketAddr), Arc<rustls::ServerConfig>)> {
        let stream = match &self.source {
            Source::Tokio(s) => from_tokio(s.accept().await?.0)?,
            Source::Other(s) => s.accept().await?,
        };
        // A poisoned lock only means a panic elsewhere; the value is a plain Arc.
        let tls = self.tls.read().unwrap_or_else(|p| p.into_inner()).clone();
        Ok((stream, tls))
    }
}
