//! Three etcd members on loopback (Debian's `etcd-server`, 3.4, installed by
//! `.ci/install-etcd` the first time a test needs it), for the tests of the root's etcd
//! store: `strata-node`'s etcd store tests and the system tests' HA root. Each member is a
//! process killed when the cluster drops.

// A test fixture: it may unwrap, and it waits on the calling thread.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running etcd cluster of three members.
pub struct EtcdCluster {
    /// `http://127.0.0.1:PORT` of each member.
    pub endpoints: Vec<String>,
    members: Vec<Option<Child>>,
    dir: PathBuf,
}

/// `n` distinct free TCP ports: each listener is held until all are chosen, so the
/// kernel cannot hand the same port out twice (CI48 gave two members one peer port).
fn free_tcp_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

impl EtcdCluster {
    /// Starts three members with their data and logs under `dir`, and waits until
    /// the cluster answers.
    pub fn start(dir: &Path) -> EtcdCluster {
        let etcd = crate::require(crate::Tool::Etcd);
        let ports = free_tcp_ports(6);
        let (client, peer) = (ports[..3].to_vec(), ports[3..].to_vec());
        let initial: Vec<String> = (0..3)
            .map(|i| format!("m{i}=http://127.0.0.1:{}", peer[i]))
            .collect();
        let mut members = Vec::new();
        for i in 0..3 {
            let log = std::fs::File::create(dir.join(format!("etcd-m{i}.log"))).unwrap();
            let child = Command::new(&etcd)
                .args(["--name", &format!("m{i}")])
                .args([
                    "--data-dir",
                    dir.join(format!("etcd-m{i}")).to_str().unwrap(),
                ])
                .args([
                    "--listen-client-urls",
                    &format!("http://127.0.0.1:{}", client[i]),
                ])
                .args([
                    "--advertise-client-urls",
                    &format!("http://127.0.0.1:{}", client[i]),
                ])
                .args([
                    "--listen-peer-urls",
                    &format!("http://127.0.0.1:{}", peer[i]),
                ])
                .args([
                    "--initial-advertise-peer-urls",
                    &format!("http://127.0.0.1:{}", peer[i]),
                ])
                .args(["--initial-cluster", &initial.join(",")])
                .args([
                    "--initial-cluster-state",
                    "new",
                    "--initial-cluster-token",
                    "strata-test",
                ])
                // A root's commit is one transaction; a snapshot cut may hold many keys.
                .args(["--max-txn-ops", "10000", "--max-request-bytes", "16777216"])
                .env_remove("ETCD_UNSUPPORTED_ARCH")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            members.push(Some(child));
        }
        let cluster = EtcdCluster {
            endpoints: client
                .iter()
                .map(|p| format!("http://127.0.0.1:{p}"))
                .collect(),
            members,
            dir: dir.to_owned(),
        };
        cluster.wait_healthy();
        cluster
    }

    /// Waits until every live member answers `GET /health` with `"health":"true"`
    /// (a member is healthy once the cluster has a leader).
    pub fn wait_healthy(&self) {
        let live: Vec<&str> = self
            .endpoints
            .iter()
            .zip(&self.members)
            .filter(|(_, m)| m.is_some())
            .map(|(e, _)| e.trim_start_matches("http://"))
            .collect();
        for _ in 0..200 {
            if live.iter().all(|addr| healthy(addr)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("etcd did not become healthy:\n{}", self.log_tails(5));
    }

    /// The last `lines` lines of every member's log, newest first, for a failure's
    /// message (the logs live in the test's temporary directory, gone after it).
    pub fn log_tails(&self, lines: usize) -> String {
        let logs: Vec<String> = (0..3)
            .map(|i| {
                let log = std::fs::read_to_string(self.dir.join(format!("etcd-m{i}.log")));
                let log = log.unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(lines).collect();
                format!("--- m{i}\n{}", tail.join("\n"))
            })
            .collect();
        logs.join("\n")
    }

    /// Writes `key` directly, as another client of the cluster would (etcd's JSON
    /// gateway, `POST /v3/kv/put`).
    pub fn put(&self, key: &str, value: &[u8]) {
        let body = format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            b64(key.as_bytes()),
            b64(value)
        );
        self.post("/v3/kv/put", &body);
    }

    /// Deletes `key` directly (`POST /v3/kv/deleterange`).
    pub fn delete(&self, key: &str) {
        self.post(
            "/v3/kv/deleterange",
            &format!(r#"{{"key":"{}"}}"#, b64(key.as_bytes())),
        );
    }

    /// POSTs `body` to `path` of the first live member; panics unless it answers 200.
    fn post(&self, path: &str, body: &str) {
        use std::io::{Read, Write};
        let addr = self
            .endpoints
            .iter()
            .zip(&self.members)
            .find(|(_, m)| m.is_some())
            .map(|(e, _)| e.trim_start_matches("http://"))
            .expect("a live member");
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let request = format!(
            "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(
            response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
            "{path}: {response}"
        );
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut m) = self.members[i].take() {
            m.kill().unwrap();
            m.wait().unwrap();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in self.members.iter_mut().flatten() {
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

/// Standard base64 with padding, as etcd's gateway takes bytes.
fn b64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn healthy(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}
