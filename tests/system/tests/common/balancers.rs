//! Real L4 balancers from Debian for the tests (installed by `.ci/install-proxies` the
//! first time a test needs one, see `strata_test_tools`): haproxy in TCP mode and
//! nginx's stream module for UDP, each a process on a loopback port of its own with its
//! files in the test's directory, in front of one or more parents' TLS/TCP and QUIC
//! ports.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use strata_test_tools::{NGINX_STREAM_MODULE, Tool, require};

use super::proxies::ProxyProc;

/// haproxy (`mode tcp`) on 127.0.0.1:`port`, spreading connections over `backends`
/// (health-checked every 300 ms, so a dead one is skipped within a second).
pub async fn haproxy(dir: &Path, port: u16, backends: &[SocketAddr]) -> ProxyProc {
    let program = require(Tool::Haproxy);
    let dir = dir.join("haproxy");
    std::fs::create_dir_all(&dir).unwrap();
    let servers: String = backends
        .iter()
        .enumerate()
        .map(|(i, a)| format!("  server s{i} {a} check inter 300 fall 1 rise 1\n"))
        .collect();
    let log = dir.join("haproxy.log");
    let conf = dir.join("haproxy.cfg");
    std::fs::write(
        &conf,
        format!(
            "global\n  maxconn 200\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 60s\n  timeout server 60s\nfrontend front\n  bind 127.0.0.1:{port}\n  default_backend parents\nbackend parents\n  balance roundrobin\n{servers}"
        ),
    )
    .unwrap();
    let mut child = Command::new(program)
        .args(["-db", "-f", conf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_tcp(port, "haproxy", &mut child).await;
    ProxyProc { child, port, log }
}

/// nginx with the stream module proxying UDP on 127.0.0.1:`port` to `backends`, a
/// client's datagrams always to the same backend (hash of its address) while it lives.
pub async fn nginx_udp(dir: &Path, port: u16, backends: &[SocketAddr]) -> ProxyProc {
    let program = require(Tool::Nginx);
    let module = Path::new(NGINX_STREAM_MODULE);
    let dir = dir.join("nginx");
    std::fs::create_dir_all(&dir).unwrap();
    let servers: String = backends
        .iter()
        .map(|a| format!("    server {a} max_fails=1 fail_timeout=2s;\n"))
        .collect();
    let d = dir.display();
    let log = dir.join("error.log");
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "load_module {module};\ndaemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\nevents {{ worker_connections 256; }}\nstream {{\n  upstream parents {{\n    hash $remote_addr$remote_port consistent;\n{servers}  }}\n  server {{\n    listen 127.0.0.1:{port} udp;\n    proxy_pass parents;\n    proxy_timeout 30s;\n  }}\n}}\n",
            module = module.display(),
        ),
    )
    .unwrap();
    let mut child = Command::new(program)
        .args([
            "-p",
            &d.to_string(),
            "-c",
            conf.to_str().unwrap(),
            "-e",
            &format!("{d}/error.log"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // UDP has no handshake to wait for: nginx logs its limits once its sockets are
    // open.
    for _ in 0..100 {
        if std::fs::read_to_string(&log).is_ok_and(|t| t.contains("getrlimit")) {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "nginx exited at start: {status}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ProxyProc { child, port, log }
}

async fn wait_tcp(port: u16, what: &str, child: &mut std::process::Child) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited at start: {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} does not listen on 127.0.0.1:{port}");
}
