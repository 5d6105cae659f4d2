#!/usr/bin/env python3
"""Generate anedvd-quant goldens from ggml itself (libggml-base.so via ctypes).

Run after the llama.cpp reference build exists:

    /work/venv/bin/python crates/quant/tests/golden/gen_golden_ggml.py \
        [--lib /root/.cache/llamacpp-ref/build/bin/libggml-base.so]

Writes under `ggml/`:

* `<TYPE>.f32.bin`: ggml's `dequantize_row_*` (or `ggml_*_to_fp32_row`) of the
  SAME random blocks gen_golden.py wrote to `gguf_py/<TYPE>.blocks.bin`, so
  every dequantizer is checked against two outside implementations.
* `Q8_K.blocks.bin` / `Q8_K.f32.bin`: Q8_K is not in gguf-py; random blocks
  with the f32 scale forced through 1, +/-0, subnormal, negative, +/-Inf,
  NaN, large; dequantized by `dequantize_row_q8_K`.
* `quant_input.f32.bin`: 4096 f32 (16 super-blocks of 256) with edge
  super-blocks; `quant_<TYPE>.out.bin`: ggml's reference quantizer
  (`quantize_row_*_ref`, `ggml_fp32_to_fp16_row`, `ggml_fp32_to_bf16_row_ref`)
  of that input for every type that has one without an importance matrix.
* `manifest.json`: library path, ggml version string if available, counts.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SRC = HERE / "gguf_py"
OUT = HERE / "ggml"
SEED = 20261201
DEFAULT_LIB = "/root/.cache/llamacpp-ref/build/bin/libggml-base.so"

# name -> (block size, block bytes)
SIZES = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2),
    "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
    "Q8_0": (32, 34), "Q8_1": (32, 36), "MXFP4": (32, 17), "IQ4_NL": (32, 18),
    "Q2_K": (256, 84), "Q3_K": (256, 110), "Q4_K": (256, 144), "Q5_K": (256, 176),
    "Q6_K": (256, 210), "Q8_K": (256, 292), "TQ1_0": (256, 54), "TQ2_0": (256, 66),
    "IQ2_XXS": (256, 66), "IQ2_XS": (256, 74), "IQ2_S": (256, 82), "IQ3_XXS": (256, 98),
    "IQ3_S": (256, 110), "IQ1_S": (256, 50), "IQ1_M": (256, 56), "IQ4_XS": (256, 136),
}

DEQUANT_TYPES = [t for t in SIZES if t not in ("F32", "Q8_1")]
QUANT_TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
               "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "TQ1_0", "TQ2_0", "MXFP4"]


def c_name(t: str) -> str:
    return t.lower().replace("_k", "_K")


def fn(lib, name):
    f = getattr(lib, name)
    f.restype = None
    return f


def dequantizer(lib, t: str):
    if t == "F16":
        return fn(lib, "ggml_fp16_to_fp32_row")
    if t == "BF16":
        return fn(lib, "ggml_bf16_to_fp32_row")
    return fn(lib, f"dequantize_row_{c_name(t)}")


def quantizer(lib, t: str):
    if t == "F16":
        return fn(lib, "ggml_fp32_to_fp16_row")
    if t == "BF16":
        return fn(lib, "ggml_fp32_to_bf16_row_ref")
    return fn(lib, f"quantize_row_{c_name(t)}_ref")


def run_dequant(lib, t: str, blocks: np.ndarray) -> np.ndarray:
    bs, bb = SIZES[t]
    n = blocks.size // bb * bs
    src = np.ascontiguousarray(blocks, dtype=np.uint8)
    dst = np.zeros(n, dtype=np.float32)
    dequantizer(lib, t)(src.ctypes.data_as(ctypes.c_void_p), dst.ctypes.data_as(ctypes.c_void_p),
                        ctypes.c_int64(n))
    return dst


def run_quant(lib, t: str, x: np.ndarray) -> np.ndarray:
    bs, bb = SIZES[t]
    src = np.ascontiguousarray(x, dtype=np.float32)
    dst = np.zeros(x.size // bs * bb, dtype=np.uint8)  # zeroed: Q8_K leaves bsums of zero blocks untouched
    quantizer(lib, t)(src.ctypes.data_as(ctypes.c_void_p), dst.ctypes.data_as(ctypes.c_void_p),
                      ctypes.c_int64(x.size))
    return dst


def q8k_blocks(rng: np.random.Generator, n: int) -> np.ndarray:
    blocks = rng.integers(0, 256, size=(n, 292), dtype=np.uint8)
    specials = np.array([1.0, 0.0, -0.0, 1e-40, -3.5, np.inf, -np.inf, np.nan, 3e38, 1e-3],
                        dtype=np.float32)
    d = (rng.standard_normal(n) * 0.01).astype(np.float32)
    d[: len(specials)] = specials
    blocks[:, 0:4] = d.view(np.uint8).reshape(n, 4)
    return blocks


def quant_input(rng: np.random.Generator) -> np.ndarray:
    nb = 16
    x = rng.standard_normal((nb, 256)).astype(np.float32)
    x *= np.exp2(rng.integers(-6, 6, (nb, 1))).astype(np.float32)
    x[0] = 0.0                                                  # all zero
    x[1, :32] = 0.0                                             # one zero sub-block
    x[1, 32:64] = 1e-3                                          # one constant sub-block
    x[2] = np.abs(x[2]) + 0.5                                   # all positive (min > 0)
    x[3] = -np.abs(x[3]) - 0.5                                  # all negative
    x[4] = rng.standard_normal(256).astype(np.float32) * 1e-20  # below GROUP_MAX_EPS-ish
    x[5] = rng.standard_normal(256).astype(np.float32) * 1e4    # large
    x[6] = np.linspace(-1, 1, 256, dtype=np.float32)            # ramp
    x[7] = np.where(np.arange(256) % 2 == 0, 3.0, -3.0)         # +/- max of equal magnitude
    x[8] = 1e-40                                                # f32 subnormal
    x[9, ::7] = 0.0                                             # sparse zeros
    x[10] = np.round(x[10] * 4) / 4                             # many exact ties
    x[11, :128] *= 1e-6                                         # mixed magnitudes inside one block
    return x.reshape(-1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=DEFAULT_LIB)
    args = ap.parse_args()
    lib = ctypes.CDLL(args.lib)
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    manifest: dict = {"generator": "crates/quant/tests/golden/gen_golden_ggml.py",
                      "library": args.lib, "seed": SEED, "dequant": {}, "quant": {}}
    try:
        ver = Path(args.lib).resolve().name
        manifest["library_file"] = ver
    except OSError:
        pass

    for t in DEQUANT_TYPES:
        if t == "Q8_K":
            blocks = q8k_blocks(rng, 16)
            (OUT / "Q8_K.blocks.bin").write_bytes(blocks.tobytes())
        else:
            blocks = np.fromfile(SRC / f"{t}.blocks.bin", dtype=np.uint8)
        y = run_dequant(lib, t, blocks)
        (OUT / f"{t}.f32.bin").write_bytes(y.astype("<f4").tobytes())
        manifest["dequant"][t] = {"elements": int(y.size)}

    x = quant_input(rng)
    (OUT / "quant_input.f32.bin").write_bytes(x.astype("<f4").tobytes())
    for t in QUANT_TYPES:
        q = run_quant(lib, t, x)
        (OUT / f"quant_{t}.out.bin").write_bytes(q.tobytes())
        manifest["quant"][t] = {"bytes": int(q.size)}

    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{len(manifest['dequant'])} dequant + {len(manifest['quant'])} quant fixtures, {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
