#!/usr/bin/env python3
"""Where rein's CPU goes, by stage: reads `perf script -F comm,ip,sym` output (call stacks
recorded with --call-graph dwarf) and prints, for each stage, the share of samples whose stack
passes through it (inclusive, so stages can overlap: a writev inside the response path counts
in both), plus the self time of the allocator and of the scheduler.

    perf script -i perf.data -F comm,ip,sym | perf_stages.py
"""

import re
import sys

# (label, regex over the whole stack)
STAGES = [
    ("caller request: JSON parse (wire::openai::parse_request)", r"wire::openai::parse_request"),
    ("upstream request: body build + send (OpenAiProvider::send)", r"OpenAiProvider as rein_core::provider::Provider>::send"),
    ("upstream answer: JSON parse (openai::response::parse_response)", r"openai::response::parse_response"),
    ("upstream answer: SSE lines (SseParser)", r"sse::SseParser"),
    ("upstream answer: SSE chunk decode (OpenAiDecoder::decode)", r"OpenAiDecoder as .*Decoder>::decode"),
    ("caller answer: JSON render (render_response + Json::into_response)", r"wire::openai::render_response|axum::json::Json<T> as axum_core::response::into_response"),
    ("caller answer: SSE encode (OpenAiStream::encode)", r"OpenAiStream::encode"),
    ("upstream client: pool checkout + dispatch (hyper_util legacy Client)", r"hyper_util::client::legacy::(client::Client|pool)"),
    ("metrics: label lookups (prometheus_client Family)", r"prometheus_client::metrics::family"),
    ("engine: release-stream channel (tokio mpsc)", r"tokio::sync::mpsc"),
    ("engine: metrics observer", r"MetricsObserver|rein_gateway::metrics"),
    ("syscall: writev (includes loopback delivery to the reader)", r"\bwritev\b|__GI___writev"),
    ("syscall: recv/read", r"__libc_recv|__GI___libc_read\b|\bksys_read\b"),
    ("syscall: epoll_wait", r"epoll_wait"),
    ("syscall: futex (thread wake/park)", r"futex"),
]
# self time: the innermost frame
SELF = [
    ("self: glibc malloc/free/realloc", r"malloc|_int_free|cfree|libc_free|tcache_|unlink_chunk|realloc|malloc_consolidate"),
    ("self: memcpy/memmove/memcmp", r"__mem(cpy|move|cmp|set)"),
    ("self: scheduler (finish_task_switch, spin_unlock_irqrestore)", r"finish_task_switch|_raw_spin_unlock_irqrestore"),
    ("self: serde_json (all)", r"serde_json::"),
    ("self: BTreeMap (serde_json::Map, vars)", r"btree::"),
]


def main():
    samples = [s for s in sys.stdin.read().split("\n\n") if s.strip()]
    if not samples:
        print("no samples")
        return
    n = len(samples)
    print(f"{n} samples")
    for label, pattern in STAGES:
        rx = re.compile(pattern)
        count = sum(1 for s in samples if rx.search(s))
        print(f"{100 * count / n:6.1f}%  {label}")
    for label, pattern in SELF:
        rx = re.compile(pattern)
        count = 0
        for s in samples:
            lines = s.split("\n")
            if len(lines) > 1 and rx.search(lines[1]):
                count += 1
        print(f"{100 * count / n:6.1f}%  {label}")


if __name__ == "__main__":
    main()
