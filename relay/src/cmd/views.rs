//! Text views of the API's answers for the CLI: the tier tree of `relay status` and the
//! inventory of `relay clusters`. Pure functions of the JSON, so they are tested
//! without a running node.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// A duration in milliseconds, short: `850ms`, `12s`, `4m`, `3h`, `2d`.
pub fn ago(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=119 => format!("{s}s"),
        120..=7_199 => format!("{}m", s / 60),
        7_200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or_default()
}

/// The earliest certificate expiry (wall-clock milliseconds) of `node` and every node
/// below it, from the link records (`all` holds every link, agents included, by parent).
fn earliest_expiry(all: &BTreeMap<&str, Vec<&Value>>, node: &str, own: Option<u64>) -> Option<u64> {
    let mut earliest = own;
    let mut todo = vec![(node, 0usize)];
    while let Some((n, depth)) = todo.pop() {
        // The tree is built from reports: a malformed one must not loop forever.
        if depth > 32 {
            continue;
        }
        for l in all.get(n).into_iter().flatten() {
            if let Some(t) = l["certExpires"].as_u64() {
                earliest = Some(earliest.map_or(t, |e: u64| e.min(t)));
            }
            todo.push((text(l, "node"), depth + 1));
        }
    }
    earliest
}

/// `cert 2027-11-24`, flagged when it is within 30 days of `now` (or past).
fn expiry_note(expires: Option<u64>, now: u64) -> String {
    let Some(t) = expires else {
        return String::new();
    };
    let date = strata_topology::certs::utc_date(i64::try_from(t / 1000).unwrap_or(i64::MAX));
    let warn_ms = u64::from(strata_topology::certs::WARN_DAYS) * 86_400_000;
    if t <= now {
        format!("   cert EXPIRED {date}")
    } else if t - now <= warn_ms {
        format!("   cert {date} (in {})", ago(t - now))
    } else {
        format!("   cert {date}")
    }
}

/// The tier tree: the root, then every relay below it (agents only with `agents`), each
/// with its link state, lag and last heartbeat as its parent last saw them, and the
/// earliest expiry of the certificates on and below that link. A link whose parent is
/// down is shown as that parent last reported it.
pub fn status_tree(v: &Value, agents: bool) -> String {
    let now = v["now"].as_u64().unwrap_or(0);
    let root = text(v, "node");
    let links: Vec<&Value> = v["links"].as_array().into_iter().flatten().collect();
    let mut below: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    let mut all: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for l in &links {
        all.entry(text(l, "parent")).or_default().push(l);
        if agents || text(l, "role") == "relay" {
            below.entry(text(l, "parent")).or_default().push(l);
        }
    }
    let direct: Vec<&&Value> = links.iter().filter(|l| text(l, "parent") == root).collect();
    let up = direct.iter().filter(|l| l["connected"] == true).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{root:<24} root     children {up}/{}   rev {}",
        direct.len(),
        v["head"]
    );
    branch(&mut out, (&below, &all), root, "", now, 0);
    let agents_total = links.iter().filter(|l| text(l, "role") == "agent").count();
    let agents_up = links
        .iter()
        .filter(|l| text(l, "role") == "agent" && l["connected"] == true)
        .count();
    if !agents && agents_total > 0 {
        let _ = writeln!(
            out,
            "agents: {agents_up}/{agents_total} connected (relay status --agents lists them)"
        );
    }
    out
}

/// Links by parent: those shown, and all of them (for expiries below).
type Tree<'a, 'v> = (
    &'a BTreeMap<&'v str, Vec<&'v Value>>,
    &'a BTreeMap<&'v str, Vec<&'v Value>>,
);

