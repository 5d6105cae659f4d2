#!/usr/bin/env python3
"""Soak test of `anedvd serve` under faults (loopback only, bounded in time).

Starts the server with the tiny qwen2 fixture (or --model), then runs
--clients concurrent clients for --duration seconds. Each client loops over a
random mix of:

  chat / completions / messages requests, streamed and not, in both dialects;
  disconnects mid-prefill (long prompt, socket closed right after sending) and
  mid-stream (a few events read, then closed); requests cancelled mid-
  generation (closed after a short wait); slow readers (one read every 100 ms);
  malformed JSON, wrong field types and oversized bodies; idle connections
  held open without a request; prompts longer than the context.

Pass, checked at the end (exit status 1 and a reason otherwise):
  - the server never exits, and /health always answers within 10 s (no hang);
  - every request completes or gets a well-formed error in its dialect (JSON
    error body with the right shape and status, or an SSE error event);
  - nothing leaks: once the clients stop, busy slots, queue, in-flight
    requests and busy-slot KV bytes in /metrics return to 0, and the slots'
    KV bytes stay within anedvd_kv_cache_max_bytes;
  - /metrics counters add up: requests received = completed + errored +
    cancelled;
  - peak RSS (VmHWM) stays under --max-rss-mb;
  - SIGTERM then ends the server with status 0.

Standard library only. Usage:
  cargo build --release -p anedvd
  python3 scripts/soak.py --binary target/release/anedvd --duration 600
"""

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_BODY = 65536
MAX_SEQ = 256

# Statuses a request may end with besides 200, by cause.
EXPECTED_ERRORS = {400, 413, 503, 504}


class Failure(Exception):
    pass


class Stats:
    def __init__(self):
        self.kinds = {}
        self.failures = []

    def count(self, kind, outcome):
        k = self.kinds.setdefault(kind, {})
        k[outcome] = k.get(outcome, 0) + 1

    def fail(self, kind, message):
        self.failures.append(f"{kind}: {message}")


async def send_request(port, method, path, body=None, headers=None, raw_body=None):
    """Opens a connection and writes one request; returns (reader, writer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = raw_body if raw_body is not None else (json.dumps(body).encode() if body is not None else b"")
    head = f"{method} {path} HTTP/1.1\r\nhost: soak\r\nconnection: close\r\n"
    if data:
        head += f"content-type: application/json\r\ncontent-length: {len(data)}\r\n"
    for k, v in (headers or {}).items():
        head += f"{k}: {v}\r\n"
    writer.write(head.encode() + b"\r\n" + data)
    await writer.drain()
    return reader, writer


async def read_head(reader):
    line = await reader.readline()
    m = re.match(rb"HTTP/1\.1 (\d{3})", line)
    if not m:
        raise Failure(f"bad status line {line!r}")
    headers = {}
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(m.group(1)), headers


async def body_chunks(reader, headers):
    """Yields the body's bytes as they arrive (chunked or sized)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise Failure("connection closed inside a chunked body")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return
            chunk = await reader.readexactly(size)
            await reader.readexactly(2)
            yield chunk
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if n:
            yield await reader.readexactly(n)
    else:
        data = await reader.read()
        if data:
            yield data


async def read_body(reader, headers, pause=0.0):
    out = b""
    async for c in body_chunks(reader, headers):
        out += c
        if pause:
            await asyncio.sleep(pause)
    return out


def check_error_body(dialect, status, body):
    try:
        v = json.loads(body)
    except ValueError:
        raise Failure(f"{status} with a non-JSON body {body[:200]!r}")
    if dialect == "anthropic":
        if v.get("type") != "error" or "message" not in v.get("error", {}):
            raise Failure(f"{status} not in Anthropic's error shape: {v}")
    else:
        e = v.get("error")
        if not isinstance(e, dict) or "message" not in e or "type" not in e:
            raise Failure(f"{status} not in OpenAI's error shape: {v}")
    return v


def sse_events(text):
    events = []
    for block in text.split("\n\n"):
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if data:
            events.append((name, "\n".join(data)))
    return events


