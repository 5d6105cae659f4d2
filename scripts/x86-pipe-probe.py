#!/usr/bin/env python3
"""Measures, on this x86-64 CPU, how fast the int8 product instruction of the
prefill kernels issues and which other instructions compete with it for the same
pipes: the facts the kernels are arranged around (docs/BENCHMARKS.md, issue 18).
With AVX-512 VNNI (the default) that is `vpdpbusd zmm`; with `--avx2`,
`vpmaddubsw ymm`, the AVX2 kernels' product (which leaves i16 pair sums, so the
kernels add `vpaddw` and, per sub-block, `vpmaddwd`). Writes a C file of
inline-assembly loops, builds it with gcc and prints one line per loop.

  scripts/x86-pipe-probe.py [--avx2] [--ghz GHZ]

Rates are instructions per cycle at GHZ (default: measured with a dependent-add
loop, which retires one add per cycle). Needs gcc and a CPU with AVX-512 VNNI
(or AVX2 for --avx2).
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
    ap.add_argument("--avx2", action="store_true", help="probe vpmaddubsw ymm instead of vpdpbusd zmm")
    a = ap.parse_args()
    if a.avx2:
        main_op, base = "vpmaddubsw", 0
        others = {
            "vpmaddwd": "vpmaddwd %%ymm15, %%ymm14, %%ymm{r}",
            "vfmadd231ps": "vfmadd231ps %%ymm15, %%ymm14, %%ymm{r}",
            "vpaddw": "vpaddw %%ymm15, %%ymm14, %%ymm{r}",
            "vpand": "vpand %%ymm15, %%ymm14, %%ymm{r}",
            "vpsrlw": "vpsrlw $4, %%ymm15, %%ymm{r}",
            "vpbroadcastd m32": "vpbroadcastd (%%rsp), %%ymm{r}",
            "vpunpcklbw": "vpunpcklbw %%ymm15, %%ymm14, %%ymm{r}",
        }
        # 16 registers: 8 destinations for the product, 6 for the other
        # (a vpmaddubsw does not read its destination: no chains to vary).
        n_main, n_other, chains = 8, 6, ()
        dp = lambda n: [f"{main_op} %%ymm15, %%ymm14, %%ymm{i % 8}" for i in range(n)]
    else:
        main_op, base = "vpdpbusd", 16
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
        n_main, n_other, chains = 16, 8, (1, 2, 4, 8, 12, 16)
        dp = lambda n: [f"vpdpbusd %%zmm30, %%zmm31, %%zmm{i}" for i in range(n)]
    cases = [(f"dp{n}", dp(n), n, f"{main_op}, {n} independent chains") for n in chains]
    if a.avx2:
        cases.append(("dp8", dp(8), 8, f"{main_op} alone"))
    for i, (label, fmt) in enumerate(others.items()):
        if a.avx2:
            # Interleaved one for one up to the six others (the product's
            # results are never read, so it has no chains to wait on).
            body = []
            for j in range(n_main):
                body.append(dp(n_main)[j])
                if j < n_other:
                    body.append(fmt.format(r=8 + j))
        else:
            body = dp(n_main) + [fmt.format(r=base + j) for j in range(n_other)]
        cases.append((f"mix{i}", body, n_main, f"{n_main} {main_op} + {n_other} {label}"))
    src = HEADER + "".join(loop(n, l) for n, l, _, _ in cases)
    src += "int main(int argc, char **argv) {\n double ghz = 0; if (argc > 1) sscanf(argv[1], \"%lf\", &ghz);\n"
    src += " if (ghz == 0) { long it = 1000000000; dep_add(1000); double t = now(); dep_add(it); ghz = it / (now() - t) / 1e9; }\n"
    src += f' printf("clock %.2f GHz\\n| loop | {main_op} per cycle |\\n|---|---|\\n", ghz);\n'
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
