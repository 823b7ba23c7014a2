//! Time to an established link on loopback, per route: QUIC, TLS 1.3 over TCP, TLS
//! over TCP through tinyproxy (when installed), and `auto` starting where UDP is
//! blocked, through tinyproxy (a node's first attempt: QUIC's fallback timeout, then
//! the tunnel). Mutual TLS with the hierarchy's
//! certificates each time, as a child connecting to its parent. Figures printed, never
//! asserted:
//!
//! ```sh
//! cargo run --release -p strata-sim --bin handshakes -- [ROUNDS]
//! ```

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use strata_node::dial::{Connector, ParentAddress, TransportMode};
use strata_node::proxy::Proxy;
use strata_node::reconnect::{self, AutoState};
use strata_node::tcp;
use strata_node::tls::{self, Identity};
use strata_node::transport;
use strata_topology::certs::Ca;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(n) => n.parse().context("ROUNDS must be a number")?,
        None => 50,
    };
    let ca = Ca::generate("figures")?;
    let parent = Identity::issue(&ca, "center")?;
    let child = Identity::issue(&ca, "site-1")?;
    let server = tls::server_config(&parent)?;
    let quic = transport::server_endpoint("127.0.0.1:0".parse()?, server.clone(), [3; 32])?;
    let quic_addr = quic.local_addr()?;
    let tcp_listener = tcp::Listener::bind("127.0.0.1:0".parse()?, server)?;
    let tcp_addr = tcp_listener.local_addr()?;
    // The parent's side: accept, finish the handshake, hold until the child closes.
    let mut parent_tasks = tokio::task::JoinSet::new();
    parent_tasks.spawn(async move {
        while let Some(incoming) = quic.accept().await {
            tokio::spawn(async move {
                if let Ok(c) = incoming.await {
                    c.closed().await;
                }
            });
        }
    });
    parent_tasks.spawn(async move {
        while let Ok((stream, tls)) = tcp_listener.next().await {
            tokio::spawn(async move {
                if let Ok(l) = tcp::accept(stream, tls).await {
                    l.closed().await;
                }
            });
        }
    });
    let tls = tls::client_config(&child)?;
    let endpoint = transport::client_endpoint("127.0.0.1:0".parse()?, tls.clone())?;
    let direct = Connector::new(TransportMode::Auto, Some(endpoint), Some(tls.clone()), None);

    let mut rows = vec![
        (
            "QUIC",
            measure(rounds, &direct, &quic_addr.into(), Route::Quic).await?,
        ),
        (
            "TLS 1.3 over TCP",
            measure(rounds, &direct, &tcp_addr.into(), Route::Tcp).await?,
        ),
    ];
    let tinyproxy = ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let mut proxy_proc = None;
    match tinyproxy {
        Some(program) => {
            let dir =
                std::env::temp_dir().join(format!("strata-handshakes-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let conf = dir.join("tinyproxy.conf");
            std::fs::write(
                &conf,
                format!(
                    "Port {port}\nListen 127.0.0.1\nTimeout 600\nLogLevel Error\nMaxClients 50\n"
                ),
            )?;
            let child = Command::new(program)
                .args(["-d", "-c", &conf.to_string_lossy()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            proxy_proc = Some((child, dir));
            for _ in 0..100 {
                if tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let proxy = Proxy::parse(&format!("http://127.0.0.1:{port}"))?;
            let via = Connector::new(
                TransportMode::Tcp,
                None,
                Some(tls.clone()),
                Some(proxy.clone()),
            );
            rows.push((
                "TLS 1.3 over TCP through tinyproxy",
                measure(rounds, &via, &tcp_addr.into(), Route::Tcp).await?,
            ));
            // `auto` at start with UDP blocked: the TCP listener's port answers no UDP,
            // so QUIC waits out its fallback timeout (3 s, production's) before the
            // tunnel; each round a fresh start (no memory of the last failure).
            let endpoint = transport::client_endpoint("127.0.0.1:0".parse()?, tls.clone())?;
            let auto = Connector::new(TransportMode::Auto, Some(endpoint), Some(tls), Some(proxy));
            rows.push((
                "auto, UDP blocked, via tinyproxy",
                measure(
                    rounds.clamp(1, 3),
                    &auto,
                    &tcp_addr.into(),
                    Route::AutoFromStart,
                )
                .await?,
            ));
        }
        None => println!("(tinyproxy is not installed: no row for it)"),
    }
    println!(
        "time from connect to an established mutual-TLS link, loopback, {rounds} rounds each:"
    );
    println!(
        "{:<36} {:>10} {:>10} {:>10}",
        "route", "median", "p90", "max"
    );
    for (name, mut ms) in rows {
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        println!(
            "{name:<36} {:>8.2}ms {:>8.2}ms {:>8.2}ms",
            at(0.5),
            at(0.9),
            at(1.0)
        );
    }
    if let Some((mut child, dir)) = proxy_proc {
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(dir);
    }
    parent_tasks.shutdown().await;
    Ok(())
}

#[derive(Clone, Copy)]
enum Route {
    Quic,
    Tcp,
    /// What a node's first attempt does in its transport mode.
    AutoFromStart,
}

async fn measure(
    rounds: usize,
    connector: &Connector,
    addr: &ParentAddress,
    route: Route,
) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = tokio::time::Instant::now();
        let link = match route {
            Route::Quic => connector.connect_quic(addr, "center", None).await?,
            Route::Tcp => connector.connect_tcp(addr, "center").await?,
            Route::AutoFromStart => {
                reconnect::dial(connector, addr, "center", &mut AutoState::default()).await?
            }
        };
        out.push(start.elapsed().as_secs_f64() * 1000.0);
        link.close(0, b"measured");
    }
    Ok(out)
}
