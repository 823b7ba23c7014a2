//! Figure: N concurrent watchers of the root's Kubernetes API receiving one change.
//! Opens N watches (`GET /api/v1/namespaces/default/configmaps?watch=true`, each its
//! own TLS connection) from the current revision, creates one ConfigMap, and prints the
//! latency from just before the write to each watcher's event (p50, p99, max).
//!
//! Usage, with the `STRATA_*` variables `relay up` prints:
//! `cargo run --release -p strata-relay --example watch_fanout -- [N]` (N: 100).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use http_body_util::{BodyExt, Empty};
use hyper::Method;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use strata_relay::client::ApiClient;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

const PATH: &str = "/api/v1/namespaces/default/configmaps";

/// Opens one watch from `rv`; returns when it is open, with a task that reports the
/// instant the first event naming `name` arrived.
async fn watch(
    addr: std::net::SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    server_name: String,
    token: String,
    rv: String,
    name: String,
) -> anyhow::Result<tokio::task::JoinHandle<Option<Instant>>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let stream = TlsConnector::from(tls)
        .connect(ServerName::try_from(server_name.clone())?, tcp)
        .await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .uri(format!("{PATH}?watch=true&resourceVersion={rv}"))
        .header(hyper::header::HOST, server_name)
        .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    anyhow::ensure!(
        resp.status().is_success(),
        "watch answered {}",
        resp.status()
    );
    let mut body = resp.into_body();
    Ok(tokio::spawn(async move {
        // The connection lives while its sender does.
        let _sender = sender;
        let mut seen = Vec::new();
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                seen.extend_from_slice(&data);
                if String::from_utf8_lossy(&seen).contains(&name) {
                    return Some(Instant::now());
                }
            }
        }
        None
    }))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100);
    let env = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
    let addr = env("STRATA_SERVER")?.parse()?;
    let server_name = env("STRATA_SERVER_NAME").unwrap_or_else(|_| "center".into());
    let ca = std::path::PathBuf::from(env("STRATA_CA")?);
    let token = env("STRATA_TOKEN")?;
    let client = ApiClient::new(addr, &server_name, &ca, &token)?;
    let (_, list) = client.request(Method::GET, PATH, None).await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let name = format!("fanout-{rv}");
    let tls = strata_node::tls::api_client_config(&ca)?;
    let mut watchers = Vec::with_capacity(n);
    for _ in 0..n {
        watchers.push(
            watch(
                addr,
                tls.clone(),
                server_name.clone(),
                token.clone(),
                rv.clone(),
                name.clone(),
            )
            .await?,
        );
    }
    // Let every watch reach its poll loop before the write.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let body = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"a":"b"}}}}"#
    );
    let start = Instant::now();
    let (status, _) = client
        .request(Method::POST, PATH, Some(body.into_bytes()))
        .await?;
    anyhow::ensure!(status.is_success(), "the write answered {status}");
    let mut latencies = Vec::with_capacity(n);
    for w in watchers {
        match tokio::time::timeout(Duration::from_secs(30), w).await {
            Ok(Ok(Some(at))) => latencies.push(at.duration_since(start)),
            _ => anyhow::bail!("a watcher saw no event within 30 s"),
        }
    }
    latencies.sort();
    let pick = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    println!(
        "{n} watchers, one ConfigMap created: latency write -> event p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pick(0.50).as_secs_f64() * 1e3,
        pick(0.99).as_secs_f64() * 1e3,
        pick(1.0).as_secs_f64() * 1e3
    );
    Ok(())
}
