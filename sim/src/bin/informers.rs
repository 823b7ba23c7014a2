//! `informers`: many informers with streaming lists against the root's Kubernetes API
//! (issue 45). Starts a `relay up` hierarchy (a root and one simulated cluster), creates
//! N ConfigMaps through the API, then starts M informers at once, each on a connection
//! of its own, as M controllers would: `watch=1&sendInitialEvents=true&
//! resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`, the objects as `ADDED`
//! events and the `BOOKMARK` annotated `k8s.io/initial-events-end` that ends them (what
//! client-go's and kube-rs' informers ask for). Prints the time until every informer is
//! synced (and each one's percentiles), the events and bytes they read, and the root
//! process's RSS before, at its peak, and after.
//!
//! `ulimit -n 20000; cargo build --profile production --bin relay --bin agent --bin informers
//!  && target/production/informers --relay target/production/relay --objects 10000 --informers 1000`

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

#[derive(Debug, Parser)]
#[command(
    about = "Informers with streaming lists against the root: time until all are synced, and the root's RSS",
    after_help = "Raise the open-file limit first (ulimit -n 20000): every informer holds a \
                  connection, at both ends."
)]
struct Args {
    /// The relay binary (`relay up` runs the hierarchy).
    #[arg(long, default_value = "target/release/relay")]
    relay: PathBuf,
    /// ConfigMaps created before the informers start.
    #[arg(long, default_value_t = 10_000)]
    objects: usize,
    /// Informers started at once, each on a connection of its own.
    #[arg(long, default_value_t = 1_000)]
    informers: usize,
    /// Bytes of data in each ConfigMap.
    #[arg(long, default_value_t = 256)]
    object_bytes: usize,
    /// Requests in flight while the objects are created.
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Give up on an informer that is not synced after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
}

const TOKEN: &str = "bench-admin-token-0123456789";
const NAMESPACE: &str = "bench";
const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: informers }
spec:
  root: { name: center }
  clusters:
    - { name: site-1, parent: center, labels: { role: bench } }
";

/// Where the root's API is, as `relay up` printed it.
#[derive(Debug, Clone)]
struct Api {
    addr: std::net::SocketAddr,
    name: String,
    tls: Arc<rustls::ClientConfig>,
}

/// One HTTP/1.1 connection to the API over TLS.
struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    api: Api,
}

impl Conn {
    async fn open(api: &Api) -> anyhow::Result<Conn> {
        let tcp = tokio::net::TcpStream::connect(api.addr)
            .await
            .with_context(|| format!("connecting to {}", api.addr))?;
        let name = ServerName::try_from(api.name.clone())?;
        let tls = TlsConnector::from(api.tls.clone())
            .connect(name, tcp)
            .await
            .context("TLS with the root")?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(Conn {
            sender,
            api: api.clone(),
        })
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<Request<Full<Bytes>>> {
        Ok(Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.api.name.as_str())
            .header(hyper::header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?)
    }

    /// Sends a request and reads the whole answer; `Err` unless it is 2xx.
    async fn call(&mut self, method: Method, path: &str, body: Vec<u8>) -> anyhow::Result<()> {
        let req = self.request(method, path, body)?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!("{path}: {status}: {}", String::from_utf8_lossy(&bytes));
        }
        Ok(())
    }
}

/// What one informer read until it was synced.
struct Synced {
    after: Duration,
    added: u64,
}

/// One informer: a streaming list, read until the bookmark that ends the initial events.
async fn informer(api: Api, started: Instant, bytes: Arc<AtomicU64>) -> anyhow::Result<Synced> {
    let mut conn = Conn::open(&api).await?;
    let path = format!(
        "/api/v1/namespaces/{NAMESPACE}/configmaps?watch=1&sendInitialEvents=true\
         &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    );
    let req = conn.request(Method::GET, &path, Vec::new())?;
    conn.sender.ready().await?;
    let resp = conn.sender.send_request(req).await?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        bail!("watch: {status}: {}", String::from_utf8_lossy(&body));
    }
    let reader = tokio::io::BufReader::new(BodyReader::new(resp.into_body(), bytes));
    let mut lines = reader.lines();
    let mut added = 0u64;
    while let Some(line) = lines.next_line().await? {
        if line.starts_with("{\"type\":\"ADDED\"") {
            added += 1;
        } else if line.contains("\"BOOKMARK\"") && line.contains("k8s.io/initial-events-end") {
            return Ok(Synced {
                after: started.elapsed(),
                added,
            });
        } else if line.contains("\"ERROR\"") {
            bail!("the watch ended in an error: {line}");
        }
    }
    bail!("the watch ended before its initial events did ({added} ADDED)")
}