fn branch(
    out: &mut String,
    trees: Tree<'_, '_>,
    parent: &str,
    prefix: &str,
    now: u64,
    depth: usize,
) {
    // The tree is built from reports: a malformed one must not recurse forever.
    if depth > 32 {
        return;
    }
    let (below, all) = trees;
    let Some(children) = below.get(parent) else {
        return;
    };
    for (i, l) in children.iter().enumerate() {
        let last = i + 1 == children.len();
        let name = text(l, "node");
        let since = now.saturating_sub(l["since"].as_u64().unwrap_or(now));
        let heard = now.saturating_sub(l["lastHeard"].as_u64().unwrap_or(now));
        let lag = l["lag"].as_u64().map_or("?".to_owned(), |x| x.to_string());
        let label = format!("{prefix}{}{name}", if last { "└─ " } else { "├─ " });
        let line = if l["connected"] == true {
            // What the link runs on, when its parent's version reports it.
            let over = l["transport"]
                .as_str()
                .map_or(String::new(), |t| format!(" over {t}"));
            // Through a proxy, when the child says so (protocol version 5).
            let over = match l["via"].as_str() {
                Some("proxied") => format!("{over}, proxied"),
                _ => over,
            };
            format!(
                "{label:<24} up {:<5} lag {lag:<12} clusters {:<6} last heartbeat {}{over}",
                ago(since),
                l["clusters"].as_u64().unwrap_or(0),
                ago(heard)
            )
        } else {
            format!(
                "{label:<24} DOWN {:<3} lag {:<12} clusters {:<6} last heard {} ago",
                ago(since),
                format!("{lag} (cached)"),
                l["clusters"].as_u64().unwrap_or(0),
                ago(heard)
            )
        };
        let cert = expiry_note(earliest_expiry(all, name, l["certExpires"].as_u64()), now);
        let _ = writeln!(out, "{}{cert}", line.trim_end());
        let next = format!("{prefix}{}", if last { "   " } else { "│  " });
        branch(out, trees, name, &next, now, depth + 1);
    }
}

/// Objects with their rollout summary per placement, as `relay get` shows them; `now`
/// (wall-clock milliseconds) dates the oldest report. Up to 3 failed clusters are named
/// under a placement's line (5 with `wide`).
pub fn objects_table(items: &[Value], wide: bool, now: u64) -> String {
    let mut out = format!(
        "{:<24} {:<12} {:<16} {:>5} {:>8} {:>7} {:>9} {:>6} {:>11}  OLDEST-REPORT\n",
        "NAME",
        "NAMESPACE",
        "PLACEMENT",
        "REV",
        "CLUSTERS",
        "APPLIED",
        "AVAILABLE",
        "FAILED",
        "UNREACHABLE"
    );
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    for item in items {
        let name = item["key"]["name"].as_str().unwrap_or_default();
        let ns = item["key"]["namespace"].as_str().unwrap_or("-");
        let rev = n(&item["revision"]);
        let placements = item["placements"].as_array().cloned().unwrap_or_default();
        if placements.is_empty() {
            let _ = writeln!(out, "{name:<24} {ns:<12} {:<16} {rev:>5}", "<none>");
        }
        let d = &item["decisions"];
        if d.is_object() {
            let excluded: Vec<String> = d["excluded"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(why, count)| format!("{why} {count}"))
                .collect();
            let _ = writeln!(
                out,
                "  chose {} of {} matching clusters{}",
                n(&d["chosen"]),
                n(&d["matching"]),
                if excluded.is_empty() {
                    String::new()
                } else {
                    format!("; left out: {}", excluded.join(", "))
                }
            );
            let names = |v: &Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.as_str().map(str::to_owned))
                    .collect()
            };
            let retiring = names(&d["retiring"]);
            if !retiring.is_empty() {
                let _ = writeln!(
                    out,
                    "  moving off (until the new clusters are available): {}",
                    retiring.join(", ")
                );
            }
            if wide {
                let _ = writeln!(out, "  chosen: {}", names(&d["clusters"]).join(", "));
            }
        }
        user_summary_line(&mut out, &item["userSummary"]);
        for p in placements {
            let s = &p["summary"];
            let oldest = s["oldest_report"]
                .as_u64()
                .map_or("-".to_owned(), |t| ago(now.saturating_sub(t)));
            let _ = writeln!(
                out,
                "{name:<24} {ns:<12} {:<16} {rev:>5} {:>8} {:>7} {:>9} {:>6} {:>11}  {oldest}",
                text(&p, "placement"),
                n(&s["expected"]),
                n(&s["reporting"]),
                n(&s["health"]["available"]),
                n(&s["health"]["failed"]),
                n(&p["silent"]),
            );
            let samples = s["error_samples"].as_array().cloned().unwrap_or_default();
            if !samples.is_empty() {
                let shown: Vec<String> = samples
                    .iter()
                    .take(if wide { 5 } else { 3 })
                    .map(|e| format!("{} ({})", text(e, "cluster"), text(e, "message")))
                    .collect();
                let _ = writeln!(out, "  failed: {}", shown.join(", "));
            }
            user_summary_line(&mut out, &p["userSummary"]);
        }
    }
    out
}

/// `  summary: ready=4 images={"web:1":2}`: a placement's `statusSummary` values.
fn user_summary_line(out: &mut String, summary: &Value) {
    let Some(entries) = summary.as_object().filter(|m| !m.is_empty()) else {
        return;
    };
    let shown: Vec<String> = entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(out, "  summary: {}", shown.join(" "));
}

