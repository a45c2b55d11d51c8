#!/usr/bin/env python3
"""Time to first event and to last byte of a streaming chat completion, over one keep-alive
connection, with raw sockets (no HTTP library between the clock and the wire).

    sse_probe.py HOST PORT PATH BODY_JSON COUNT [WARMUP]

Prints one line of JSON: {"n":..,"ttfb_p50_us":..,"ttfb_p99_us":..,"ttlb_p50_us":..,...}.
"First event" is the first `data:` line of the response body (the first SSE event the caller
can act on); "last byte" is the end of the body (content-length reached, or the last chunk of
a chunked body). The clock starts just before the request is written. Exits 1 on a non-200
answer or a broken connection.
"""

import json
import math
import socket
import sys
import time


class Probe:
    def __init__(self, host, port, path, body):
        self.host, self.port = host, port
        body = body.encode()
        self.request = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.sock = None
        self.buf = b""

    def connect(self):
        self.sock = socket.create_connection((self.host, self.port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def recv(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed mid-response")
        self.buf += data

    def one(self):
        """One request: (ttfb_ns, ttlb_ns, body)."""
        if self.sock is None:
            self.connect()
        t0 = time.perf_counter_ns()
        self.sock.sendall(self.request)
        while b"\r\n\r\n" not in self.buf:
            self.recv()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ")[1]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if status != "200":
            raise RuntimeError(f"status {status}: {head!r}")
        first = None
        body = b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                while b"\r\n" not in self.buf:
                    self.recv()
                size_line, rest = self.buf.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                while len(rest) < size + 2:
                    self.recv()
                    size_line, rest = self.buf.split(b"\r\n", 1)
                body += rest[:size]
                self.buf = rest[size + 2 :]
                if first is None and b"data:" in body:
                    first = time.perf_counter_ns()
                if size == 0:
                    break
        else:
            length = int(headers.get("content-length", "0"))
            while len(self.buf) < length:
                if first is None and b"data:" in self.buf:
                    first = time.perf_counter_ns()
                self.recv()
            body, self.buf = self.buf[:length], self.buf[length:]
            if first is None and b"data:" in body:
                first = time.perf_counter_ns()
        last = time.perf_counter_ns()
        if headers.get("connection", "").lower() == "close":
            self.sock.close()
            self.sock = None
        if first is None:
            raise RuntimeError(f"no SSE event in the body: {body[:200]!r}")
        return first - t0, last - t0, body


def percentile(values, p):
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def main():
    host, port, path, body, count = sys.argv[1:6]
    warmup = int(sys.argv[6]) if len(sys.argv) > 6 else 20
    probe = Probe(host, int(port), path, body)
    ttfb, ttlb = [], []
    events = 0
    for i in range(warmup + int(count)):
        first, last, body_bytes = probe.one()
        if i >= warmup:
            ttfb.append(first / 1000)
            ttlb.append(last / 1000)
            events = body_bytes.count(b"data:")
    out = {"n": len(ttfb), "events": events}
    for name, values in (("ttfb", ttfb), ("ttlb", ttlb)):
        out[f"{name}_p50_us"] = round(percentile(values, 50), 1)
        out[f"{name}_p99_us"] = round(percentile(values, 99), 1)
    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # noqa: BLE001 - one line for the calling script
        print(f"sse_probe: {error}", file=sys.stderr)
        sys.exit(1)