/// A response body as an `AsyncRead`, counting its bytes.
struct BodyReader {
    body: hyper::body::Incoming,
    chunk: Bytes,
    counted: Arc<AtomicU64>,
}

impl BodyReader {
    fn new(body: hyper::body::Incoming, counted: Arc<AtomicU64>) -> Self {
        BodyReader {
            body,
            chunk: Bytes::new(),
            counted,
        }
    }
}

impl tokio::io::AsyncRead for BodyReader {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use hyper::body::Body;
        use std::task::Poll;
        loop {
            if !self.chunk.is_empty() {
                let n = self.chunk.len().min(buf.remaining());
                let part = self.chunk.split_to(n);
                buf.put_slice(&part);
                return Poll::Ready(Ok(()));
            }
            match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.counted.fetch_add(data.len() as u64, Ordering::Relaxed);
                        self.chunk = data;
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(std::io::Error::other(e))),
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The resident set size of process `pid` (KiB), from `/proc`.
fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The root's process: the child of `relay up` serving `nodes/center/`.
fn root_pid(up: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The parent is the fourth field, after the command's closing parenthesis.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        (ppid == up && cmdline.contains("nodes/center/")).then_some(pid)
    })
}

/// Starts `relay up`; returns it and the API once it printed its address.
fn start(args: &Args, dir: &Path) -> anyhow::Result<(Child, Api)> {
    let file = dir.join("topology.yaml");
    std::fs::write(&file, TOPOLOGY)?;
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join("api.tokens"), format!("{TOKEN}\n"))?;
    let mut child = Command::new(&args.relay)
        .arg("up")
        .arg(&file)
        .arg("--data")
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {} up", args.relay.display()))?;
    let stdout = child.stdout.take().context("relay up's stdout")?;
    // Read on a thread to its end, so that relay up never writes into a closed pipe.
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(60)) {
        let Some(vars) = line.trim().strip_prefix("export STRATA_SERVER=") else {
            continue;
        };
        let mut fields = vars.split(' ');
        let addr = fields.next().context("STRATA_SERVER")?.parse()?;
        let var = |name: &str| {
            vars.split(' ')
                .find_map(|kv| kv.strip_prefix(name))
                .map(str::to_owned)
        };
        let name = var("STRATA_SERVER_NAME=").context("STRATA_SERVER_NAME")?;
        let ca = var("STRATA_CA=").context("STRATA_CA")?;
        let ca = if Path::new(&ca).is_absolute() {
            PathBuf::from(ca)
        } else {
            std::env::current_dir()?.join(ca)
        };
        let tls = strata_node::tls::api_client_config(&ca)?;
        return Ok((child, Api { addr, name, tls }));
    }
    let _ = child.kill();
    bail!("relay up printed no STRATA_SERVER within 60 s")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let (mut up, api) = start(&args, tmp.path())?;
    let result = run(&args, &api, up.id()).await;
    // SIGTERM, so that relay up stops its nodes.
    let _ = Command::new("kill")
        .args(["-TERM", &up.id().to_string()])
        .status();
    let _ = tokio::task::spawn_blocking(move || up.wait()).await;
    result
}

