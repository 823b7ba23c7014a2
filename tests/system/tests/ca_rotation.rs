//! Rotating the hierarchy's CA with an overlap, as `deploy/CERTIFICATES.md` says, with
//! real processes on loopback (center → eu → pos-1), each node restarted in turn at
//! every step: trust old + new (add), re-issue every node's certificate from the new CA
//! (the root first, so that old and new certificates meet), then trust the new CA only
//! (drop). A change applied at the root reaches the agent after every step, and at the
//! end a certificate from the dropped CA is refused at the handshake.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{POS_APP, Proc, bin, free_port, log_tails, relay_cli, write};
use serde_json::Value;
use strata_relay::certs::Ca;

const NODES: [&str; 3] = ["center", "eu", "pos-1"];

struct Net<'a> {
    dir: &'a Path,
    api_port: u16,
    procs: Vec<Proc>,
}

impl Net<'_> {
    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    fn eventually(&self, what: &str, mut check: impl FnMut(&Net) -> bool) {
        for _ in 0..300 {
            if check(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut names: Vec<String> = NODES.iter().map(|n| (*n).to_owned()).collect();
        names.push("pos-old".into());
        panic!(
            "timed out waiting until {what}\n{}",
            log_tails(self.dir, &names, 20)
        );
    }

    /// Stops `name` (SIGTERM) and starts it again with its files as they are now.
    fn restart(&mut self, name: &str) {
        let i = self.procs.iter().position(|p| p.name == name).unwrap();
        let old = self.procs.remove(i);
        let status = old.terminate();
        assert!(status.success(), "{name} exited with {status} on SIGTERM");
        self.procs.insert(i, start(self.dir, name));
    }

    /// Applies the app with `replicas` and waits until pos-1 runs them: the change went
    /// through every link.
    fn converge(&self, step: &str, replicas: u64) {
        let app = self.dir.join("app.yaml");
        write(
            &app,
            &POS_APP.replace("replicas: 2", &format!("replicas: {replicas}")),
        );
        // The root may be restarting: the API answers once it is up.
        self.eventually(&format!("{step}: the root accepts the change"), |n| {
            relay_cli(
                n.dir,
                n.api_port,
                &["apply", "-f", &app.display().to_string()],
            )
            .0
        });
        self.eventually(&format!("{step}: pos-1 runs {replicas} replicas"), |n| {
            let (ok, out, _) = relay_cli(
                n.dir,
                n.api_port,
                &["get", "deployment", "pos", "-n", "pos", "-o", "summary"],
            );
            let Some(v) = ok
                .then(|| serde_json::from_str::<Value>(&out).ok())
                .flatten()
                .and_then(|v| v.as_array()?.first().cloned())
            else {
                return false;
            };
            let s = &v["placements"][0]["summary"];
            s["max_revision"] == v["revision"]
                && s["health"]["available"] == 1
                && s["numbers"]["readyReplicas"]["sum"] == replicas
        });
    }
}

fn start(dir: &Path, name: &str) -> Proc {
    let cfg = dir.join(format!("{name}.yaml")).display().to_string();
    let (program, verb) = if name.starts_with("pos") {
        ("agent", "run")
    } else {
        ("relay", "serve")
    };
    Proc::spawn(dir, name, &bin(program), &[verb, "--config", &cfg])
}

#[test]
fn the_ca_rotates_with_an_overlap_and_the_hierarchy_converges_at_every_step() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    bin("relay");
    let old = Ca::generate("old").unwrap();
    let new = Ca::generate("new").unwrap();
    let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
    write(&dir.join("ca.crt"), &old.cert_pem());
    write(&dir.join("tokens"), "s3cret\n");
    for name in NODES {
        old.issue(name).unwrap().write_to(dir).unwrap();
    }
    let (center, eu, api) = (free_port(), free_port(), free_port());
    let tls =
        |n: &str| format!("tls: {{ cert: {n}.crt, key: {n}.key, ca: ca.crt }}\ndata: data/{n}\n");
    write(
        &dir.join("center.yaml"),
        &format!(
            "node: center\nlisten: 127.0.0.1:{center}\nchildren: [eu]\n{}api: {{ listen: 127.0.0.1:{api}, tokens: tokens }}\nsummary_interval_ms: 100\n",
            tls("center")
        ),
    );
    write(
        &dir.join("eu.yaml"),
        &format!(
            "node: eu\nlisten: 127.0.0.1:{eu}\nparent: {{ name: center, address: 127.0.0.1:{center} }}\nchildren: [pos-1, pos-old]\n{}summary_interval_ms: 100\n",
            tls("eu")
        ),
    );
    let agent = |name: &str, ca: &str| {
        format!(
            "cluster: {name}\nlabels: {{ role: pos }}\nparent: {{ name: eu, address: 127.0.0.1:{eu} }}\ntls: {{ cert: {name}.crt, key: {name}.key, ca: {ca} }}\ndata: data/{name}\nsimulated: {{ ready_delay_ms: 50 }}\n"
        )
    };
    write(&dir.join("pos-1.yaml"), &agent("pos-1", "ca.crt"));

    let mut net = Net {
        dir,
        api_port: api,
        procs: NODES.iter().map(|n| start(dir, n)).collect(),
    };
    net.converge("before the rotation", 2);

    // 1. Add: every node trusts old + new, restarted one by one.
    write(&dir.join("ca.crt"), &bundle);
    for name in NODES {
        net.restart(name);
    }
    net.converge("trusting old and new", 3);

    // 2. Re-issue from the new CA: the root first (a new certificate meets old ones on
    //    both sides of its link), then the others.
    new.issue("center").unwrap().write_to(dir).unwrap();
    net.restart("center");
    net.converge("the root on the new CA, the others on the old", 4);
    for name in ["eu", "pos-1"] {
        new.issue(name).unwrap().write_to(dir).unwrap();
        net.restart(name);
    }
    net.converge("every node on the new CA", 5);

    // 3. Drop: every node trusts the new CA only.
    write(&dir.join("ca.crt"), &new.cert_pem());
    for name in NODES {
        net.restart(name);
    }
    net.converge("trusting the new CA only", 6);

    // A certificate from the dropped CA is refused at the handshake (the agent itself
    // still trusts both, so the refusal is eu's).
    old.issue("pos-old").unwrap().write_to(dir).unwrap();
    write(&dir.join("bundle.crt"), &bundle);
    write(&dir.join("pos-old.yaml"), &agent("pos-old", "bundle.crt"));
    net.procs.push(start(dir, "pos-old"));
    net.eventually("eu refused the old CA's certificate", |n| {
        n.log("eu").lines().any(|l| {
            l.contains("handshake failed (a certificate refused?)") && l.contains("UnknownIssuer")
        })
    });
    assert!(
        !net.log("eu").contains("child connected child=pos-old"),
        "eu admitted a certificate from the dropped CA"
    );

    for p in std::mem::take(&mut net.procs).into_iter().rev() {
        let name = p.name.clone();
        let status = p.terminate();
        assert!(status.success(), "{name} exited with {status} on SIGTERM");
    }
}
