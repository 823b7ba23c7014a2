//! The CLI where users live: a root from a rendered topology, reached through a
//! kubeconfig whose context's server is `https://localhost:PORT/spaces/default` (a DNS
//! name, resolved at connect time) by real kubectl 1.33, by `kubectl strata` (the relay
//! binary installed as the kubectl plugin `kubectl-strata`) and by `relay` itself with
//! `--kubeconfig`/`KUBECONFIG` and `--context`; `STRATA_*` variables still win; and
//! `--server` taking `localhost:PORT`.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{Proc, bin, kube_clients, log_tails, write};
use strata_topology::files;

/// Two contexts: `nowhere` (current: nothing listens there) and `strata` (the root by
/// the name `localhost`).
fn kubeconfig(dir: &Path, api_port: u16, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: nowhere\n  cluster:\n    server: https://127.0.0.1:1\n    certificate-authority: {ca}\n\
         - name: strata\n  cluster:\n    server: https://localhost:{api_port}/spaces/default\n    certificate-authority: {ca}\n\
         users:\n- name: ops\n  user:\n    token: {token}\n\
         contexts:\n- name: nowhere\n  context: {{ cluster: nowhere, user: ops }}\n- name: strata\n  context: {{ cluster: strata, user: ops }}\n\
         current-context: nowhere\n",
        ca = files::ca_cert(dir).display()
    )
}

/// Runs `program args` with `env` and without any `STRATA_*` variable of the test's.
fn run(program: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut c = Command::new(program);
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("STRATA_") || k == "KUBECONFIG" {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn kubectl_strata_and_relay_read_a_kubeconfig_context_with_a_dns_named_server() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let (port, config) = crate::token_reload::rendered_root(&dir);
    let config = config.display().to_string();
    let root = Proc::spawn(
        &dir,
        "center",
        &bin("relay"),
        &["serve", "--config", &config],
    );
    let kc = dir.join("kubeconfig");
    write(&kc, &kubeconfig(&dir, port, "s3cret"));
    let relay = bin("relay");
    let kubeconfig_env = [("KUBECONFIG", kc.display().to_string())];

    // relay with the kubeconfig's context: the root by the name localhost.
    let mut ok = None;
    for _ in 0..150 {
        let o = run(
            &relay,
            &["clusters", "--context", "strata"],
            &kubeconfig_env,
        );
        if o.status.success() {
            ok = Some(o);
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let ok = ok.unwrap_or_else(|| {
        panic!(
            "relay clusters --context strata never succeeded\n{}",
            log_tails(&dir, &["center".to_owned()], 20)
        )
    });
    assert!(text(&ok).contains("CLUSTER"), "{}", text(&ok));
    // --kubeconfig names the file instead of KUBECONFIG.
    let kc_arg = kc.display().to_string();
    let o = run(
        &relay,
        &["clusters", "--kubeconfig", &kc_arg, "--context", "strata"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    // The current context points where nothing listens: said so.
    let o = run(&relay, &["clusters"], &kubeconfig_env);
    assert!(
        !o.status.success() && text(&o).contains("cannot reach the API at 127.0.0.1:1"),
        "{}",
        text(&o)
    );
    // STRATA_TOKEN wins over the kubeconfig's token.
    let mut env = kubeconfig_env.to_vec();
    env.push(("STRATA_TOKEN", "wrong".to_owned()));
    let o = run(&relay, &["clusters", "--context", "strata"], &env);
    assert!(
        !o.status.success() && text(&o).contains("401"),
        "{}",
        text(&o)
    );
    // --server takes a DNS name, resolved when connecting.
    let ca = files::ca_cert(&dir).display().to_string();
    let o = run(
        &relay,
        &[
            "clusters",
            "--server",
            &format!("localhost:{port}"),
            "--server-name",
            "center",
            "--ca",
            &ca,
            "--token",
            "s3cret",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    // relay kubeconfig writes the name as given; the API's certificate covers
    // localhost, so no tls-server-name.
    let o = run(
        &relay,
        &[
            "kubeconfig",
            "--server",
            &format!("localhost:{port}"),
            "--ca",
            &ca,
            "--token",
            "s3cret",
        ],
        &[],
    );
    let written = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success()
            && written.contains(&format!("    server: https://localhost:{port}\n"))
            && !written.contains("tls-server-name"),
        "{}",
        text(&o)
    );

    // kubectl itself, through the same context.
    let kubectl = kube_clients().join("kubectl");
    let o = run(
        &kubectl,
        &["--context", "strata", "get", "namespaces", "-o", "name"],
        &kubeconfig_env,
    );
    assert!(o.status.success(), "{}", text(&o));

    // The relay binary as the kubectl plugin kubectl-strata, found on the PATH.
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::os::unix::fs::symlink(&relay, plugins.join("kubectl-strata")).unwrap();
    let path = format!(
        "{}:{}",
        plugins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut env = kubeconfig_env.to_vec();
    env.push(("PATH", path));
    let o = run(&kubectl, &["plugin", "list"], &env);
    assert!(text(&o).contains("kubectl-strata"), "{}", text(&o));
    let o = run(
        &kubectl,
        &["strata", "clusters", "--context", "strata"],
        &env,
    );
    assert!(
        o.status.success() && text(&o).contains("CLUSTER"),
        "{}",
        text(&o)
    );
    let o = run(&kubectl, &["strata", "--help"], &env);
    assert!(text(&o).contains("Usage: kubectl strata"), "{}", text(&o));
    assert!(root.terminate().success());
}
