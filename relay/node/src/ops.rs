//! The operations listener of a relay or an agent: plain HTTP/1 on the configured
//! `metrics:` address, for Prometheus and for orchestrators' probes.
//!
//! * `GET /metrics`: the node's metrics and its process's ([`crate::process_metrics`]),
//!   written by `prometheus-client`
//!   ([`crate::exposition`]): OpenMetrics 1.0 text when the scraper's `Accept` asks for
//!   it (Prometheus does), the Prometheus text format (version 0.0.4) otherwise, each
//!   with its own `Content-Type`.
//! * `GET /healthz`: liveness. 200 while the process runs and its node task answers
//!   (which it only does once its store is open); 503 otherwise. A failing liveness
//!   probe means "restart me".
//! * `GET /readyz`: readiness. 200 when the node can do its job now: its store takes a
//!   durable write, and (per node kind) its API listens or its parent link is up or its
//!   store holds what the parent sent before. 503 with the reason otherwise. A failing
//!   readiness probe means "send no traffic yet"; it never means "restart".
//!
//! What each check means for a relay and an agent is decided by the [`OpsSource`] the
//! binary hands in; this module only serves the answers.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::exposition::{Exposition, Format};
use crate::store::Store;

/// A boxed future, as [`OpsSource`] returns them.
pub type OpsFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the operations listener asks the node.
pub trait OpsSource: Send + Sync + 'static {
    /// The metric families, read now; `None` once the node has stopped.
    fn metrics(&self) -> OpsFuture<'_, Option<Exposition>>;
    /// `Ok` while the node is alive; `Err(why)` otherwise.
    fn live(&self) -> OpsFuture<'_, Result<(), String>>;
    /// `Ok(what)` when the node is ready (`what` says why, for the body); `Err(why)`
    /// otherwise.
    fn ready(&self) -> OpsFuture<'_, Result<String, String>>;
}

/// The operations listener could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind metrics on {addr}")]
pub struct OpsBindError {
    /// The configured `metrics` address.
    pub addr: SocketAddr,
    /// What the operating system said.
    pub source: std::io::Error,
}

/// Binds `addr` now (so a taken port is reported at startup) and serves `/metrics`,
/// `/healthz` and `/readyz` from `source` until the returned task is aborted.
pub fn spawn(
    addr: SocketAddr,
    source: Arc<dyn OpsSource>,
) -> Result<tokio::task::JoinHandle<()>, OpsBindError> {
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(TcpListener::from_std)
        .map_err(|source| OpsBindError { addr, source })?;
    Ok(tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let source = source.clone();
            conns.spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let source = source.clone();
                    async move {
                        let accept = req
                            .headers()
                            .get(hyper::header::ACCEPT)
                            .and_then(|v| v.to_str().ok());
                        let format = Format::from_accept(accept);
                        Ok::<_, Infallible>(answer(req.uri().path(), format, &*source).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
            while conns.try_join_next().is_some() {}
        }
    }))
}

/// The answer to `GET path` (`/metrics`, `/healthz`, `/livez`, `/readyz`) from `source`;
/// 404 for any other path. The root's API port answers the health paths with it too.
pub async fn answer(path: &str, format: Format, source: &dyn OpsSource) -> Response<Full<Bytes>> {
    match path {
        "/metrics" => match source.metrics().await {
            Some(mut families) => {
                families.extend(crate::process_metrics::families());
                let mut resp = text(StatusCode::OK, families.encode(format));
                resp.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static(format.content_type()),
                );
                resp
            }
            None => text(StatusCode::SERVICE_UNAVAILABLE, "node stopping\n".into()),
        },
        "/healthz" | "/livez" => match source.live().await {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/readyz" => match source.ready().await {
            Ok(what) => text(StatusCode::OK, format!("ready: {what}\n")),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Whether `store` takes a durable write now (off the async workers): the store half
/// of every node's readiness.
pub async fn store_writable(store: Arc<dyn Store>) -> Result<(), StoreProbeError> {
    match tokio::task::spawn_blocking(move || store.probe_write()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(StoreProbeError::NotWritable(e)),
        Err(e) => Err(StoreProbeError::Unfinished(e)),
    }
}

/// Why [`store_writable`] says no.
#[derive(Debug, thiserror::Error)]
pub enum StoreProbeError {
    /// The probe's write failed.
    #[error("store not writable: {0}")]
    NotWritable(crate::store::StoreError),
    /// The probe's task panicked or was cancelled.
    #[error("store probe did not finish: {0}")]
    Unfinished(tokio::task::JoinError),
}

/// Whether something accepts TCP connections on `addr` (an unspecified IP is tried on
/// loopback): the root's "API listening".
pub async fn accepts_connections(addr: SocketAddr) -> bool {
    let mut target = addr;
    if target.ip().is_unspecified() {
        target.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    tokio::net::TcpStream::connect(target).await.is_ok()
}
