#!/usr/bin/env python3
"""Benchmarks anedvd against llama.cpp's llama-bench on the same GGUF, same machine and
thread count, interleaved in one run, and prints ratios with min/median/max.

Each round runs llama-bench then `anedvd bench` with identical tests (-p/-n/-d/-r/-t),
both with JSON output; peak RSS of each process comes from /usr/bin/time. Rounds
alternate so drift in machine load hits both sides alike.

Then a second table compares load time and peak RSS of a process that loads the
model and generates one token (--load-reps runs of each, interleaved, after one
unrecorded warm-up run of each so both read the file from the page cache):
  llama.cpp: llama-simple -m M -n 1 PROMPT
  anedvd:    anedvd run --model M -n 1 --raw --temp 0 --json -t T --prompt PROMPT
Rows: wall time of the whole process (start to exit, the fair headline);
"load + first eval", the span llama.cpp prints as `load time` (model load start
to the end of the first decode, i.e. including the prompt's forward pass), for
anedvd timings.load_ms + timings.prompt_ms; anedvd's model load alone
(timings.load_ms; llama.cpp prints no such figure); peak RSS. llama-simple
takes no thread count (it uses llama.cpp's default). Ratios are anedvd /
llama.cpp, so below 1 is better for anedvd.

Size sweep: give --model several times (e.g. the files of scripts/gen-synthetic-gguf.py);
each gets its own table, then one table has a row per model: file size, prefill and decode of
both engines (medians) with ratios, peak RSS of both, and anedvd's decode as streamed bytes per
second (tok/s times the bytes one token reads: every tensor but an untied token embedding, from
`anedvd inspect --json`) and as a fraction of the read bandwidth: --bandwidth GB/s, or with
--measure-bandwidth the median of `cargo bench -p anedvd-cpu --bench membw` at the thread count
benchmarked (the faster of its 4 KiB and huge-page reads), run once per round between the two
engines (a shared host's bandwidth can move by 2x within an hour, so a figure measured apart from
the run says little).

Usage:
  scripts/bench-vs-llamacpp.py --model M [--model M2 ...] [--bandwidth GBS | --measure-bandwidth]
      [--llama-bench PATH] [--anedvd PATH]
      [-p 128,512] [-n 128] [-d 0,1024] [-t 2] [-r 5] [--rounds 3] [--md OUT.md]
      [--llama-simple PATH] [--load-reps 5] [--load-prompt Hello] [--load-only]
      [--llama-args "--poll 0 -fa 1"]
Default llama-bench: $LLAMA_BENCH or ~/.cache/llamacpp-ref/bin/llama-bench, default
llama-simple: $LLAMA_SIMPLE or ~/.cache/llamacpp-ref/bin/llama-simple (built by
../shared/scripts/build-llamacpp.sh). --load-reps 0 skips the load table;
--load-only skips the throughput table. --llama-args are extra llama-bench options
(default `--poll 0`: its default busy-wait polling slows it down on 2 shared vCPUs;
add `-fa 1` where flash attention is faster, e.g. the MoE file).
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile, time

def run_timed(cmd):
    """Runs cmd; returns (stdout, stderr, wall seconds, peak RSS KiB)."""
    with tempfile.NamedTemporaryFile(mode="r", suffix=".time") as tf:
        full = ["/usr/bin/time", "-f", "%M", "-o", tf.name] + cmd
        t0 = time.perf_counter()
        out = subprocess.run(full, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
        rss_kib = int(open(tf.name).read().strip().splitlines()[-1])
    return out.stdout, out.stderr, wall, rss_kib

LLAMA_LOAD = re.compile(r"llama_perf_context_print:\s+load time =\s+([0-9.]+) ms")

def load_table(a):
    llama_cmd = [a.llama_simple, "-m", a.model, "-n", "1", a.load_prompt]
    ours_cmd = [a.anedvd, "run", "--model", a.model, "-n", "1", "--raw", "--temp", "0", "--json",
                "-t", a.t, "--prompt", a.load_prompt]
    v = {k: [] for k in ("l_wall", "o_wall", "l_load", "o_first", "o_load", "l_rss", "o_rss")}
    for rep in range(a.load_reps + 1):
        print(f"load {rep}/{a.load_reps}{' (warm-up)' if rep == 0 else ''}: llama-simple, anedvd run ...", file=sys.stderr)
        _, err, wall, kib = run_timed(llama_cmd)
        m = LLAMA_LOAD.search(err)
        if not m:
            sys.exit(f"no `load time` line in llama-simple's output:\n{err[-2000:]}")
        out, _, owall, okib = run_timed(ours_cmd)
        t = json.loads(out)["timings"]
        if rep == 0:
            continue
        v["l_wall"].append(wall * 1e3); v["l_load"].append(float(m.group(1))); v["l_rss"].append(kib / 1024)
        v["o_wall"].append(owall * 1e3); v["o_first"].append(t["load_ms"] + t["prompt_ms"])
        v["o_load"].append(t["load_ms"]); v["o_rss"].append(okib / 1024)
    f = lambda x: f"{x[0]:.0f} / {x[1]:.0f} / {x[2]:.0f}"
    lines = [f"load: model `{os.path.basename(a.model)}`, prompt {a.load_prompt!r}, one token generated, "
             f"{a.load_reps} interleaved runs each (min / median / max; ratio = anedvd / llama.cpp, lower is better for anedvd)", "",
             f"`{' '.join(llama_cmd)}` vs `{' '.join(ours_cmd)}`", "",
             "| measure | llama.cpp | anedvd | ratio of medians | ratio min / max |", "|---|---|---|---|---|"]
    for label, l, o in (("process wall time (ms)", "l_wall", "o_wall"),
                        ("load + first eval (ms)", "l_load", "o_first"),
                        ("peak RSS (MiB)", "l_rss", "o_rss")):
        lm, om = mmm(v[l]), mmm(v[o])
        lines.append(f"| {label} | {f(lm)} | {f(om)} | **{om[1] / lm[1]:.2f}x** | {om[0] / lm[2]:.2f}x / {om[2] / lm[0]:.2f}x |")
    lines.append(f"| model load alone (ms) | n/a | {f(mmm(v['o_load']))} | | |")
    return "\n".join(lines)

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
    ap.add_argument("--model", required=True, action="append", help="GGUF (repeat for a size sweep)")
    ap.add_argument("--bandwidth", type=float, help="measured read bandwidth, GB/s, for the sweep's fraction column")
    ap.add_argument("--measure-bandwidth", action="store_true",
                    help="measure the read bandwidth in every round (membw bench) for the fraction column")
    ap.add_argument("--llama-bench", default=os.environ.get("LLAMA_BENCH", os.path.expanduser("~/.cache/llamacpp-ref/bin/llama-bench")))
    ap.add_argument("--anedvd", default="target/release/anedvd")
    ap.add_argument("-p", default="128,512"); ap.add_argument("-n", default="128")
    ap.add_argument("-d", default="0"); ap.add_argument("-t", default="2")
    ap.add_argument("-r", default="5"); ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--md", help="append the markdown table to this file")
    ap.add_argument("--llama-simple", default=os.environ.get("LLAMA_SIMPLE", os.path.expanduser("~/.cache/llamacpp-ref/bin/llama-simple")))
    ap.add_argument("--load-reps", type=int, default=5, help="runs of each side for the load table (0 = skip it)")
    ap.add_argument("--load-prompt", default="Hello")
    ap.add_argument("--load-only", action="store_true", help="skip the throughput table")
    ap.add_argument("--llama-args", default="--poll 0", help="extra llama-bench options")
    a = ap.parse_args()
    texts, sweep = [], []
    models = a.model
    for m in models:
        a.model = m
        if not a.load_only:
            text, summary = throughput_table(a)
            texts.append(text)
            sweep.append((m, summary))
        if a.load_reps > 0:
            texts.append(load_table(a))
    if len(sweep) > 1 or (sweep and (a.bandwidth or a.measure_bandwidth)):
        texts.append(sweep_table(a, sweep))
    text = "\n\n".join(texts)
    print(text)
    if a.md and text:
        with open(a.md, "a") as f: f.write(text + "\n")

def throughput_table(a):
    common = ["-m", a.model, "-p", a.p, "-n", a.n, "-d", a.d, "-t", a.t, "-r", a.r]
    llama = {}; ours = {}; rss = {"llama.cpp": [], "anedvd": []}; bandwidth = []
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}: llama-bench ...", file=sys.stderr)
        rows, kib = run_json([a.llama_bench, "-o", "json"] + a.llama_args.split() + common)
        rss["llama.cpp"].append(kib)
        for r in rows: llama.setdefault(key(r), []).extend(r["samples_ts"])
        print(f"round {rnd + 1}/{a.rounds}: anedvd bench ...", file=sys.stderr)
        rows, kib = run_json([a.anedvd, "bench", "--json", "--model", a.model, "-p", a.p, "-n", a.n,
                              "-d", a.d, "-t", a.t, "-r", a.r])
        rss["anedvd"].append(kib)
        for r in rows: ours.setdefault(key(r), []).extend(r["samples_ts"])
        if a.measure_bandwidth:
            bandwidth.append(read_bandwidth(a.t))
            print(f"round {rnd + 1}/{a.rounds}: read bandwidth {bandwidth[-1]:.1f} GB/s", file=sys.stderr)
    lines = [f"model `{os.path.basename(a.model)}`, threads {a.t}, {a.rounds} rounds x {a.r} repetitions (tok/s, min / median / max), llama-bench `{a.llama_args}`", "",
             "| test | llama.cpp | anedvd | ratio of medians | ratio min / max |", "|---|---|---|---|---|"]
    for k in sorted(llama, key=lambda k: (k[2], k[1] > 0, k[0], k[1])):
        if k not in ours: continue
        lm, om = mmm(llama[k]), mmm(ours[k])
        lines.append(f"| {name(k)} | {lm[0]:.1f} / {lm[1]:.1f} / {lm[2]:.1f} | {om[0]:.1f} / {om[1]:.1f} / {om[2]:.1f} | "
                     f"**{om[1] / lm[1]:.2f}x** | {om[0] / lm[2]:.2f}x / {om[2] / lm[0]:.2f}x |")
    lr, orr = mmm(rss["llama.cpp"]), mmm(rss["anedvd"])
    lines.append(f"| peak RSS (MiB) | {lr[1] / 1024:.0f} | {orr[1] / 1024:.0f} | {orr[1] / lr[1]:.2f}x | |")
    summary = {name(k): (mmm(llama[k])[1], mmm(ours[k])[1]) for k in llama if k in ours}
    summary["rss"] = (lr[1] / 1024, orr[1] / 1024)
    if bandwidth:
        bm = mmm(bandwidth)
        lines.append(f"| read bandwidth (GB/s, membw) | {bm[0]:.1f} / {bm[1]:.1f} / {bm[2]:.1f} | | | |")
        summary["bandwidth"] = bm[1]
    return "\n".join(lines), summary

MEMBW_ROW = re.compile(r"^\| (\d+) \| [^|]+ \| \d+ \| [0-9.]+ \| ([0-9.]+) \|$", re.M)

def read_bandwidth(threads):
    """GB/s read by `threads` threads: the membw bench's best of 10 rounds, in whichever page
    size (4 KiB or transparent huge pages, which anedvd's packed weights use) read faster."""
    out = subprocess.run(["cargo", "bench", "-q", "-p", "anedvd-cpu", "--bench", "membw"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "BENCH_THREADS": str(threads)}).stdout
    rows = {}
    for t, g in MEMBW_ROW.findall(out):
        rows[int(t)] = max(rows.get(int(t), 0.0), float(g))
    if int(threads) not in rows:
        sys.exit(f"membw printed no row for {threads} threads:\n{out}")
    return rows[int(threads)]

def bytes_per_token(a, model):
    """Bytes of weights one decoded token reads: every tensor but an untied token embedding."""
    info = json.loads(subprocess.run([a.anedvd, "inspect", "--json", model], capture_output=True,
                                     text=True, check=True).stdout)
    sizes = {t["name"]: t["bytes"] for t in info["tensors"]}
    total = sum(sizes.values())
    return total - sizes.get("token_embd.weight", 0) if "output.weight" in sizes else total

def sweep_table(a, sweep):
    tests = [k for k in sweep[0][1] if k not in ("rss", "bandwidth")]
    limit = a.bandwidth or a.measure_bandwidth
    head = "| model | GiB |" + "".join(f" {t} llama.cpp | {t} anedvd | ratio |" for t in tests) + \
        " peak RSS MiB llama.cpp / anedvd | anedvd decode GB/s |" + \
        (" read bandwidth GB/s | of limit |" if a.measure_bandwidth else " of limit |" if limit else "")
    lines = [f"size sweep, threads {a.t}, medians of {a.rounds} rounds x {a.r} repetitions (tok/s; ratio = anedvd / llama.cpp)"
             + (f"; bandwidth limit {a.bandwidth:.1f} GB/s" if a.bandwidth else "")
             + ("; bandwidth measured in every round (median)" if a.measure_bandwidth else ""), "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for m, s in sweep:
        row = f"| `{os.path.basename(m)}` | {os.path.getsize(m) / 2**30:.2f} |"
        for t in tests:
            l, o = s.get(t, (float("nan"), float("nan")))
            row += f" {l:.1f} | {o:.1f} | **{o / l:.2f}x** |"
        lr, orr = s["rss"]
        row += f" {lr:.0f} / {orr:.0f} ({orr / lr:.2f}x) |"
        tg = [t for t in tests if t.startswith("tg") and "@" not in t]
        bw = s.get("bandwidth", a.bandwidth)
        if tg:
            gbs = s[tg[0]][1] * bytes_per_token(a, m) / 1e9
            row += f" {gbs:.1f} |"
        else:
            row += " |"
        if a.measure_bandwidth:
            row += f" {bw:.1f} |"
        if limit:
            row += f" {gbs / bw:.0%} |" if tg and bw else " |"

        lines.append(row)
    return "\n".join(lines)

if __name__ == "__main__":
    main()
