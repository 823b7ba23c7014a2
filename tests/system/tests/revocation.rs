//! Revocation with real processes on loopback: center (root) → eu (region) → site
//! (relay) → three agents.
//!
//! * Connected: `relay revoke pos-2` at the root closes pos-2's session at its site
//!   relay, two tiers down (the time it takes is printed: a figure, not asserted).
//! * Partitioned: the region and the site relay die (SIGKILL); kiosk-1 is revoked at the
//!   root meanwhile; the site relay comes back first, while its region is still down.
//!   It holds kiosk-1's connection (open, unanswered) instead of admitting it from what
//!   it stored; once the region is back it catches up, learns the revocation, and
//!   refuses kiosk-1 at its handshake with the named error, again at every retry, while
//!   pos-1 is admitted and converges to a change made meanwhile.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{POS_APP, Proc, bin, free_port, log_tails, relay_cli, write};
use serde_json::Value;
use strata_relay::certs::Ca;

const AGENTS: [(&str, &str); 3] = [("pos-1", "pos"), ("pos-2", "pos"), ("kiosk-1", "kiosk")];
const NODES: [&str; 6] = ["center", "eu", "site", "pos-1", "pos-2", "kiosk-1"];

struct Net<'a> {
    dir: &'a Path,
    api_port: u16,
}

