//! Real proxies from Debian for the tests (installed by `.ci/install-proxies` the first
//! time a test needs one, see `strata_test_tools`): a tinyproxy, a squid with Basic
//! auth, each a process on a loopback port of its own with its files in the test's
//! directory; and a UDP gate the test opens and shuts, standing for a network that
//! drops UDP.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use strata_test_tools::{SQUID_BASIC_AUTH, Tool, require};
use tokio::net::UdpSocket;

/// A proxy process; killed when dropped.
pub struct ProxyProc {
    pub child: Child,
    /// Where it listens.
    pub port: u16,
    /// Its log of tunnels (tinyproxy's log, squid's access log).
    pub log: PathBuf,
}

impl Drop for ProxyProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProxyProc {
    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `http://[user:pass@]127.0.0.1:PORT`.
    pub fn url(&self, credentials: Option<(&str, &str)>) -> String {
        match credentials {
            Some((u, p)) => format!("http://{u}:{p}@127.0.0.1:{}", self.port),
            None => format!("http://127.0.0.1:{}", self.port),
        }
    }
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn wait_listening(port: u16, what: &str, child: &mut Child) {
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

/// tinyproxy on a free loopback port, tunnelling CONNECT to any port (no `ConnectPort`
/// line), logging every connection. `timeout`: its idle `Timeout` in seconds.
pub async fn tinyproxy(dir: &Path, timeout: u32) -> ProxyProc {
    let program = require(Tool::Tinyproxy);
    std::fs::create_dir_all(dir).unwrap();
    let port = free_tcp_port();
    let log = dir.join("tinyproxy.log");
    let conf = dir.join("tinyproxy.conf");
    std::fs::write(
        &conf,
        format!(
            "Port {port}\nListen 127.0.0.1\nTimeout {timeout}\nLogFile \"{}\"\nLogLevel Connect\nMaxClients 50\n",
            log.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(program)
        .args(["-d", "-c", conf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port, "tinyproxy", &mut child).await;
    ProxyProc { child, port, log }
}

/// squid on a free loopback port that tunnels only for `user` with `password` (Basic
/// auth through Debian's `basic_ncsa_auth`), caching nothing.
pub async fn squid(dir: &Path, user: &str, password: &str) -> ProxyProc {
    let program = require(Tool::Squid);
    let helper = Path::new(SQUID_BASIC_AUTH);
    // squid, started as root, drops to `nobody`: its directory must be open to it.
    let dir = dir.join("squid");
    std::fs::create_dir_all(&dir).unwrap();
    let _ = Command::new("chmod")
        .args(["0777", dir.to_str().unwrap()])
        .status();
    if let Some(parent) = dir.parent() {
        let _ = Command::new("chmod")
            .args(["0755", parent.to_str().unwrap()])
            .status();
    }
    let hash = Command::new(require(Tool::Openssl))
        .args(["passwd", "-1", password])
        .output()
        .unwrap();
    assert!(hash.status.success(), "openssl passwd failed");
    let passwd = dir.join("passwd");
    std::fs::write(
        &passwd,
        format!("{user}:{}", String::from_utf8_lossy(&hash.stdout)),
    )
    .unwrap();
    let port = free_tcp_port();
    let log = dir.join("access.log");
    let d = dir.display();
    let conf = dir.join("squid.conf");
    std::fs::write(
        &conf,
        format!(
            "http_port 127.0.0.1:{port}
auth_param basic program {helper} {passwd}
auth_param basic realm strata-test
acl authed proxy_auth REQUIRED
http_access allow authed
http_access deny all
cache deny all
pid_filename {d}/squid.pid
access_log stdio:{log}
cache_log {d}/cache.log
coredump_dir {d}
cache_effective_user nobody
shutdown_lifetime 0 seconds
",
            helper = helper.display(),
            passwd = passwd.display(),
            log = log.display(),
        ),
    )
    .unwrap();
    let mut child = Command::new(program)
        .args(["-N", "-f", conf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port, "squid", &mut child).await;
    ProxyProc { child, port, log }
}

/// A UDP forwarder from a loopback port to `to` that the test opens and shuts: shut,
/// it drops every datagram both ways, as a firewall that blocks UDP does.
pub struct UdpGate {
    /// Where children send.
    pub addr: SocketAddr,
    open: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for UdpGate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl UdpGate {
    /// A gate at `at` (port 0: any) to `to`, shut or open.
    pub async fn new(at: SocketAddr, to: SocketAddr, open: bool) -> UdpGate {
        let front = Arc::new(UdpSocket::bind(at).await.unwrap());
        let back = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        back.connect(to).await.unwrap();
        let addr = front.local_addr().unwrap();
        let flag = Arc::new(AtomicBool::new(open));
        let gate = flag.clone();
        let task = tokio::spawn(async move {
            // One client at a time is enough for these tests: the last sender is the
            // one answers go to.
            let mut client: Option<SocketAddr> = None;
            let (mut a, mut b) = (vec![0u8; 65536], vec![0u8; 65536]);
            loop {
                tokio::select! {
                    r = front.recv_from(&mut a) => if let Ok((n, from)) = r {
                        client = Some(from);
                        if gate.load(Ordering::Relaxed) {
                            let _ = back.send(&a[..n]).await;
                        }
                    },
                    r = back.recv(&mut b) => if let (Ok(n), Some(c)) = (r, client)
                        && gate.load(Ordering::Relaxed) {
                        let _ = front.send_to(&b[..n], c).await;
                    },
                }
            }
        });
        UdpGate {
            addr,
            open: flag,
            task,
        }
    }

    /// Lets datagrams through (or not).
    pub fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Relaxed);
    }
}
