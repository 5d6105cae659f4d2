#!/usr/bin/env python3
"""Prefix cache benchmark: time to first token of C concurrent clients whose
prompts share long system prompts, in three set-ups run side by side (one
server each, rounds interleaved, one server busy at a time):

  cache     `anedvd serve` as shipped: the server-wide prefix cache
            (--cache-ram) plus each slot's own cached prompt;
  slots     `--cache-ram 0`: only what a slot still holds (its last prompt,
            or a busy slot's copied) is reused;
  none      `--cache-ram 0` and `"cache_prompt": false`: every prompt is
            prefilled whole.

Each round sends C streaming llama-server /completion requests at once; client
i uses system prompt i % D (D distinct ~N-token prompts, fixed for the run)
followed by a question unique to the client and round. Prints the median time
to first token of each round, min / median / max over rounds per set-up, the
ratios of medians, and the prefix-cache hit figures from /metrics.

  scripts/bench-prefix-cache.py --model ~/.cache/models/gemma3-270m-q4_k_m.gguf \\
      -t 2 --parallel 4 --clients 16 --system-tokens 2000 --docs 1 --rounds 3
"""
import argparse, json, os, random, socket, statistics, subprocess, sys, threading, time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORDS = ("the of and to in is was for on that with as by at from his her an which "
         "river mountain city council report budget engine signal harvest winter "
         "station library garden theory market vessel archive method patient").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout=900):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metrics(base):
    out = {}
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("anedvd_prefix_cache") and " " in line:
                k, v = line.split()
                out[k] = float(v)
    return out


def first_token_seconds(base, prompt, cache_prompt, n_predict):
    body = {"prompt": prompt, "n_predict": n_predict, "stream": True, "temperature": 0,
            "cache_prompt": cache_prompt}
    req = urllib.request.Request(base + "/completion", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    t0 = time.perf_counter()
    first = None
    with urllib.request.urlopen(req, timeout=900) as r:
        for line in r:
            if first is None and line.startswith(b"data:") and b'"content"' in line:
                first = time.perf_counter() - t0
    if first is None:
        raise RuntimeError("no token streamed")
    return first


class Server:
    def __init__(self, name, args, cache_ram, cache_prompt):
        self.name, self.cache_prompt = name, cache_prompt
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [args.anedvd, "serve", "--model", args.model, "--port", str(self.port),
               "-t", str(args.threads), "--parallel", str(args.parallel),
               "--max-seq", str(args.max_seq), "--cache-ram", str(cache_ram)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(1200):
            try:
                urllib.request.urlopen(self.base + "/health", timeout=1)
                return
            except Exception:
                if self.proc.poll() is not None:
                    sys.exit(f"{name}: server exited during start-up: {' '.join(cmd)}")
                time.sleep(0.1)
        sys.exit(f"{name}: server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def round_(server, prompts, n_predict):
    out = [None] * len(prompts)
    def one(i):
        out[i] = first_token_seconds(server.base, prompts[i], server.cache_prompt, n_predict)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--anedvd", default=str(ROOT / "target/release/anedvd"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--system-tokens", type=int, default=2000, help="about this many tokens per system prompt")
    ap.add_argument("--docs", type=int, default=1, help="distinct system prompts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=4)
    ap.add_argument("--max-seq", type=int, default=4096)
    ap.add_argument("--setups", default="cache,slots,none")
    args = ap.parse_args()
    rng = random.Random(0)
    # About one token per word for this vocabulary of common words.
    n_words = max(args.system_tokens - 5, 1)
    docs = [f"Document {d}. " + " ".join(rng.choice(WORDS) for _ in range(n_words)) for d in range(args.docs)]
    setups = {"cache": (2048, True), "slots": (0, True), "none": (0, False)}
    names = [s for s in args.setups.split(",") if s]
    servers = [Server(n, args, *setups[n]) for n in names]
    try:
        ntok = len(post(servers[0].base + "/tokenize", {"content": docs[0]})["tokens"])
        print(f"system prompt: {ntok} tokens, {args.docs} distinct; {args.clients} clients, "
              f"--parallel {args.parallel}, {args.threads} threads, {args.rounds} rounds", flush=True)
        medians = {s.name: [] for s in servers}
        for r in range(args.rounds):
            for s in servers:
                prompts = [f"{docs[i % args.docs]}\nQuestion {r}.{i}: what is item {i * 7 + r} about?\nAnswer:"
                           for i in range(args.clients)]
                ttft = round_(s, prompts, args.n_predict)
                medians[s.name].append(statistics.median(ttft))
                print(f"round {r} {s.name:5s}: median TTFT {statistics.median(ttft):.3f} s "
                      f"(min {min(ttft):.3f}, max {max(ttft):.3f})", flush=True)
        print()
        print("| set-up | median TTFT per round, s: min / median / max | vs cache |")
        print("|---|---|---|")
        base = statistics.median(medians[names[0]])
        for n in names:
            m = medians[n]
            print(f"| {n} | {min(m):.3f} / {statistics.median(m):.3f} / {max(m):.3f} | "
                  f"{statistics.median(m) / base:.2f}x |")
        for s in servers:
            if s.name == "cache":
                print()
                print("prefix cache /metrics:", json.dumps(metrics(s.base)))
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
