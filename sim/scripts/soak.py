#!/usr/bin/env python3
"""A soak that should stay flat (issue 49): a hierarchy of real processes on loopback,
churned every minute, sampled all along.

    sim/scripts/soak.py BIN_DIR [--leaves 1000] [--minutes 30] [--window 20] [--out DIR]
                                [--minute 60] [--agents-away 5]

BIN_DIR holds `relay` and `agent` (a production build for figures:
`cargo build --profile production --bin relay --bin agent`, then
target/production). The hierarchy is a root, 4 regional relays, 5 site relays each and
LEAVES / 20 simulated clusters per site, each node its own process, rendered by
`relay topology certs|render`. Every minute:

* 100 ConfigMaps change (placed on every cluster of the first region), and the
  Deployment `soak-web` of a placement with a rollout in waves over every cluster gets a
  new image, so a rollout runs;
* one relay below the root restarts (SIGTERM, then started again on its store), in turn;
* 5 % of the agents stop (SIGTERM) and come back 10 s later (`--agents-away PERCENT`;
  0 keeps every agent up, to follow one process's memory over the whole run).

Every 15 s it samples each process: RSS (and its anonymous and file-backed parts) and
open files from /proc, tokio tasks from its `/metrics` (`strata_tokio_alive_tasks`),
and the bytes its store holds on disk (its data directory: sled's log grows to a few
segments before it reuses them, and its memory with it).
At the end it waits until every cluster holds the latest revision of every object (the
root's FleetStatus: every selected cluster reporting, the lowest revision observed
equal to the object's), then prints:

* the slope of RSS (and of its two parts), open files and tokio tasks of each process
  over the last WINDOW minutes (since its last start, when it restarted within the
  window), per kind: the median and the largest, per minute and as a drift over the
  window relative to the mean; and apart, the median and largest of the processes up
  the whole window (one restarted within it is measured from its start, its warm-up
  included);
* every ERROR and WARN line the nodes logged, grouped by message with numbers taken
  out, so that what the churn does not explain stands out;
* DIR/soak.csv (every sample), DIR/soak-means.csv (the mean per kind at each sample)
  and DIR/soak.png (gnuplot, installed from Debian when missing).

`--minute 10 --minutes 60 --leaves 40 --window 5` runs the same churn six times as often
on a small tree, in about 11 minutes: a leak that grows with the churn shows there
first. It exits non-zero when the hierarchy does not converge at the end. The slopes are
figures, not verdicts: read them in BENCHMARKS.md's soak section.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REGIONS = 4
SITES = 5
SAMPLE_EVERY = 15
AWAY_SECONDS = 10
KINDS = ("root", "relay", "agent")


def topology(leaves):
    per_site = max(1, leaves // (REGIONS * SITES))
    lines = ["apiVersion: strata.dev/v1alpha1", "kind: Topology", "metadata: { name: soak }",
             "spec:", "  root: { name: center, metrics: 127.0.0.1:0 }", "  relays:"]
    for r in range(REGIONS):
        lines.append(f"    - {{ name: r{r}, parent: center, metrics: 127.0.0.1:0, labels: {{ region: r{r} }} }}")
        for s in range(SITES):
            lines.append(f"    - {{ name: r{r}-s{s}, parent: r{r}, metrics: 127.0.0.1:0 }}")
    lines.append("  clusters:")
    for r in range(REGIONS):
        for s in range(SITES):
            for c in range(per_site):
                lines.append(f"    - {{ name: r{r}-s{s}-c{c}, parent: r{r}-s{s}, metrics: 127.0.0.1:0, simulated: {{ readyDelayMs: 200 }} }}")
    return "\n".join(lines) + "\n"


class Node:
    def __init__(self, name, kind, config):
        self.name, self.kind, self.config = name, kind, config
        text = open(config).read()
        m = re.search(r"^data:\s*\"?([^\"\n]+)", text, re.M)
        self.data = os.path.join(os.path.dirname(config), m.group(1).strip()) if m else None
        m = re.search(r"^metrics:\s*\"?([0-9.]+:[0-9]+)", text, re.M)
        self.metrics = m.group(1) if m else None
        self.proc = None
        self.last_start = 0.0

    def start(self, bins, logs):
        program, verb = (bins["agent"], "run") if self.kind == "agent" else (bins["relay"], "serve")
        log = open(os.path.join(logs, self.name + ".log"), "a")
        env = dict(os.environ, RUST_LOG="warn", NO_COLOR="1")
        self.proc = subprocess.Popen([program, verb, "--config", self.config], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=log, env=env)
        log.close()

    def stop(self):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            print(f"{self.name} did not stop within 30 s of SIGTERM: killed", flush=True)
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def sample(self):
        """(rss KiB, open files, tokio tasks, anonymous rss KiB, file-backed rss KiB, store
        KiB on disk) now, or None while it is not running. The two parts of the RSS tell a
        heap that grows from the binary's pages being read in as new code runs."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None
        try:
            rss, anon, file = status_kib(proc.pid, "VmRSS", "RssAnon", "RssFile")
            fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
        except (OSError, AttributeError):
            return None
        tasks = None
        if self.metrics:
            try:
                with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=3) as r:
                    m = re.search(rb"^strata_tokio_alive_tasks (\S+)", r.read(), re.M)
                    tasks = float(m.group(1)) if m else None
            except OSError:
                pass
        return rss, fds, tasks, anon, file, self.store_kib()

    def store_kib(self):
        """The size of the files under its data directory, in KiB (None without one)."""
        if self.data is None:
            return None
        total = 0
        for root, _dirs, files in os.walk(self.data):
            for f in files:
                try:
                    total += os.stat(os.path.join(root, f)).st_size
                except OSError:
                    pass
        return total // 1024