def check_stream(dialect, text):
    """'completed' or 'errored' for a whole SSE transcript; raises if malformed."""
    events = sse_events(text)
    if not events:
        raise Failure("empty stream")
    for name, data in events:
        if data == "[DONE]":
            continue
        try:
            v = json.loads(data)
        except ValueError:
            raise Failure(f"non-JSON SSE data {data[:200]!r}")
        if dialect == "openai" and "error" in v:
            if events[-1][1] != "[DONE]":
                raise Failure("OpenAI error event not followed by [DONE]")
            return "errored"
        if dialect == "anthropic" and (name == "error" or v.get("type") == "error"):
            return "errored"
    last = events[-1]
    if dialect == "openai" and last[1] != "[DONE]":
        raise Failure(f"stream did not end with [DONE]: {last}")
    if dialect == "anthropic" and last[0] != "message_stop":
        raise Failure(f"stream did not end with message_stop: {last}")
    return "completed"


def words(n):
    vocab = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "seven", "blue", "quiet"]
    return " ".join(random.choice(vocab) for _ in range(n))


def chat_body(stream, n_words=8, max_tokens=None):
    return {
        "model": "m",
        "messages": [{"role": "user", "content": words(n_words)}],
        "max_tokens": max_tokens or random.randint(4, 48),
        "stream": stream,
        "temperature": random.choice([0, 0.8]),
    }


def messages_body(stream, n_words=8):
    return {
        "model": "m",
        "max_tokens": random.randint(4, 48),
        "messages": [{"role": "user", "content": words(n_words)}],
        "stream": stream,
    }


ROUTES = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


def body_for(dialect, stream, n_words=8):
    return chat_body(stream, n_words) if dialect == "openai" else messages_body(stream, n_words)


async def full_request(port, dialect, stream, slow=False):
    path = ROUTES[dialect]
    reader, writer = await send_request(port, "POST", path, body_for(dialect, stream))
    try:
        status, headers = await read_head(reader)
        body = await read_body(reader, headers, pause=0.1 if slow else 0.0)
        if status == 200:
            if stream:
                return check_stream(dialect, body.decode())
            v = json.loads(body)
            if dialect == "openai" and "choices" not in v:
                raise Failure(f"200 without choices: {v}")
            if dialect == "anthropic" and v.get("type") != "message":
                raise Failure(f"200 not a message: {v}")
            return "completed"
        if status not in EXPECTED_ERRORS:
            raise Failure(f"unexpected status {status}: {body[:300]!r}")
        check_error_body(dialect, status, body)
        if status == 503 and "retry-after" not in headers:
            raise Failure("503 without Retry-After")
        return f"http_{status}"
    finally:
        writer.close()


async def completions_ids(port):
    ids = [random.randint(1, 100) for _ in range(random.randint(1, 40))]
    body = {"prompt": ids, "max_tokens": random.randint(1, 32), "stream": random.random() < 0.5}
    reader, writer = await send_request(port, "POST", "/v1/completions", body)
    try:
        status, headers = await read_head(reader)
        data = await read_body(reader, headers)
        if status == 200:
            return check_stream("openai", data.decode()) if body["stream"] else "completed"
        if status not in EXPECTED_ERRORS:
            raise Failure(f"unexpected status {status}: {data[:300]!r}")
        check_error_body("openai", status, data)
        return f"http_{status}"
    finally:
        writer.close()


async def disconnect_mid_prefill(port):
    dialect = random.choice(["openai", "anthropic"])
    _, writer = await send_request(port, "POST", ROUTES[dialect], body_for(dialect, True, n_words=25))
    await asyncio.sleep(random.uniform(0, 0.02))
    writer.close()
    return "disconnected"


async def disconnect_mid_stream(port):
    dialect = random.choice(["openai", "anthropic"])
    body = body_for(dialect, True)
    body["max_tokens"] = 200
    reader, writer = await send_request(port, "POST", ROUTES[dialect], body)
    try:
        status, headers = await read_head(reader)
        if status != 200:
            data = await read_body(reader, headers)
            check_error_body(dialect, status, data)
            return f"http_{status}"
        n = 0
        async for _ in body_chunks(reader, headers):
            n += 1
            if n >= random.randint(1, 6):
                break
        return "disconnected"
    finally:
        writer.close()


async def cancel_non_stream(port):
    dialect = random.choice(["openai", "anthropic"])
    body = body_for(dialect, False)
    body["max_tokens"] = 200
    reader, writer = await send_request(port, "POST", ROUTES[dialect], body)
    try:
        await asyncio.wait_for(read_head(reader), timeout=random.uniform(0.01, 0.3))
        return "finished_first"
    except asyncio.TimeoutError:
        return "cancelled"
    finally:
        writer.close()


