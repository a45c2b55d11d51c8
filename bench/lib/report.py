#!/usr/bin/env python3
"""Turns bench/run.sh's raw measurements (TSV: round section target conns key value) into the
markdown report: medians across rounds, "added" = path minus direct in the same round (then the
median of those differences), ratios against the bare nginx proxy, and pass/miss per target."""

import argparse
import statistics
from collections import defaultdict

# The targets (2-core machine, loopback).
ADDED_P50_MS = 0.06
ADDED_P99_MS = 0.5
MIN_RPS = 30_000
MAX_CPU_US = 40
MAX_IDLE_RSS_MIB = 30
STREAM_ADDED_MS = 0.2

NONSTREAM = [
    ("direct", "direct to the upstream"),
    ("nginx", "bare nginx proxy"),
    ("floor", "hyper proxy (rein's HTTP stack alone)"),
    ("rein", "rein serve (checked, JSON upstream)"),
    ("rein-sse", "rein serve (checked, SSE upstream)"),
    ("rein-obj", "rein serve (checked, JSON-object answer)"),
    ("rein-valid", "rein serve (the same, schema + two rules)"),
]
# Validation on costs at most this much of the row without it (req/s down, CPU up).
MAX_VALIDATION_RATIO = 1.15
STREAMING = [
    ("s-direct", "direct to the upstream"),
    ("s-nginx", "bare nginx proxy (unbuffered)"),
    ("s-floor", "hyper proxy (rein's HTTP stack alone)"),
    ("s-rein-pt", "rein serve (passthrough)"),
    ("s-rein-checked", "rein serve (checked)"),
]


def load(path):
    data = defaultdict(dict)  # (section, target, conns, key) -> {round: value}
    for line in open(path):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 6:
            continue
        rnd, section, target, conns, key, value = parts
        try:
            data[(section, target, conns, key)][int(rnd)] = float(value)
        except ValueError:
            pass
    return data


class Report:
    def __init__(self, data, conns):
        self.data = data
        self.conns = str(conns)

    def values(self, section, target, conns, key):
        return self.data.get((section, target, str(conns), key), {})

    def median(self, section, target, conns, key):
        values = list(self.values(section, target, conns, key).values())
        return statistics.median(values) if values else None

    def added(self, section, target, base, conns, key):
        """Median over rounds of (target - base) in the same round."""
        a = self.values(section, target, conns, key)
        b = self.values(section, base, conns, key)
        diffs = [a[r] - b[r] for r in a if r in b]
        return statistics.median(diffs) if diffs else None

    def spread(self, section, target, conns, key):
        values = list(self.values(section, target, conns, key).values())
        return (min(values), max(values)) if values else (None, None)


def ms(us, digits=3):
    return "—" if us is None else f"{us / 1000:.{digits}f}"


def signed_ms(us, digits=3):
    return "—" if us is None else f"{us / 1000:+.{digits}f}"


def num(value, fmt="{:,.0f}"):
    return "—" if value is None else fmt.format(value)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}×"


def verdict(ok):
    return "**pass**" if ok else "**MISS**"


