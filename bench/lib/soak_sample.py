"""Per-second sampler of the soak benchmark (bench/soak.sh).

Once a second, until the process goes away or this one gets SIGTERM, appends one JSON line to
`--out` with the process's resident memory (`VmRSS` from /proc/PID/status, KiB; and of it
`RssAnon` and `RssFile`), its open file
descriptors (entries of /proc/PID/fd), its threads, its CPU time and the machine's (busy and
total clock ticks of all cores, to tell rein's share from other load), and from rein's
`/metrics` the breaker state of every tier (0 closed, 1 half-open, 2 open), the open client
connections, and the running totals of upstream attempts and of retries the retry budget
refused; with `--upstream-port`, also the TCP connections open to that port (rein's pool to the
simulator: nothing else connects to it), so that the report can tell the descriptors that follow
the load's concurrency from the rest.

    python soak_sample.py --pid PID --metrics http://127.0.0.1:PORT/metrics --out samples.jsonl \
        [--upstream-port SIM_PORT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import urllib.request

LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def status_field(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of the process, all threads, in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def connections_to(port: int) -> int | None:
    """Established TCP connections whose remote end is `port` on this host (/proc/net/tcp and
    tcp6: state 01, the remote address's port in hex)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                        count += 1
        except OSError:
            if table.endswith("tcp"):
                return None
    return count


def metrics(url: str) -> dict:
    """The few series the report plots, from the Prometheus text exposition."""
    out: dict = {"breaker": {}, "attempts": 0.0, "budget_exhausted": 0.0, "connections": None}
    try:
        with urllib.request.urlopen(url, timeout=0.8) as resp:
            text = resp.read().decode("utf-8", "replace")
    except OSError:
        return out
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), dict(LABEL.findall(m.group(2) or "")), m.group(3)
        try:
            number = float(value)
        except ValueError:
            continue
        if name == "rein_tier_breaker_state":
            out["breaker"][labels.get("tier", "?")] = number
        elif name == "rein_attempts_total":
            out["attempts"] += number
        elif name == "rein_retry_budget_exhausted_total":
            out["budget_exhausted"] += number
        elif name == "rein_connections_open":
            out["connections"] = number
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--metrics", required=True, help="rein's /metrics URL")
    p.add_argument("--out", required=True)
    p.add_argument("--every", type=float, default=1.0)
    p.add_argument("--upstream-port", type=int, help="count the connections open to this port")
    args = p.parse_args()
    running = True

    def stop(*_):
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    start = time.time()
    tick = time.monotonic()
    with open(args.out, "w", encoding="utf-8") as f:
        while running:
            rss = status_field(args.pid, "VmRSS")
            if rss is None:
                break  # the process is gone
            try:
                fds = len(os.listdir(f"/proc/{args.pid}/fd"))
            except OSError:
                break
            busy, ticks = machine_ticks()
            sample = {
                "t": round(time.time() - start, 3),
                "unix": round(time.time(), 3),
                "rss_kib": rss,
                # Of it: the heap and other anonymous memory, and file-backed pages (the
                # binary's code mapped in as paths run): a leak grows the first.
                "rss_anon_kib": status_field(args.pid, "RssAnon"),
                "rss_file_kib": status_field(args.pid, "RssFile"),
                "fds": fds,
                "threads": status_field(args.pid, "Threads"),
                "cpu_ticks": cpu_ticks(args.pid),
                "machine_busy_ticks": busy,
                "machine_ticks": ticks,
            }
            sample.update(metrics(args.metrics))
            if args.upstream_port:
                sample["upstream_connections"] = connections_to(args.upstream_port)
            f.write(json.dumps(sample, separators=(",", ":")) + "\n")
            f.flush()
            tick += args.every
            pause = tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
