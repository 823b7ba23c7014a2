//! The simulated API's door to its claims' bytes (see [`crate::sim_volumes`]): what a
//! test reads and writes through the debug tunnel, `https://ROOT/clusters/NAME/strata/volumes/...`.

use strata_protocol::placement_spec::VolumeClaim;

use crate::sim_volumes::{SimVolumes, VolumeAccessError};

/// Where the simulated API serves claims' bytes: `GET PREFIX/NS/CLAIM[?offset=&length=]`
/// reads, `PUT PREFIX/NS/CLAIM?offset=N` writes the body, `GET PREFIX/NS/CLAIM/digest`
/// answers `{size, sha256, frozen}`.
pub const API_PREFIX: &str = "/strata/volumes/";

/// Most bytes one request reads or writes.
const MAX_API_BYTES: u64 = 16 << 20;

/// Answers a request under [`API_PREFIX`].
pub async fn answer(
    volumes: &SimVolumes,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<crate::tunnel_body::TunnelBody> {
    use hyper::{Method, StatusCode};

    use crate::tunnel_body::{full, status};

    let path = req.uri().path().trim_start_matches(API_PREFIX).to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse::<u64>().ok())
    };
    let segs: Vec<&str> = path.split('/').collect();
    let (claim, digest) = match segs.as_slice() {
        [ns, c] => (
            VolumeClaim {
                claim: (*c).into(),
                namespace: (*ns).into(),
            },
            false,
        ),
        [ns, c, "digest"] => (
            VolumeClaim {
                claim: (*c).into(),
                namespace: (*ns).into(),
            },
            true,
        ),
        _ => {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{API_PREFIX}NAMESPACE/CLAIM[/digest] is served, not {path}"),
            );
        }
    };
    let refused = |e: VolumeAccessError| {
        let code = match e {
            VolumeAccessError::NoClaim(_) => StatusCode::NOT_FOUND,
            VolumeAccessError::Refused(_) => StatusCode::SERVICE_UNAVAILABLE,
            VolumeAccessError::Beyond { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            _ => StatusCode::CONFLICT,
        };
        status(code, "Refused", e.to_string())
    };
    let offset = param("offset").unwrap_or(0);
    match (req.method().clone(), digest) {
        (Method::GET, true) => {
            let (size, sha) = match volumes.digest(&claim).await {
                Ok(d) => d,
                Err(e) => return refused(e),
            };
            let frozen = volumes.frozen(&claim).await.unwrap_or(false);
            let body = serde_json::json!({ "size": size, "sha256": sha, "frozen": frozen });
            hyper::Response::new(full(body.to_string()))
        }
        (Method::GET, false) => {
            let len = param("length").unwrap_or(MAX_API_BYTES).min(MAX_API_BYTES);
            match volumes.read(&claim, offset, len).await {
                Ok(bytes) => hyper::Response::new(full(bytes)),
                Err(e) => refused(e),
            }
        }
        (Method::PUT, false) => {
            let limit = MAX_API_BYTES as usize;
            let body = match crate::tunnel_body::collect_limited(req.into_body(), limit).await {
                Ok(b) => b,
                Err(refused) => return refused,
            };
            match volumes.write(&claim, offset, &body).await {
                Ok(()) => hyper::Response::new(full(Vec::new())),
                Err(e) => refused(e),
            }
        }
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "volumes are read with GET and written with PUT".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper::{Method, Request, StatusCode};
    use hyper_util::rt::TokioIo;

    use super::*;
    use crate::simulated::SimulatedCluster;

    /// One request to the simulated cluster's API over a pipe, as the tunnel carries it.
    async fn call(
        cluster: &SimulatedCluster,
        method: Method,
        path: &str,
        body: &[u8],
    ) -> (StatusCode, Vec<u8>) {
        let api = cluster.api();
        let (client, server) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let api = api.clone();
                async move { Ok::<_, Infallible>(api.answer(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(server), service)
                .await;
        });
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "sim")
            .body(Full::new(Bytes::copy_from_slice(body)))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, bytes.to_vec())
    }

    #[tokio::test]
    async fn a_test_writes_and_reads_a_claim_through_the_api() {
        let cluster = SimulatedCluster::default();
        let vols = cluster.volumes();
        let claim = VolumeClaim {
            claim: "data".into(),
            namespace: "shop".into(),
        };
        let path = "/strata/volumes/shop/data";
        let (status, _) = call(&cluster, Method::GET, path, b"").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "no claim applied yet");
        // As if the claim had been applied with 1 MiB.
        vols.begin_restore(&claim).await.unwrap();
        vols.end_restore(&claim, 1 << 20, &[], false).await.unwrap();
        let put = format!("{path}?offset=300000");
        let (status, _) = call(&cluster, Method::PUT, &put, b"hello volume").await;
        assert_eq!(status, StatusCode::OK);
        let get = format!("{path}?offset=300000&length=12");
        let (status, body) = call(&cluster, Method::GET, &get, b"").await;
        assert_eq!(
            (status, body.as_slice()),
            (StatusCode::OK, &b"hello volume"[..])
        );
        let (_, digest) = call(&cluster, Method::GET, &format!("{path}/digest"), b"").await;
        let digest: serde_json::Value = serde_json::from_slice(&digest).unwrap();
        assert_eq!(digest["size"], 1 << 20);
        assert_eq!(digest["sha256"], vols.digest(&claim).await.unwrap().1);
        vols.freeze(&claim, true).await.unwrap();
        let (status, body) = call(&cluster, Method::PUT, &put, b"x").await;
        assert_eq!(
            status,
            StatusCode::CONFLICT,
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
}
