#!/usr/bin/env python3
"""The heap one idle child holds at a relay, by owner (issue 49: "what quinn and rustls
hold is theirs; say how much it is").

    sim/scripts/heap-split.py FEW.zst N_FEW MANY.zst N_MANY [--min BYTES] [--peak]

FEW and MANY are `idle-child.py --heaptrack` runs of the same build with N_FEW and
N_MANY children. For every allocation stack, the bytes still held when the relay was
killed in MANY minus those in FEW, over N_MANY - N_FEW, is that stack's share of one
idle child. A stack belongs to rustls (or ring) if a rustls frame is the nearest to the
allocation among rustls, quinn and our crates; to quinn if a quinn frame is; to us
(`strata_*`, our store sled) otherwise, when one of ours is on it; "other" is what
has none of them (a task spawned by code that was inlined). The endpoints' and the
store's start-up allocations are left out: they do not grow with children, but their
sizes differ from run to run. Prints the totals per owner, then every stack group
above --min bytes per child (default 150).

With --peak the profiles are of simulator runs (`heaptrack target/release/sim run ...`
with N_FEW and N_MANY clusters): each stack's share of the heap at its peak, not what
was held at the end, start-up allocations included (in the simulator a QUIC endpoint is
made per host or per agent), and the owners finer: turmoil, the simulator (`sim`), the
agent, the relay, and "ours" for our other crates.
"""
import argparse
import collections
import re
import subprocess


def stacks(path, cost="leaked"):
    """heaptrack's leaked (or peak) bytes per collapsed stack."""
    out = subprocess.run(["heaptrack_print", "-f", path, "--print-leaks", "0", "--print-peaks", "0",
                          "--print-allocators", "0", "--print-temporary", "0", "--flamegraph-cost-type", cost,
                          "--print-flamegraph", "/dev/stdout"], capture_output=True, text=True, check=True).stdout
    held = collections.Counter()
    for line in out.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            held[stack] += int(n)
    return held


def short(frame):
    frame = re.sub(r"::h[0-9a-f]{16}$", "", frame)
    for a, b in (("$LT$", "<"), ("$GT$", ">"), ("$u20$", " "), ("..", "::"), ("$C$", ","), ("$RF$", "&"),
                 ("$u7b$", "{"), ("$u7d$", "}")):
        frame = frame.replace(a, b)
    return frame


STARTUP = re.compile(r"Endpoint::new|PageCache::start|sled::metrics|Db::start_inner")
ANY = re.compile(r"strata_|quinn|rustls|sled::|turmoil|tokio::sync|Cell<T,S>::new")


def owner(frames, fine=False):
    for f in reversed(frames):
        if fine and not re.search(r"rustls|\bring::|quinn", f):
            for who, pattern in (("turmoil", "turmoil"), ("sim", "strata_sim"), ("agent", "strata_agent"),
                                 ("relay", "strata_relay")):
                if pattern in f:
                    return who
        if re.search(r"rustls|\bring::", f):
            return "rustls"
        if "quinn" in f:
            return "quinn"
        if re.search(r"strata_|sled::", f):
            return "ours"
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("few")
    ap.add_argument("n_few", type=int)
    ap.add_argument("many")
    ap.add_argument("n_many", type=int)
    ap.add_argument("--min", type=float, default=150)
    ap.add_argument("--peak", action="store_true", help="simulator runs: the heap at its peak, finer owners")
    a = ap.parse_args()
    cost = "peak" if a.peak else "leaked"
    few, many = stacks(a.few, cost), stacks(a.many, cost)
    per_owner, per_group = collections.Counter(), collections.Counter()
    for stack in set(few) | set(many):
        frames = [short(f) for f in stack.split(";") if f]
        if not a.peak and any(STARTUP.search(f) for f in frames):
            continue
        share = (many[stack] - few[stack]) / (a.n_many - a.n_few)
        who = owner(frames, a.peak)
        per_owner[who] += share
        named = [f for f in frames if ANY.search(f)]
        per_group[(who, " <- ".join(reversed(named[-3:])))] += share
    print(f"heap per {'cluster' if a.peak else 'idle child'}: {sum(per_owner.values()):.0f} B")
    for who, b in per_owner.most_common():
        print(f"  {who:7s} {b:7.0f} B")
    print()
    for (who, group), b in sorted(per_group.items(), key=lambda kv: -kv[1]):
        if abs(b) >= a.min:
            print(f"{who:7s} {b:7.0f}  {group[:240]}")


if __name__ == "__main__":
    main()
