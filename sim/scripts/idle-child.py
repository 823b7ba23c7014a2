#!/usr/bin/env python3
"""The relay's end of an idle child, and an agent's whole RSS, each process apart
(issue 49: "measure each end apart").

    sim/scripts/idle-child.py BIN_DIR [--children 500] [--transport quic|tcp]

A root and one site relay, each its own process, and CHILDREN agents (simulated
clusters), each its own process, connect over loopback (`--transport`: how the agents
reach the site; QUIC by default). The site relay's RSS (VmRSS, and RssAnon: its heap)
is read once it runs with no child connected, and again once every child has been
connected and idle for 20 s: the difference over CHILDREN is the relay's end of one
idle child. The agents' VmRSS and RssAnon are read at the same time (median and
largest). The hierarchy is rendered by `relay topology certs|render` and run as
`relay serve` and `agent run`, as in production; BIN_DIR should be a production build.

`--heaptrack OUT` runs the site relay under heaptrack (its data in OUT.zst) and kills it
with SIGKILL once measured, so that every allocation it held then shows as leaked; two
runs with different CHILDREN, split by `heap-split.py`, give the heap of one idle child
by owner (quinn, rustls, ours). heaptrack's own bookkeeping inflates the RSS figures of
such a run.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak import Node, status_kib, stop_on_sigterm  # noqa: E402


def topology(children, transport):
    lines = ["apiVersion: strata.dev/v1alpha1", "kind: Topology", "metadata: { name: idle }", "spec:",
             "  root: { name: center, metrics: 127.0.0.1:0 }", "  relays:",
             "    - { name: site, parent: center, metrics: 127.0.0.1:0 }", "  clusters:"]
    for c in range(children):
        lines.append(f"    - {{ name: site-c{c}, parent: site, transport: {transport}, simulated: {{}} }}")
    return "\n".join(lines) + "\n"


def memory(pid):
    return status_kib(pid, "VmRSS", "RssAnon")


def connected_children(metrics):
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=3) as r:
        m = re.search(rb"^strata_children_connected(?:\{[^}]*\})? (\S+)", r.read(), re.M)
        return int(float(m.group(1))) if m else 0


def start_heaptracked(site, bins, logs, out):
    """Starts the site relay under heaptrack; returns the relay's own pid."""
    env = dict(os.environ, RUST_LOG="warn", NO_COLOR="1")
    with open(os.path.join(logs, site.name + ".log"), "a") as log:
        site.proc = subprocess.Popen(["heaptrack", "-o", out, bins["relay"], "serve", "--config", site.config],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env)
    for _ in range(100):
        time.sleep(0.1)
        found = subprocess.run(["pgrep", "-P", str(site.proc.pid), "-x", "relay"], capture_output=True, text=True)
        if found.stdout.split():
            time.sleep(8)
            return int(found.stdout.split()[0])
    raise SystemExit("the site relay did not start under heaptrack")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir")
    ap.add_argument("--children", type=int, default=500)
    ap.add_argument("--transport", choices=["quic", "tcp"], default="quic")
    ap.add_argument("--heaptrack", metavar="OUT", help="run the site relay under heaptrack, writing OUT.zst")
    a = ap.parse_args()
    bins = {b: os.path.join(os.path.abspath(a.bin_dir), b) for b in ("relay", "agent")}
    work = tempfile.mkdtemp(prefix="strata-idle-")
    topo = os.path.join(work, "idle.yaml")
    open(topo, "w").write(topology(a.children, a.transport))
    hier = os.path.join(work, "h")
    for verb in ("certs", "render"):
        subprocess.run([bins["relay"], "topology", verb, topo, "--out", hier], check=True, stdout=subprocess.DEVNULL)
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    node = lambda name, kind: Node(name, kind, os.path.join(hier, "nodes", name, "config.yaml"))
    root, site = node("center", "root"), node("site", "relay")
    agents = [node(f"site-c{c}", "agent") for c in range(a.children)]
    started = [root, site]
    site_pid = None
    stop_on_sigterm()
    try:
        root.start(bins, logs)
        if a.heaptrack:
            site_pid = start_heaptracked(site, bins, logs, a.heaptrack)
        else:
            site.start(bins, logs)
            time.sleep(5)
            site_pid = site.proc.pid
        before = memory(site_pid)
        for n in agents:
            n.start(bins, logs)
            started.append(n)
        for _ in range(300):
            if connected_children(site.metrics) == a.children:
                break
            time.sleep(1)
        up = connected_children(site.metrics)
        if up != a.children:
            print(f"only {up} of {a.children} children connected; logs in {logs}")
            return 1
        time.sleep(20)
        after = memory(site_pid)
        agent_mem = [memory(n.proc.pid) for n in agents]
        per_rss = (after[0] - before[0]) / a.children
        per_anon = (after[1] - before[1]) / a.children
        print(f"# The relay's end of an idle child, {a.transport}, {a.children} children (load {os.getloadavg()[0]:.2f})")
        print(f"site relay VmRSS {before[0]} KiB with no child, {after[0]} KiB with {a.children} idle: {per_rss:.1f} KiB per child")
        print(f"site relay RssAnon {before[1]} KiB with no child, {after[1]} KiB with {a.children} idle: {per_anon:.1f} KiB per child (heap)")
        rss = sorted(m[0] for m in agent_mem)
        anon = sorted(m[1] for m in agent_mem)
        print(f"agent VmRSS median {statistics.median(rss) / 1024:.1f} MiB, largest {rss[-1] / 1024:.1f} MiB; "
              f"RssAnon median {statistics.median(anon) / 1024:.1f} MiB, largest {anon[-1] / 1024:.1f} MiB")
        if a.heaptrack:
            os.kill(site_pid, signal.SIGKILL)
            site.proc.wait()
            site.proc = None
            print(f"heaptrack data of the site relay: {a.heaptrack}.zst")
        return 0
    finally:
        if a.heaptrack and site.proc is not None and site_pid is not None:
            os.kill(site_pid, signal.SIGTERM)
        for n in reversed(started):
            n.stop()


if __name__ == "__main__":
    sys.exit(main())
