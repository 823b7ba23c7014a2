//! What the two HTTP servers of a relay share (the root's [`crate::api`] and
//! [`crate::metrics`]): the listener, the accept loop and the response builder.

use std::future::Future;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use tokio::net::{TcpListener, TcpStream};

/// A listener on `addr`, bound now (not in the task), so that a port already taken is
/// reported when the node starts.
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

/// Accepts connections forever, each served by `serve` in a task owned by the loop:
/// aborting the loop's task ends every connection too.
pub(crate) async fn accept_loop<F, Fut>(listener: TcpListener, mut serve: F)
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let Ok((tcp, peer)) = listener.accept().await else {
            continue;
        };
        conns.spawn(serve(tcp, peer));
        while conns.try_join_next().is_some() {}
    }
}

/// A response with this status, content type and body.
pub(crate) fn response(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}
