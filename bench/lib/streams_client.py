#!/usr/bin/env python3
"""Open N slow SSE streams against one proxy within a ramp, hold them, read each to its end.

Used by bench/streams.sh. The streams are spread evenly over `--ramp` seconds and over
`--procs` client processes (forked; each raises its open-files limit to the hard limit and runs
its own asyncio loop on raw sockets), so the client is not the bottleneck. While they run, the
parent samples the resident memory (VmRSS, summed) of the proxy's processes (`--pids`) every
`--sample` seconds. Every stream is then judged: "whole" when it answered 200, ended with
`data: [DONE]` and its `delta.content` pieces join to exactly the reference text (`--expect`);
anything else is a failure, classified by where it happened (connect, status, cut, mismatch,
timeout). One JSON object goes to stdout:

  opened_s      seconds from the first to the last request written (the ramp achieved)
  late_opens    streams whose connect started > 0.5 s after their slot (client lag)
  first_end_s   seconds from the start to the first whole stream's end
  samples       [[t_s, rss_kib], ...] over the whole run
  whole, failed, failures {kind: count}, errors {message: count} (first few kinds)
  ttfb_p50_s / ttfb_max_s   time to the response head, over streams that got one

MODEL may be a comma-separated list: stream i asks for the (i mod len)-th.

Usage: streams_client.py HOST PORT MODEL N --expect FILE --pids "PID ..." [--ramp 5]
       [--procs 4] [--sample 0.25] [--timeout 120] [--message TEXT]
"""

import argparse
import asyncio
import json
import multiprocessing as mp
import queue
import resource
import statistics
import sys
import time
from collections import Counter


def build_request(host, port, model, message):
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": message}], "stream": True},
        separators=(",", ":"),
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def dechunk(body):
    """The payload of a chunked body, and whether its last chunk (size 0) arrived."""
    out, pos = bytearray(), 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return bytes(out), False
        try:
            size = int(body[pos:eol].split(b";")[0], 16)
        except ValueError:
            return bytes(out), False
        if size == 0:
            return bytes(out), True
        start = eol + 2
        if len(body) < start + size:
            out += body[start:]
            return bytes(out), False
        out += body[start : start + size]
        pos = start + size + 2


def judge(raw, expect):
    """'whole' or the kind of failure, from a response's raw bytes."""
    head_end = raw.find(b"\r\n\r\n")
    if head_end < 0:
        return "no_head" if raw else "no_response"
    head = raw[:head_end].decode("latin-1")
    lines = head.split("\r\n")
    parts = lines[0].split(" ")
    status = parts[1] if len(parts) > 1 else "?"
    if status != "200":
        return f"status_{status}"
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip().lower()
    body = raw[head_end + 4 :]
    if "chunked" in headers.get("transfer-encoding", ""):
        body, complete = dechunk(body)
        if not complete:
            return "cut"
    elif "content-length" in headers:
        if len(body) < int(headers["content-length"]):
            return "cut"
    text, done = [], False
    for line in body.decode("utf-8", "replace").split("\n"):
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if done:
            return "data_after_done"
        if data == "[DONE]":
            done = True
            continue
        try:
            event = json.loads(data)
        except ValueError:
            return "bad_json"
        if "error" in event:
            return "stream_error"
        for choice in event.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                text.append(piece)
    if not done:
        return "no_done"
    if "".join(text) != expect:
        return "mismatch"
    return "whole"


class Stream(asyncio.Protocol):
    """One request on one connection; resolves `done` with the raw response when it ends."""

    def __init__(self, request, done, started):
        self.request, self.done, self.started = request, done, started
        self.buf = bytearray()
        self.head_at = None
        self.framing = None  # "chunked", ("length", n) or "close"
        self.body_start = 0
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data):
        self.buf += data
        if self.framing is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head_at = time.monotonic()
            self.body_start = end + 4
            head = bytes(self.buf[:end]).lower()
            if b"transfer-encoding: chunked" in head:
                self.framing = "chunked"
            elif b"content-length:" in head:
                n = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
                self.framing = ("length", n)
            else:
                self.framing = "close"
        if self.framing == "chunked":
            if self.buf.endswith(b"\r\n0\r\n\r\n") or (
                len(self.buf) == self.body_start + 5 and self.buf.endswith(b"0\r\n\r\n")
            ):
                self.finish(None)
        elif self.framing != "close" and len(self.buf) - self.body_start >= self.framing[1]:
            self.finish(None)

    def eof_received(self):
        self.finish(None)

    def connection_lost(self, exc):
        self.finish(exc)

    def finish(self, exc):
        if not self.done.done():
            self.done.set_result((bytes(self.buf), self.head_at, exc))
        if self.transport is not None:
            self.transport.close()


