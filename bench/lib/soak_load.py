"""Open-loop load generator of the soak benchmark (bench/soak.sh).

Issues OpenAI chat completions to rein's `/v1/chat/completions` on a fixed schedule: request i is
due at `i / rate` seconds after the start, and is sent then however many earlier requests are
still in flight (no connection cap, no waiting for answers), so slow answers cannot slow the
load down and hide themselves (no coordinated omission). Latency is measured from the request's
due time, so any lag of this generator counts against rein, never for it.

Every other request streams (`stream: true`; the SSE is read to the end and must end with
`data: [DONE]`); the rest are plain. Each request becomes one JSON line in `--out`:

  i, due (s from start), lag (s the send started after its due time), stream, status, latency
  (s, due to last byte), outcome (rein's `x-rein-outcome` header or the body's `rein.outcome`),
  tier, attempts (rein's count), result and detail.

result: `answered` (a whole model answer: rein said answered/fallback and the text ends with the
simulator's `[end]` sentinel), `degraded` (rein's degraded reply), or `failed` (any error status,
a cut or unterminated stream, an error event, a client timeout, a connection error). The deadline
is judged by the report, from the latency.

    python soak_load.py --url http://127.0.0.1:PORT/v1/chat/completions --route soak \
        --rate 200 --duration 60 --degraded-text TEXT --out requests.jsonl --meta meta.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import aiohttp

SENTINEL = "[end]"
TOPICS = ["order", "refund", "invoice", "delivery", "password", "plan", "address", "warranty"]


def body_of(route: str, i: int, stream: bool) -> bytes:
    topic = TOPICS[i % len(TOPICS)]
    doc = {
        "model": route,
        "messages": [{"role": "user", "content": f"Question {i}: where is my {topic}?"}],
    }
    if stream:
        doc["stream"] = True
    return json.dumps(doc).encode()


def summary_of(doc: object) -> dict:
    if isinstance(doc, dict) and isinstance(doc.get("rein"), dict):
        return doc["rein"]
    return {}


def judge(record: dict, outcome: str | None, text: str, degraded_text: str) -> None:
    """Sets result/detail of a 200 answer from rein's outcome and the text."""
    if outcome in ("answered", "fallback"):
        if text.rstrip().endswith(SENTINEL):
            record["result"] = "answered"
        else:
            record["result"], record["detail"] = "failed", "answer not whole"
    elif outcome == "degraded":
        if text.strip() == degraded_text.strip():
            record["result"] = "degraded"
        else:
            record["result"], record["detail"] = "failed", "degraded reply is not the template"
    else:
        record["result"], record["detail"] = "failed", f"outcome {outcome}"


async def plain(resp: aiohttp.ClientResponse, record: dict, degraded_text: str) -> None:
    raw = await resp.read()
    try:
        doc = json.loads(raw)
    except ValueError:
        record["result"], record["detail"] = "failed", "body is not JSON"
        return
    summary = summary_of(doc)
    record["outcome"] = resp.headers.get("x-rein-outcome") or summary.get("outcome")
    record["tier"] = summary.get("tier")
    record["attempts"] = summary.get("attempts")
    if resp.status != 200:
        err = doc.get("error", {}) if isinstance(doc, dict) else {}
        record["result"] = "failed"
        record["detail"] = f"{resp.status} {err.get('code') or err.get('type') or ''}".strip()
        return
    try:
        text = doc["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        record["result"], record["detail"] = "failed", "no message content"
        return
    judge(record, record["outcome"], text, degraded_text)


async def streamed(resp: aiohttp.ClientResponse, record: dict, degraded_text: str) -> None:
    if resp.status != 200:
        await plain(resp, record, degraded_text)
        return
    parts: list[str] = []
    summary: dict = {}
    error = None
    done = False
    buffer = b""
    async for chunk in resp.content.iter_any():
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            line = line.rstrip(b"\r")
            if not line.startswith(b"data:"):
                continue  # blank separators, `:` keep-alive comments, `event:` lines
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                continue
            try:
                event = json.loads(data)
            except ValueError:
                error = "data line is not JSON"
                continue
            if not isinstance(event, dict):
                continue
            if "error" in event:
                err = event["error"] if isinstance(event["error"], dict) else {}
                error = f"error event {err.get('code') or err.get('type') or ''}".strip()
            summary = summary_of(event) or summary
            for choice in event.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    parts.append(content)
    record["outcome"] = resp.headers.get("x-rein-outcome") or summary.get("outcome")
    record["tier"] = summary.get("tier")
    record["attempts"] = summary.get("attempts")
    if error:
        record["result"], record["detail"] = "failed", error
    elif not done:
        record["result"], record["detail"] = "failed", "stream ended without [DONE]"
    else:
        judge(record, record["outcome"], "".join(parts), degraded_text)


async def one(session, args, i: int, start: float, out: list) -> None:
    due = i / args.rate
    stream = i % 2 == 1
    record = {"i": i, "due": round(due, 4), "stream": stream, "status": None}
    began = time.monotonic()
    record["lag"] = round(began - start - due, 4)
    try:
        async with session.post(
            args.url,
            data=body_of(args.route, i, stream),
            headers={"content-type": "application/json"},
        ) as resp:
            record["status"] = resp.status
            if stream:
                await streamed(resp, record, args.degraded_text)
            else:
                await plain(resp, record, args.degraded_text)
    except asyncio.TimeoutError:
        record["result"], record["detail"] = "failed", "client timeout"
    except aiohttp.ClientPayloadError as error:
        record["result"], record["detail"] = "failed", f"cut: {type(error).__name__}"
    except aiohttp.ClientError as error:
        record["result"], record["detail"] = "failed", f"connection: {type(error).__name__}"
    record["latency"] = round(time.monotonic() - start - due, 4)
    out.append(record)


async def writer(path: str, out: list, stop: asyncio.Event) -> None:
    with open(path, "w", encoding="utf-8") as f:
        while True:
            stopping = stop.is_set()
            batch, out[:] = out[:], []
            for record in batch:
                f.write(json.dumps(record, separators=(",", ":")) + "\n")
            f.flush()
            if stopping:
                return
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--route", required=True)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--timeout", type=float, default=30.0, help="client timeout per request (s)")
    p.add_argument("--degraded-text", required=True, help="the route's degraded reply")
    p.add_argument("--out", required=True)
    p.add_argument("--meta", required=True, help="where to write the start time and settings")
    args = p.parse_args()

    total = int(args.rate * args.duration)
    connector = aiohttp.TCPConnector(limit=0, force_close=False, keepalive_timeout=30)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    out: list = []
    stop = asyncio.Event()
    tasks: set = set()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic()
        with open(args.meta, "w", encoding="utf-8") as f:
            json.dump({"start_unix": time.time(), "rate": args.rate, "duration": args.duration,
                       "requests": total, "timeout": args.timeout}, f)
        write = asyncio.create_task(writer(args.out, out, stop))
        next_report = 60.0
        for i in range(total):
            delay = start + i / args.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(session, args, i, start, out))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            if i / args.rate >= next_report:
                print(
                    f"[soak-load] {int(next_report)} s: {i} sent, {len(tasks)} in flight",
                    file=sys.stderr,
                    flush=True,
                )
                next_report += 60.0
        if tasks:
            await asyncio.wait(set(tasks))
        stop.set()
        await write
    print(f"[soak-load] done: {total} requests in {time.monotonic() - start:.1f} s",
          file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
