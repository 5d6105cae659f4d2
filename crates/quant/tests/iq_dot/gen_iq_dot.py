#!/usr/bin/env python3
"""Goldens for the i-quant x Q8 integer dot products, from ggml's own C code.

ggml computes `IQ* x activations` on the CPU by quantizing the activations
to Q8_K (Q8_0 for IQ4_NL) and calling `ggml_vec_dot_<iq>_q8_K_generic` (the
scalar reference of the SIMD kernels, `ggml-cpu/quants.c`). This script
extracts those nine functions verbatim from the llama.cpp source, compiles
them with ggml's `ggml-common.h` tables under strict IEEE flags
(`-O2 -ffp-contract=off`, so no FMA contraction), and runs them via ctypes on
random blocks. It needs a C compiler with `_Float16` (GCC >= 12, clang).

As a side check it also runs the same functions from the shipped
`libggml-cpu.so` (built -march=native, where GCC may contract `a += b*c`
into an FMA) and records in `manifest.json` how many results differ.

Run: /work/venv/bin/python crates/quant/tests/iq_dot/gen_iq_dot.py \
        [--src /root/.cache/llamacpp-ref/src] [--lib .../libggml-cpu.so]

Writes next to itself, for each type T (units of 256 elements, 32 units):
    T.w.bin      weight blocks (ggml layout); units 0..11 have special f16
                 scales (1, +-0, subnormals, f16 max, -1, +-Inf, NaN, ...)
    T.dot.bin    little-endian f32 results for the rows in ROWS below
and the shared activations:
    q8_K.bin     32 Q8_K blocks (f32 d, i8 qs[256], i16 bsums[16]);
                 units 0..3 have d = 0, -0.5, a subnormal, 1e30
    q8_0.bin     256 Q8_0 blocks (f16 d, i8 qs[32]) for IQ4_NL; the first
                 8 blocks of units 0..3 have d = 0, -0.5, a subnormal, 60000
"""
from __future__ import annotations

import argparse
import ctypes
import json
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 20261130
UNITS = 32
# (first unit, units) of each dot product: 24 one-unit rows, then 2 of 4 units.
ROWS = [(u, 1) for u in range(24)] + [(24, 4), (28, 4)]

# name -> (block elements, block bytes, offsets of f16 scale fields or "iq1m")
TYPES = {
    "IQ2_XXS": (256, 66, [0]),
    "IQ2_XS": (256, 74, [0]),
    "IQ2_S": (256, 82, [0]),
    "IQ3_XXS": (256, 98, [0]),
    "IQ3_S": (256, 110, [0]),
    "IQ1_S": (256, 50, [0]),
    "IQ1_M": (256, 56, "iq1m"),
    "IQ4_NL": (32, 18, [0]),
    "IQ4_XS": (256, 136, [0]),
}
FUNCS = {
    "IQ2_XXS": "ggml_vec_dot_iq2_xxs_q8_K_generic",
    "IQ2_XS": "ggml_vec_dot_iq2_xs_q8_K_generic",
    "IQ2_S": "ggml_vec_dot_iq2_s_q8_K_generic",
    "IQ3_XXS": "ggml_vec_dot_iq3_xxs_q8_K_generic",
    "IQ3_S": "ggml_vec_dot_iq3_s_q8_K_generic",
    "IQ1_S": "ggml_vec_dot_iq1_s_q8_K_generic",
    "IQ1_M": "ggml_vec_dot_iq1_m_q8_K_generic",
    "IQ4_NL": "ggml_vec_dot_iq4_nl_q8_0_generic",
    "IQ4_XS": "ggml_vec_dot_iq4_xs_q8_K_generic",
}
F16_SPECIAL = [0x3C00, 0x0000, 0x8000, 0x0001, 0x03FF, 0x8123, 0x7BFF, 0xBC00,
               0x7C00, 0xFC00, 0x7E00, 0x0400]

HARNESS = """
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#define GGML_COMMON_DECL_C
#define GGML_COMMON_IMPL_C
#include "ggml-common.h"
#define GGML_RESTRICT restrict
#define UNUSED(x) (void)(x)
static float fp16_to_fp32(uint16_t h) { _Float16 f; memcpy(&f, &h, 2); return (float)f; }
#define GGML_CPU_FP16_TO_FP32(x) fp16_to_fp32(x)
"""


def extract(quants_c: str, name: str) -> str:
    m = re.search(r"^void " + re.escape(name) + r"\(.*?^}\n", quants_c, re.S | re.M)
    if m is None:
        raise SystemExit(f"{name} not found")
    return m.group(0)


def build(src: Path, out: Path) -> ctypes.CDLL:
    quants_c = (src / "ggml/src/ggml-cpu/quants.c").read_text()
    code = HARNESS + "\n".join(extract(quants_c, f) for f in FUNCS.values())
    c_file = out / "iq_dot.c"
    c_file.write_text(code)
    so = out / "iq_dot.so"
    subprocess.run(["cc", "-std=gnu11", "-O2", "-ffp-contract=off", "-fno-fast-math", "-shared",
                    "-fPIC", "-I", str(src / "ggml/src"), str(c_file), "-o", str(so)], check=True)
    return ctypes.CDLL(str(so))


