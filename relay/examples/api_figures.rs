//! Figures of the root's Kubernetes API from a plain client (issue 49): creates through
//! keep-alive connections, and lists timed page by page.
//!
//! - `api_figures create N [CONNECTIONS] [PREFIX]`: creates N ConfigMaps in `default`
//!   (named `PREFIX-I`, PREFIX `fig`), CONNECTIONS (10) HTTP/1.1 connections each with
//!   one request in flight; prints objects/s and the latency of each POST (p50, p99).
//! - `api_figures list [PAGE]`: lists every ConfigMap (`/api/v1/configmaps`) in one
//!   request, then in pages of PAGE (500) following `continue`, once as JSON and once
//!   as the Table kubectl asks for (`Accept: application/json;as=Table;v=v1;
//!   g=meta.k8s.io`); prints each whole list's time and its slowest page (first byte
//!   and whole body).
//!
//! Run with the `STRATA_*` variables `relay up` prints:
//! `cargo build --profile production -p strata-relay --example api_figures &&
//!  target/production/examples/api_figures create 10000 10`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

/// What kubectl's `get` asks for.
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// Where the API is, from the environment `relay up` prints.
#[derive(Clone)]
struct Target {
    addr: std::net::SocketAddr,
    name: String,
    token: String,
    tls: Arc<rustls::ClientConfig>,
}

impl Target {
    fn from_env() -> anyhow::Result<Target> {
        let env = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
        let ca = std::path::PathBuf::from(env("STRATA_CA")?);
        Ok(Target {
            addr: env("STRATA_SERVER")?.parse()?,
            name: env("STRATA_SERVER_NAME").unwrap_or_else(|_| "center".into()),
            token: env("STRATA_TOKEN")?,
            tls: strata_node::tls::api_client_config(&ca)?,
        })
    }
}

/// One keep-alive HTTP/1.1 connection over TLS.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    target: Target,
}

/// One answer: its status, body, and when its head and its whole body arrived.
struct Timed {
    status: hyper::StatusCode,
    body: Bytes,
    first_byte: Duration,
    whole: Duration,
}

impl Connection {
    async fn open(target: &Target) -> anyhow::Result<Connection> {
        let tcp = tokio::net::TcpStream::connect(target.addr).await?;
        let tls = TlsConnector::from(target.tls.clone())
            .connect(ServerName::try_from(target.name.clone())?, tcp)
            .await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(Connection {
            sender,
            target: target.clone(),
        })
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        accept: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<Timed> {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.target.name.as_str())
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.target.token),
            )
            .header(hyper::header::ACCEPT, accept)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let started = Instant::now();
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let first_byte = started.elapsed();
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Timed {
            status,
            body,
            first_byte,
            whole: started.elapsed(),
        })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1);
    sorted.get(i).copied().unwrap_or_default()
}

async fn create(target: &Target, n: u64, connections: usize, prefix: &str) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut conns = Vec::new();
    for _ in 0..connections.max(1) {
        conns.push(Connection::open(target).await?);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for mut conn in conns {
        let (next, prefix) = (next.clone(), prefix.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return anyhow::Ok(took);
                }
                let cm = serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": format!("{prefix}-{i}"), "labels": { "app": "figures" } },
                    "data": { "value": i.to_string() },
                });
                let path = "/api/v1/namespaces/default/configmaps";
                let answer = conn
                    .send(
                        Method::POST,
                        path,
                        "application/json",
                        serde_json::to_vec(&cm)?,
                    )
                    .await?;
                if !answer.status.is_success() {
                    let body = String::from_utf8_lossy(&answer.body);
                    bail!("{path}: {}: {body}", answer.status);
                }
                took.push(answer.whole);
            }
        }));
    }
    let mut took = Vec::new();
    for t in tasks {
        took.extend(t.await??);
    }
    let secs = started.elapsed().as_secs_f64();
    took.sort();
    println!(
        "created {n} ConfigMaps over {connections} connections in {secs:.2} s: {:.0} objects/s; \
         each POST p50 {:.1} ms, p99 {:.1} ms",
        n as f64 / secs,
        ms(percentile(&took, 0.5)),
        ms(percentile(&took, 0.99)),
    );
    Ok(())
}

/// Lists every ConfigMap in pages of `limit` (`None`: one request); prints the time.
async fn list(conn: &mut Connection, limit: Option<usize>, accept: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let (mut pages, mut items, mut bytes) = (0, 0, 0);
    let mut slowest: Option<(Duration, Duration)> = None;
    let mut token: Option<String> = None;
    loop {
        let mut path = "/api/v1/configmaps".to_owned();
        if let Some(l) = limit {
            path.push_str(&format!("?limit={l}"));
        }
        if let Some(t) = &token {
            path.push_str(&format!("&continue={t}"));
        }
        let answer = conn.send(Method::GET, &path, accept, Vec::new()).await?;
        if !answer.status.is_success() {
            bail!(
                "{path}: {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&answer.body)?;
        pages += 1;
        bytes += answer.body.len();
        items += v["items"]
            .as_array()
            .or(v["rows"].as_array())
            .map_or(0, Vec::len);
        if slowest.is_none_or(|(_, w)| answer.whole > w) {
            slowest = Some((answer.first_byte, answer.whole));
        }
        token = v["metadata"]["continue"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    let (first, whole) = slowest.unwrap_or_default();
    println!(
        "list {} ({}): {items} objects in {pages} pages, {:.0} KiB: {:.1} ms; slowest page: \
         head {:.1} ms, body {:.1} ms",
        limit.map_or("in one request".to_owned(), |l| format!("limit={l}")),
        if accept == TABLE { "Table" } else { "JSON" },
        bytes as f64 / 1024.0,
        ms(started.elapsed()),
        ms(first),
        ms(whole),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    let target = Target::from_env()?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!("load average: {}", load.join(" "));
    match arg(0) {
        Some("create") => {
            let n = arg(1).map(str::parse).transpose()?.unwrap_or(10_000);
            let conns = arg(2).map(str::parse).transpose()?.unwrap_or(10);
            create(&target, n, conns, arg(3).unwrap_or("fig")).await
        }
        Some("list") => {
            let page = arg(1).map(str::parse).transpose()?.unwrap_or(500);
            let mut conn = Connection::open(&target).await?;
            for accept in ["application/json", TABLE] {
                list(&mut conn, None, accept).await?;
                list(&mut conn, Some(page), accept).await?;
            }
            Ok(())
        }
        _ => bail!("usage: api_figures create N [CONNECTIONS] [PREFIX] | list [PAGE]"),
    }
}
