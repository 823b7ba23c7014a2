//! The NATS baseline: `nats-server` processes on loopback, a hub with leafnode servers
//! mirroring our tiers, and one subscriber per leaf connected to the lowest servers,
//! delivering the same payload.
//!
//! The baseline runs twice: over plaintext TCP, and with mutual TLS on every client and
//! leafnode link (as every link of ours runs), which is the honest comparison.
//!
//! The client is a minimal NATS text-protocol client (INFO, CONNECT, SUB, PUB, MSG,
//! PING/PONG) over tokio TCP, upgraded to TLS after INFO as nats-server 2.9 expects:
//! the harness needs one subject. `async-nats`
//! could stay on ring (its default; aws-lc-rs is optional), but it always brings
//! tokio-rustls, rustls-native-certs, rustls-pemfile, a second rustls-webpki (0.102),
//! nkeys, nuid, regex, time, url, rand 0.8 and more: a heavy tree for ~150 lines.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::measure::Arrivals;
use super::tree::Applied;
use super::{BenchError, Dist, NatsReport, Options};

const SUBJECT: &str = "bench.payload";

fn err(detail: impl std::fmt::Display) -> BenchError {
    BenchError::Nats {
        detail: detail.to_string(),
    }
}

/// Finds `nats-server` on the PATH (or the given path).
pub(crate) fn find(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return p.is_file().then(|| p.to_owned());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("nats-server"))
            .find(|p| p.is_file())
    })
}

struct Server {
    child: Child,
    client: SocketAddr,
}

/// A loopback port, held (so that the next pick differs) until the caller drops it.
fn free_port(held: &mut Vec<std::net::TcpListener>) -> Result<SocketAddr, BenchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?;
    let addr = l.local_addr().map_err(err)?;
    held.push(l);
    Ok(addr)
}

/// Writes the configurations of the servers `(name, parent index)` with distinct
/// ports (all held until every configuration is written), then starts them all.
fn spawn_all(
    binary: &Path,
    dir: &Path,
    plan: &[(String, Option<usize>)],
    tls: Option<&Tls>,
    servers: &mut Vec<Server>,
) -> Result<(), BenchError> {
    let mut held = Vec::new();
    let mut addrs: Vec<(SocketAddr, SocketAddr)> = Vec::new();
    // Every server presents the one certificate and requires its peers' (mutual TLS);
    // the handshake timeout is generous, as thousands of subscribers connect at once.
    let files = tls.map(|t| {
        format!(
            "cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\"",
            t.cert.display(),
            t.key.display(),
            t.ca.display()
        )
    });
    let (server_tls, scheme, remote_tls) = match &files {
        Some(f) => (
            format!("tls {{ {f}, verify: true, timeout: 30 }}"),
            "tls",
            format!(", tls {{ {f} }}"),
        ),
        None => (String::new(), "nats-leaf", String::new()),
    };
    for (name, parent) in plan {
        let client = free_port(&mut held)?;
        let leaf = free_port(&mut held)?;
        let remotes = parent
            .map(|p| {
                format!(
                    "remotes: [ {{ url: \"{scheme}://{}\"{remote_tls} }} ]",
                    addrs[p].1
                )
            })
            .unwrap_or_default();
        let conf = format!(
            "server_name: {name}\nlisten: {client}\nmax_payload: 8MB\n{server_tls}\n\
             leafnodes {{\n  listen: {leaf}\n  {server_tls}\n  {remotes}\n}}\n"
        );
        std::fs::write(dir.join(format!("{name}.conf")), conf).map_err(err)?;
        addrs.push((client, leaf));
    }
    drop(held);
    for ((name, _), (client, _)) in plan.iter().zip(addrs) {
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).map_err(err)?;
        let child = Command::new(binary)
            .arg("-c")
            .arg(dir.join(format!("{name}.conf")))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| err(format!("starting {}: {e}", binary.display())))?;
        servers.push(Server { child, client });
    }
    Ok(())
}

/// The TLS baseline's material: one CA, and one certificate (for 127.0.0.1) that every
/// server and client presents and checks its peer's against.
pub(crate) struct Tls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client: Arc<rustls::ClientConfig>,
}

impl Tls {
    /// Issues the material into `dir`.
    fn issue(dir: &Path) -> Result<Tls, BenchError> {
        use rcgen::{
            BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
        };
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).map_err(err)?;
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).map_err(err)?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &ca, &ca_key).map_err(err)?;
        let tls = Tls {
            ca: dir.join("ca.pem"),
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
            client: {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(ca.der().clone()).map_err(err)?;
                let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
                let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .map_err(err)?
                .with_root_certificates(roots)
                .with_client_auth_cert(vec![cert.der().clone()], key_der)
                .map_err(err)?;
                Arc::new(config)
            },
        };
        std::fs::write(&tls.ca, ca.pem()).map_err(err)?;
        std::fs::write(&tls.cert, cert.pem()).map_err(err)?;
        std::fs::write(&tls.key, key.serialize_pem()).map_err(err)?;
        Ok(tls)
    }
}

