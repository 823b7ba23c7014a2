//! The agent's end of the debug tunnel: the tunnel streams its parent opens carry HTTP/1.1
//! requests for this cluster's Kubernetes API (see `strata_node::tunnel`). Each is
//! served by hyper over the stream and sent to the cluster with the agent's own
//! credentials (its kube client: service account or kubeconfig), so the cluster's RBAC
//! bounds what any user of the tunnel can do; the user's token never leaves the root.
//! Answers stream back as they come (`logs -f`, watches), and a `101 Switching
//! Protocols` (exec, attach, port-forward over WebSocket or SPDY) splices the two
//! upgraded connections.
//!
//! A simulated cluster answers itself ([`crate::simulated_api`]).

use std::convert::Infallible;

use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use strata_node::tunnel::{self, TunnelStream};
use strata_protocol::tunnel::TunnelOpen;

use crate::simulated_api::SimulatedApi;

pub use crate::tunnel_body::{TunnelBody, full, status};

/// Largest request body carried to the cluster (kubectl's are small; the root takes
/// larger manifests itself).
const MAX_REQUEST: usize = 4 << 20;

/// What answers the tunnel's requests.
#[derive(Clone)]
pub enum TunnelTarget {
    /// The cluster's Kubernetes API, through the agent's own client; and its volumes,
    /// when moves of its claims are served (volume streams, not debug tunnels).
    Kube(
        kube::Client,
        Option<crate::kubernetes::volumes::KubeVolumes>,
    ),
    /// The simulated cluster's small API.
    Simulated(SimulatedApi),
}

impl std::fmt::Debug for TunnelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TunnelTarget::Kube(..) => "Kube",
            TunnelTarget::Simulated(_) => "Simulated",
        })
    }
}

/// Serves one tunnel stream from the parent: its header must name this cluster.
pub async fn serve(cluster: String, target: TunnelTarget, open: TunnelOpen, stream: TunnelStream) {
    if open.cluster != cluster {
        let msg = format!(
            "this agent serves cluster {cluster:?}, not {:?}",
            open.cluster
        );
        return tunnel::refuse(stream, 404, "NotFound", &msg).await;
    }
    tracing::debug!(request = open.request, user = %open.user, "serving a tunnelled request");
    let service = hyper::service::service_fn(move |req| {
        let target = target.clone();
        async move { Ok::<_, Infallible>(answer(&target, req).await) }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await
    {
        tracing::debug!(request = open.request, error = %e, "a tunnelled connection ended");
    }
}

async fn answer(target: &TunnelTarget, req: Request<Incoming>) -> Response<TunnelBody> {
    match target {
        TunnelTarget::Simulated(api) => api.answer(req).await,
        TunnelTarget::Kube(client, _) => to_cluster(client, req).await,
    }
}

async fn to_cluster(client: &kube::Client, mut req: Request<Incoming>) -> Response<TunnelBody> {
    let upgrade = req
        .headers()
        .contains_key(hyper::header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    let body = match crate::tunnel_body::collect_limited(body, MAX_REQUEST).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    // The client names its own server and credentials.
    parts.headers.remove(hyper::header::HOST);
    parts.headers.remove(hyper::header::AUTHORIZATION);
    let request = Request::from_parts(parts, kube::client::Body::from(body));
    let mut resp = match client.send(request).await {
        Ok(r) => r,
        Err(e) => {
            return status(
                StatusCode::BAD_GATEWAY,
                "BadGateway",
                format!("the agent could not reach its cluster's API: {e}"),
            );
        }
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(user_side) = upgrade
    {
        let cluster_side = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            if let (Ok(u), Ok(c)) = (user_side.await, cluster_side.await) {
                let _ =
                    tokio::io::copy_bidirectional(&mut TokioIo::new(u), &mut TokioIo::new(c)).await;
            }
        });
        let (parts, _) = resp.into_parts();
        return Response::from_parts(parts, full(Bytes::new()));
    }
    resp.map(|b| b.map_err(|e| Box::new(e) as _).boxed_unsync())
}
