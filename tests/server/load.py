#!/usr/bin/env python3
"""Load test for `anedvd serve`: N concurrent streaming chat clients for a
bounded time; prints requests, tokens, aggregate tokens/s and the server's RSS.

  python tests/server/load.py --base-url http://127.0.0.1:8080 --clients 16 --seconds 30 [--pid PID]

Each client loops: one streaming /v1/chat/completions request (include_usage)
with a distinct prompt, counting completion tokens from the usage chunk.
"""
import argparse
import json
import threading
import time

import openai


def rss_kib(pid):
    if not pid:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--pid", type=int, default=0)
    args = ap.parse_args()

    deadline = time.monotonic() + args.seconds
    lock = threading.Lock()
    totals = {"requests": 0, "tokens": 0, "errors": 0, "ttft": []}
    rss = [rss_kib(args.pid)]

    def client(i):
        c = openai.OpenAI(base_url=args.base_url + "/v1", api_key=args.api_key, max_retries=0, timeout=600)
        n = 0
        while time.monotonic() < deadline:
            n += 1
            t0 = time.monotonic()
            first = None
            try:
                stream = c.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": f"Client {i}, request {n}: tell me a story about the number {i * 1000 + n}."}],
                    max_tokens=args.max_tokens,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                tokens = 0
                for chunk in stream:
                    if first is None and chunk.choices and chunk.choices[0].delta.content:
                        first = time.monotonic() - t0
                    if chunk.usage:
                        tokens = chunk.usage.completion_tokens
                with lock:
                    totals["requests"] += 1
                    totals["tokens"] += tokens
                    if first is not None:
                        totals["ttft"].append(first)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    totals["errors"] += 1
                    totals.setdefault("last_error", repr(e)[:200])

    def sampler():
        while time.monotonic() < deadline:
            r = rss_kib(args.pid)
            if r:
                rss.append(r)
            time.sleep(0.5)

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    threads.append(threading.Thread(target=sampler))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    ttft = sorted(totals.pop("ttft"))
    out = dict(totals)
    out.update(
        clients=args.clients,
        wall_s=round(wall, 2),
        aggregate_tok_s=round(totals["tokens"] / wall, 1),
        ttft_median_s=round(ttft[len(ttft) // 2], 3) if ttft else None,
        rss_mib_max=round(max(r for r in rss if r) / 1024, 1) if any(rss) else None,
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