impl Net<'_> {
    fn relay(&self, args: &[&str]) -> (bool, String, String) {
        relay_cli(self.dir, self.api_port, args)
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Lines of `node`'s log with `message` about child `child`.
    fn count(&self, node: &str, message: &str, child: &str) -> usize {
        let field = format!("child={child}");
        self.log(node)
            .lines()
            .filter(|l| l.contains(message) && l.split_whitespace().any(|w| w == field.as_str()))
            .count()
    }

    fn eventually(&self, what: &str, mut check: impl FnMut(&Net) -> bool) {
        for _ in 0..450 {
            if check(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let names: Vec<String> = NODES.iter().map(|n| (*n).to_owned()).collect();
        panic!(
            "timed out waiting until {what}\n{}",
            log_tails(self.dir, &names, 25)
        );
    }

    /// The summary of the `pos` deployment and the root's revision of it.
    fn summary(&self) -> Option<(Value, Value)> {
        let (ok, out, _) = self.relay(&["get", "deployment", "pos", "-n", "pos", "-o", "summary"]);
        if !ok {
            return None;
        }
        let v = serde_json::from_str::<Value>(&out)
            .ok()?
            .as_array()?
            .first()?
            .clone();
        Some((v["placements"][0]["summary"].clone(), v["revision"].clone()))
    }
}

fn start(dir: &Path, name: &str) -> Proc {
    let cfg = dir.join(format!("{name}.yaml")).display().to_string();
    let (program, verb) = if name.starts_with("pos") || name.starts_with("kiosk") {
        ("agent", "run")
    } else {
        ("relay", "serve")
    };
    Proc::spawn(dir, name, &bin(program), &[verb, "--config", &cfg])
}

fn configure(dir: &Path) -> u16 {
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    write(&dir.join("tokens"), "s3cret\n");
    for name in NODES {
        ca.issue(name).unwrap().write_to(dir).unwrap();
    }
    let (center, eu, site, api) = (free_port(), free_port(), free_port(), free_port());
    let relay = |name: &str,
                 listen: u16,
                 parent: Option<(&str, u16)>,
                 children: &str,
                 extra: &str| {
        let parent = parent
            .map(|(p, port)| format!("parent: {{ name: {p}, address: 127.0.0.1:{port} }}\n"))
            .unwrap_or_default();
        format!(
            "node: {name}\nlisten: 127.0.0.1:{listen}\n{parent}tls: {{ cert: {name}.crt, key: {name}.key, ca: ca.crt }}\ndata: data/{name}\nchildren: [{children}]\nsummary_interval_ms: 100\n{extra}"
        )
    };
    write(
        &dir.join("center.yaml"),
        &relay(
            "center",
            center,
            None,
            "eu",
            &format!("api: {{ listen: 127.0.0.1:{api}, tokens: tokens }}\n"),
        ),
    );
    write(
        &dir.join("eu.yaml"),
        &relay("eu", eu, Some(("center", center)), "site", ""),
    );
    // The site relay waits for its parent for longer than the test takes to bring the
    // region back (the default is 5 s).
    write(
        &dir.join("site.yaml"),
        &relay(
            "site",
            site,
            Some(("eu", eu)),
            "pos-1, pos-2, kiosk-1",
            "admission_hold_ms: 30000\n",
        ),
    );
    for (agent, role) in AGENTS {
        write(
            &dir.join(format!("{agent}.yaml")),
            &format!(
                "cluster: {agent}\nlabels: {{ role: {role} }}\nparent: {{ name: site, address: 127.0.0.1:{site} }}\ntls: {{ cert: {agent}.crt, key: {agent}.key, ca: ca.crt }}\ndata: data/{agent}\nsimulated: {{ ready_delay_ms: 100 }}\n"
            ),
        );
    }
    api
}

#[test]
fn a_revoked_child_is_refused_by_a_relay_that_was_down_when_it_was_revoked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let api_port = configure(dir);
    bin("relay");
    let net = Net { dir, api_port };
    // Parents first: a child dialling a port nobody listens on yet waits out a QUIC
    // handshake timeout before it tries again.
    let mut procs: Vec<Proc> = NODES[..3].iter().map(|n| start(dir, n)).collect();
    net.eventually("site caught up with its parent", |n| {
        n.log("site").contains("caught up with the parent")
    });
    procs.extend(NODES[3..].iter().map(|n| start(dir, n)));
    net.eventually("the root knows every cluster, seen now", |n| {
        let (ok, out, _) = n.relay(&["clusters"]);
        ok && out.matches(" now ").count() == 3
    });

    // Connected: the time from `relay revoke` to the session closed two tiers down.
    // A figure for the report only: nothing is asserted on it.
    #[allow(clippy::disallowed_types)]
    let started = std::time::Instant::now();
    let (ok, out, err) = net.relay(&["revoke", "pos-2"]);
    assert!(ok, "{out}{err}");
    net.eventually("site closed the revoked pos-2", |n| {
        n.count("site", "closing the session of a revoked child", "pos-2") > 0
    });
    eprintln!(
        "relay revoke to the session closed two tiers down (connected): {:?}",
        started.elapsed()
    );
    net.eventually("pos-2 says why it was closed", |n| {
        n.log("pos-2").contains("was revoked at the root")
    });

    // Partitioned: the region and the site relay die; kiosk-1 is revoked meanwhile.
    let index = |name: &str| procs.iter().position(|p| p.name == name).unwrap();
    let (eu, site) = (index("eu"), index("site"));
    procs[site].kill9();
    procs[eu].kill9();
    let (ok, out, err) = net.relay(&["revoke", "kiosk-1", "--reason", "stolen"]);
    assert!(
        ok && out.starts_with("revoked kiosk-1 at revision"),
        "{out}{err}"
    );
    // A change the surviving cluster must still receive.
    let app = dir.join("app.yaml");
    write(&app, POS_APP);
    let (ok, _, err) = net.relay(&["apply", "-f", &app.display().to_string()]);
    assert!(ok, "{err}");

    // The site relay returns first, its region still down: it cannot know of the
    // revocation, so it holds its children's connections rather than admit them.
    procs[site] = start(dir, "site");
    net.eventually("site holds kiosk-1's connection", |n| {
        n.count("site", "holding a child's connection", "kiosk-1") > 0
    });
    assert_eq!(
        net.count("site", "child connected", "kiosk-1"),
        0,
        "site admitted kiosk-1 before it could know of the revocation"
    );
    procs[eu] = start(dir, "eu");
    net.eventually("site refuses kiosk-1 at its handshake, named", |n| {
        n.log("site").lines().any(|l| {
            l.contains("refusing a connection")
                && l.contains("child=kiosk-1")
                && l.contains("\"kiosk-1\" was revoked at the root")
        }) && n.log("kiosk-1").contains("was revoked at the root")
    });
    net.eventually("pos-1 is admitted again and converges", |n| {
        n.count("site", "child connected", "pos-1") > 0
            && n.summary()
                .is_some_and(|(s, rev)| s["max_revision"] == rev && s["health"]["available"] == 1)
    });
    // kiosk-1 keeps trying and is refused every time: never admitted.
    net.eventually("kiosk-1 is refused again at its next attempt", |n| {
        n.count("site", "refusing a connection", "kiosk-1") >= 2
    });
    assert_eq!(
        net.count("site", "child connected", "kiosk-1"),
        0,
        "site admitted the revoked kiosk-1:\n{}",
        net.log("site")
    );
    assert_eq!(net.count("site", "child connected", "pos-2"), 0);

    for p in procs.into_iter().rev() {
        let name = p.name.clone();
        let status = p.terminate();
        assert!(status.success(), "{name} exited with {status} on SIGTERM");
    }
}