/// A connection after the handshake.
struct Conn {
    reader: BufReader<Box<dyn AsyncRead + Send + Unpin>>,
    writer: Box<dyn AsyncWrite + Send + Unpin>,
}

/// Reads the server's INFO line byte by byte, so nothing after it is consumed before a
/// TLS upgrade.
async fn read_info(s: &mut TcpStream, addr: SocketAddr) -> Result<(), BenchError> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.last() != Some(&b'\n') {
        if line.len() > 64 * 1024 || s.read(&mut byte).await.map_err(err)? == 0 {
            return Err(err(format!("{addr} sent no INFO line")));
        }
        line.push(byte[0]);
    }
    if !line.starts_with(b"INFO") {
        let line = String::from_utf8_lossy(&line);
        return Err(err(format!("{addr} greeted with {line:?}")));
    }
    Ok(())
}

async fn connect(addr: SocketAddr, tls: Option<&Tls>) -> Result<Conn, BenchError> {
    let mut last = String::new();
    for _ in 0..200 {
        match TcpStream::connect(addr).await {
            Ok(mut s) => {
                s.set_nodelay(true).map_err(err)?;
                read_info(&mut s, addr).await?;
                let (r, w): (
                    Box<dyn AsyncRead + Send + Unpin>,
                    Box<dyn AsyncWrite + Send + Unpin>,
                ) = match tls {
                    None => {
                        let (r, w) = s.into_split();
                        (Box::new(r), Box::new(w))
                    }
                    Some(tls) => {
                        let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
                        let stream = tokio_rustls::TlsConnector::from(tls.client.clone())
                            .connect(name, s)
                            .await
                            .map_err(|e| err(format!("TLS to {addr}: {e}")))?;
                        let (r, w) = tokio::io::split(stream);
                        (Box::new(r), Box::new(w))
                    }
                };
                let mut conn = Conn {
                    reader: BufReader::new(r),
                    writer: w,
                };
                conn.writer
                    .write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"lang\":\"strata-bench\",\"version\":\"0\",\"protocol\":1}\r\n")
                    .await
                    .map_err(err)?;
                return Ok(conn);
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(err(format!("cannot connect to {addr}: {last}")))
}

impl Conn {
    /// Sends PING and reads until PONG: everything sent before is processed. Answers
    /// the server's own PINGs on the way.
    async fn flush(&mut self) -> Result<(), BenchError> {
        self.writer.write_all(b"PING\r\n").await.map_err(err)?;
        let mut line = String::new();
        for _ in 0..1000 {
            line.clear();
            if self.reader.read_line(&mut line).await.map_err(err)? == 0 {
                return Err(err("connection closed"));
            }
            if line.starts_with("PONG") {
                return Ok(());
            }
            // The server's keep-alive: a client that leaves two of them unanswered is
            // dropped as a "Stale Connection" (after about 4 minutes at the defaults,
            // which a 10,000-subscriber set-up outlasts).
            if line.starts_with("PING") {
                self.writer.write_all(b"PONG\r\n").await.map_err(err)?;
                continue;
            }
            if line.starts_with("-ERR") {
                return Err(err(line.trim()));
            }
        }
        Err(err("no PONG"))
    }
}

/// A subscriber standing in for leaf `leaf`: reports every message's sequence number
/// (its first 8 bytes) with its arrival time.
async fn subscribe(
    addr: SocketAddr,
    tls: Option<&Tls>,
    leaf: u32,
    tx: mpsc::UnboundedSender<Applied>,
) -> Result<tokio::task::JoinHandle<()>, BenchError> {
    let mut conn = connect(addr, tls).await?;
    conn.writer
        .write_all(format!("SUB {SUBJECT} 1\r\n").as_bytes())
        .await
        .map_err(err)?;
    conn.flush().await?;
    Ok(tokio::spawn(async move {
        let Conn {
            mut reader,
            mut writer,
        } = conn;
        let mut line = String::new();
        let mut payload = Vec::new();
        loop {
            line.clear();
            match reader.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.starts_with("MSG") {
                let size: usize = line
                    .split_whitespace()
                    .last()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                payload.resize(size + 2, 0);
                if reader.read_exact(&mut payload).await.is_err() {
                    return;
                }
                let at = Instant::now();
                let mut seq = [0u8; 8];
                let n = size.min(8);
                seq[..n].copy_from_slice(&payload[..n]);
                let _ = tx.send(Applied {
                    leaf,
                    revision: u64::from_le_bytes(seq),
                    at,
                });
            } else if line.starts_with("PING") && writer.write_all(b"PONG\r\n").await.is_err() {
                return;
            }
        }
    }))
}

async fn publish(conn: &mut Conn, seq: u64, size: usize) -> Result<(), BenchError> {
    let mut msg = format!("PUB {SUBJECT} {}\r\n", size.max(8)).into_bytes();
    msg.extend_from_slice(&seq.to_le_bytes());
    msg.resize(msg.len() + size.saturating_sub(8), b'x');
    msg.extend_from_slice(b"\r\n");
    conn.writer.write_all(&msg).await.map_err(err)?;
    conn.flush().await
}

fn proc_rss_cpu(pid: u32) -> (u64, f64) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024;
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.get(s.rfind(')')? + 2..)?.to_owned();
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(0.0);
    (rss, cpu)
}

/// Runs the NATS tree of shape `fanout` and measures fan-out latency of `payload`
/// bytes (the size of our encoded object), with mutual TLS on every link when `tls`.
pub(crate) async fn run(
    binary: &Path,
    fanout: &[usize],
    payload: usize,
    opts: &Options,
    tls: bool,
) -> Result<NatsReport, BenchError> {
    let leaves: usize = fanout.iter().product();
    let dir = std::env::temp_dir().join(format!(
        "strata-bench-nats{}-{}",
        if tls { "-tls" } else { "" },
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(err)?;
    let mut servers: Vec<Server> = Vec::new();
    let result = async {
        let tls = if tls { Some(Tls::issue(&dir)?) } else { None };
        let tls = tls.as_ref();
        let mut plan: Vec<(String, Option<usize>)> = vec![("hub".into(), None)];
        let mut level: Vec<usize> = vec![0];
        for (depth, n) in fanout.iter().enumerate().take(fanout.len() - 1) {
            let mut next = Vec::new();
            for &p in &level {
                for i in 0..*n {
                    plan.push((format!("l{depth}-{p}-{i}"), Some(p)));
                    next.push(plan.len() - 1);
                }
            }
            level = next;
        }
        spawn_all(binary, &dir, &plan, tls, &mut servers)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut arrivals = Arrivals::new(rx);
        let mut subs = Vec::new();
        let per = fanout[fanout.len() - 1];
        for (i, &s) in level.iter().enumerate() {
            for j in 0..per {
                subs.push(
                    subscribe(servers[s].client, tls, (i * per + j) as u32, tx.clone()).await?,
                );
            }
        }
        let mut publisher = connect(servers[0].client, tls).await?;
        publisher.flush().await?;
        // Interest travels up the leafnode links: probe until every subscriber hears.
        let start = Instant::now();
        let mut seq = 1u64;
        let mut heard = vec![false; leaves];
        let mut count = 0;
        while count < leaves {
            if start.elapsed() > Duration::from_secs(60 + leaves as u64 / 50) {
                return Err(err(format!(
                    "only {count} of {leaves} subscribers heard the probes"
                )));
            }
            publish(&mut publisher, seq, 8).await?;
            seq += 1;
            let until = Instant::now() + Duration::from_millis(250);
            while let Ok(Some(a)) = arrivals.next_until(until).await {
                if !heard[a.leaf as usize] {
                    heard[a.leaf as usize] = true;
                    count += 1;
                }
            }
        }
        let ready = start.elapsed();
        let cpu_before: f64 = servers.iter().map(|s| proc_rss_cpu(s.child.id()).1).sum();
        let mut times = Vec::new();
        for _ in 0..opts.rounds.max(1) {
            tokio::time::sleep(Duration::from_millis(300)).await;
            arrivals.drain();
            seq += 1;
            let start = Instant::now();
            publish(&mut publisher, seq, payload).await?;
            let got = arrivals
                .wait(
                    0..leaves,
                    seq,
                    start,
                    Duration::from_secs(60 + leaves as u64 / 50),
                )
                .await?;
            times.extend(got.into_iter().map(|g| g.1));
        }
        let (rss, cpu_after) = servers.iter().fold((0u64, 0f64), |(r, c), s| {
            let (sr, sc) = proc_rss_cpu(s.child.id());
            (r + sr, c + sc)
        });
        for s in subs {
            s.abort();
        }
        Ok(NatsReport {
            tls: tls.is_some(),
            servers: servers.len(),
            leaves,
            payload_bytes: payload,
            interest_ready_secs: ready.as_secs_f64(),
            p1: Dist::of(times),
            servers_rss: rss,
            servers_cpu_updates: cpu_after - cpu_before,
        })
    }
    .await;
    for s in &mut servers {
        let _ = s.child.kill();
        let _ = s.child.wait();
    }
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "nats-server logs kept in {}",
            dir.display()
        );
    }
    result
}
