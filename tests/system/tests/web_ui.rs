//! The root's web view (issue 48) in a real browser: Debian's chromium, headless,
//! driven through ChromeDriver (`strata_test_tools::webdriver`), against a `relay up`
//! fleet of processes (`kube_fleet`: two relays, four simulated clusters).
//!
//! One login link from `relay ui --print` (no token typed into the page), then:
//! the tree shows every cluster; a cordon clicked on the page shows at the root
//! (`relay clusters`, `kubectl get cluster`) and an uncordon undoes it; a placement's
//! rollout moves through its waves on the page while it runs, and undo and resume
//! clicked on it roll it back and out again; a cluster's pods and a pod's log open
//! through the debug tunnel; a cluster whose agent
//! is frozen turns unreachable; a `view` token's session shows no action buttons and
//! its forged writes get 403, as does a write without the CSRF header; the root's audit
//! log names the page's writes, allowed and refused. Screenshots of
//! each view are saved under `target/web-ui/` and checked as images: the size the page
//! says it has, and drawn (many colours, most pixels not background).

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes and a browser.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use strata_test_tools::webdriver::{Browser, PngFacts};

use crate::kube_fleet::{self, Fleet};
// Three waves over the three `role=pos` clusters, each held 2 s once healthy, so that
// the page has time to show each.
use crate::rollout_processes::{NAMESPACE, THREE_WAVES, app};

const VIEW_TOKEN: &str = "view-token-0123456789";

/// A login link from `relay ui --print`, for the admin or for `token`.
fn login_url(f: &Fleet, token: Option<&str>) -> String {
    let mut c = f.command("relay");
    c.args(["ui", "--print"]);
    if let Some(t) = token {
        c.env("STRATA_TOKEN", t);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "relay ui --print: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        url.starts_with("https://") && url.contains("/ui/login?code="),
        "{url}"
    );
    url
}

fn artifacts() -> PathBuf {
    let dir = strata_test_tools::target().join("web-ui");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Saves a screenshot as `name` and checks it is the page's size and drawn.
fn screenshot(b: &Browser, name: &str) -> PngFacts {
    let path = artifacts().join(name);
    let facts = b.save_screenshot(&path).unwrap();
    let size = b
        .script(
            "return [Math.round(window.innerWidth * devicePixelRatio), \
                     Math.round(window.innerHeight * devicePixelRatio)]",
            json!([]),
        )
        .unwrap();
    assert_eq!(
        json!([facts.width, facts.height]),
        size,
        "{name}: the screenshot is not the window's size"
    );
    let pixels = u64::from(facts.width) * u64::from(facts.height);
    assert!(
        facts.colours >= 16 && facts.not_background * 50 >= pixels,
        "{name} looks blank: {facts:?}"
    );
    println!("screenshot {}: {facts:?}", path.display());
    facts
}

fn clusters_on_page(b: &Browser) -> Value {
    b.script(
        "return Object.fromEntries([...document.querySelectorAll('[data-cluster]')]
            .map(e => [e.dataset.cluster, e.dataset.state]))",
        json!([]),
    )
    .unwrap()
}

/// Clicks `action` on `cluster`'s row and confirms it.
fn cluster_action(b: &Browser, cluster: &str, action: &str) {
    act(b, &format!("[data-cluster='{cluster}']"), action);
}

/// Clicks the `action` button inside `scope` (a CSS selector) and confirms it.
fn act(b: &Browser, scope: &str, action: &str) {
    let button = b
        .find(&format!("{scope} button[data-action='{action}']"))
        .unwrap()
        .unwrap_or_else(|| panic!("no {action} button in {scope}"));
    b.click(&button).unwrap();
    let yes = b.find("#confirm-yes").unwrap().expect("a confirmation");
    b.click(&yes).unwrap();
}

/// The `status.rollout.phase` of placement `web`, as kubectl reads it.
fn rollout_phase(f: &Fleet) -> String {
    f.ok(
        "kubectl",
        &[
            "get",
            "placement",
            "web",
            "-o",
            "jsonpath={.status.rollout.phase}",
        ],
    )
    .trim()
    .to_owned()
}