async def run_worker(args, index, t0, events):
    loop = asyncio.get_running_loop()
    models = args.model.split(",")
    requests = [build_request(args.host, args.port, m, args.message) for m in models]
    expect = open(args.expect).read()
    slots = [i for i in range(args.n) if i % args.procs == index]
    step = args.ramp / args.n
    results = Counter()
    errors = Counter()
    ttfb = []
    late = 0
    first_end = [None]
    last_sent = [0.0]

    async def one(request):
        done = loop.create_future()
        started = time.monotonic()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: Stream(request, done, started), args.host, args.port),
                timeout=args.connect_timeout,
            )
        except (OSError, asyncio.TimeoutError) as error:
            kind = "connect_timeout" if isinstance(error, asyncio.TimeoutError) else "connect_error"
            results[kind] += 1
            errors[f"{kind}: {error}"] += 1
            return
        last_sent[0] = max(last_sent[0], time.monotonic())
        try:
            raw, head_at, exc = await asyncio.wait_for(done, timeout=args.timeout)
        except asyncio.TimeoutError:
            results["timeout"] += 1
            return
        now = time.monotonic()
        if head_at is not None:
            ttfb.append(head_at - started)
        verdict = judge(raw, expect)
        if verdict == "whole" and first_end[0] is None:
            first_end[0] = now
            events.put(("first_end", now))
        results[verdict] += 1
        if verdict != "whole" and exc is not None:
            errors[f"{verdict}: {exc}"] += 1

    tasks = []
    for slot in slots:
        at = t0 + slot * step
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.5:
            late += 1
        tasks.append(loop.create_task(one(requests[slot % len(requests)])))
    await asyncio.gather(*tasks)
    events.put(
        (
            "result",
            {
                "results": dict(results),
                "errors": dict(errors),
                "ttfb": ttfb,
                "late": late,
                "last_sent": last_sent[0],
                "first_end": first_end[0],
            },
        )
    )


def worker(args, index, t0, events):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        asyncio.run(run_worker(args, index, t0, events))
    except BaseException as error:  # report, never hang the parent
        events.put(("result", {"results": {"client_crash": 1}, "errors": {repr(error): 1},
                               "ttfb": [], "late": 0, "last_sent": 0.0, "first_end": None}))
        raise


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("model")
    p.add_argument("n", type=int)
    p.add_argument("--expect", required=True)
    p.add_argument("--pids", required=True)
    p.add_argument("--ramp", type=float, default=5.0)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--sample", type=float, default=0.25)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--connect-timeout", type=float, default=30.0)
    p.add_argument("--message", default="where is my order?")
    args = p.parse_args()
    pids = [int(x) for x in args.pids.split()]

    ctx = mp.get_context("fork")
    events = ctx.Queue()
    t0 = time.monotonic() + 0.5  # every worker starts from the same instant
    procs = [ctx.Process(target=worker, args=(args, i, t0, events)) for i in range(args.procs)]
    for proc in procs:
        proc.start()
    samples, parts, first_end = [], [], None
    while len(parts) < len(procs):
        samples.append([round(time.monotonic() - t0, 3), rss_kib(pids)])
        deadline = time.monotonic() + args.sample
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                kind, value = events.get(timeout=left)
            except queue.Empty:
                break
            if kind == "first_end":
                first_end = value if first_end is None else min(first_end, value)
            else:
                parts.append(value)
        if not any(proc.is_alive() for proc in procs) and events.empty() and len(parts) < len(procs):
            parts.append({"results": {"client_crash": 1}, "errors": {}, "ttfb": [], "late": 0,
                          "last_sent": 0.0, "first_end": None})
    for proc in procs:
        proc.join()

    results, errors, ttfb = Counter(), Counter(), []
    for part in parts:
        results.update(part["results"])
        errors.update(part["errors"])
        ttfb += part["ttfb"]
    last_sent = max(part["last_sent"] for part in parts)
    whole = results.pop("whole", 0)
    print(json.dumps({
        "n": args.n,
        "opened_s": round(last_sent - t0, 3) if last_sent else None,
        "late_opens": sum(part["late"] for part in parts),
        "first_end_s": round(first_end - t0, 3) if first_end else None,
        "samples": samples,
        "whole": whole,
        "failed": sum(results.values()),
        "failures": dict(results),
        "errors": dict(errors.most_common(8)),
        "ttfb_p50_s": round(statistics.median(ttfb), 4) if ttfb else None,
        "ttfb_max_s": round(max(ttfb), 4) if ttfb else None,
    }))


if __name__ == "__main__":
    sys.exit(main())