def relative(w, r, section, direct, nginx, rows, c):
    """Ratios of each row to the bare nginx proxy and to the floor (hyper alone) in one table."""
    floor = "s-floor" if section == "stream" else "floor"
    w(
        "Relative to the bare nginx proxy, and to the floor (a proxy of hyper alone: what rein costs above it is "
        "rein's own work). 1.00× = as cheap; lower is better except req/s:"
    )
    w("")
    w(f"| path | added p50 @1 | req/s @{c} | CPU/req @{c} | req/s @{c} vs floor | CPU/req @{c} vs floor |")
    w("|---|--:|--:|--:|--:|--:|")
    for target, label in rows:
        w(
            "| {} | {} | {} | {} | {} | {} |".format(
                label,
                ratio(r.added(section, target, direct, 1, "p50_us"), r.added(section, nginx, direct, 1, "p50_us")),
                ratio(r.median(section, target, c, "rps"), r.median(section, nginx, c, "rps")),
                ratio(r.median(section, target, c, "cpu_us_per_req"), r.median(section, nginx, c, "cpu_us_per_req")),
                "—" if target == floor else ratio(r.median(section, target, c, "rps"), r.median(section, floor, c, "rps")),
                "—" if target == floor else ratio(
                    r.median(section, target, c, "cpu_us_per_req"), r.median(section, floor, c, "cpu_us_per_req")),
            )
        )
    w("")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--machine", default="?")
    ap.add_argument("--rein", default="?")
    ap.add_argument("--tools", default="?")
    ap.add_argument("--duration", default="?")
    ap.add_argument("--rounds", default="?")
    ap.add_argument("--conns", default="32")
    ap.add_argument("--probe-count", default="?")
    ap.add_argument("--sim-delay", default="20")
    ap.add_argument("--others", default="")
    args = ap.parse_args()
    r = Report(load(args.raw), args.conns)
    c = args.conns
    out = []
    w = out.append

    w("# rein loopback overhead benchmark")
    w("")
    w(f"- machine: {args.machine} — wrk, the upstream, the proxy under test and the tools share these cores")
    w(f"- rein: {args.rein}; {args.tools}")
    if args.others:
        note = (
            " — **the machine was busy with other work: absolute numbers are skewed, ratios less so**"
            if float(args.others) > 5
            else " (a quiet machine)"
        )
        w(f"- CPU taken by other processes during the rounds: {args.others}% of the machine{note}")
    w(
        f"- {args.rounds} interleaved rounds × {args.duration} s per wrk run; medians across rounds; "
        f"\"added\" = path − direct in the same round (median of the differences)"
    )
    w("- latency = wrk's request-to-last-byte time; 1 connection: `wrk -t1 -c1`; "
      f"throughput: `wrk -t2 -c{c}`; CPU/req = the proxy's utime+stime ÷ requests "
      "(direct: the upstream nginx's own CPU); ctx switches = voluntary + involuntary, all threads")
    w("")

    # --- non-streaming -----------------------------------------------------------------------
    w("## Non-streaming (fixed upstream: nginx `return 200` with a 505-byte chat.completion)")
    w("")
    w(f"| path | p50 @1 (ms) | p99 @1 (ms) | added p50 | added p99 | req/s @{c} | p99 @{c} (ms) | CPU µs/req @{c} | CPU µs/req @1 | ctx switches/req @{c} |")
    w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for target, label in NONSTREAM:
        base = target == "direct"
        w(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                label,
                ms(r.median("nonstream", target, 1, "p50_us")),
                ms(r.median("nonstream", target, 1, "p99_us")),
                "—" if base else signed_ms(r.added("nonstream", target, "direct", 1, "p50_us")),
                "—" if base else signed_ms(r.added("nonstream", target, "direct", 1, "p99_us")),
                num(r.median("nonstream", target, c, "rps")),
                ms(r.median("nonstream", target, c, "p99_us")),
                num(r.median("nonstream", target, c, "cpu_us_per_req"), "{:.1f}"),
                num(r.median("nonstream", target, 1, "cpu_us_per_req"), "{:.1f}"),
                num(r.median("nonstream", target, c, "ctxsw_per_req"), "{:.2f}"),
            )
        )
    w("")
    relative(w, r, "nonstream", "direct", "nginx", NONSTREAM[2:], c)
    validation(w, r, c)

    # --- memory ------------------------------------------------------------------------------
    w("## Memory (MiB)")
    w("")
    w("| process | idle RSS (after start) | RSS after the run | peak RSS (VmHWM) |")
    w("|---|--:|--:|--:|")
    for target, label in (("rein", "rein serve"), ("floor", "hyper proxy (floor)"), ("nginx", "nginx proxy (master + workers)"), ("direct", "upstream nginx (master + workers)")):
        def mib(key):
            v = r.median("mem", target, "-", key)
            return "—" if v is None else f"{v / 1024:.1f}"
        w(f"| {label} | {mib('idle_rss_kib')} | {mib('after_rss_kib')} | {mib('peak_rss_kib')} |")
    w("")

    # --- streaming ---------------------------------------------------------------------------
    events = r.median("probe", "s-direct", 1, "events")
    w(f"## Streaming (fixed upstream: the same answer as {num(events)} SSE events, 6.7 kB, sent at once)")
    w("")
    w(
        f"| path | last byte p50 @1 (ms) | p99 @1 | added last byte p50 | added p99 | first event p50 (ms) | added first event p50 | probe last byte p50 (ms) | req/s @{c} | p99 @{c} (ms) | CPU µs/req @{c} | ctx switches/req @{c} |"
    )
    w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for target, label in STREAMING:
        base = target == "s-direct"
        w(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                label,
                ms(r.median("stream", target, 1, "p50_us")),
                ms(r.median("stream", target, 1, "p99_us")),
                "—" if base else signed_ms(r.added("stream", target, "s-direct", 1, "p50_us")),
                "—" if base else signed_ms(r.added("stream", target, "s-direct", 1, "p99_us")),
                ms(r.median("probe", target, 1, "ttfb_p50_us")),
                "—" if base else signed_ms(r.added("probe", target, "s-direct", 1, "ttfb_p50_us")),
                ms(r.median("probe", target, 1, "ttlb_p50_us")),
                num(r.median("stream", target, c, "rps")),
                ms(r.median("stream", target, c, "p99_us")),
                num(r.median("stream", target, c, "cpu_us_per_req"), "{:.1f}"),
                num(r.median("stream", target, c, "ctxsw_per_req"), "{:.2f}"),
            )
        )
    w("")
    w(
        f"Last byte: wrk at 1 connection. First event: `lib/sse_probe.py` ({args.probe_count} requests per round on one "
        "keep-alive connection, raw sockets; time to the first `data:` line). With this upstream the whole "
        "stream arrives at once, so first event ≈ last byte; the behaviour check below separates them."
    )
    w("")
    relative(w, r, "stream", "s-direct", "s-nginx", STREAMING[2:], c)

    # --- behaviour ---------------------------------------------------------------------------
    delay = float(args.sim_delay)
    w(f"## Behaviour: first event with a slow stream (`rein sim`, `token_delay:ms={args.sim_delay}`)")
    w("")
    w("| path | first event p50 (ms) | last byte p50 (ms) | events |")
    w("|---|--:|--:|--:|")
    for target, label in (
        ("sim-direct", "direct to rein sim"),
        ("sim-rein-pt", "rein serve (passthrough)"),
        ("sim-rein-checked", "rein serve (checked)"),
    ):
        w(
            "| {} | {} | {} | {} |".format(
                label,
                ms(r.median("behaviour", target, 1, "ttfb_p50_us"), 2),
                ms(r.median("behaviour", target, 1, "ttlb_p50_us"), 2),
                num(r.median("behaviour", target, 1, "events")),
            )
        )
    w("")

    # --- targets -----------------------------------------------------------------------------
    w("## Targets")
    w("")
    w("| target | rein | bare nginx proxy | result |")
    w("|---|--:|--:|---|")
    rows = []
    a50 = r.added("nonstream", "rein", "direct", 1, "p50_us")
    n50 = r.added("nonstream", "nginx", "direct", 1, "p50_us")
    rows.append((f"added p50 ≤ {ADDED_P50_MS} ms @1 connection", f"{signed_ms(a50)} ms", f"{signed_ms(n50)} ms",
                 a50 is not None and a50 / 1000 <= ADDED_P50_MS))
    a99 = r.added("nonstream", "rein", "direct", 1, "p99_us")
    n99 = r.added("nonstream", "nginx", "direct", 1, "p99_us")
    rows.append((f"added p99 ≤ {ADDED_P99_MS} ms @1 connection", f"{signed_ms(a99)} ms", f"{signed_ms(n99)} ms",
                 a99 is not None and a99 / 1000 <= ADDED_P99_MS))
    rps = r.median("nonstream", "rein", c, "rps")
    nrps = r.median("nonstream", "nginx", c, "rps")
    rows.append((f"≥ {MIN_RPS:,} req/s @{c} connections", num(rps), num(nrps), rps is not None and rps >= MIN_RPS))
    cpu = r.median("nonstream", "rein", c, "cpu_us_per_req")
    ncpu = r.median("nonstream", "nginx", c, "cpu_us_per_req")
    rows.append((f"≤ {MAX_CPU_US} µs CPU per request", f"{num(cpu, '{:.1f}')} µs", f"{num(ncpu, '{:.1f}')} µs",
                 cpu is not None and cpu <= MAX_CPU_US))
    idle = r.median("mem", "rein", "-", "idle_rss_kib")
    nidle = r.median("mem", "nginx", "-", "idle_rss_kib")
    rows.append((f"RSS ≤ {MAX_IDLE_RSS_MIB} MiB idle", f"{num(idle and idle / 1024, '{:.1f}')} MiB",
                 f"{num(nidle and nidle / 1024, '{:.1f}')} MiB", idle is not None and idle / 1024 <= MAX_IDLE_RSS_MIB))
    s50 = r.added("stream", "s-rein-pt", "s-direct", 1, "p50_us")
    ns50 = r.added("stream", "s-nginx", "s-direct", 1, "p50_us")
    rows.append((f"streaming adds ≤ {STREAM_ADDED_MS} ms to the last byte (passthrough, p50)", f"{signed_ms(s50)} ms",
                 f"{signed_ms(ns50)} ms", s50 is not None and s50 / 1000 <= STREAM_ADDED_MS))
    sc50 = r.added("stream", "s-rein-checked", "s-direct", 1, "p50_us")
    rows.append((f"… the same, checked mode (p50)", f"{signed_ms(sc50)} ms", f"{signed_ms(ns50)} ms",
                 sc50 is not None and sc50 / 1000 <= STREAM_ADDED_MS))
    d_first = r.median("behaviour", "sim-direct", 1, "ttfb_p50_us")
    pt_first = r.median("behaviour", "sim-rein-pt", 1, "ttfb_p50_us")
    ck_first = r.median("behaviour", "sim-rein-checked", 1, "ttfb_p50_us")
    held = None if pt_first is None or d_first is None else pt_first - d_first
    ok = held is not None and held / 1000 < delay / 2
    rows.append((
        "passthrough never holds back the first event",
        f"first event {signed_ms(held, 2)} ms vs direct (checked: {ms(ck_first, 1)} ms)",
        "—",
        ok,
    ))
    for name, value, ref, good in rows:
        w(f"| {name} | {value} | {ref} | {verdict(good)} |")
    w("")
    sse = r.median("nonstream", "rein-sse", c, "rps")
    w(
        f"The target rows use rein's non-streaming path against the JSON upstream (the same bytes direct and nginx "
        f"get). rein asks every upstream for `stream: true`, so against a real provider it parses SSE even for a "
        f"non-streaming caller: that row (\"checked, SSE upstream\") does {num(sse)} req/s."
    )
    print("\n".join(out))


