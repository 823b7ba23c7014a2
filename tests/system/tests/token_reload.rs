//! API tokens change while the root runs: a root started from a rendered topology
//! (`relay serve`), its tokens file edited under it. A token added is accepted once the
//! file is read again, a token removed is answered 401, each reload is logged and
//! audited, and a file that does not parse keeps the previous tokens and is logged
//! naming the file and the line. A child added to a relay's configuration file connects
//! without a restart.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{Proc, bin, log_tails, write};
use strata_topology::certs::{self, CertOptions};
use strata_topology::files;
use strata_topology::render::{self, RenderOptions};

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: tokens }
spec:
  root: { name: center }
";

/// A root alone, rendered into `dir` from [`TOPOLOGY`] (`relay topology certs` and
/// `render`) with the tokens file `s3cret user=ops`: its API port and its configuration
/// file, not started (a test may edit the file first).
pub(crate) fn rendered_root(dir: &Path) -> (u16, std::path::PathBuf) {
    let topology = strata_topology::parse(TOPOLOGY, &dir.join("t.yaml"))
        .unwrap()
        .topology;
    write(&files::api_tokens(dir), "s3cret user=ops\n");
    certs::issue_all(&topology, dir, &CertOptions::default()).unwrap();
    let rendered = render::render(&topology, dir, &RenderOptions::default()).unwrap();
    (rendered.api.port(), rendered.nodes[0].config.clone())
}

/// The status code of `GET /clusters` with `token`.
pub(crate) fn status_with(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    api_port: u16,
    token: &str,
) -> u16 {
    let client = strata_relay::client::ApiClient::new(
        ([127, 0, 0, 1], api_port).into(),
        "center",
        &files::ca_cert(dir),
        token,
    )
    .unwrap();
    rt.block_on(client.request(hyper::Method::GET, "/clusters", None))
        .map(|(code, _)| code.as_u16())
        .unwrap_or(0)
}

/// Polls `check` every 200 ms, at most 150 times (30 s).
pub(crate) fn eventually(what: &str, dir: &Path, mut check: impl FnMut() -> bool) {
    for _ in 0..150 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "timed out waiting until {what}\n{}",
        log_tails(dir, &["center".to_owned()], 30)
    );
}

#[test]
fn a_token_added_to_the_file_works_and_one_removed_is_refused_without_a_restart() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let (api_port, config) = rendered_root(&dir);
    let tokens = files::api_tokens(&dir);
    let config = config.display().to_string();
    let root = Proc::spawn(
        &dir,
        "center",
        &bin("relay"),
        &["serve", "--config", &config],
    );
    eventually("the root's API answers", &dir, || {
        status_with(&rt, &dir, api_port, "s3cret") == 200
    });
    assert_eq!(status_with(&rt, &dir, api_port, "n3w-token"), 401);

    // Added: accepted once read again.
    write(&tokens, "s3cret user=ops\nn3w-token user=bob role=view\n");
    eventually("the new token is accepted", &dir, || {
        status_with(&rt, &dir, api_port, "n3w-token") == 200
    });

    // A broken line: the previous tokens stay, the error names the file and the line.
    write(
        &tokens,
        "s3cret user=ops\nn3w-token user=bob role=root\nother-token\n",
    );
    let log = || std::fs::read_to_string(dir.join("center.log")).unwrap_or_default();
    eventually("the broken file is reported", &dir, || {
        log().contains("role \"root\" is not view, edit or admin")
    });
    let line = log()
        .lines()
        .find(|l| l.contains("role \"root\" is not view, edit or admin") && l.contains("ERROR"))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no error line:\n{}", log()));
    // The file as the configuration names it (nodes/center/../../api.tokens).
    let named = dir.join("nodes/center/../../api.tokens");
    assert!(
        line.contains(&format!("file={}", named.display())) && line.contains("line 2:"),
        "{line}"
    );
    assert_eq!(status_with(&rt, &dir, api_port, "n3w-token"), 200);
    assert_eq!(status_with(&rt, &dir, api_port, "other-token"), 401);

    // Removed: refused.
    write(&tokens, "s3cret user=ops\n");
    eventually("the removed token is refused", &dir, || {
        status_with(&rt, &dir, api_port, "n3w-token") == 401
    });
    assert_eq!(status_with(&rt, &dir, api_port, "s3cret"), 200);

    // Each reload is audited.
    let audited = log()
        .lines()
        .filter(|l| l.contains("tokens-reload") && l.contains("api.tokens"))
        .count();
    assert!(audited >= 3, "{audited} audit lines:\n{}", log());
    assert!(root.terminate().success());
}

