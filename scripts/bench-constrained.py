#!/usr/bin/env python3
"""What constrained decoding costs: decode tok/s of `anedvd run` with a JSON
schema against the same run without one, interleaved (this host is shared
and noisy), as ratios with min/median/max.

With --gbnf the same list is a GBNF grammar (llama.cpp's format, translated
to Lark with one-character lexemes) instead of a JSON schema.

The schema (a long list of objects) never completes within -n tokens, so both
runs decode the same number of tokens; the unconstrained run uses
--ignore-eos for the same reason. Greedy, same prompt, same threads.

  python3 scripts/bench-constrained.py --binary target/release/anedvd \
      --model ~/.cache/models/gemma3-270m-q4_k_m.gguf --runs 8

Standard library only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SCHEMA = {
    "type": "object",
    "properties": {"items": {"type": "array", "minItems": 1000, "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["name", "count"]}}},
    "required": ["items"],
}

# The same shape in GBNF: at least 1000 items, so it never completes.
GBNF = r"""root ::= "{\"items\": [" item (", " item){999,} "]}"
item ::= "{\"name\": " string ", \"count\": " int "}"
string ::= "\"" [^"\\\x00-\x1f]* "\""
int ::= "-"? ([0-9] | [1-9] [0-9]+)
"""


def run(args, extra):
    cmd = [args.binary, "run", "-m", args.model, "-p", args.prompt, "-n", str(args.n),
           "--temp", "0", "-t", str(args.threads), "--json"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    t = json.loads(out)["timings"]
    return t["predicted_per_second"], t["predicted_n"], t["peak_rss_bytes"]


def stats(xs):
    return f"min {min(xs):.3f} / median {statistics.median(xs):.3f} / max {max(xs):.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="target/release/anedvd")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/models/gemma3-270m-q4_k_m.gguf"))
    ap.add_argument("--prompt", default="A shopping list as JSON:")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--gbnf", action="store_true", help="constrain by a GBNF grammar instead of a JSON schema")
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf" if args.gbnf else ".json", delete=False) as f:
        if args.gbnf:
            f.write(GBNF)
        else:
            json.dump(SCHEMA, f)
        schema_path = f.name
    flag = "--grammar-file" if args.gbnf else "--json-schema-file"
    try:
        plain, constrained, ratios, rss = [], [], [], []
        for i in range(args.runs):
            # alternate which goes first, so drift hits both alike
            order = [False, True] if i % 2 == 0 else [True, False]
            pair = {}
            for with_schema in order:
                extra = [flag, schema_path] if with_schema else ["--ignore-eos"]
                pair[with_schema] = run(args, extra)
            (p_tps, p_n, p_rss), (c_tps, c_n, c_rss) = pair[False], pair[True]
            if c_n != p_n:
                print(f"run {i}: the constrained run decoded {c_n} tokens, the plain one {p_n}", file=sys.stderr)
            plain.append(p_tps)
            constrained.append(c_tps)
            ratios.append(c_tps / p_tps)
            rss.append(c_rss / p_rss)
            print(f"run {i}: plain {p_tps:.1f} tok/s, constrained {c_tps:.1f} tok/s, ratio {c_tps / p_tps:.3f}")
        print(f"plain tok/s:       {stats(plain)}")
        print(f"constrained tok/s: {stats(constrained)}")
        print(f"ratio constrained/plain: {stats(ratios)}")
        print(f"peak RSS ratio constrained/plain: {stats(rss)}")
    finally:
        os.unlink(schema_path)


if __name__ == "__main__":
    main()
