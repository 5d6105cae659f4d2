#!/usr/bin/env python3
"""Generate dequantization and quantization goldens for anedvd-quant from gguf-py.

Run with /work/venv/bin/python from anywhere:

    /work/venv/bin/python crates/quant/tests/golden/gen_golden.py

For every ggml type that `gguf.quants` can dequantize (and that anedvd knows),
random blocks are built from random bytes, then the scale fields (f16 `d`,
`dmin`/`m`, the split IQ1_M scale, MXFP4's e8m0 exponent) are overwritten with
a schedule that covers zero, -0, subnormals, normals of both signs, the f16
maximum, +/-Inf and NaN. gguf-py dequantizes them; fixtures written under
`gguf_py/`:

    <TYPE>.blocks.bin    raw block bytes (ggml layout)
    <TYPE>.f32.bin       gguf-py's dequantized values, little-endian f32

For the types gguf-py can quantize, random f32 rows (with edge blocks: zeros,
a single non-zero, subnormals, huge values, ties, +/- max of equal magnitude)
are quantized; fixtures:

    quant_<TYPE>.in.f32.bin   input, little-endian f32
    quant_<TYPE>.out.bin      gguf-py's quantized bytes

If the Gemma 3 270M Q4_K_M GGUF is present (env ANEDVD_GEMMA3_GGUF or
/root/.cache/models/gemma3-270m-q4_k_m.gguf), the first rows of one tensor of
each quantized type in it are copied with gguf-py's dequantization (real
weight statistics rather than random bytes):

    model_<TYPE>.blocks.bin / model_<TYPE>.f32.bin   (and manifest "model")

`manifest.json` records the gguf-py and numpy versions, seed and counts.
"""
from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
import gguf.quants as gq

OUT = Path(__file__).resolve().parent / "gguf_py"
SEED = 20261130

# Scale fields per type: list of (byte offset within block, kind).
# kind: "f16" (little-endian half), "e8m0" (one byte exponent), "iq1m" (f16
# split over the top nibbles of the four u16 scale words at offset 48).
SCALES: dict[T, list[tuple[int, str]]] = {
    T.Q4_0: [(0, "f16")],
    T.Q4_1: [(0, "f16"), (2, "f16")],
    T.Q5_0: [(0, "f16")],
    T.Q5_1: [(0, "f16"), (2, "f16")],
    T.Q8_0: [(0, "f16")],
    T.Q2_K: [(80, "f16"), (82, "f16")],
    T.Q3_K: [(108, "f16")],
    T.Q4_K: [(0, "f16"), (2, "f16")],
    T.Q5_K: [(0, "f16"), (2, "f16")],
    T.Q6_K: [(208, "f16")],
    T.TQ1_0: [(52, "f16")],
    T.TQ2_0: [(64, "f16")],
    T.MXFP4: [(0, "e8m0")],
    T.IQ2_XXS: [(0, "f16")],
    T.IQ2_XS: [(0, "f16")],
    T.IQ2_S: [(0, "f16")],
    T.IQ3_XXS: [(0, "f16")],
    T.IQ3_S: [(0, "f16")],
    T.IQ1_S: [(0, "f16")],
    T.IQ1_M: [(48, "iq1m")],
    T.IQ4_NL: [(0, "f16")],
    T.IQ4_XS: [(0, "f16")],
}

# Special f16 bit patterns used for the first blocks of each type.
F16_SPECIAL = [
    0x3C00,  # 1.0
    0x0000,  # +0
    0x8000,  # -0
    0x0001,  # smallest subnormal
    0x03FF,  # largest subnormal
    0x8123,  # negative subnormal
    0x7BFF,  # f16 max
    0xBC00,  # -1.0
    0x7C00,  # +Inf
    0xFC00,  # -Inf
    0x7E00,  # NaN
    0x0400,  # smallest normal
]
E8M0_SPECIAL = [127, 0, 1, 2, 3, 126, 128, 254, 255, 100, 150, 60]


def rand_f16_normal(rng: np.random.Generator) -> int:
    """A random normal f16 with magnitude in [2^-14, 2^4) and random sign."""
    exp = int(rng.integers(1, 19))  # biased exponent 1..18
    mant = int(rng.integers(0, 1024))
    sign = int(rng.integers(0, 2))
    return (sign << 15) | (exp << 10) | mant


