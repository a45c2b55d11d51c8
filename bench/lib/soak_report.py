"""Report of the soak benchmark (bench/soak.sh): markdown and a PNG of four goals over time.

Reads the load generator's requests (`soak_load.py`), the sampler's seconds (`soak_sample.py`)
and the simulator's attempt log (one JSON line per upstream attempt), and judges the goals:

- every request answered (a whole answer) or degraded (rein's degraded reply) inside the
  route's deadline, latency counted from the request's due time to its last byte;
- upstream attempts <= 1.2 x requests + the retry budget's floor (min_retries_per_s x seconds,
  per provider);
- rein's RSS and open file descriptors flat: a least-squares line through the per-minute
  medians after the first two minutes (warm-up) may not climb more than 5 % of the mean over
  the run (fds: 5 % or 10 descriptors, whichever is more).

    python soak_report.py --dir TMP --md OUT.md --png OUT.png --deadline-ms 10000 \
        --ratio 0.2 --min-retries 1 --providers 2 --primary-model M --machine ... --rein ...
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections import Counter, defaultdict

WINDOW = 10  # seconds per point of the latency, share and attempts series


def read_jsonl(path: str) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by the stop
    return out


def quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    values = sorted(values)
    pos = q * (len(values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (0 with fewer than two)."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in points) / den


def pct(n: float, d: float) -> str:
    return "n/a" if d == 0 else f"{100.0 * n / d:.3f} %"


def ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:.0f}"


def span(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes" if seconds >= 300 else f"{seconds:.0f} s"


def mark(ok: bool) -> str:
    return "**pass**" if ok else "**MISS**"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, help="the run's temp dir")
    p.add_argument("--md", required=True)
    p.add_argument("--png", required=True)
    p.add_argument("--deadline-ms", type=float, required=True)
    p.add_argument("--ratio", type=float, required=True)
    p.add_argument("--min-retries", type=float, required=True)
    p.add_argument("--providers", type=int, required=True)
    p.add_argument("--primary-model", required=True)
    p.add_argument("--machine", default="")
    p.add_argument("--rein", default="")
    p.add_argument("--settings", default="", help="markdown lines describing the run")
    args = p.parse_args()

    meta = json.load(open(os.path.join(args.dir, "meta.json"), encoding="utf-8"))
    reqs = read_jsonl(os.path.join(args.dir, "requests.jsonl"))
    samples = read_jsonl(os.path.join(args.dir, "samples.jsonl"))
    attempts = read_jsonl(os.path.join(args.dir, "attempts.jsonl"))
    start = meta["start_unix"]
    duration = meta["duration"]
    deadline = args.deadline_ms / 1000.0
    minutes = max(1, math.ceil(duration / 60))
    windows = max(1, math.ceil(duration / WINDOW))

    for r in reqs:
        good = r.get("result") in ("answered", "degraded")
        r["ok"] = good and r["latency"] <= deadline
        r["late"] = good and r["latency"] > deadline
    total = len(reqs)
    ok = sum(r["ok"] for r in reqs)
    answered = sum(r.get("result") == "answered" for r in reqs)
    degraded = sum(r.get("result") == "degraded" for r in reqs)
    failed = sum(r.get("result") == "failed" for r in reqs)
    late = sum(r["late"] for r in reqs)
    missing = meta["requests"] - total
    lat = [r["latency"] for r in reqs]
    lags = [r["lag"] for r in reqs]

    # attempts: by the time the simulator received them, relative to the load's start
    for a in attempts:
        a["t"] = a.get("unix_ms", 0) / 1000.0 - start
    primary = [a for a in attempts if a.get("model") == args.primary_model]
    others = [a for a in attempts if a.get("model") != args.primary_model]
    floor = args.min_retries * duration * args.providers
    bound = 1.2 * meta["requests"] + floor
    bound_one = 1.2 * meta["requests"] + args.min_retries * duration

    # windows
    by_w = defaultdict(list)
    by_m = defaultdict(list)
    for r in reqs:
        by_w[min(int(r["due"] // WINDOW), windows - 1)].append(r)
        by_m[min(int(r["due"] // 60), minutes - 1)].append(r)
    att_w = Counter(min(max(int(a["t"] // WINDOW), 0), windows - 1) for a in attempts)
    att_pw = Counter(min(max(int(a["t"] // WINDOW), 0), windows - 1) for a in primary)
    att_m = Counter(min(max(int(a["t"] // 60), 0), minutes - 1) for a in attempts)
    samp_m = defaultdict(list)
    for s in samples:
        s["tl"] = s["unix"] - start
        if 0 <= s["tl"] < duration:
            samp_m[int(s["tl"] // 60)].append(s)

    # resources: per-minute medians after a two-minute warm-up
    def series(key: str) -> list[tuple[float, float]]:
        pts = []
        for m in sorted(samp_m):
            vals = [s[key] for s in samp_m[m] if s.get(key) is not None]
            if vals and (m >= 2 or minutes <= 3):
                pts.append((m + 0.5, statistics.median(vals)))
        return pts

    def trend(key: str, scale: float, min_abs: float) -> dict:
        pts = series(key)
        vals = [y for _, y in pts]
        mean = statistics.fmean(vals) if vals else math.nan
        per_min = slope(pts)
        climb = per_min * (duration / 60.0)
        limit = max(0.05 * mean, min_abs)
        within = [s[key] for s in samples if 0 <= s["tl"] < duration and s.get(key) is not None]

        def at(frac: float) -> float:
            if not within:
                return math.nan
            i = min(int(frac * len(within)), len(within) - 1)
            window = within[max(0, i - 30) : i + 30]
            return statistics.median(window) / scale

        steps = [b - a for (_, a), (_, b) in zip(pts, pts[1:])]
        return {
            "median_step": (statistics.median(steps) / scale) if steps else math.nan,
            "start": at(0.0 if minutes <= 3 else 2 / minutes),
            "middle": at(0.5),
            "end": at(1.0),
            "max": (max(within) / scale) if within else math.nan,
            "per_min": per_min / scale,
            "climb": climb / scale,
            "limit": limit / scale,
            "flat": climb <= limit if pts else False,
        }

    tick = os.sysconf("SC_CLK_TCK")
    run = [s for s in samples if 0 <= s["tl"] < duration and s.get("cpu_ticks") is not None]

    def cpu(ss: list[dict]) -> tuple[float, float]:
        """rein's CPU (% of one core) and the machine's busy share (% of all cores) over ss."""
        if len(ss) < 2 or ss[-1]["unix"] <= ss[0]["unix"]:
            return math.nan, math.nan
        seconds = ss[-1]["unix"] - ss[0]["unix"]
        rein_pct = 100.0 * (ss[-1]["cpu_ticks"] - ss[0]["cpu_ticks"]) / tick / seconds
        total = ss[-1]["machine_ticks"] - ss[0]["machine_ticks"]
        busy = ss[-1]["machine_busy_ticks"] - ss[0]["machine_busy_ticks"]
        return rein_pct, (100.0 * busy / total if total else math.nan)

    # the primary's breaker: each run of sampled seconds it was open
    streaks, current = [], 0
    for smp in samples:
        if (smp.get("breaker") or {}).get("primary") == 2:
            current += 1
        elif current:
            streaks.append(current)
            current = 0
    if current:
        streaks.append(current)

    # Descriptors that follow neither the load's connections nor rein's pool to the simulator
    # (both grow to the most requests ever in flight at once; samples of older runs have no
    # count of the pool).
    for smp in samples:
        if smp.get("connections") is not None:
            smp["own_fds"] = smp["fds"] - smp["connections"] - (smp.get("upstream_connections") or 0)
    rss = trend("rss_kib", 1024.0, 0.0)
    # Samples of older runs have no split.
    anon = trend("rss_anon_kib", 1024.0, 0.0) if series("rss_anon_kib") else None
    file_backed = trend("rss_file_kib", 1024.0, 0.0) if series("rss_file_kib") else None
    fds = trend("fds", 1.0, 10.0)
    own = trend("own_fds", 1.0, 10.0)
    conns = trend("connections", 1.0, 10.0)
    upstream = trend("upstream_connections", 1.0, 10.0) if series("upstream_connections") else None
    before = [smp for smp in samples if smp["tl"] < 0]
    after = [smp for smp in samples if smp["tl"] >= duration]

    minute_rows = []
    for m in range(minutes):
        rs = by_m.get(m, [])
        n = len(rs)
        lm = [r["latency"] for r in rs]
        ss = samp_m.get(m, [])
        br = [s["breaker"].get("primary") for s in ss if s.get("breaker")]
        open_share = sum(1 for b in br if b == 2) / len(br) if br else math.nan
        minute_rows.append(
            {
                "m": m,
                "n": n,
                "ok": sum(r["ok"] for r in rs),
                "ans": sum(r.get("result") == "answered" for r in rs),
                "deg": sum(r.get("result") == "degraded" for r in rs),
                "fail": sum(r.get("result") == "failed" for r in rs),
                "late": sum(r["late"] for r in rs),
                "p50": quantile(lm, 0.5),
                "p99": quantile(lm, 0.99),
                "att": att_m.get(m, 0),
                "rss": statistics.median([s["rss_kib"] for s in ss]) / 1024 if ss else math.nan,
                "fds": statistics.median([s["fds"] for s in ss]) if ss else math.nan,
                "open": open_share,
                "cpu": cpu([x for x in ss if x.get("cpu_ticks") is not None]),
            }
        )
    worst = min(minute_rows, key=lambda r: (r["ok"] / r["n"]) if r["n"] else 1.0)

    details = Counter(r.get("detail") or "late" for r in reqs if not r["ok"])
    outcomes = Counter(r.get("outcome") for r in reqs)
    faults = Counter(a.get("fault") for a in primary)
    statuses_p = Counter(a.get("status") for a in primary)
    tiers = Counter(r.get("tier") for r in reqs if r.get("result") == "answered")
    att_hdr = Counter(r.get("attempts") for r in reqs)

    share_ok = ok / meta["requests"] if meta["requests"] else 0.0
    goal_share = ok == meta["requests"]
    goal_att = len(attempts) <= bound
    L = []
    w = L.append
    w(f"# Brownout soak: {span(duration)} at {meta['rate']:.0f} req/s")
    w("")
    if args.machine:
        w(f"Machine: {args.machine}. rein: {args.rein}.")
        w("")
    w(args.settings)
    w("")
    w("## Goals")
    w("")
    w("| goal | measured | target | |")
    w("|---|---|---|---|")
    w(
        f"| answered or degraded inside the {args.deadline_ms / 1000:.0f} s deadline | "
        f"{pct(ok, meta['requests'])} ({ok} of {meta['requests']}); worst minute "
        f"{worst['m'] + 1}: {pct(worst['ok'], worst['n'])} | 100 % | {mark(goal_share)} |"
    )
    w(
        f"| upstream attempts | {len(attempts)} = {len(attempts) / max(1, meta['requests']):.3f} "
        f"per request | <= 1.2 x {meta['requests']} + floor {floor:.0f} = {bound:.0f} | "
        f"{mark(goal_att)} |"
    )
    w(
        f"| rein RSS flat | {rss['start']:.1f} -> {rss['middle']:.1f} -> {rss['end']:.1f} MiB "
        f"(start/middle/end), trend {rss['climb']:+.2f} MiB over the run | climbs "
        f"<= {rss['limit']:.1f} MiB | {mark(rss['flat'])} |"
    )
    w(
        f"| rein open fds flat | {fds['start']:.0f} -> {fds['middle']:.0f} -> {fds['end']:.0f}, "
        f"trend {fds['climb']:+.1f} over the run | climbs <= {fds['limit']:.0f} | "
        f"{mark(fds['flat'])} |"
    )
    w("")
    w(
        f"The floor is the retry budget's `min_retries_per_s` ({args.min_retries:g}) x "
        f"{duration:.0f} s for each of the {args.providers} providers (each has its own budget); "
        f"with one provider's floor the bound is {bound_one:.0f}. Start, middle and end are "
        "one-minute medians (start after the two-minute warm-up); the trend is the "
        "least-squares line through the per-minute medians after the warm-up, times the run's length."
    )
    w("")
    pool = (
        f"; its connections to the simulator (its client's pool, which grows the same way) "
        f"{upstream['start']:.0f} -> {upstream['middle']:.0f} -> {upstream['end']:.0f}"
        if upstream
        else ""
    )
    w(
        "What the trends are made of: the client connections rein held (the generator's pool, "
        "which grows to the most requests ever in flight at once and then keeps them alive) went "
        f"{conns['start']:.0f} -> {conns['middle']:.0f} -> {conns['end']:.0f}{pool}; rein's descriptors "
        f"besides {'these' if upstream else 'them'} {own['start']:.0f} -> {own['middle']:.0f} -> {own['end']:.0f} (trend "
        f"{own['climb']:+.1f}, {'flat' if own['flat'] else 'NOT flat'} by the same rule). The "
        f"median minute-to-minute change of the RSS was {rss['median_step']:+.2f} MiB and of the "
        f"fds {fds['median_step']:+.1f}: a steady leak would make most minutes climb, steps "
        "after a burst of concurrency do not."
    )
    w("")
    if anon and file_backed:
        w(
            f"Of the RSS, anonymous memory (the heap) went {anon['start']:.1f} -> "
            f"{anon['middle']:.1f} -> {anon['end']:.1f} MiB (trend {anon['climb']:+.2f}, "
            f"{'flat' if anon['flat'] else 'NOT flat'} by the same rule) and file-backed pages "
            f"(the binary's code as its paths run) {file_backed['start']:.1f} -> "
            f"{file_backed['middle']:.1f} -> {file_backed['end']:.1f} MiB (trend "
            f"{file_backed['climb']:+.2f})."
        )
        w("")
    if before and after:
        w(
            f"Before the load rein held {before[-1]['rss_kib'] / 1024:.1f} MiB and "
            f"{before[-1]['fds']} fds; {after[-1]['tl'] - duration:.0f} s after it, with the "
            f"client's connections closed, {after[-1]['rss_kib'] / 1024:.1f} MiB and "
            f"{after[-1]['fds']} fds (peak during the run {rss['max']:.1f} MiB, {fds['max']:.0f} fds)."
        )
    w("")
    w("## Requests")
    w("")
    w("| | count | share |")
    w("|---|--:|--:|")
    w(f"| issued | {meta['requests']} | |")
    w(f"| answered (a whole model answer) | {answered} | {pct(answered, total)} |")
    w(f"| degraded (rein's degraded reply) | {degraded} | {pct(degraded, total)} |")
    w(f"| failed (error, cut, unterminated, timeout) | {failed} | {pct(failed, total)} |")
    w(f"| answered or degraded, but after the deadline | {late} | {pct(late, total)} |")
    if missing:
        w(f"| never recorded (the generator stopped first) | {missing} | |")
    w("")
    w(
        "Answers by tier: "
        + ", ".join(f"{k or '-'} {v}" for k, v in tiers.most_common())
        + ". rein's outcomes: "
        + ", ".join(f"{k or '-'} {v}" for k, v in outcomes.most_common())
        + ". rein's attempts per request (`rein.attempts`): "
        + ", ".join(f"{k}: {v}" for k, v in sorted(att_hdr.items(), key=lambda kv: str(kv[0])))
        + "."
    )
    w("")
    if details:
        w("Not answered-or-degraded in time: " + ", ".join(f"{k} {v}" for k, v in details.most_common()) + ".")
        w("")
    w(
        f"Latency (due time to last byte): p50 {ms(quantile(lat, 0.5))} ms, p90 "
        f"{ms(quantile(lat, 0.9))} ms, p99 {ms(quantile(lat, 0.99))} ms, p99.9 "
        f"{ms(quantile(lat, 0.999))} ms, max {ms(max(lat) if lat else math.nan)} ms. "
        + "By result: "
        + "; ".join(
            f"{kind} p50 {ms(quantile(v, 0.5))} / p99 {ms(quantile(v, 0.99))} ms"
            for kind in ("answered", "degraded")
            if (v := [r["latency"] for r in reqs if r.get("result") == kind])
        )
        + "; streaming p99 "
        + ms(quantile([r["latency"] for r in reqs if r["stream"]], 0.99))
        + " ms, plain p99 "
        + ms(quantile([r["latency"] for r in reqs if not r["stream"]], 0.99))
        + " ms."
    )
    w("")
    w(
        f"Load generator lag (send start after the due time): p50 {ms(quantile(lags, 0.5))} ms, "
        f"p99 {ms(quantile(lags, 0.99))} ms, max {ms(max(lags) if lags else math.nan)} ms "
        "(counted in the latency above)."
    )
    w("")
    w("## Upstream attempts")
    w("")
    w(
        f"{len(attempts)} attempts reached the simulator: {len(primary)} on the primary "
        f"(`{args.primary_model}`), {len(others)} on the fallback. Primary attempts by the fault "
        "drawn: " + ", ".join(f"`{k}` {v}" for k, v in faults.most_common()) + "; by status: "
        + ", ".join(f"{k} {v}" for k, v in statuses_p.most_common())
        + "."
    )
    last = samples[-1] if samples else {}
    if last:
        w("")
        w(
            f"rein's counters at the end: {last.get('attempts', 0):.0f} attempts "
            f"(`rein_attempts_total`), {last.get('budget_exhausted', 0):.0f} retries refused by "
            "the retry budget (`rein_retry_budget_exhausted_total`)."
        )
        w("")
    n_req = max(1, meta["requests"])
    w(
        f"Per request: {len(primary) / n_req:.3f} attempts on the primary, "
        f"{len(others) / n_req:.3f} on the fallback. The retry budget is per provider and "
        "counts a tier's first attempt as a request, never as a retry, so it bounds each "
        "provider's attempts at 1.2 x the requests that reach it (+ its floor), not the sum "
        "over tiers: every call that steps down to the fallback adds one attempt outside it."
    )
    w("")
    br_all = [s["breaker"].get("primary") for s in samples if s.get("breaker")]
    if br_all:
        streak_txt = (
            f"{len(streaks)} times, for a median {statistics.median(streaks):.0f} s and at most "
            f"{max(streaks)} s each (1 s samples)"
            if streaks
            else "never"
        )
        w(
            f"The primary tier's breaker was open in {pct(sum(b == 2 for b in br_all), len(br_all))} "
            f"of the sampled seconds, half-open in {pct(sum(b == 1 for b in br_all), len(br_all))}; "
            f"it opened {streak_txt}."
        )
        w("")
    rein_cpu, busy_cpu = cpu(run)
    w(
        f"CPU over the run: rein {rein_cpu:.0f} % of one core; the whole machine "
        f"({os.cpu_count()} cores, the simulator, the generator and anything else running) "
        f"{busy_cpu:.0f} % busy."
    )
    w("")
    w("## Per minute")
    w("")
    w(
        "| min | requests | ok in time | answered | degraded | failed | late | p50 ms | p99 ms "
        "| attempts/req | primary breaker open | RSS MiB | fds | rein CPU | machine busy |"
    )
    w("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in minute_rows:
        open_txt = "n/a" if math.isnan(r["open"]) else f"{100 * r['open']:.0f} %"
        w(
            f"| {r['m'] + 1} | {r['n']} | {pct(r['ok'], r['n'])} | {r['ans']} | {r['deg']} | "
            f"{r['fail']} | {r['late']} | {ms(r['p50'])} | {ms(r['p99'])} | "
            f"{r['att'] / r['n'] if r['n'] else math.nan:.3f} | {open_txt} | {r['rss']:.1f} | "
            f"{r['fds']:.0f} | {r['cpu'][0]:.0f} % | {r['cpu'][1]:.0f} % |"
        )
    w("")
    w(f"![soak]({os.path.basename(args.png)})")
    w("")
    with open(args.md, "w", encoding="utf-8") as f:
        f.write("\n".join(L))
    sys.stdout.write("\n".join(L[: L.index("## Requests")]) + "\n")

    plot(args, reqs, samples, by_w, att_w, att_pw, windows, duration, deadline, start, bound / meta["requests"])
    return 0


def plot(args, reqs, samples, by_w, att_w, att_pw, windows, duration, deadline, start, bound_ratio):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale, unit = (60.0, "minutes") if duration >= 300 else (1.0, "seconds")
    xs, p50, p99, share, deg_share, att, att_p = [], [], [], [], [], [], []
    for k in range(windows):
        rs = by_w.get(k, [])
        if not rs:
            continue
        xs.append((k + 0.5) * WINDOW / scale)
        lm = [r["latency"] for r in rs]
        p50.append(quantile(lm, 0.5))
        p99.append(quantile(lm, 0.99))
        share.append(100.0 * sum(r["ok"] for r in rs) / len(rs))
        deg_share.append(100.0 * sum(r.get("result") == "degraded" for r in rs) / len(rs))
        att.append(att_w.get(k, 0) / len(rs))
        att_p.append(att_pw.get(k, 0) / len(rs))
    st = [(s["unix"] - start) / scale for s in samples]
    fig, axes = plt.subplots(3, 2, figsize=(14, 11), sharex=True)
    (a_lat, a_share), (a_att, a_br), (a_rss, a_fd) = axes

    a_lat.plot(xs, p50, label="p50", color="tab:blue")
    a_lat.plot(xs, p99, label="p99", color="tab:red")
    a_lat.axhline(deadline, color="black", ls="--", lw=1, label=f"deadline {deadline:.0f} s")
    a_lat.set_ylabel("latency, s (due to last byte)")
    a_lat.set_ylim(0, deadline * 1.15)
    a_lat.set_title(f"Latency per {WINDOW} s window")
    a_lat.legend(loc="upper right", fontsize=8)

    a_share.plot(xs, share, color="tab:green", label="answered or degraded in time")
    a_share.plot(xs, deg_share, color="tab:orange", label="of which degraded")
    a_share.set_ylim(-2, 102)
    a_share.set_ylabel("% of requests")
    a_share.set_title(f"Share OK per {WINDOW} s window (goal 100 %)")
    a_share.legend(loc="center right", fontsize=8)

    a_att.plot(xs, att, color="tab:purple", label="all attempts")
    a_att.plot(xs, att_p, color="tab:gray", label="primary attempts")
    a_att.axhline(bound_ratio, color="black", ls="--", lw=1, label=f"bound {bound_ratio:.2f}")
    a_att.set_ylabel("attempts / request")
    a_att.set_ylim(0, max([bound_ratio * 1.3] + att) * 1.05)
    a_att.set_title(f"Upstream attempts per request, {WINDOW} s windows")
    a_att.legend(loc="upper right", fontsize=8)

    tiers = sorted({t for s in samples for t in (s.get("breaker") or {})})
    for tier in tiers:
        a_br.step(st, [(s.get("breaker") or {}).get(tier, math.nan) for s in samples], where="post", label=tier)
    a_br.set_yticks([0, 1, 2], ["closed", "half-open", "open"])
    a_br.set_ylim(-0.2, 2.2)
    a_br.set_title("Tier breakers (rein /metrics)")
    a_br.legend(loc="center right", fontsize=8)

    a_rss.plot(st, [s["rss_kib"] / 1024 for s in samples], color="tab:brown", lw=0.8)
    a_rss.set_ylabel("MiB")
    a_rss.set_ylim(bottom=0)
    a_rss.set_title("rein RSS (VmRSS), every second")
    a_rss.set_xlabel(unit)

    a_fd.plot(st, [s["fds"] for s in samples], color="tab:cyan", lw=0.8, label="open fds")
    conns = [s.get("connections") for s in samples]
    if any(c is not None for c in conns):
        a_fd.plot(st, [math.nan if c is None else c for c in conns], color="tab:olive", lw=0.8, label="client connections")
    ups = [s.get("upstream_connections") for s in samples]
    if any(c is not None for c in ups):
        a_fd.plot(st, [math.nan if c is None else c for c in ups], color="tab:purple", lw=0.8, label="upstream connections")
    a_fd.set_ylim(bottom=0)
    a_fd.set_title("rein open file descriptors, every second")
    a_fd.set_xlabel(unit)
    a_fd.legend(loc="upper right", fontsize=8)

    for ax in axes.flat:
        ax.grid(alpha=0.3)
        ax.set_xlim(0, duration / scale)
    fig.suptitle(f"rein brownout soak: {span(duration)} at {len(reqs) / duration:.0f} req/s", fontsize=13)
    fig.tight_layout()
    fig.savefig(args.png, dpi=90)


if __name__ == "__main__":
    sys.exit(main())