async fn run(args: &Args, api: &Api, up: u32) -> anyhow::Result<()> {
    let root = {
        let mut found = None;
        for _ in 0..100 {
            found = root_pid(up);
            if found.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        found.context("the root's process (relay serve ... nodes/center/) was not found")?
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average before: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );

    let mut conn = Conn::open(api).await?;
    let ns = serde_json::json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": NAMESPACE } });
    conn.call(Method::POST, "/api/v1/namespaces", serde_json::to_vec(&ns)?)
        .await?;

    // The objects, `writers` requests in flight.
    let created = Instant::now();
    let payload = "x".repeat(args.object_bytes);
    let next = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for _ in 0..args.writers.max(1) {
        let (api, next, payload, total) = (
            api.clone(),
            next.clone(),
            payload.clone(),
            args.objects as u64,
        );
        writers.push(tokio::spawn(async move {
            let mut conn = Conn::open(&api).await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return anyhow::Ok(());
                }
                let cm = serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": format!("cm-{i:05}"), "labels": { "bench": "informers" } },
                    "data": { "payload": payload },
                });
                conn.call(
                    Method::POST,
                    &format!("/api/v1/namespaces/{NAMESPACE}/configmaps"),
                    serde_json::to_vec(&cm)?,
                )
                .await?;
            }
        }));
    }
    for w in writers {
        w.await??;
    }
    let create_secs = created.elapsed().as_secs_f64();
    println!(
        "created {} ConfigMaps of {} bytes in {create_secs:.1} s ({:.0}/s, {} writers)",
        args.objects,
        args.object_bytes,
        args.objects as f64 / create_secs,
        args.writers
    );
    let rss_before = rss_kib(root, "VmRSS:");

    // Every informer at once; the root's RSS sampled meanwhile.
    let bytes = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = Duration::from_secs(args.timeout_secs);
    let mut tasks = Vec::new();
    for _ in 0..args.informers {
        let (api, bytes) = (api.clone(), bytes.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::timeout(deadline, informer(api, started, bytes))
                .await
                .unwrap_or_else(|_| bail!("not synced within {} s", deadline.as_secs()))
        }));
    }
    let sampling = Arc::new(AtomicU64::new(rss_before));
    let sampler = {
        let peak = sampling.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(root, "VmRSS:"), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut synced = Vec::new();
    let mut failures = Vec::new();
    for t in tasks {
        match t.await? {
            Ok(s) => synced.push(s),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let all_secs = started.elapsed().as_secs_f64();
    sampler.abort();
    let peak = sampling
        .load(Ordering::Relaxed)
        .max(rss_kib(root, "VmRSS:"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = rss_kib(root, "VmRSS:");

    let mut times: Vec<Duration> = synced.iter().map(|s| s.after).collect();
    times.sort_unstable();
    let complete = synced
        .iter()
        .filter(|s| s.added == args.objects as u64)
        .count();
    // Every body byte the informers read (each stops reading at its bookmark).
    let read = bytes.load(Ordering::Relaxed);
    println!(
        "{} informers (streaming lists) against {} objects: {} synced, {} with every object, {} failed",
        args.informers,
        args.objects,
        synced.len(),
        complete,
        failures.len()
    );
    println!(
        "time until all were synced: {all_secs:.1} s; per informer p50 {:.1} s, p95 {:.1} s, p99 {:.1} s, max {:.1} s",
        percentile(&times, 0.50).as_secs_f64(),
        percentile(&times, 0.95).as_secs_f64(),
        percentile(&times, 0.99).as_secs_f64(),
        percentile(&times, 1.0).as_secs_f64(),
    );
    println!(
        "read: {:.0} MiB of events ({:.0} MiB/s), {} ADDED events",
        read as f64 / 1_048_576.0,
        read as f64 / 1_048_576.0 / all_secs,
        synced.iter().map(|s| s.added).sum::<u64>()
    );
    println!(
        "root RSS: {:.0} MiB before the informers, {:.0} MiB at the peak, {:.0} MiB after (peak of the process's life: {:.0} MiB)",
        mib(rss_before),
        mib(peak),
        mib(rss_after),
        mib(rss_kib(root, "VmHWM:"))
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average after: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    if let Some(first) = failures.first() {
        bail!("{} informers failed; the first: {first}", failures.len());
    }
    Ok(())
}