/// What `relay cordon|drain` did to a cluster (in the space asked): `drained`,
/// `cordoned`, or `ready`; `tainted` for other `NoSchedule`/`NoExecute` taints.
fn schedule(c: &Value) -> &'static str {
    let taints: Vec<&Value> = c["taints"].as_array().into_iter().flatten().collect();
    let has = |key: &str| taints.iter().any(|t| t["key"] == key);
    if has(crate::cmd::lifecycle::DRAINED) {
        "drained"
    } else if has(crate::cmd::lifecycle::CORDONED) {
        "cordoned"
    } else if taints.is_empty() {
        "ready"
    } else {
        "tainted"
    }
}

/// The inventory as a table by relay path (`relay clusters`): whether each cluster is
/// reachable now or when it was last seen, whether placements may choose it, labels.
pub fn clusters_table(v: &Value) -> String {
    let now = v["now"].as_u64().unwrap_or(0);
    let mut items: Vec<&Value> = v["items"].as_array().into_iter().flatten().collect();
    items.sort_by_key(|c| (path_of(c), text(c, "name").to_owned()));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<32} {:<24} {:<12} {:<10} LABELS",
        "PATH", "CLUSTER", "LAST-SEEN", "SCHEDULE"
    );
    for c in items {
        let labels: Vec<String> = c["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        let seen = match (c["reachable"].as_bool(), c["lastSeen"].as_u64()) {
            (Some(true), _) => "now".to_owned(),
            (_, Some(t)) => format!("{} ago", ago(now.saturating_sub(t))),
            _ => "unknown".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<32} {:<24} {seen:<12} {:<10} {}",
            path_of(c),
            text(c, "name"),
            schedule(c),
            labels.join(",")
        );
        if let Some(why) = c["reason"].as_str() {
            let _ = writeln!(out, "  unreachable: {why}");
        }
    }
    out
}

/// Upsynced objects, one line each: cluster, space, kind, namespace, name.
pub fn upsynced_table(v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:<12} {:<24} {:<16} NAME",
        "CLUSTER", "SPACE", "KIND", "NAMESPACE"
    );
    for item in v["items"].as_array().into_iter().flatten() {
        let k = &item["key"];
        let kind = match text(k, "group") {
            "" => text(k, "kind").to_owned(),
            g => format!("{}.{g}", text(k, "kind")),
        };
        let _ = writeln!(
            out,
            "{:<24} {:<12} {kind:<24} {:<16} {}",
            text(item, "cluster"),
            text(k, "space"),
            k["namespace"].as_str().unwrap_or("-"),
            text(k, "name")
        );
    }
    out
}

