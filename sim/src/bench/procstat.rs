//! Memory and CPU of this process from `/proc` (Linux only; zeros elsewhere).

use std::collections::BTreeMap;

/// Clock ticks per second of `/proc/*/stat` times (`sysconf(_SC_CLK_TCK)`, 100 on
/// every Linux this runs on).
const TICKS: f64 = 100.0;

/// Resident set size of this process, in bytes.
pub(crate) fn rss_bytes() -> u64 {
    status_kib("VmRSS:") * 1024
}

/// File descriptors this process holds open (sockets among them).
pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// The soft and hard limits on this process's open files (`ulimit -n`), from
/// `/proc/self/limits`; `None` where unreadable or unlimited.
pub(crate) fn open_file_limit() -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let values = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    let mut fields = values.split_whitespace();
    let soft = fields.next()?.parse().ok()?;
    let hard = fields.next()?.parse().ok()?;
    Some((soft, hard))
}

/// Peak resident set size of this process, in bytes.
pub(crate) fn peak_rss_bytes() -> u64 {
    status_kib("VmHWM:") * 1024
}

/// A figure per phase, in order.
pub(crate) type ByPhase = Vec<(String, u64)>;

/// The peak RSS of each phase of a run: [`Peaks::end`] records the peak since the last
/// mark under a name and starts the next phase's peak from the RSS of now (the kernel's
/// `clear_refs` reset of `VmHWM`). Where that reset is refused, every phase reads the
/// process's peak so far, which is still an upper bound.
///
/// Each phase also records the UDP datagrams the kernel dropped at full receive
/// buffers meanwhile ([`udp_receive_drops`]).
#[derive(Debug, Default)]
pub(crate) struct Peaks {
    phases: Vec<(String, u64)>,
    overall: u64,
    drops_at: u64,
    drops: Vec<(String, u64)>,
}

impl Peaks {
    /// A record whose first phase starts now.
    pub(crate) fn start() -> Self {
        let p = Self {
            phases: Vec::new(),
            overall: peak_rss_bytes(),
            drops_at: udp_receive_drops(),
            drops: Vec::new(),
        };
        reset_peak();
        p
    }

    /// The phase called `name` ended now.
    pub(crate) fn end(&mut self, name: &str) {
        let peak = peak_rss_bytes();
        self.overall = self.overall.max(peak);
        self.phases.push((name.to_owned(), peak));
        reset_peak();
        let drops = udp_receive_drops();
        self.drops
            .push((name.to_owned(), drops.saturating_sub(self.drops_at)));
        self.drops_at = drops;
    }

    /// Each phase's peak, the process's peak over all of them and before, and each
    /// phase's UDP drops.
    pub(crate) fn finish(self) -> (ByPhase, u64, ByPhase) {
        let overall = self.overall.max(peak_rss_bytes());
        (self.phases, overall, self.drops)
    }
}

/// UDP datagrams the kernel dropped because a socket's receive buffer was full, over
/// the whole network namespace since boot (`RcvbufErrors` of `/proc/net/snmp` and
/// `/proc/net/snmp6`): only this process's on a quiet machine.
pub(crate) fn udp_receive_drops() -> u64 {
    let v4 = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut udp = v4.lines().filter(|l| l.starts_with("Udp: "));
    let v4_drops = match (udp.next(), udp.next()) {
        (Some(names), Some(values)) => names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == "RcvbufErrors")
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or(0),
        _ => 0,
    };
    let v6 = std::fs::read_to_string("/proc/net/snmp6").unwrap_or_default();
    let v6_drops = v6
        .lines()
        .filter_map(|l| l.strip_prefix("Udp6RcvbufErrors"))
        .find_map(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    v4_drops + v6_drops
}

/// Resets `VmHWM` to the current RSS (`echo 5 > /proc/self/clear_refs`).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU seconds from a `stat` line (fields 14 and 15, after the command
/// name in parentheses, which may hold spaces).
fn stat_cpu(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let user: f64 = f.get(11)?.parse().ok()?;
    let system: f64 = f.get(12)?.parse().ok()?;
    Some((user + system) / TICKS)
}

/// CPU seconds of the whole process.
pub(crate) fn process_cpu() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| stat_cpu(&s))
        .unwrap_or(0.0)
}

/// CPU seconds per thread-name prefix among `prefixes` (threads of ended threads are
/// not counted: read this while the runtimes live).
pub(crate) fn cpu_by_thread(prefixes: &[&str]) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = prefixes.iter().map(|p| ((*p).to_owned(), 0.0)).collect();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let name = stat
            .find('(')
            .zip(stat.rfind(')'))
            .map(|(a, b)| &stat[a + 1..b])
            .unwrap_or("");
        if let Some(p) = prefixes.iter().find(|p| name.starts_with(**p)) {
            *out.entry((*p).to_owned()).or_default() += stat_cpu(&stat).unwrap_or(0.0);
        }
    }
    out
}

/// A short description of this machine: CPU model, cores, memory, load.
pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(str::trim)
        .unwrap_or("unknown CPU")
        .to_owned();
    let cores = cpu.lines().filter(|l| l.starts_with("processor")).count();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    // The test build (CI's short run) optimizes only some dependencies: its figures say
    // whether the harness works, not how fast the product is.
    let build = if cfg!(debug_assertions) {
        "; UNOPTIMIZED build (debug assertions on): figures not comparable, use --release"
    } else {
        ""
    };
    format!(
        "{model}, {cores} cores, {:.0} GiB, load average {} at start{build}",
        mem as f64 / 1024.0 / 1024.0,
        load.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_fields_are_read_after_the_command_name() {
        let line = "12 (bench relay) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(stat_cpu(line), Some(3.0));
    }
}