def set_scale(block: np.ndarray, off: int, kind: str, value: int) -> None:
    if kind == "f16":
        block[off] = value & 0xFF
        block[off + 1] = value >> 8
    elif kind == "e8m0":
        block[off] = value
    elif kind == "iq1m":
        sc = block[off : off + 8].view("<u2").copy()
        for i in range(4):
            nib = (value >> (4 * i)) & 0xF
            sc[i] = (int(sc[i]) & 0x0FFF) | (nib << 12)
        block[off : off + 8] = sc.view(np.uint8)
    else:
        raise ValueError(kind)


def gen_blocks(rng: np.random.Generator, qt: T, n_blocks: int) -> np.ndarray:
    _, type_size = GGML_QUANT_SIZES[qt]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for fi, (off, kind) in enumerate(SCALES[qt]):
        for b in range(n_blocks):
            if kind == "e8m0":
                k = b if b < len(E8M0_SPECIAL) else -1
                v = E8M0_SPECIAL[k] if k >= 0 else int(rng.integers(100, 150))
            else:
                # second scale field gets a shifted schedule so specials mix
                k = (b + 3 * fi) % len(F16_SPECIAL) if b < len(F16_SPECIAL) else -1
                v = F16_SPECIAL[k] if k >= 0 else rand_f16_normal(rng)
            set_scale(blocks[b], off, kind, v)
    return blocks


def write(name: str, arr: np.ndarray) -> int:
    data = arr.tobytes()
    (OUT / name).write_bytes(data)
    return len(data)