/// A child added to a running relay's configuration may connect without a restart: an
/// agent refused as an unknown child (`children: []`) is admitted once `pos-1` is added
/// to the root's file, read again within 2 s; the root keeps its process, the reload is
/// audited (`children-reload`), and a file that does not validate changes nothing.
#[test]
fn a_child_added_to_the_configuration_connects_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let ca = strata_relay::certs::Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    for n in ["center", "pos-1"] {
        ca.issue(n).unwrap().write_to(&dir).unwrap();
    }
    write(&dir.join("tokens"), "s3cret\n");
    let (root_port, api_port) = (common::free_port(), common::free_port());
    let root_config = |children: &str| {
        format!(
            "node: center\nlisten: 127.0.0.1:{root_port}\ntls: {{ cert: center.crt, key: center.key, ca: ca.crt }}\ndata: data/center\nchildren: [{children}]\napi: {{ listen: 127.0.0.1:{api_port}, tokens: tokens }}\nsummary_interval_ms: 100\n"
        )
    };
    write(&dir.join("center.yaml"), &root_config(""));
    write(
        &dir.join("pos-1.yaml"),
        &format!(
            "cluster: pos-1\nparent: {{ name: center, address: 127.0.0.1:{root_port} }}\ntls: {{ cert: pos-1.crt, key: pos-1.key, ca: ca.crt }}\ndata: data/pos-1\nsimulated: {{ ready_delay_ms: 100 }}\n"
        ),
    );
    let cfg = |n: &str| dir.join(format!("{n}.yaml")).display().to_string();
    let mut root = Proc::spawn(
        &dir,
        "center",
        &bin("relay"),
        &["serve", "--config", &cfg("center")],
    );
    let _agent = Proc::spawn(
        &dir,
        "pos-1",
        &bin("agent"),
        &["run", "--config", &cfg("pos-1")],
    );
    let clusters = || {
        let (ok, out, _) = common::relay_cli(&dir, api_port, &["clusters"]);
        ok.then_some(out)
    };
    let log = || std::fs::read_to_string(dir.join("center.log")).unwrap_or_default();
    eventually("the root refuses pos-1 as an unknown child", &dir, || {
        log().contains("is not a child of") && clusters().is_some()
    });
    assert!(!clusters().unwrap().contains("pos-1"));

    // A file that does not validate changes nothing and is said.
    write(&dir.join("center.yaml"), "node: center\nchildren: [pos-1\n");
    eventually("the broken file is logged", &dir, || {
        log().contains("children-reload-refused")
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(!clusters().unwrap().contains("pos-1"));

    // pos-1 added: it connects, with the same root process.
    write(&dir.join("center.yaml"), &root_config("pos-1"));
    eventually("pos-1 reports to the root", &dir, || {
        clusters().is_some_and(|out| out.contains("pos-1"))
    });
    assert!(
        root.child.try_wait().unwrap().is_none(),
        "the root kept running"
    );
    let audited = log()
        .lines()
        .any(|l| l.contains("\"children-reload\"") && l.contains("pos-1"));
    assert!(audited, "the reload is audited:\n{}", log());
    root.kill9();
}
