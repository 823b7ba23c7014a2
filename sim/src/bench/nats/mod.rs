//! The NATS baseline: `nats-server` processes on loopback, a hub with leafnode servers
//! mirroring our tiers, and one subscriber per leaf connected to the lowest servers,
//! delivering the same payload.
//!
//! The baseline runs three times: core NATS over plaintext TCP; core NATS with mutual
//! TLS on every client and leafnode link (as every link of ours runs), the lower bound;
//! and JetStream with mutual TLS (`jetstream.rs`): a durable stream at the hub and one
//! durable consumer per leaf that acknowledges every message, which does what we do
//! (keep the object durably, count every leaf's answer).
//!
//! The client (`client.rs`) is a minimal NATS text-protocol client (INFO, CONNECT, SUB,
//! PUB, MSG, PING/PONG) over tokio TCP, upgraded to TLS after INFO as nats-server 2.9
//! expects: the harness needs a handful of subjects. `async-nats`
//! could stay on ring (its default; aws-lc-rs is optional), but it always brings
//! tokio-rustls, rustls-native-certs, rustls-pemfile, a second rustls-webpki (0.102),
//! nkeys, nuid, regex, time, url, rand 0.8 and more: a heavy tree for ~150 lines.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

pub(crate) use super::NatsFlavor as Flavor;
use super::measure::Arrivals;
use super::{BenchError, Dist, NatsReport, Options};
use client::{Conn, Heard, Tls, connect, subscribe};

mod client;
mod jetstream;

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
/// The first server (the hub) runs JetStream for [`Flavor::JetStream`], storing in
/// `dir/jetstream`.
fn spawn_all(
    binary: &Path,
    dir: &Path,
    plan: &[(String, Option<usize>)],
    (tls, flavor): (Option<&Tls>, Flavor),
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
        let jetstream = match (flavor, parent) {
            (Flavor::JetStream, None) => format!(
                "jetstream {{ store_dir: \"{}\" }}\n",
                dir.join("jetstream").display()
            ),
            _ => String::new(),
        };
        let conf = format!(
            "server_name: {name}\nlisten: {client}\nmax_payload: 8MB\n{server_tls}\n{jetstream}\
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

/// Publishes payload `seq` of `size` bytes. Core NATS: returns once the server
/// processed it (PING/PONG). JetStream: once the stream stored it (its PubAck, on the
/// publisher's inbox; see `jetstream.rs`).
async fn publish(conn: &mut Conn, flavor: Flavor, seq: u64, size: usize) -> Result<(), BenchError> {
    let reply = match flavor {
        Flavor::Core => String::new(),
        Flavor::JetStream => format!("{} ", jetstream::INBOX),
    };
    let mut msg = format!("PUB {SUBJECT} {reply}{}\r\n", size.max(8)).into_bytes();
    msg.extend_from_slice(&seq.to_le_bytes());
    msg.resize(msg.len() + size.saturating_sub(8), b'x');
    msg.extend_from_slice(b"\r\n");
    conn.writer.write_all(&msg).await.map_err(err)?;
    match flavor {
        Flavor::Core => conn.flush().await,
        Flavor::JetStream => jetstream::answered(conn, &format!("publishing message {seq}")).await,
    }
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
/// bytes (the size of our encoded object), with mutual TLS on every link when `tls`,
/// through core NATS or JetStream (`flavor`).
pub(crate) async fn run(
    binary: &Path,
    fanout: &[usize],
    payload: usize,
    opts: &Options,
    (tls, flavor): (bool, Flavor),
) -> Result<NatsReport, BenchError> {
    let leaves: usize = fanout.iter().product();
    let dir = std::env::temp_dir().join(format!(
        "strata-bench-nats{}{}-{}",
        if flavor == Flavor::JetStream {
            "-js"
        } else {
            ""
        },
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
        spawn_all(binary, &dir, &plan, (tls, flavor), &mut servers)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut arrivals = Arrivals::new(rx);
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        let mut acks = Arrivals::new(ack_rx);
        let mut subs = Vec::new();
        let per = fanout[fanout.len() - 1];
        for (i, &s) in level.iter().enumerate() {
            for j in 0..per {
                let heard = Heard {
                    delivered: tx.clone(),
                    acked: ack_tx.clone(),
                };
                let leaf = (i * per + j) as u32;
                subs.push(subscribe(servers[s].client, tls, leaf, flavor, heard).await?);
            }
        }
        let mut publisher = connect(servers[0].client, tls).await?;
        publisher.flush().await?;
        if flavor == Flavor::JetStream {
            jetstream::set_up(&mut publisher, leaves as u32).await?;
        }
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
            publish(&mut publisher, flavor, seq, 8).await?;
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
        let mut acked = Vec::new();
        let limit = Duration::from_secs(60 + leaves as u64 / 50);
        for _ in 0..opts.rounds.max(1) {
            tokio::time::sleep(Duration::from_millis(300)).await;
            arrivals.drain();
            acks.drain();
            seq += 1;
            let start = Instant::now();
            publish(&mut publisher, flavor, seq, payload).await?;
            let got = arrivals.wait(0..leaves, seq, start, limit).await?;
            times.extend(got.into_iter().map(|g| g.1));
            if flavor == Flavor::JetStream {
                let got = acks.wait(0..leaves, seq, start, limit).await?;
                acked.extend(got.into_iter().map(|g| g.1));
            }
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
            jetstream: flavor == Flavor::JetStream,
            acked: (flavor == Flavor::JetStream).then(|| Dist::of(acked)),
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