def float_inputs(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random f32 values with edge values mixed in (used for F32/F16/BF16 data)."""
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(np.float32)
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 65504.0, 65520.0, 1e-8, -1e-8,
         6.1e-5, 5.96e-8, 2.98e-8, 1e38, -3.4e38, 1.17549435e-38, 1e-45],
        dtype=np.float32,
    )
    x[: len(special)] = special
    return x


def dequant_fixtures(rng: np.random.Generator, manifest: dict) -> None:
    # Plain float types: the "blocks" are raw element bytes.
    n = 1024
    f32_bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    f32_bits[:18] = float_inputs(rng, 18).view(np.uint32)
    f16_bits = rng.integers(0, 2**16, size=n, dtype=np.uint32).astype(np.uint16)
    f16_bits[: len(F16_SPECIAL)] = F16_SPECIAL
    f16_bits[len(F16_SPECIAL) : len(F16_SPECIAL) + 64] = np.arange(0, 1024, 16, dtype=np.uint16)
    bf16_bits = rng.integers(0, 2**16, size=n, dtype=np.uint32).astype(np.uint16)
    bf16_bits[:8] = [0x0000, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x7FC0, 0x3F80, 0x0080]
    raw = {
        T.F32: f32_bits.view(np.uint8),
        T.F16: f16_bits.view(np.uint8),
        T.BF16: bf16_bits.view(np.uint8),
    }
    for qt, data in raw.items():
        out = gq.dequantize(data.copy(), qt).astype(np.float32)
        manifest["dequant"][qt.name] = {
            "elements": int(out.size),
            "bytes": write(f"{qt.name}.blocks.bin", data)
            + write(f"{qt.name}.f32.bin", out.astype("<f4")),
        }

    for qt in SCALES:
        block_size, type_size = GGML_QUANT_SIZES[qt]
        n_blocks = 64 if block_size == 32 else 16
        blocks = gen_blocks(rng, qt, n_blocks)
        out = gq.dequantize(blocks.reshape(-1).copy(), qt).astype(np.float32).reshape(-1)
        assert out.size == n_blocks * block_size, (qt, out.shape)
        manifest["dequant"][qt.name] = {
            "blocks": n_blocks,
            "elements": int(out.size),
            "bytes": write(f"{qt.name}.blocks.bin", blocks)
            + write(f"{qt.name}.f32.bin", out.astype("<f4")),
        }


def quant_inputs(rng: np.random.Generator, block: int, n_blocks: int) -> np.ndarray:
    x = rng.standard_normal((n_blocks, block)).astype(np.float32)
    x *= np.exp2(rng.integers(-8, 8, (n_blocks, 1))).astype(np.float32)
    edge = [
        np.zeros(block),                                         # all zeros
        np.eye(1, block, 5)[0] * -3.0,                           # one negative non-zero
        np.eye(1, block, block - 1)[0] * 7.5,                    # one positive non-zero
        np.full(block, 1e-40),                                   # subnormal f32
        np.linspace(-1e30, 1e30, block),                         # huge (f16 scale overflows)
        np.full(block, 0.25),                                    # constant
        np.where(np.arange(block) % 2 == 0, 2.0, -2.0),          # equal-magnitude +/- max
        np.arange(block, dtype=np.float64) - block / 2 + 0.5,    # ramp with ties
        np.linspace(-8, 7, block),                               # exactly representable grid
        np.linspace(1e-6, 1e-5, block),                          # tiny (f16 subnormal scale)
    ]
    for i, e in enumerate(edge):
        if i < n_blocks:
            x[i] = np.asarray(e, dtype=np.float32)
    return x.reshape(-1)


def quant_fixtures(rng: np.random.Generator, manifest: dict) -> None:
    for qt in [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.TQ1_0, T.TQ2_0, T.MXFP4]:
        if qt in (T.F16, T.BF16):
            block, n_blocks = 1, 1024
            x = float_inputs(rng, 1024)
            if qt == T.BF16:
                x[20:24] = np.array([0x7F800001, 0xFF812345, 0x3F808000, 0x3F818000], dtype=np.uint32).view(np.float32)
        else:
            block = GGML_QUANT_SIZES[qt][0]
            n_blocks = 32 if block == 32 else 8
            x = quant_inputs(rng, block, n_blocks)
        with np.errstate(all="ignore"):
            q = gq.quantize(x.reshape(1, -1), qt)
        q = np.ascontiguousarray(q).view(np.uint8).reshape(-1)
        manifest["quant"][qt.name] = {
            "elements": int(x.size),
            "bytes": write(f"quant_{qt.name}.in.f32.bin", x.astype("<f4"))
            + write(f"quant_{qt.name}.out.bin", q),
        }


MODEL_TENSORS = {
    "Q8_0": ("token_embd.weight", 4),
    "Q5_0": ("blk.0.attn_k.weight", 4),
    "Q4_K": ("blk.0.attn_output.weight", 2),
    "Q6_K": (None, 2),  # first Q6_K tensor in the file
}


def model_fixtures(manifest: dict) -> None:
    path = os.environ.get("ANEDVD_GEMMA3_GGUF", "/root/.cache/models/gemma3-270m-q4_k_m.gguf")
    if not Path(path).exists():
        print(f"model {path} absent: skipping model_* fixtures")
        return
    reader = gguf.GGUFReader(path)
    manifest["model"] = {"file": Path(path).name}
    for tname, (tensor_name, rows) in MODEL_TENSORS.items():
        qt = T[tname]
        t = next(t for t in reader.tensors
                 if t.tensor_type == qt and (tensor_name is None or t.name == tensor_name))
        data = np.asarray(t.data)[:rows]  # (rows, row_bytes) uint8 view
        blocks = np.ascontiguousarray(data).reshape(-1)
        out = gq.dequantize(blocks.copy(), qt).astype(np.float32).reshape(-1)
        manifest["model"][tname] = {"tensor": t.name, "rows": rows, "elements": int(out.size),
                                    "bytes": write(f"model_{tname}.blocks.bin", blocks)
                                    + write(f"model_{tname}.f32.bin", out.astype("<f4"))}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    manifest: dict = {
        "generator": "crates/quant/tests/golden/gen_golden.py",
        "gguf_version": version("gguf"),
        "gguf_module": str(Path(gguf.__file__).parent),
        "numpy_version": np.__version__,
        "seed": SEED,
        "dequant": {},
        "quant": {},
    }
    with np.errstate(all="ignore"):
        dequant_fixtures(rng, manifest)
    quant_fixtures(rng, manifest)
    model_fixtures(manifest)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(v["bytes"] for k in ("dequant", "quant") for v in manifest[k].values())
    total += sum(v["bytes"] for v in manifest.get("model", {}).values() if isinstance(v, dict))
    print(f"gguf {manifest['gguf_version']} numpy {np.__version__}: "
          f"{len(manifest['dequant'])} dequant + {len(manifest['quant'])} quant fixtures, {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