/// A cluster's relay path, joined with `/`.
pub fn path_of(c: &Value) -> String {
    c["path"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn link(node: &str, parent: &str, role: &str, connected: bool, since: u64) -> Value {
        json!({ "node": node, "parent": parent, "role": role, "connected": connected,
                "since": since, "lastHeard": 99_600, "lag": 3, "clusters": 4 })
    }

    fn over_tcp(mut l: Value) -> Value {
        l["transport"] = json!("tcp");
        l
    }

    fn proxied(mut l: Value) -> Value {
        l["via"] = json!("proxied");
        l
    }

    #[test]
    fn status_shows_every_tier_and_down_links_as_cached() {
        let v = json!({
            "node": "center", "head": 118, "now": 100_000,
            "links": [
                link("eu", "center", "relay", true, 10_000),
                over_tcp(link("eu-site-1", "eu", "relay", true, 40_000)),
                link("us", "center", "relay", false, 88_000),
                proxied(over_tcp(link("us-site-1", "us", "relay", true, 20_000))),
                link("c1", "eu-site-1", "agent", true, 50_000),
            ],
        });
        let text = status_tree(&v, false);
        let expected = "\
center                   root     children 1/2   rev 118
├─ eu                    up 90s   lag 3            clusters 4      last heartbeat 400ms
│  └─ eu-site-1          up 60s   lag 3            clusters 4      last heartbeat 400ms over tcp
└─ us                    DOWN 12s lag 3 (cached)   clusters 4      last heard 400ms ago
   └─ us-site-1          up 80s   lag 3            clusters 4      last heartbeat 400ms over tcp, proxied
agents: 1/1 connected (relay status --agents lists them)
";
        assert_eq!(text, expected);
        assert!(status_tree(&v, true).contains("│     └─ c1"));
    }

    #[test]
    fn each_link_shows_the_earliest_certificate_expiry_on_and_below_it() {
        const DAY: u64 = 86_400_000;
        // 2026-11-24T00:00:00Z
        let now = 1_795_478_400_000;
        let with = |mut l: Value, expires: u64| {
            l["certExpires"] = json!(expires);
            l
        };
        let v = json!({
            "node": "center", "head": 1, "now": now,
            "links": [
                with(link("eu", "center", "relay", true, now), now + 300 * DAY),
                with(link("eu-site-1", "eu", "relay", true, now), now + 200 * DAY),
                // An agent two tiers down expires first: its relays show it.
                with(link("c1", "eu-site-1", "agent", true, now), now + 12 * DAY),
                with(link("us", "center", "relay", true, now), now - DAY),
                link("us-site-1", "us", "relay", true, now),
            ],
        });
        let text = status_tree(&v, false);
        let line = |name: &str| {
            text.lines()
                .find(|l| l.contains(&format!(" {name} ")))
                .unwrap_or_default()
                .to_owned()
        };
        assert!(line("eu").ends_with("cert 2026-12-06 (in 12d)"), "{text}");
        assert!(
            line("eu-site-1").ends_with("cert 2026-12-06 (in 12d)"),
            "{text}"
        );
        assert!(line("us").ends_with("cert EXPIRED 2026-11-23"), "{text}");
        assert!(!line("us-site-1").contains("cert"), "{text}");
        let agents = status_tree(&v, true);
        assert!(agents.contains("c1") && agents.contains("(in 12d)"));
    }

    #[test]
    fn clusters_show_last_seen() {
        let v = json!({ "now": 100_000, "items": [
            { "name": "c2", "path": ["center", "us"], "labels": { "region": "us" },
              "reachable": false, "lastSeen": 40_000 },
            { "name": "c1", "path": ["center", "eu"], "labels": {}, "reachable": true,
              "lastSeen": 100_000,
              "taints": [{ "key": "strata.dev/cordoned", "effect": "NoSchedule" }] },
            { "name": "c3", "path": ["center", "us"], "labels": {}, "reachable": false,
              "lastSeen": 90_000, "reason": "its agent cannot reach the cluster's API server: refused" },
        ]});
        let text = clusters_table(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("center/eu") && lines[1].contains(" now "));
        assert!(lines[1].contains(" cordoned "), "{text}");
        assert!(lines[2].contains(" ready "), "{text}");
        assert!(lines[2].contains("60s ago") && lines[2].ends_with("region=us"));
        assert!(
            lines[3].contains(" c3 ") && lines[3].contains("10s ago"),
            "{text}"
        );
        assert_eq!(
            lines[4],
            "  unreachable: its agent cannot reach the cluster's API server: refused"
        );
    }

    #[test]
    fn objects_line_up_in_columns_and_name_failed_clusters() {
        let items = vec![json!({
            "key": { "name": "pos", "namespace": "pos" },
            "revision": 118,
            "placements": [{
                "placement": "pos-app", "silent": 3,
                "summary": {
                    "expected": 1204, "reporting": 1204, "oldest_report": 86_000,
                    "health": { "available": 1199, "failed": 2 },
                    "error_samples": [
                        { "cluster": "store-0917-pos", "message": "ImagePullBackOff" },
                        { "cluster": "store-1102-pos", "message": "CrashLoopBackOff" },
                    ],
                },
            }],
        })];
        let text = objects_table(&items, false, 100_000);
        let expected = "\
NAME                     NAMESPACE    PLACEMENT          REV CLUSTERS APPLIED AVAILABLE FAILED UNREACHABLE  OLDEST-REPORT
pos                      pos          pos-app            118     1204    1204      1199      2           3  14s
  failed: store-0917-pos (ImagePullBackOff), store-1102-pos (CrashLoopBackOff)
";
        assert_eq!(text, expected);
    }

    #[test]
    fn user_summaries_show_under_their_placement() {
        let item = json!({
            "key": { "name": "pos", "namespace": "pos" },
            "revision": 3,
            "placements": [ {
                "placement": "pos",
                "summary": { "expected": 2, "reporting": 2, "health": { "available": 2 } },
                "userSummary": { "ready": 4, "images": { "pos:2.1": 2 } },
            } ],
        });
        let table = objects_table(&[item], false, 0);
        assert!(
            table.ends_with("  summary: ready=4 images={\"pos:2.1\":2}\n"),
            "{table}"
        );
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(ago(850), "850ms");
        assert_eq!(ago(12_000), "12s");
        assert_eq!(ago(600_000), "10m");
        assert_eq!(ago(3 * 86_400_000), "3d");
    }
}