async def malformed(port):
    dialect = random.choice(["openai", "anthropic"])
    kind = random.choice(["json", "type", "oversized", "context"])
    if kind == "json":
        raw = b'{"messages": [ {"role": "user", "content": "unterminated'
        want = 400
    elif kind == "type":
        b = body_for(dialect, False)
        b["max_tokens"] = "many"
        raw = json.dumps(b).encode()
        want = 400
    elif kind == "oversized":
        b = body_for(dialect, False)
        b["messages"][0]["content"] = "x" * (MAX_BODY + 1000)
        raw = json.dumps(b).encode()
        want = 413
    else:
        b = body_for(dialect, False, n_words=MAX_SEQ * 2)
        raw = json.dumps(b).encode()
        want = 400
    reader, writer = await send_request(port, "POST", ROUTES[dialect], raw_body=raw)
    try:
        status, headers = await read_head(reader)
        data = await read_body(reader, headers)
        if status != want:
            raise Failure(f"{kind}: want {want}, got {status}: {data[:300]!r}")
        check_error_body(dialect, status, data)
        return f"refused_{kind}"
    finally:
        writer.close()


async def idle_connection(port):
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(random.uniform(0.5, 3))
    writer.close()
    return "idle"


async def client(port, stop_at, stats):
    actions = [
        ("chat", lambda: full_request(port, "openai", False), 4),
        ("chat_stream", lambda: full_request(port, "openai", True), 4),
        ("messages", lambda: full_request(port, "anthropic", False), 3),
        ("messages_stream", lambda: full_request(port, "anthropic", True), 3),
        ("completions", lambda: completions_ids(port), 2),
        ("slow_reader", lambda: full_request(port, random.choice(["openai", "anthropic"]), True, slow=True), 1),
        ("disconnect_prefill", lambda: disconnect_mid_prefill(port), 2),
        ("disconnect_stream", lambda: disconnect_mid_stream(port), 2),
        ("cancel", lambda: cancel_non_stream(port), 2),
        ("malformed", lambda: malformed(port), 2),
        ("idle", lambda: idle_connection(port), 1),
    ]
    names = [a[0] for a in actions]
    weights = [a[2] for a in actions]
    table = {a[0]: a[1] for a in actions}
    while time.monotonic() < stop_at:
        kind = random.choices(names, weights)[0]
        try:
            outcome = await asyncio.wait_for(table[kind](), timeout=120)
            stats.count(kind, outcome)
            if outcome == "http_503":
                # What a well-behaved client does with Retry-After: 1.
                await asyncio.sleep(random.uniform(0.5, 1.5))
        except Failure as e:
            stats.fail(kind, str(e))
        except asyncio.TimeoutError:
            stats.fail(kind, "no answer within 120 s (hang)")
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            stats.fail(kind, f"connection error: {e!r}")


async def get(port, path, timeout=10):
    reader, writer = await send_request(port, "GET", path)
    try:
        status, headers = await asyncio.wait_for(read_head(reader), timeout)
        body = await asyncio.wait_for(read_body(reader, headers), timeout)
        return status, body.decode()
    finally:
        writer.close()


