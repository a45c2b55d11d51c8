"""Writes the request bodies the gateway's tests build with `json!({...})` (those with `model`
and `messages`) as seed files, one compact JSON body each. A Rust expression inside a body (a
variable, a call) becomes a one-turn `messages` list, so most bodies survive.

Usage: python3 fuzz/seed_requests.py SOURCE.rs OUT_DIR PREFIX
"""

import json
import os
import re
import sys

EXPRESSION = re.compile(r"[A-Za-z_][A-Za-z0-9_:.]*(\([^()]*\))?(\.[a-z_]+\([^()]*\))*")
USER_TURN = '[{"role":"user","content":"hi"}]'


def macro_bodies(text):
    """The `{...}` argument of every `json!(` in `text`."""
    for match in re.finditer(r"json!\(\{", text):
        start = match.end() - 1
        depth, in_string, escaped = 0, False, False
        for end in range(start, len(text)):
            c = text[end]
            if in_string:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    yield text[start : end + 1]
                    break


def without_expressions(body):
    """`body` with every bare Rust expression outside strings replaced by a user turn."""
    out, i, in_string, escaped = [], 0, False, False
    while i < len(body):
        c = body[i]
        if in_string:
            out.append(c)
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            i += 1
            continue
        if c == '"':
            in_string = True
            out.append(c)
            i += 1
            continue
        match = EXPRESSION.match(body, i)
        if match and match.group(0) not in ("true", "false", "null"):
            out.append(USER_TURN)
            i = match.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def main():
    source, out_dir, prefix = sys.argv[1:4]
    os.makedirs(out_dir, exist_ok=True)
    seen = set()
    for body in macro_bodies(open(source, encoding="utf-8").read()):
        for candidate in (body, without_expressions(body)):
            try:
                value = json.loads(candidate)
                break
            except ValueError:
                value = None
        if not isinstance(value, dict) or "model" not in value or "messages" not in value:
            continue
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        if text in seen:
            continue
        seen.add(text)
        name = os.path.join(out_dir, "seed-%s-%03d" % (prefix, len(seen)))
        with open(name, "w", encoding="utf-8") as out:
            out.write(text)


if __name__ == "__main__":
    main()