def random_f16(rng, n):
    # normal f16 of either sign, magnitude in [2^-10, 2^-2)
    mag = np.ldexp(rng.uniform(1, 2, n), rng.integers(-10, -2, n)).astype(np.float16)
    return np.where(rng.integers(0, 2, n) == 1, -mag, mag).astype(np.float16).view(np.uint16)


def weights(rng, name):
    qk, bb, scales = TYPES[name]
    per_unit = 256 // qk
    blocks = rng.integers(0, 256, (UNITS * per_unit, bb), dtype=np.uint8)
    bits = random_f16(rng, UNITS * per_unit)
    for u in range(12):
        bits[u * per_unit:(u + 1) * per_unit] = F16_SPECIAL[u]
    for i, b in enumerate(blocks):
        v = int(bits[i])
        if scales == "iq1m":
            sc = b[48:56].view(np.uint16).copy()
            for k in range(4):
                sc[k] = (sc[k] & 0x0FFF) | (((v >> (4 * k)) & 0xF) << 12)
            b[48:56] = sc.view(np.uint8)
        else:
            for off in scales:
                b[off:off + 2] = np.array([v], dtype=np.uint16).view(np.uint8)
    return blocks.tobytes()


def q8_k(rng):
    d = np.ldexp(rng.uniform(1, 2, UNITS), rng.integers(-12, -4, UNITS)).astype(np.float32)
    d[:4] = [0.0, -0.5, np.float32(1e-40), 1e30]
    qs = rng.integers(-128, 128, (UNITS, 256), dtype=np.int64)
    out = bytearray()
    for u in range(UNITS):
        bsums = qs[u].reshape(16, 16).sum(axis=1).astype(np.int16)
        out += d[u:u + 1].astype("<f4").tobytes() + qs[u].astype(np.int8).tobytes()
        out += bsums.astype("<i2").tobytes()
    return bytes(out)


def q8_0(rng):
    n = UNITS * 8
    d = random_f16(rng, n).view(np.float16)
    d[0:8], d[8:16], d[16:24], d[24:32] = 0.0, -0.5, np.float16(1e-7), 60000.0
    qs = rng.integers(-128, 128, (n, 32), dtype=np.int64).astype(np.int8)
    return b"".join(d[i:i + 1].astype("<f2").tobytes() + qs[i].tobytes() for i in range(n))


def dots(fn, name, w, act, act_bb_per_unit):
    qk, bb, _ = TYPES[name]
    w_unit = 256 // qk * bb
    out = []
    for u0, nu in ROWS:
        s = ctypes.c_float(0.0)
        wb = ctypes.create_string_buffer(w[u0 * w_unit:(u0 + nu) * w_unit])
        ab = ctypes.create_string_buffer(act[u0 * act_bb_per_unit:(u0 + nu) * act_bb_per_unit])
        fn(ctypes.c_int(256 * nu), ctypes.byref(s), ctypes.c_size_t(0), wb, ctypes.c_size_t(0),
           ab, ctypes.c_size_t(0), ctypes.c_int(1))
        out.append(s.value)
    return np.array(out, dtype=np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", type=Path, default=Path("/root/.cache/llamacpp-ref/src"))
    ap.add_argument("--lib", type=Path,
                    default=Path("/root/.cache/llamacpp-ref/build/bin/libggml-cpu.so"))
    args = ap.parse_args()
    rng = np.random.default_rng(SEED)
    acts = {"q8_K": q8_k(rng), "q8_0": q8_0(rng)}
    for k, v in acts.items():
        (HERE / f"{k}.bin").write_bytes(v)
    shipped = ctypes.CDLL(str(args.lib)) if args.lib.exists() else None
    if shipped is not None:
        shipped.ggml_cpu_init()  # fills the f16 -> f32 table the CPU code may use
    manifest = {"generator": "crates/quant/tests/iq_dot/gen_iq_dot.py", "seed": SEED,
                "rows": ROWS, "cc": subprocess.run(["cc", "--version"], capture_output=True,
                                                   text=True).stdout.splitlines()[0],
                "shipped_lib": str(args.lib) if shipped else None, "types": {}}
    with tempfile.TemporaryDirectory() as tmp:
        lib = build(args.src, Path(tmp))
        for name, fname in FUNCS.items():
            w = weights(rng, name)
            act, per = (acts["q8_0"], 8 * 34) if name == "IQ4_NL" else (acts["q8_K"], 292)
            res = dots(getattr(lib, fname), name, w, act, per)
            (HERE / f"{name}.w.bin").write_bytes(w)
            (HERE / f"{name}.dot.bin").write_bytes(res.astype("<f4").tobytes())
            info = {"rows": len(res), "nan": int(np.isnan(res).sum()),
                    "inf": int(np.isinf(res).sum())}
            if shipped is not None:
                other = dots(getattr(shipped, fname), name, w, act, per)
                same = (res.view(np.uint32) == other.view(np.uint32)) | (np.isnan(res) & np.isnan(other))
                info["differ_from_shipped_lib"] = int((~same).sum())
            manifest["types"][name] = info
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
