#!/usr/bin/env python3
"""Speculative decoding in the server: one `anedvd serve --parallel P`, then
rounds of C concurrent greedy /v1/completions requests on a workload of
scripts/spec-workloads/, interleaved with `"speculative": false` and with
`"speculative": {"proposer": "ngram", ...}`. Checks that every reply's text is
the plain one and prints a markdown row per workload: aggregate generated
tok/s (all clients, wall clock of the round) min / median / max of each, the
ratio of medians, and the acceptance from /metrics.

  scripts/bench-spec-server.py --model ~/.cache/models/gemma3-270m-q4_k_m.gguf -t 2 -P 4 -c 4
"""
import argparse, json, os, socket, statistics, subprocess, sys, threading, time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def round_(base, prompt, args, spec):
    body = {"prompt": prompt, "max_tokens": args.n, "temperature": 0, "speculative": spec}
    out = [None] * args.clients
    def one(i):
        out[i] = post(base + "/v1/completions", body)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads: t.start()
    for t in threads: t.join()
    wall = time.perf_counter() - t0
    tokens = sum(o["usage"]["completion_tokens"] for o in out)
    return tokens / wall, [o["choices"][0]["text"] for o in out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--anedvd", default="target/release/anedvd")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-P", "--parallel", type=int, default=4)
    ap.add_argument("-c", "--clients", type=int, default=4)
    ap.add_argument("-n", type=int, default=100, help="tokens per request")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--spec-n", type=int, default=12)
    ap.add_argument("--spec-m", type=int, default=16)
    ap.add_argument("--workloads", default="copy,code-edit,prose")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    server = subprocess.Popen([args.anedvd, "serve", "-m", args.model, "-t", str(args.threads),
                               "--port", str(port), "--parallel", str(args.parallel)],
                              stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=5); break
            except Exception:
                time.sleep(0.2)
        spec = {"proposer": "ngram", "n": args.spec_n, "m": args.spec_m}
        rows = []
        for w in args.workloads.split(","):
            prompt = (HERE / "spec-workloads" / f"{w}.txt").read_text().rstrip("\n")
            plain, fast = [], []
            d0 = metric(base, "anedvd_spec_drafted_tokens_total")
            a0 = metric(base, "anedvd_spec_accepted_tokens_total")
            for r in range(args.rounds):
                print(f"{w}: round {r + 1}/{args.rounds}", file=sys.stderr)
                tps_a, texts_a = round_(base, prompt, args, False)
                tps_b, texts_b = round_(base, prompt, args, spec)
                if set(texts_a) != set(texts_b) or len(set(texts_a)) != 1:
                    sys.exit(f"{w}: speculation changed the text:\n{texts_a}\n{texts_b}")
                plain.append(tps_a); fast.append(tps_b)
            drafted = metric(base, "anedvd_spec_drafted_tokens_total") - d0
            accepted = metric(base, "anedvd_spec_accepted_tokens_total") - a0
            f = lambda v: f"{min(v):.1f} / {statistics.median(v):.1f} / {max(v):.1f}"
            ratio = statistics.median(fast) / statistics.median(plain)
            rows.append(f"| {w} | {f(plain)} | {f(fast)} | **{ratio:.2f}x** | "
                        f"{min(fast) / max(plain):.2f}x / {max(fast) / min(plain):.2f}x | "
                        f"{int(accepted)}/{int(drafted)} |")
    finally:
        server.terminate(); server.wait()
    print(f"model `{os.path.basename(args.model)}`, threads {args.threads}, --parallel {args.parallel}, "
          f"{args.clients} concurrent clients, {args.n} tokens greedy each, {args.rounds} interleaved rounds, "
          f"speculative ngram n={args.spec_n} m={args.spec_m} (aggregate tok/s, min / median / max; texts identical)\n")
    print("| workload | plain | speculative | ratio of medians | ratio min / max | accepted / drafted |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
