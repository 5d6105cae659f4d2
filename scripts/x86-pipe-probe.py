#!/usr/bin/env python3
"""Measures, on this x86-64 CPU, how fast `vpdpbusd zmm` issues and which other
instructions compete with it for the same pipes: the facts the AVX-512 prefill
kernels are arranged around (docs/BENCHMARKS.md, issue 18). Writes a C file of
inline-assembly loops, builds it with gcc and prints one line per loop.

  scripts/x86-pipe-probe.py [--ghz GHZ]

Rates are instructions per cycle at GHZ (default: measured with a dependent-add
loop, which retires one add per cycle). Needs gcc and a CPU with AVX-512 VNNI.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HEADER = r"""
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec a; clock_gettime(CLOCK_MONOTONIC, &a); return a.tv_sec + a.tv_nsec * 1e-9; }
static void dep_add(long it) { long x = 0; __asm__ volatile("1:\n add $1, %1\n dec %0\n jnz 1b" : "+r"(it), "+r"(x)); }
"""


def loop(name, lines):
    body = "\\n".join(lines)
    return f'static void {name}(long it) {{ __asm__ volatile("1:\\n{body}\\n dec %0\\n jnz 1b" : "+r"(it) :: "memory"); }}\n'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ghz", type=float, help="clock in GHz (default: measured)")
    a = ap.parse_args()
    dp = lambda n: [f"vpdpbusd %%zmm30, %%zmm31, %%zmm{i}" for i in range(n)]
    cases = [(f"dp{n}", dp(n), n, f"vpdpbusd, {n} independent chains") for n in (1, 2, 4, 8, 12, 16)]
    others = {
        "vpmulld": "vpmulld %%zmm29, %%zmm28, %%zmm{r}",
        "vpmaddwd": "vpmaddwd %%zmm29, %%zmm28, %%zmm{r}",
        "vpdpwssd": "vpdpwssd %%zmm29, %%zmm28, %%zmm{r}",
        "vfmadd231ps": "vfmadd231ps %%zmm29, %%zmm28, %%zmm{r}",
        "vcvtdq2ps": "vcvtdq2ps %%zmm29, %%zmm{r}",
        "vpmovzxbd": "vpmovzxbd %%xmm29, %%zmm{r}",
        "vpaddd": "vpaddd %%zmm29, %%zmm28, %%zmm{r}",
        "vpsrlw": "vpsrlw $4, %%zmm29, %%zmm{r}",
        "vpbroadcastd r32": "vpbroadcastd %%eax, %%zmm{r}",
    }
    for i, (label, fmt) in enumerate(others.items()):
        cases.append((f"mix{i}", dp(16) + [fmt.format(r=16 + j) for j in range(8)], 16, f"16 vpdpbusd + 8 {label}"))
    src = HEADER + "".join(loop(n, l) for n, l, _, _ in cases)
    src += "int main(int argc, char **argv) {\n double ghz = 0; if (argc > 1) sscanf(argv[1], \"%lf\", &ghz);\n"
    src += " if (ghz == 0) { long it = 1000000000; dep_add(1000); double t = now(); dep_add(it); ghz = it / (now() - t) / 1e9; }\n"
    src += ' printf("clock %.2f GHz\\n| loop | vpdpbusd per cycle |\\n|---|---|\\n", ghz);\n'
    for name, _, n, label in cases:
        src += f' {{ long it = 200000000 / {n}; {name}(1000); double t = now(); {name}(it); t = now() - t; printf("| {label} | %.2f |\\n", it * {n} / t / (ghz * 1e9)); }}\n'
    src += " return 0;\n}\n"
    with tempfile.TemporaryDirectory() as d:
        c, exe = os.path.join(d, "probe.c"), os.path.join(d, "probe")
        with open(c, "w") as f:
            f.write(src)
        subprocess.run(["gcc", "-O2", c, "-o", exe], check=True)
        sys.exit(subprocess.run([exe] + ([str(a.ghz)] if a.ghz else [])).returncode)


if __name__ == "__main__":
    main()
