//! API tokens change while the root runs: a root started from a rendered topology
//! (`relay serve`), its tokens file edited under it. A token added is accepted once the
//! file is read again, a token removed is answered 401, each reload is logged and
//! audited, and a file that does not parse keeps the previous tokens and is logged
//! naming the file and the line.

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

/// The status code of `GET /clusters` with `token`.
fn status_with(rt: &tokio::runtime::Runtime, dir: &Path, api_port: u16, token: &str) -> u16 {
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
fn eventually(what: &str, dir: &Path, mut check: impl FnMut() -> bool) {
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
    let topology = strata_topology::parse(TOPOLOGY, &dir.join("t.yaml"))
        .unwrap()
        .topology;
    let tokens = files::api_tokens(&dir);
    write(&tokens, "s3cret user=ops\n");
    certs::issue_all(&topology, &dir, &CertOptions::default()).unwrap();
    let rendered = render::render(&topology, &dir, &RenderOptions::default()).unwrap();
    let api_port = rendered.api.port();
    let config = rendered.nodes[0].config.display().to_string();
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
