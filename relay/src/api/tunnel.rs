//! The root's end of the debug tunnel: `https://ROOT/clusters/{name}/...` (and
//! `.../clusters/{name}/proxy/...`) is that cluster's own Kubernetes API, carried down
//! the tiers ([`crate::tier::tunnel`]) to its agent, which sends the request to its
//! cluster with its own credentials. So a kubeconfig whose server is
//! `https://ROOT/clusters/NAME` makes kubectl work unchanged (kubectl appends `/api/...`
//! and `/apis/...` to the server's path).
//!
//! Here: the token's `debug` permission ([`super::auth::Grant::may_debug`]), the first
//! hop's route and permit, HTTP/1.1 over the tunnel stream (hyper's client, so bodies
//! stream both ways and a `101 Switching Protocols` hands over the raw connection for
//! exec and port-forward), and one audit line per request (target `audit`:
//! user, cluster, method, path, status).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use strata_protocol::tunnel::TunnelOpen;
use tokio::sync::OwnedSemaphorePermit;

use super::auth::Grant;
use super::{ApiState, Body, reply};
use crate::tier::core::NodeCore;
use crate::tier::tunnel::{TunnelRefusal, open_next};

/// Request ids for the logs of every tier (unique per root run).
static REQUESTS: AtomicU64 = AtomicU64::new(1);

/// The cluster and the path on its API a `/clusters/{name}/...` request is for; `None`
/// for any other path (`/clusters` itself is the inventory).
pub(super) fn target(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix("/clusters/")?;
    let (name, rest) = rest.split_once('/')?;
    if name.is_empty() || rest.is_empty() {
        return None;
    }
    // `/clusters/NAME/proxy/api/...` and `/clusters/NAME/api/...` are the same: no
    // Kubernetes API path starts with `proxy`.
    let rest = match rest.strip_prefix("proxy") {
        Some("") => "",
        Some(r) if r.starts_with('/') => r.trim_start_matches('/'),
        _ => rest,
    };
    Some((name.to_owned(), format!("/{rest}")))
}

fn status(code: u16, reason: &str, message: String) -> Response<Body> {
    let (_, body) = crate::kube::failure(code, reason, message, None);
    reply(
        StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
        body,
    )
}

fn audit(open: &TunnelOpen, method: &hyper::Method, path: &str, code: u16) {
    tracing::info!(
        target: strata_node::process::AUDIT_TARGET,
        who = %open.user, cluster = %open.cluster, request = open.request,
        %method, %path, status = code, "debug tunnel"
    );
}

/// Serves one request for `cluster`'s API (`path`: the part after the prefix).
pub(super) async fn serve(
    mut req: Request<Incoming>,
    grant: &Grant,
    state: &ApiState,
    cluster: String,
    path: String,
) -> Response<Body> {
    let open = TunnelOpen {
        cluster: cluster.clone(),
        request: REQUESTS.fetch_add(1, Ordering::Relaxed),
        user: grant.user.clone(),
    };
    let method = req.method().clone();
    let name = cluster.clone();
    let labels = state
        .node
        .query(move |core: &mut NodeCore| {
            core.reports()
                .clusters()
                .find(|c| c.name == name)
                .map(|c| core.reports().effective(c).labels)
        })
        .await
        .flatten()
        .unwrap_or_default();
    if let Err(why) = grant.may_debug(&cluster, &labels) {
        audit(&open, &method, &path, 403);
        return status(403, "Forbidden", why.to_string());
    }
    let route = match state.node.tunnel_route(&cluster).await {
        Ok(r) => r,
        Err(TunnelRefusal {
            code,
            reason,
            message,
        }) => {
            audit(&open, &method, &path, code);
            return status(code, reason, message);
        }
    };
    let stream = match open_next(&route, &open).await {
        Ok(s) => s,
        Err(r) => {
            audit(&open, &method, &path, r.code);
            return status(r.code, r.reason, r.message);
        }
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(x) => x,
        Err(e) => {
            audit(&open, &method, &path, 502);
            return status(502, "BadGateway", format!("tunnel to {cluster}: {e}"));
        }
    };
    // The connection is driven by its own task; it ends with the stream.
    let driver = tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let upgrade = req
        .headers()
        .contains_key(hyper::header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    let query = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let (parts, body) = req.into_parts();
    let mut down = Request::builder()
        .method(parts.method.clone())
        .uri(format!("{path}{query}"))
        .version(hyper::Version::HTTP_11);
    for (k, v) in &parts.headers {
        // The user's token is the root's business; the agent uses its own credentials.
        if k != hyper::header::AUTHORIZATION {
            down = down.header(k, v);
        }
    }
    let down = match down.body(body) {
        Ok(r) => r,
        Err(e) => {
            audit(&open, &method, &path, 400);
            return status(400, "BadRequest", e.to_string());
        }
    };
    let mut resp = match sender.send_request(down).await {
        Ok(r) => r,
        Err(e) => {
            driver.abort();
            audit(&open, &method, &path, 502);
            return status(
                502,
                "BadGateway",
                format!("the tunnel to cluster {cluster:?} broke: {e}"),
            );
        }
    };
    audit(&open, &method, &path, resp.status().as_u16());
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(user_side) = upgrade
    {
        let cluster_side = hyper::upgrade::on(&mut resp);
        let permit = route.permit;
        tokio::spawn(async move {
            let _permit = permit;
            if let (Ok(u), Ok(c)) = (user_side.await, cluster_side.await) {
                let _ =
                    tokio::io::copy_bidirectional(&mut TokioIo::new(u), &mut TokioIo::new(c)).await;
            }
            drop(driver);
        });
        let (parts, _) = resp.into_parts();
        return Response::from_parts(parts, BodyExt::boxed_unsync(http_body_util::Empty::new()));
    }
    let (parts, body) = resp.into_parts();
    let body = TunnelBody {
        inner: body,
        _permit: route.permit,
        _driver: AbortOnDrop(driver),
    };
    Response::from_parts(parts, BodyExt::boxed_unsync(body))
}

/// Aborts the connection's task when the response is dropped (the user went away).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The cluster's answer streamed to the user, holding the tunnel's permit until it
/// ends; a tunnel that breaks mid-answer ends the body (the user sees a short read).
struct TunnelBody {
    inner: Incoming,
    _permit: OwnedSemaphorePermit,
    _driver: AbortOnDrop,
}

impl hyper::body::Body for TunnelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => Poll::Ready(Some(Ok(f))),
            Poll::Ready(Some(Err(e))) => {
                tracing::debug!(error = %e, "a tunnelled answer broke off");
                Poll::Ready(None)
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_paths_with_and_without_proxy() {
        let t = |p: &str| target(p);
        assert_eq!(
            t("/clusters/c1/api/v1/pods"),
            Some(("c1".into(), "/api/v1/pods".into()))
        );
        assert_eq!(
            t("/clusters/c1/proxy/api/v1/pods"),
            Some(("c1".into(), "/api/v1/pods".into()))
        );
        assert_eq!(t("/clusters/c1/proxy"), Some(("c1".into(), "/".into())));
        assert_eq!(
            t("/clusters/c1/version"),
            Some(("c1".into(), "/version".into()))
        );
        assert_eq!(t("/clusters"), None);
        assert_eq!(t("/clusters/c1"), None);
        assert_eq!(t("/spaces/x/api"), None);
    }
}
