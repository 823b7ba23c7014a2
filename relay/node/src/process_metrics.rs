//! The process's own figures, appended to every node's `/metrics` by [`crate::ops`]:
//! Prometheus' standard process metrics (`process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_cpu_seconds_total`, read from `/proc/self`, as client libraries export
//! them) and the tokio runtime's tasks and workers (`strata_tokio_alive_tasks`,
//! `strata_tokio_workers`). A soak reads leaks here: memory, descriptors or tasks that
//! climb while the fleet's size stays the same. Off Linux, the `/proc` figures are
//! left out.

use crate::exposition::{Exposition, Kind};

/// Clock ticks per second of `/proc/self/stat`'s CPU times (`USER_HZ`, 100 on every
/// Linux architecture we build for).
const TICKS_PER_SECOND: f64 = 100.0;

/// The process's figures now.
pub fn families() -> Exposition {
    let mut out = Exposition::new();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v * 1024.0)
    };
    let gauges = [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes (VmRSS).",
            kib("VmRSS:"),
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes (VmSize).",
            kib("VmSize:"),
        ),
        (
            "process_open_fds",
            "Open file descriptors, sockets included.",
            open_fds(),
        ),
        (
            "process_max_fds",
            "The soft limit on open file descriptors.",
            max_fds(),
        ),
    ];
    for (name, help, value) in gauges {
        if let Some(v) = value {
            out.family(name, Kind::Gauge, help, &[(Vec::new(), v)]);
        }
    }
    if let Some(cpu) = cpu_seconds() {
        out.family(
            "process_cpu_seconds_total",
            Kind::Counter,
            "User and system CPU time spent, in seconds.",
            &[(Vec::new(), cpu)],
        );
    }
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        let m = handle.metrics();
        out.family(
            "strata_tokio_alive_tasks",
            Kind::Gauge,
            "Tasks alive on the tokio runtime that serves /metrics (the node's runtime): it climbs with connections, and stays flat when the fleet does.",
            &[(Vec::new(), m.num_alive_tasks() as f64)],
        );
        out.family(
            "strata_tokio_workers",
            Kind::Gauge,
            "Worker threads of that runtime.",
            &[(Vec::new(), m.num_workers() as f64)],
        );
    }
    out
}

fn open_fds() -> Option<f64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    // The directory's own descriptor, open while it is read, is one of them.
    Some(entries.count().saturating_sub(1) as f64)
}

fn max_fds() -> Option<f64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces), from the state (field 3):
    // utime and stime are fields 14 and 15.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((user + system) / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::{Format, check};

    #[tokio::test]
    async fn the_process_figures_are_there_and_pass_the_check() {
        let _file = std::fs::File::open("/proc/self/status").expect("a file held open");
        let text = families().encode(Format::Prometheus);
        check(&text).expect("valid exposition");
        for name in [
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_cpu_seconds_total",
            "strata_tokio_alive_tasks",
        ] {
            assert!(
                text.contains(&format!("\n{name} ")),
                "{name} missing:\n{text}"
            );
        }
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} has no value:\n{text}"))
        };
        assert!(value("process_resident_memory_bytes") > 1e6);
        // stdin, stdout, stderr and the file held above at least.
        assert!(value("process_open_fds") >= 4.0);
        assert!(value("strata_tokio_alive_tasks") >= 0.0);
    }
}