def validation(w, r, c):
    """Validation on (`rein-valid`: the schema and two rules) against the same answer with it
    off (`rein-obj`), per round then the median: req/s and CPU a request at `c` connections,
    p50 at one."""
    def ratio(key, conns, inverse=False):
        on, off = r.values("nonstream", "rein-valid", conns, key), r.values("nonstream", "rein-obj", conns, key)
        ratios = [(off[k] / on[k] if inverse else on[k] / off[k]) for k in on if k in off and off[k] and on[k]]
        return statistics.median(ratios) if ratios else None

    rows = [
        (f"req/s @{c} (without ÷ with)", ratio("rps", c, inverse=True)),
        (f"CPU µs/req @{c} (with ÷ without)", ratio("cpu_us_per_req", c)),
        ("p50 @1 (with ÷ without)", ratio("p50_us", 1)),
    ]
    w(f"### Validation: schema + two rules on, against the same answer with them off (target ≤ {MAX_VALIDATION_RATIO:.2f}×)")
    w("")
    w("| measure | ratio (median of the rounds) | result |")
    w("|---|--:|---|")
    for name, value in rows:
        w(f"| {name} | {num(value, '{:.3f}')} | {verdict(value is not None and value <= MAX_VALIDATION_RATIO)} |")
    w("")


if __name__ == "__main__":
    main()