def metrics_values(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


def rss_mb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


async def watchdog(port, proc, stop_at, stats, rss):
    while time.monotonic() < stop_at:
        if proc.poll() is not None:
            stats.fail("server", f"exited with status {proc.returncode}")
            return
        try:
            status, _ = await get(port, "/health", timeout=10)
            if status != 200:
                stats.fail("health", f"/health answered {status}")
        except Exception as e:  # noqa: BLE001 - any failure to answer is a hang
            stats.fail("health", f"/health did not answer: {e!r}")
        rss.append(rss_mb(proc.pid))
        await asyncio.sleep(2)


async def settle(port, limit=60):
    """Waits until the server is idle; returns the last metrics."""
    start = time.monotonic()
    while True:
        _, text = await get(port, "/metrics")
        m = metrics_values(text)
        idle = (
            m["anedvd_slots_busy"] == 0
            and m["anedvd_queue_depth"] == 0
            and m["anedvd_requests_in_flight"] == 0
            and m["anedvd_kv_cache_busy_bytes"] == 0
        )
        if idle or time.monotonic() - start > limit:
            return m, idle
        await asyncio.sleep(0.5)


def start_server(args):
    cmd = [
        args.binary, "serve", "--model", args.model, "--port", "0",
        "--parallel", str(args.parallel), "--max-seq", str(MAX_SEQ), "--queue", "32",
        "--max-body", str(MAX_BODY), "--request-timeout", "30", "--header-timeout", "5",
        "--max-connections", str(args.clients * 2), "-t", "1", "--shutdown-grace", "2",
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready" in line:
            break
        if "failed" in line:
            raise SystemExit(f"soak: server failed: {line}")
    if port is None:
        raise SystemExit("soak: the server did not start")
    # Keep draining stderr so the server never blocks on a full pipe.
    import threading
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, port


async def main(args):
    random.seed(args.seed)
    proc, port = start_server(args)
    stats = Stats()
    rss = []
    try:
        _, base_text = await get(port, "/metrics")
        base = metrics_values(base_text)
        stop_at = time.monotonic() + args.duration
        t0 = time.monotonic()
        clients = [client(port, stop_at, stats) for _ in range(args.clients)]
        await asyncio.gather(watchdog(port, proc, stop_at, stats, rss), *clients)
        ran = time.monotonic() - t0
        m, idle = await settle(port)
        if not idle:
            stats.fail("leak", f"not idle 60 s after the clients stopped: {m}")
        received = sum(v for k, v in m.items() if k.startswith("anedvd_requests_total{"))
        ended = {o: m[f'anedvd_requests_ended_total{{outcome="{o}"}}'] for o in ("completed", "errored", "cancelled")}
        if received != sum(ended.values()):
            stats.fail("counters", f"requests {received} != completed+errored+cancelled {ended}")
        if m["anedvd_kv_cache_bytes"] > m["anedvd_kv_cache_max_bytes"]:
            stats.fail("kv", f"KV bytes {m['anedvd_kv_cache_bytes']} over the slots' capacity {m['anedvd_kv_cache_max_bytes']}")
        if m["anedvd_panics_total"] != base.get("anedvd_panics_total", 0):
            stats.fail("panics", f"{m['anedvd_panics_total']} panics caught")
        peak = rss_mb(proc.pid, "VmHWM")
        if peak > args.max_rss_mb:
            stats.fail("rss", f"peak RSS {peak:.0f} MiB over the bound {args.max_rss_mb} MiB")
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
            if code != 0:
                stats.fail("shutdown", f"exited with status {code} after SIGTERM")
        except subprocess.TimeoutExpired:
            stats.fail("shutdown", "still running 30 s after SIGTERM")
            proc.kill()
    finally:
        if proc.poll() is None:
            proc.kill()
    total = sum(sum(k.values()) for k in stats.kinds.values())
    print(f"soak: {ran:.0f} s, {args.clients} clients, {total} client actions, "
          f"{int(received)} requests seen by the server")
    for kind in sorted(stats.kinds):
        print(f"  {kind:20s} " + ", ".join(f"{o}={n}" for o, n in sorted(stats.kinds[kind].items())))
    print(f"  server: ended {ended}, generated tokens {m.get('anedvd_tokens_generated_total', 0):.0f}, "
          f"cancelled generations {m.get('anedvd_requests_cancelled_total', 0):.0f}")
    print(f"  RSS: start {rss[0] if rss else 0:.0f} MiB, last {rss[-1] if rss else 0:.0f} MiB, "
          f"peak {peak:.0f} MiB (bound {args.max_rss_mb} MiB); KV held {m['anedvd_kv_cache_bytes']:.0f} "
          f"of {m['anedvd_kv_cache_max_bytes']:.0f} bytes")
    if stats.failures:
        print(f"soak: FAILED ({len(stats.failures)} problems)")
        for f in stats.failures[:30]:
            print("  " + f)
        return 1
    print("soak: passed")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/anedvd"))
    ap.add_argument("--model", default=os.path.join(ROOT, "tests/fixtures/models/qwen2/model-f32.gguf"))
    ap.add_argument("--duration", type=float, default=600, help="seconds of load (default 600)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--max-rss-mb", type=float, default=512, help="bound on the server's peak RSS")
    ap.add_argument("--seed", type=int, default=1)
    sys.exit(asyncio.run(main(ap.parse_args())))