/// Whether the root's log holds an audit line for `method` on a path ending in `path`
/// with `status`.
fn audited(f: &Fleet, method: &str, path: &str, status: u16) -> bool {
    let log = strata_topology::files::node_log(&f.dir.join("data"), "center");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|v| {
            v["target"] == "audit"
                && v["fields"]["method"] == method
                && v["fields"]["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(path))
                && v["fields"]["status"] == status
        })
}

/// The status code of a request the page makes with its session cookie.
fn page_request(b: &Browser, method: &str, path: &str, body: Value, csrf: bool) -> u64 {
    let script = "const [method, path, body, csrf] = arguments;
        const headers = { 'Content-Type': method === 'PATCH'
            ? 'application/merge-patch+json' : 'application/json' };
        if (csrf) headers['X-Strata-Csrf'] = '1';
        return fetch(path, { method, headers, body: JSON.stringify(body),
                             credentials: 'same-origin' }).then(r => r.status);";
    b.script(script, json!([method, path, body, csrf]))
        .unwrap()
        .as_u64()
        .unwrap()
}

/// The pid of `cluster`'s agent, started by `relay up`.
fn agent_pid(f: &Fleet, cluster: &str) -> String {
    let pattern = format!("nodes/{cluster}/config.yaml");
    let out = Command::new("pgrep")
        .args(["-f", &pattern])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_else(|| {
            panic!(
                "no agent process for {cluster} ({pattern}) in {}",
                f.dir.display()
            )
        })
        .to_owned()
}

fn signal(pid: &str, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, pid])
            .status()
            .unwrap()
            .success()
    );
}

