//! The printed table: our figures, the baselines', their ratios, and each goal.

use std::fmt::Write;

use super::{Dist, Report, TopologyReport};

fn mib(b: u64) -> f64 {
    b as f64 / 1024.0 / 1024.0
}

fn dist(d: &Dist) -> String {
    format!(
        "p50 {:>8.1}  p90 {:>8.1}  p99 {:>8.1}  max {:>8.1} ms  (n={})",
        d.p50_ms, d.p90_ms, d.p99_ms, d.max_ms, d.n
    )
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn topology(out: &mut String, t: &TopologyReport) {
    let _ = writeln!(
        out,
        "\n## {} {:?}: {} leaves, object {} B ({} B encoded)",
        t.label, t.fanout, t.leaves, t.object_bytes, t.encoded_object_bytes
    );
    let _ = writeln!(out, "registration          {:.1} s", t.register_secs);
    let _ = writeln!(out, "first delivery        {}", dist(&t.first_delivery));
    let _ = writeln!(out, "P1 update -> leaf     {}", dist(&t.p1));
    for b in &t.p2 {
        let _ = writeln!(
            out,
            "P2 tier {} ({:>4} nodes, {:>5} links) sent {:>10} B/update; object x links {:>10} B; ratio {:.2}; datagrams per link {:.2} out, {:.2} in",
            b.tier,
            b.nodes,
            b.links,
            b.bytes_per_update,
            b.ideal_bytes,
            b.ratio,
            b.datagrams_sent_per_link,
            b.datagrams_received_per_link
        );
    }
    let _ = writeln!(out, "P3 status -> summary  {}", dist(&t.p3));
    let _ = writeln!(
        out,
        "P3 root received      {} B/update from {} children ({} B per child), window {:.2} s",
        t.p3_root_bytes_received_per_update,
        t.p3_root_children,
        t.p3_root_bytes_received_per_update / t.p3_root_children.max(1) as u64,
        t.update_window_secs
    );
    for (round, h) in t.p3_hops.iter().enumerate() {
        let tiers: Vec<String> = h
            .tiers
            .iter()
            .rev()
            .map(|tier| {
                let at = |t: Option<f64>| t.map_or("never".to_owned(), |t| format!("{t:.0} ms"));
                let slowest = match &tier.slowest {
                    Some((name, t)) => format!("{} ({name})", at(*t)),
                    None => "none".to_owned(),
                };
                format!(
                    "tier {} median {}, last {slowest}",
                    tier.level,
                    at(tier.median_ms)
                )
            })
            .collect();
        let mut hops = vec![format!("last leaf applied {:.0} ms", h.last_applied_ms)];
        hops.extend(tiers);
        hops.push(format!("root {:.0} ms", h.root_complete_ms));
        let _ = writeln!(out, "P3 hops, update {}    {}", round + 1, hops.join("; "));
    }
    if let Some(r) = &t.p4 {
        let _ = writeln!(
            out,
            "P4 resync {} ({} leaves) after {} objects changed: {} B sent vs {} B changed; ratio {:.2}; caught up in {:.2} s",
            r.region,
            r.leaves_below,
            r.changed_objects,
            r.resync_bytes,
            r.changed_bytes,
            r.ratio,
            r.caught_up_secs
        );
    }
    let s = &t.storm;
    let _ = writeln!(
        out,
        "P4 storm {} agents: started in {:.1} s; all applied {:.1} s; root summary {}; {} never got it",
        s.agents,
        s.start_secs,
        s.all_applied_secs,
        s.summary_secs
            .map_or("never".to_owned(), |v| format!("{v:.1} s")),
        s.missing
    );
    let _ = writeln!(out, "P4 storm per agent    {}", dist(&s.applied));
    let _ = writeln!(
        out,
        "P4 storm stop         the stopped agents' sockets released {}",
        s.released_secs
            .map_or("not within 60 s".to_owned(), |v| format!("after {v:.1} s"))
    );
    let _ = writeln!(
        out,
        "P4 storm admission    {} child connections opened; {} refused before the handshake; {} hellos told to come back later",
        s.refused.connections, s.refused.handshakes, s.refused.sessions
    );
    let _ = writeln!(
        out,
        "P4 storm bytes        {} B to agents ({} B per agent; each holds {} objects x {} B = {} B)",
        s.bytes_to_agents,
        s.bytes_to_agents / s.agents.max(1) as u64,
        s.objects_held,
        t.encoded_object_bytes,
        s.objects_held * t.encoded_object_bytes
    );
    let m = &t.memory;
    let _ = writeln!(
        out,
        "P6 RSS {:.0} MiB idle; per relay {:.0} KiB; per agent incl. both ends of its connection {:.0} KiB; per unconnected agent {:.0} KiB; so per idle connection (both ends) ~{:.0} KiB",
        mib(m.rss_idle),
        m.per_relay as f64 / 1024.0,
        m.per_agent_with_connection as f64 / 1024.0,
        m.per_agent_unconnected as f64 / 1024.0,
        m.per_agent_with_connection
            .saturating_sub(m.per_agent_unconnected) as f64
            / 1024.0
    );
    let cpu = |v: &[(String, f64)]| {
        v.iter()
            .map(|(k, s)| format!("{} {s:.2}", k.trim_start_matches("bench-")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(out, "CPU s/s idle          {}", cpu(&t.cpu_idle_per_sec));
    let _ = writeln!(out, "CPU s during updates  {}", cpu(&t.cpu_updates));
    let _ = writeln!(
        out,
        "machine speed         the same fixed work took {:.0} ms before the updates, {:.0} ms after (lower is faster; compare runs only when these agree)",
        t.calibration_ms.0, t.calibration_ms.1
    );
    let _ = writeln!(
        out,
        "during updates        {} child connections opened (0: every link held), root planned {} times",
        t.updates_reconnects, t.updates_plans
    );
    let _ = writeln!(out, "CPU s whole run       {}", cpu(&t.cpu_total));
    let _ = writeln!(
        out,
        "process               CPU {:.1} s, peak RSS {:.0} MiB",
        t.process_cpu_secs,
        mib(t.peak_rss)
    );
    let phases: Vec<String> = t
        .phase_peaks
        .iter()
        .map(|(name, bytes)| format!("{name} {:.0}", mib(*bytes)))
        .collect();
    let _ = writeln!(out, "peak RSS by phase MiB {}", phases.join(", "));
    let drops: Vec<String> = t
        .udp_drops
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "UDP datagrams dropped at full receive buffers (whole machine) {}",
        drops.join(", ")
    );
}

/// The report as a table, with ratios against the baselines and the goals' verdicts.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Strata benchmark\nmachine: {}", r.machine);
    topology(&mut out, &r.tree);
    if let Some(f) = &r.flat {
        topology(&mut out, f);
    }
    for (label, nats) in [
        ("plaintext", &r.nats),
        ("mutual TLS", &r.nats_tls),
        ("JetStream, mutual TLS", &r.jetstream_tls),
    ] {
        match nats {
            Ok(n) => {
                let _ = writeln!(
                    out,
                    "\n## NATS leafnode tree, {label}: {} servers, {} subscribers, payload {} B\ninterest ready {:.1} s\nP1 publish -> sub     {}\nservers RSS {:.0} MiB, CPU s during updates {:.2}",
                    n.servers,
                    n.leaves,
                    n.payload_bytes,
                    n.interest_ready_secs,
                    dist(&n.p1),
                    mib(n.servers_rss),
                    n.servers_cpu_updates
                );
                if let Some(acked) = &n.acked {
                    let _ = writeln!(out, "publish -> ack confirmed {}", dist(acked));
                }
            }
            Err(why) => {
                let _ = writeln!(out, "\n## NATS, {label}: {why}");
            }
        }
    }
    let t = &r.tree;
    let _ = writeln!(out, "\n## Ratios (ours / baseline)");
    if let Some(f) = &r.flat {
        let _ = writeln!(
            out,
            "tree / flat hub: P1 p99 {:.2}, P3 p99 {:.2}, root bytes sent per update {:.3}, storm {:.2}",
            t.p1.p99_ms / f.p1.p99_ms.max(0.001),
            t.p3.p99_ms / f.p3.p99_ms.max(0.001),
            t.p2[0].bytes_per_update as f64 / f.p2[0].bytes_per_update.max(1) as f64,
            t.storm.summary_secs.unwrap_or(f64::INFINITY)
                / f.storm.summary_secs.unwrap_or(f64::INFINITY).max(0.001)
        );
    }
    for (label, nats) in [
        ("NATS", &r.nats),
        ("NATS with TLS", &r.nats_tls),
        ("JetStream with TLS", &r.jetstream_tls),
    ] {
        if let Ok(n) = nats {
            let _ = writeln!(
                out,
                "tree / {label}: P1 p50 {:.2}, p99 {:.2}",
                t.p1.p50_ms / n.p1.p50_ms.max(0.001),
                t.p1.p99_ms / n.p1.p99_ms.max(0.001)
            );
        }
    }
    // P5 compares like with like: every link of ours runs mutual TLS. Core NATS is the
    // lower bound (nothing kept, nothing counted); JetStream does what we do.
    let p5 = r
        .nats_tls
        .as_ref()
        .ok()
        .map(|n| t.p1.p99_ms / n.p1.p99_ms.max(0.001));
    let p5_durable = r.jetstream_tls.as_ref().ok().map(|n| {
        let acked = n.acked.as_ref().map(|a| t.p3.p99_ms / a.p99_ms.max(0.001));
        (t.p1.p99_ms / n.p1.p99_ms.max(0.001), acked)
    });
    let _ = writeln!(out, "\n## Goals (at {} leaves)", t.leaves);
    // Issue 17 asks for an update at every one of 10,000 leaves within a second; the
    // seeds' two seconds hold below that size.
    let p1_goal_ms = if t.leaves >= 10_000 { 1000.0 } else { 2000.0 };
    let _ = writeln!(
        out,
        "P1 p99 <= {} s: {:.0} ms, {}",
        p1_goal_ms / 1000.0,
        t.p1.p99_ms,
        verdict(t.p1.p99_ms <= p1_goal_ms)
    );
    let _ = writeln!(
        out,
        "P2 root <= 1.1 x object x children: {:.2}, {}",
        t.p2[0].ratio,
        verdict(t.p2[0].ratio <= 1.1)
    );
    let _ = writeln!(
        out,
        "P3 p99 <= 2 s: {:.0} ms, {}",
        t.p3.p99_ms,
        verdict(t.p3.p99_ms <= 2000.0)
    );
    if let Some(p4) = &t.p4 {
        let _ = writeln!(
            out,
            "P4 resync <= 1.2 x changed bytes: {:.2}, {}",
            p4.ratio,
            verdict(p4.ratio <= 1.2)
        );
    }
    let settle = t.storm.summary_secs.unwrap_or(f64::INFINITY);
    let _ = writeln!(
        out,
        "P4 storm settles <= 30 s: {settle:.1} s, {}",
        verdict(settle <= 30.0)
    );
    match p5 {
        Some(p5) => {
            let _ = writeln!(
                out,
                "P5 p99 within 3 x NATS with TLS: {p5:.2} x, {}",
                verdict(p5 <= 3.0)
            );
        }
        None => {
            let _ = writeln!(out, "P5: no NATS-with-TLS figure");
        }
    }
    match p5_durable {
        Some((p1, acked)) => {
            let acked = acked
                .map(|a| format!("; P3 p99 / its acks confirmed p99: {a:.2} x"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "P5 p99 within 1.0 x JetStream with TLS: {p1:.2} x, {}{acked}",
                verdict(p1 <= 1.0)
            );
        }
        None => {
            let _ = writeln!(out, "P5: no JetStream-with-TLS figure");
        }
    }
    let m = &t.memory;
    let per_conn = m
        .per_agent_with_connection
        .saturating_sub(m.per_agent_unconnected);
    let _ = writeln!(
        out,
        "P6 per idle connection <= 50 KiB: ~{:.0} KiB (both ends), {}; idle agent < 30 MiB: {:.0} KiB incl. its connection, {}",
        per_conn as f64 / 1024.0,
        verdict(per_conn <= 50 * 1024),
        m.per_agent_with_connection as f64 / 1024.0,
        verdict(m.per_agent_with_connection < 30 * 1024 * 1024)
    );
    let _ = writeln!(
        out,
        "\nharness process (NATS subscribers): CPU {:.1} s, peak RSS {:.0} MiB",
        r.process_cpu_secs,
        mib(r.peak_rss)
    );
    out
}