def status_kib(pid, *fields):
    """The named fields (in KiB) of /proc/PID/status, in the order asked."""
    status = open(f"/proc/{pid}/status").read()
    return tuple(int(re.search(rf"^{f}:\s+(\d+)", status, re.M).group(1)) for f in fields)


def stop_on_sigterm():
    """Make SIGTERM unwind like an exception, so that the caller's `finally` stops every
    process it started (Python's default dies at once and leaves them running; SIGINT is
    ignored when the script was started in the background)."""
    def unwind(signum, _frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, unwind)


def relay_cli(bins, env, args, stdin=None):
    r = subprocess.run([bins["relay"]] + args, input=stdin, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"relay {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def manifests(minute, first):
    docs = []
    if first:
        docs.append("""apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: soak-config }
spec:
  objects: [ { kinds: [ConfigMap], selector: { matchLabels: { soak: config } } } ]
  clusters: { selector: { matchLabels: { region: r0 } } }""")
        docs.append("""apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: soak-web }
spec:
  objects: [ { kinds: [Deployment], selector: { matchLabels: { soak: web } } } ]
  clusters: { selector: {} }
  rollout:
    waves: [ { name: canary, clusters: 5 }, { percent: 25 }, { percent: 100 } ]
    gate: { available: 90%, timeout: 5m }
    onFailure: pause""")
    for i in range(100):
        docs.append(f"""apiVersion: v1
kind: ConfigMap
metadata: {{ name: soak-{i}, namespace: default, labels: {{ soak: config }} }}
data: {{ minute: "{minute}", index: "{i}" }}""")
    docs.append(f"""apiVersion: apps/v1
kind: Deployment
metadata: {{ name: soak-web, namespace: default, labels: {{ soak: web }} }}
spec:
  replicas: 2
  selector: {{ matchLabels: {{ app: soak-web }} }}
  template:
    metadata: {{ labels: {{ app: soak-web }} }}
    spec: {{ containers: [ {{ name: web, image: "nginx:1.27.{minute}" }} ] }}""")
    return "\n---\n".join(docs) + "\n"


def unconverged(bins, env):
    """Fleet statuses of the soak's objects that are not yet at their latest revision
    everywhere: (name, why) pairs; empty when converged."""
    items = json.loads(relay_cli(bins, env, ["get", "fleetstatuses", "-o", "json"])).get("items", [])
    mine = [i for i in items if i["object"]["name"].startswith("soak-")]
    if len(mine) < 101:
        return [("fleet statuses", f"{len(mine)} of 101 objects have one")]
    behind = []
    for i in mine:
        s, rev = i["summary"], i["object"]["revision"]
        if s["expected"] == 0 or s["reporting"] < s["expected"] or s.get("observedRevision") != rev:
            behind.append((i["metadata"]["name"],
                           f"{s['reporting']}/{s['expected']} reporting, lowest revision {s.get('observedRevision')} of {rev}"))
    return behind


def slope(points):
    """Least-squares slope (per minute) of (seconds, value) points."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return 0.0, my
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx * 60.0, my


def slopes(samples, nodes, end, window):
    """Per kind and metric: each process's slope over the window since its last start."""
    out = {}
    since = end - window * 60
    for node in nodes:
        rows = [r for r in samples if r[1] == node.name and r[0] >= max(since, node.last_start)]
        if len(rows) < 8 or rows[-1][0] - rows[0][0] < min(300, window * 60 / 2):
            continue
        for k, label in ((3, "rss_kib"), (6, "rss_anon"), (7, "rss_file"), (8, "store"), (4, "fds"), (5, "tasks")):
            pts = [(r[0], r[k]) for r in rows if r[k] is not None]
            if len(pts) < 8:
                continue
            s, mean = slope(pts)
            whole = node.last_start <= since
            out.setdefault((node.kind, label), []).append((node.name, s, mean, whole))
    return out


def log_lines(logs):
    groups = {}
    for f in sorted(os.listdir(logs)):
        for line in open(os.path.join(logs, f), errors="replace"):
            m = re.search(r"\b(ERROR|WARN)\b\s+(.*)", line)
            if not m:
                continue
            text = re.sub(r"\x1b\[[0-9;]*m", "", m.group(2))
            text = re.sub(r"[0-9a-f]{8,}|\d+(\.\d+)?", "N", text)[:220]
            key = (m.group(1), text)
            groups[key] = groups.get(key, 0) + 1
    return sorted(groups.items(), key=lambda kv: -kv[1])


def write_means(rows, means_csv):
    with open(means_csv, "w") as f:
        # One block per kind (root, relay, agent), two blank lines apart: gnuplot's
        # `index`.
        by = {}
        for r in rows:
            by.setdefault((r[2], round(r[0] / SAMPLE_EVERY)), []).append(r)
        for kind in KINDS:
            f.write(f"# {kind}: seconds,rss_kib,fds,tasks (means over the kind's processes)\n")
            for (k, slot), rs in sorted(by.items()):
                if k != kind:
                    continue
                tasks = [r[5] for r in rs if r[5] is not None]
                f.write(f"{slot * SAMPLE_EVERY},{sum(r[3] for r in rs) / len(rs):.1f},"
                        f"{sum(r[4] for r in rs) / len(rs):.2f},{(sum(tasks) / len(tasks)) if tasks else 'NaN'}\n")
            f.write("\n\n")


def plot(out, means_csv):
    if shutil.which("gnuplot") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "gnuplot-nox"], check=False,
                       stdout=subprocess.DEVNULL, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if shutil.which("gnuplot") is None:
        print("gnuplot is missing and could not be installed: no plot", flush=True)
        return
    png = os.path.join(out, "soak.png")
    script = f"""set terminal pngcairo size 1200,900 font ',10'
set output '{png}'
set datafile separator ','
set key top left
set offsets graph 0, graph 0, graph 0.1, graph 0.1
set multiplot layout 3,1 title 'Soak: mean per process of each kind'
set xlabel 'minutes'
set ylabel 'RSS MiB'
plot for [i=0:2] '{means_csv}' index i using ($1/60):($2/1024) with lines title word('root relay agent', i+1)
set ylabel 'open files'
plot for [i=0:2] '{means_csv}' index i using ($1/60):3 with lines title word('root relay agent', i+1)
set ylabel 'tokio tasks'
plot for [i=0:2] '{means_csv}' index i using ($1/60):4 with lines title word('root relay agent', i+1)
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=False)
    print(f"plot: {png}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir")
    ap.add_argument("--leaves", type=int, default=1000)
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--window", type=int, default=20, help="minutes at the end the slopes are taken over")
    ap.add_argument("--out", default=None, help="where the CSVs and the plot go (default: a new temporary directory)")
    ap.add_argument("--seed", type=int, default=49)
    ap.add_argument("--agents-away", type=int, default=5, metavar="PERCENT",
                    help="the share of agents stopped each minute and started again (default 5; 0: none)")
    ap.add_argument("--minute", type=float, default=60.0,
                    help="seconds between two rounds of churn (default 60; shorter to find a leak quickly, "
                         "with the agents away for a third of it at most)")
    a = ap.parse_args()
    bins = {b: os.path.join(os.path.abspath(a.bin_dir), b) for b in ("relay", "agent")}
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="strata-soak-")
    out = a.out or work
    os.makedirs(out, exist_ok=True)
    topo = os.path.join(work, "soak.yaml")
    open(topo, "w").write(topology(a.leaves))
    hier = os.path.join(work, "h")
    for verb in ("certs", "render"):
        subprocess.run([bins["relay"], "topology", verb, topo, "--out", hier], check=True,
                       stdout=subprocess.DEVNULL)
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    nodes = []
    for name in sorted(os.listdir(os.path.join(hier, "nodes"))):
        config = os.path.join(hier, "nodes", name, "config.yaml")
        kind = "root" if name == "center" else ("agent" if name.count("-") == 2 else "relay")
        nodes.append(Node(name, kind, config))
    nodes.sort(key=lambda n: KINDS.index(n.kind))
    relays = [n for n in nodes if n.kind == "relay"]
    agents = [n for n in nodes if n.kind == "agent"]
    token = next(l.split()[0] for l in open(os.path.join(hier, "api.tokens")) if l.strip() and not l.startswith("#"))
    api = re.search(r"listen:\s*\"?([0-9.]+:[0-9]+)", open(nodes[0].config).read().split("api:", 1)[1]).group(1)
    env = dict(os.environ, STRATA_SERVER=api, STRATA_SERVER_NAME="center", STRATA_TOKEN=token,
               STRATA_CA=os.path.join(hier, "ca.crt"))
    away_for = min(AWAY_SECONDS, a.minute / 3)
    print(f"soak: {len(relays) + 1} relays and {len(agents)} agents in {work}; {a.minutes} minutes", flush=True)
    t_zero = time.monotonic()
    stop_on_sigterm()
    for n in nodes:
        n.start(bins, logs)
    samples, stop_sampling = [], threading.Event()
    lock = threading.Lock()

    def sampler():
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            while not stop_sampling.is_set():
                t = time.monotonic() - t_zero
                for node, got in zip(nodes, pool.map(Node.sample, nodes)):
                    if got is not None:
                        with lock:
                            samples.append((t, node.name, node.kind) + got)
                stop_sampling.wait(SAMPLE_EVERY)

    threading.Thread(target=sampler, daemon=True).start()
    try:
        for _ in range(120):
            try:
                relay_cli(bins, env, ["clusters"])
                break
            except RuntimeError:
                time.sleep(1)
        for minute in range(a.minutes):
            t0 = time.monotonic()
            relay_cli(bins, env, ["apply", "-f", "-"], stdin=manifests(minute, minute == 0))
            relay = relays[minute % len(relays)]
            relay.stop()
            relay.start(bins, logs)
            relay.last_start = time.monotonic() - t_zero
            away = rng.sample(agents, max(1, len(agents) * a.agents_away // 100)) if a.agents_away else []
            for n in away:
                n.stop()
            time.sleep(away_for)
            try:
                behind = len(unconverged(bins, env))
            except RuntimeError:
                behind = "?"
            for n in away:
                n.start(bins, logs)
                n.last_start = time.monotonic() - t_zero
            print(f"minute {minute + 1}: applied 101 objects, restarted {relay.name}, {len(away)} agents away for {away_for:g} s (then {behind} of 101 objects not yet everywhere); load {os.getloadavg()[0]:.2f}", flush=True)
            time.sleep(max(0.0, a.minute - (time.monotonic() - t0)))
        end = time.monotonic() - t_zero
        behind = []
        for _ in range(60):
            try:
                behind = unconverged(bins, env)
            except RuntimeError as e:
                behind = [("root", str(e))]
            if not behind:
                break
            time.sleep(5)
        stop_sampling.set()
        converged = time.monotonic() - t_zero - end
        with lock:
            rows = list(samples)
        with open(os.path.join(out, "soak.csv"), "w") as f:
            f.write("seconds,node,kind,rss_kib,fds,tasks,rss_anon_kib,rss_file_kib,store_kib\n")
            for r in rows:
                f.write(",".join("" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v)) for v in r) + "\n")
        means_csv = os.path.join(out, "soak-means.csv")
        write_means(rows, means_csv)
        print(f"\n## Soak: {a.minutes} minutes, {len(relays) + 1} relays, {len(agents)} agents, {len(rows)} samples")
        if behind:
            print(f"NOT converged {converged:.0f} s after the last minute: " + "; ".join(f"{n}: {w}" for n, w in behind[:5]))
        else:
            print(f"converged: every cluster holds the latest revision of all 101 objects, {converged:.0f} s after the last minute")
        print(f"\n## Slopes over the last {a.window} minutes (per process, since its last start)")
        for (kind, metric), per in sorted(slopes(rows, nodes, end, a.window).items()):
            drift = sorted(abs(s) * a.window / m * 100 if m else 0.0 for _, s, m, _ in per)
            per.sort(key=lambda p: abs(p[1]))
            worst = per[-1]
            print(f"{kind:6} {metric:8} n={len(per):5}  slope/min median {sorted(p[1] for p in per)[len(per) // 2]:+.3f}, "
                  f"largest {worst[1]:+.3f} ({worst[0]}, mean {worst[2]:.1f});  drift over the window median {drift[len(drift) // 2]:.2f} %, largest {drift[-1]:.2f} %")
            # A process started within the window is measured from its start, its
            # warm-up included: those up all along show what a long run does.
            whole = sorted(p[1] for p in per if p[3])
            if whole and len(whole) < len(per):
                print(f"{'':6} {'':8} n={len(whole):5}  up the whole window: slope/min median {whole[len(whole) // 2]:+.3f}, largest {max(whole, key=abs):+.3f}")
        print("\n## Logged ERROR and WARN lines, by message (numbers as N)")
        for (level, text), count in log_lines(logs)[:40]:
            print(f"{count:7}  {level:5} {text}")
        plot(out, means_csv)
        print(f"samples: {os.path.join(out, 'soak.csv')}")
        return 1 if behind else 0
    finally:
        stop_sampling.set()
        for n in reversed(nodes):
            n.stop()


if __name__ == "__main__":
    sys.exit(main())