#[test]
fn the_web_view_shows_the_fleet_and_acts_for_its_role() {
    let tmp = tempfile::tempdir().unwrap();
    let f =
        kube_fleet::up_with_tokens(tmp.path(), &format!("{VIEW_TOKEN} user=viewer role=view\n"));
    eprintln!("web_ui: the fleet is up; starting chromium");
    let b = Browser::start(1280, 900).unwrap();

    // One link logs in: the code is traded for a cookie, and works only once.
    let url = login_url(&f, None);
    b.goto(&url).unwrap();
    b.wait_for("return document.body.dataset.ready === 'true'", 300)
        .unwrap();
    assert_eq!(
        b.script("return document.body.dataset.role", json!([]))
            .unwrap(),
        json!("admin")
    );
    let paint = b
        .script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0];
             const r = performance.getEntriesByName('strata-ready')[0];
             const bytes = performance.getEntriesByType('resource')
                 .concat(performance.getEntriesByType('navigation'))
                 .reduce((n, e) => n + (e.transferSize || 0), 0);
             return { firstPaintMs: p && p.startTime, readyMs: r && r.startTime, bytes };",
            json!([]),
        )
        .unwrap();
    println!("first view with 4 clusters: {paint}");

    eprintln!("web_ui: the tree");
    // The tree shows every cluster, each available.
    let all = b
        .wait_for(
            "const n = document.querySelectorAll('[data-cluster]');
             return n.length === 4 && [...n].every(e => e.dataset.state === 'available')",
            300,
        )
        .map(|_| clusters_on_page(&b));
    assert_eq!(
        all.unwrap(),
        json!({ "eu-1": "available", "eu-2": "available", "us-1": "available", "us-2": "available" })
    );
    for relay in ["center", "eu", "us"] {
        assert!(
            b.find(&format!("[data-relay='{relay}']"))
                .unwrap()
                .is_some(),
            "{relay}"
        );
    }
    screenshot(&b, "fleet.png");

    // A write with the cookie but without the CSRF header is refused.
    let cluster_path = "/spaces/default/apis/strata.dev/v1alpha1/clusters/us-2";
    let forged = json!({ "apiVersion": "strata.dev/v1alpha1", "kind": "Cluster",
        "metadata": { "name": "us-2" },
        "spec": { "taints": [ { "key": "strata.dev/cordoned", "effect": "NoSchedule" } ] } });
    assert_eq!(
        page_request(&b, "PUT", cluster_path, forged.clone(), false),
        403
    );

    eprintln!("web_ui: cordon");
    // Cordon from the page: the root and `relay clusters` show it.
    cluster_action(&b, "us-2", "cordon");
    b.wait_for(
        "return !!document.querySelector(\"[data-cluster='us-2'] [data-taint='cordoned']\")",
        150,
    )
    .unwrap();
    f.eventually("relay clusters shows us-2 cordoned", |f| {
        f.ok("relay", &["clusters"])
            .lines()
            .any(|l| l.contains(" us-2 ") && l.contains(" cordoned "))
    });
    let taints = f.ok(
        "kubectl",
        &[
            "get",
            "cluster",
            "us-2",
            "-o",
            "jsonpath={.spec.taints[*].key}",
        ],
    );
    assert_eq!(taints.trim(), "strata.dev/cordoned");
    cluster_action(&b, "us-2", "uncordon");
    f.eventually("relay clusters shows us-2 ready again", |f| {
        f.ok("relay", &["clusters"])
            .lines()
            .any(|l| l.contains(" us-2 ") && l.contains(" ready "))
    });

    eprintln!("web_ui: rollout");
    // A rollout's progress moves on the page while it runs.
    f.ok(
        "relay",
        &["apply", "-f", &f.write("namespace.yaml", NAMESPACE)],
    );
    f.ok(
        "relay",
        &["apply", "-f", &f.write("placement.yaml", THREE_WAVES)],
    );
    f.ok(
        "relay",
        &["apply", "-f", &f.write("v1.yaml", &app("web:1"))],
    );
    let tab = b.find("button[data-tab='placements']").unwrap().unwrap();
    b.click(&tab).unwrap();
    let first = b
        .wait_for(
            "const r = document.querySelector(\"[data-placement='web'] .rollout\");
             return r && r.dataset.phase === 'Complete' && r.dataset.revision",
            600,
        )
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    f.ok(
        "relay",
        &["apply", "-f", &f.write("v2.yaml", &app("web:2"))],
    );
    // Every (revision, phase, wave) the page shows, until a newer revision completes.
    let mut seen: Vec<(String, String, String)> = Vec::new();
    for _ in 0..600 {
        let v = b
            .script(
                "const r = document.querySelector(\"[data-placement='web'] .rollout\");
                 return r ? [r.dataset.revision, r.dataset.phase, r.dataset.waveIndex] : null",
                json!([]),
            )
            .unwrap();
        if let Some(a) = v.as_array() {
            let step: (String, String, String) = (
                a[0].as_str().unwrap_or_default().to_owned(),
                a[1].as_str().unwrap_or_default().to_owned(),
                a[2].as_str().unwrap_or_default().to_owned(),
            );
            if seen.last() != Some(&step) {
                seen.push(step.clone());
            }
            if step.0 != first && step.1 == "Complete" {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("the page showed the rollout as: {seen:?}");
    let waves: std::collections::BTreeSet<&str> = seen
        .iter()
        .filter(|(revision, phase, _)| *revision != first && phase == "Progressing")
        .map(|(_, _, wave)| wave.as_str())
        .collect();
    assert!(
        waves.len() >= 2
            && seen
                .last()
                .is_some_and(|(r, p, _)| *r != first && p == "Complete"),
        "the page should show the rollout moving through its waves to Complete: {seen:?}"
    );
    screenshot(&b, "placements.png");

    eprintln!("web_ui: undo and resume");
    // Rollout actions from the page, each confirmed: undo rolls the placement back to
    // the revision before (kubectl reads RolledBack), resume rolls the newer one out
    // again to Complete.
    let rollout = "[data-placement='web'] .rollout";
    act(&b, rollout, "undo");
    b.wait_for(
        "const r = document.querySelector(\"[data-placement='web'] .rollout\");
         return r && r.dataset.phase === 'RolledBack'",
        600,
    )
    .expect("the page shows the rollout rolled back after undo");
    assert_eq!(rollout_phase(&f), "RolledBack");
    act(&b, rollout, "resume");
    b.wait_for(
        "const r = document.querySelector(\"[data-placement='web'] .rollout\");
         return r && r.dataset.phase === 'Complete'",
        900,
    )
    .expect("the page shows the rollout complete again after resume");
    assert_eq!(rollout_phase(&f), "Complete");

    eprintln!("web_ui: pods and logs");
    // A cluster's pods and a pod's log, through the debug tunnel, from the page.
    let fleet_tab = b.find("button[data-tab='fleet']").unwrap().unwrap();
    b.click(&fleet_tab).unwrap();
    let runs_web = f.chosen("web");
    let on = runs_web.first().expect("the placement chose a cluster");
    let pods = b
        .find(&format!("[data-cluster='{on}'] button[data-action='pods']"))
        .unwrap()
        .expect("an admin sees a cluster's Pods button");
    b.click(&pods).unwrap();
    let pod = b
        .wait_for(
            "const r = document.querySelector('#debug-body tr[data-pod]');
             return r && r.dataset.pod",
            300,
        )
        .expect("the page lists the cluster's pods");
    assert!(
        pod.as_str().is_some_and(|p| p.contains("web")),
        "{on}'s pods on the page: {pod}"
    );
    let logs = b
        .find("#debug-body tr[data-pod] button")
        .unwrap()
        .expect("a Logs button");
    b.click(&logs).unwrap();
    b.wait_for(
        "const l = document.querySelector('#log');
         return !!l && !l.hidden && l.textContent.includes('(simulated)')",
        300,
    )
    .expect("the page shows the pod's log");

    eprintln!("web_ui: unreachable");
    // A cluster whose agent stops answering turns unreachable on the page.
    let pid = agent_pid(&f, "us-2");
    signal(&pid, "-STOP");
    let unreachable = b.wait_for(
        "const e = document.querySelector(\"[data-cluster='us-2']\");
         return e && e.dataset.state === 'unreachable'",
        900,
    );
    if unreachable.is_ok() {
        screenshot(&b, "unreachable.png");
    }
    signal(&pid, "-CONT");
    unreachable.expect("us-2 turns unreachable on the page once its agent is frozen");
    b.wait_for(
        "const e = document.querySelector(\"[data-cluster='us-2']\");
         return e && e.dataset.state === 'available'",
        900,
    )
    .expect("us-2 is available again once its agent runs");

    eprintln!("web_ui: logout");
    // Log out: the session ends.
    let logout = b.find("#logout").unwrap().unwrap();
    b.click(&logout).unwrap();
    b.wait_for(
        "return document.querySelector('#notice').textContent.includes('logged out')",
        50,
    )
    .unwrap();
    let after = b
        .script(
            "return fetch('/ui/api/whoami', { credentials: 'same-origin' }).then(r => r.status)",
            json!([]),
        )
        .unwrap();
    assert_eq!(after, json!(401), "the session ended at logout");

    eprintln!("web_ui: view token");
    // A view token's session: no action buttons, and forged writes are refused.
    b.goto(&login_url(&f, Some(VIEW_TOKEN))).unwrap();
    b.wait_for("return document.body.dataset.ready === 'true'", 300)
        .unwrap();
    assert_eq!(
        b.script("return document.body.dataset.role", json!([]))
            .unwrap(),
        json!("view")
    );
    let buttons = b.all("[data-cluster] button[data-action]").unwrap();
    assert!(buttons.is_empty(), "a view session sees no cluster actions");
    b.click(&b.find("button[data-tab='placements']").unwrap().unwrap())
        .unwrap();
    b.wait_for(
        "return !!document.querySelector(\"[data-placement='web']\")",
        150,
    )
    .unwrap();
    assert!(
        b.all("[data-placement] button[data-action]")
            .unwrap()
            .is_empty(),
        "a view session sees no rollout actions"
    );
    assert_eq!(page_request(&b, "PUT", cluster_path, forged, true), 403);
    let pause = json!({ "metadata": { "annotations": { "strata.dev/rollout": "pause@1" } } });
    let placement_path = "/spaces/default/apis/strata.dev/v1alpha1/placements/web";
    assert_eq!(page_request(&b, "PATCH", placement_path, pause, true), 403);
    // The page's actions are audited at the root like any API write: the cordon and
    // uncordon, the undo and resume, and the view session's refused patch.
    f.eventually("the root's audit log names the page's writes", |f| {
        audited(f, "PUT", "/clusters/us-2", 200)
            && audited(f, "PATCH", "/placements/web", 200)
            && audited(f, "PATCH", "/placements/web", 403)
    });
    // The same login link does not work twice.
    b.goto(&url).unwrap();
    let body = b
        .script("return document.body.textContent", json!([]))
        .unwrap();
    assert!(
        body.as_str()
            .is_some_and(|t| t.contains("used already or has expired")),
        "{body}"
    );
}
