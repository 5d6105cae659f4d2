#!/usr/bin/env python3
"""Benchmarks anedvd against llama.cpp's llama-bench on the same GGUF, same machine and
thread count, interleaved in one run, and prints ratios with min/median/max.

Each round runs llama-bench then `anedvd bench` with identical tests (-p/-n/-d/-r/-t),
both with JSON output; peak RSS of each process comes from /usr/bin/time. Rounds
alternate so drift in machine load hits both sides alike.

Usage:
  scripts/bench-vs-llamacpp.py --model M [--llama-bench PATH] [--anedvd PATH]
      [-p 128,512] [-n 128] [-d 0,1024] [-t 2] [-r 5] [--rounds 3] [--md OUT.md]
Default llama-bench: $LLAMA_BENCH or ~/.cache/llamacpp-ref/bin/llama-bench
(built by ../shared/scripts/build-llamacpp.sh).
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

def run_json(cmd):
    with tempfile.NamedTemporaryFile(mode="r", suffix=".time") as tf:
        full = ["/usr/bin/time", "-f", "%M", "-o", tf.name] + cmd
        out = subprocess.run(full, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
        rss_kib = int(open(tf.name).read().strip().splitlines()[-1])
    return json.loads(out.stdout), rss_kib

def key(row):
    return (row["n_prompt"], row["n_gen"], row["n_depth"])

def name(k):
    p, g, d = k
    base = f"pp{p}" if p else f"tg{g}"
    return f"{base} @ d{d}" if d else base

def mmm(v):
    return min(v), statistics.median(v), max(v)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--llama-bench", default=os.environ.get("LLAMA_BENCH", os.path.expanduser("~/.cache/llamacpp-ref/bin/llama-bench")))
    ap.add_argument("--anedvd", default="target/release/anedvd")
    ap.add_argument("-p", default="128,512"); ap.add_argument("-n", default="128")
    ap.add_argument("-d", default="0"); ap.add_argument("-t", default="2")
    ap.add_argument("-r", default="5"); ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--md", help="append the markdown table to this file")
    a = ap.parse_args()
    common = ["-m", a.model, "-p", a.p, "-n", a.n, "-d", a.d, "-t", a.t, "-r", a.r]
    llama = {}; ours = {}; rss = {"llama.cpp": [], "anedvd": []}
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}: llama-bench ...", file=sys.stderr)
        rows, kib = run_json([a.llama_bench, "-o", "json"] + common)
        rss["llama.cpp"].append(kib)
        for r in rows: llama.setdefault(key(r), []).extend(r["samples_ts"])
        print(f"round {rnd + 1}/{a.rounds}: anedvd bench ...", file=sys.stderr)
        rows, kib = run_json([a.anedvd, "bench", "--json", "--model", a.model, "-p", a.p, "-n", a.n,
                              "-d", a.d, "-t", a.t, "-r", a.r])
        rss["anedvd"].append(kib)
        for r in rows: ours.setdefault(key(r), []).extend(r["samples_ts"])
    lines = [f"model `{os.path.basename(a.model)}`, threads {a.t}, {a.rounds} rounds x {a.r} repetitions (tok/s, min / median / max)", "",
             "| test | llama.cpp | anedvd | ratio of medians | ratio min / max |", "|---|---|---|---|---|"]
    for k in sorted(llama, key=lambda k: (k[2], k[1] > 0, k[0], k[1])):
        if k not in ours: continue
        lm, om = mmm(llama[k]), mmm(ours[k])
        lines.append(f"| {name(k)} | {lm[0]:.1f} / {lm[1]:.1f} / {lm[2]:.1f} | {om[0]:.1f} / {om[1]:.1f} / {om[2]:.1f} | "
                     f"**{om[1] / lm[1]:.2f}x** | {om[0] / lm[2]:.2f}x / {om[2] / lm[0]:.2f}x |")
    lr, orr = mmm(rss["llama.cpp"]), mmm(rss["anedvd"])
    lines.append(f"| peak RSS (MiB) | {lr[1] / 1024:.0f} | {orr[1] / 1024:.0f} | {orr[1] / lr[1]:.2f}x | |")
    text = "\n".join(lines)
    print(text)
    if a.md:
        with open(a.md, "a") as f: f.write(text + "\n")

if __name__ == "__main__":
    main()
