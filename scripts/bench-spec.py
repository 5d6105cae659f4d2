#!/usr/bin/env python3
"""Speculative decoding benchmark: `anedvd run` with and without `--spec ngram`
on three workloads (scripts/spec-workloads/: copy.txt, a passage the
continuation repeats; code-edit.txt, a function to be rewritten with one name
changed; prose.txt, novel text as the control), greedy, runs interleaved
(plain, spec, plain, spec, ...). Checks that both produce the same tokens and
prints a markdown table: decode tok/s min / median / max of each, the ratio of
medians, min/max ratios, and the acceptance of the speculative runs.

  scripts/bench-spec.py --model ~/.cache/models/gemma3-270m-q4_k_m.gguf -t 2 -n 128 -r 5
"""
import argparse, json, os, statistics, subprocess, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(args, prompt, spec):
    cmd = [args.anedvd, "run", "-m", args.model, "-t", str(args.threads), "--temp", "0",
           "-n", str(args.n), "--raw", "--ignore-eos", "--json", "-p", prompt]
    if spec:
        cmd += ["--spec", "ngram", "--spec-n", str(args.spec_n), "--spec-m", str(args.spec_m)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--anedvd", default="target/release/anedvd")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=128, help="tokens to generate")
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("--spec-n", type=int, default=12)
    ap.add_argument("--spec-m", type=int, default=16)
    ap.add_argument("--workloads", default="copy,code-edit,prose")
    args = ap.parse_args()
    rows = []
    for w in args.workloads.split(","):
        # the last line is where the continuation starts: no newline after it
        prompt = (HERE / "spec-workloads" / f"{w}.txt").read_text().rstrip("\n")
        plain, spec, acc = [], [], []
        for r in range(args.rounds):
            print(f"{w}: round {r + 1}/{args.rounds}", file=sys.stderr)
            a = run(args, prompt, False)
            b = run(args, prompt, True)
            if a["tokens"] != b["tokens"]:
                sys.exit(f"{w}: speculation changed the output:\n  {a['tokens']}\n  {b['tokens']}")
            plain.append(a["timings"]["predicted_per_second"])
            spec.append(b["timings"]["predicted_per_second"])
            s = b.get("speculative", {"drafted": 0, "accepted": 0, "verify_passes": 0})
            acc.append(s)
        f = lambda v: f"{min(v):.1f} / {statistics.median(v):.1f} / {max(v):.1f}"
        ratio = statistics.median(spec) / statistics.median(plain)
        drafted = acc[0]["drafted"]; accepted = acc[0]["accepted"]; passes = acc[0]["verify_passes"]
        rows.append(f"| {w} | {f(plain)} | {f(spec)} | **{ratio:.2f}x** | "
                    f"{min(spec) / max(plain):.2f}x / {max(spec) / min(plain):.2f}x | "
                    f"{accepted}/{drafted} in {passes} passes |")
    print(f"model `{os.path.basename(args.model)}`, threads {args.threads}, {args.n} tokens greedy, "
          f"{args.rounds} interleaved rounds, --spec ngram --spec-n {args.spec_n} --spec-m {args.spec_m} "
          f"(decode tok/s, min / median / max; outputs identical in every round)\n")
    print("| workload | plain | --spec ngram | ratio of medians | ratio min / max | accepted / drafted |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
