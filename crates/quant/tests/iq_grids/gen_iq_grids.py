#!/usr/bin/env python3
"""Dumps gguf-py's i-quant lookup tables as raw bytes, to cross-check ours.

anedvd's tables (`src/iq/grids.rs`) are generated from ggml's
`ggml-common.h`; gguf-py (`gguf.quants`) carries its own, independently
packed copies (2 bits per grid byte in `grid_hex`). This script decodes
gguf-py's copies and writes one file per table next to itself:

    <NAME>.bin   the table's bytes in ggml's in-memory order
                 (grid point i = bytes [i*w, (i+1)*w), w = 8 or 4)

Run: /work/venv/bin/python crates/quant/tests/iq_grids/gen_iq_grids.py
Checked by the unit test `iq::tests::grids_match_gguf_py`.
"""
from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
import gguf.quants as gq

OUT = Path(__file__).resolve().parent


def grid(cls, dtype) -> bytes:
    cls.init_grid()
    g = np.asarray(cls.grid).reshape(cls.grid_shape)
    out = g.astype(dtype)
    assert (out.astype(np.float32) == g).all(), cls.__name__
    return out.tobytes()


def main() -> None:
    tables = {
        "IQ2XXS_GRID": grid(gq.IQ2_XXS, np.uint8),
        "IQ2XS_GRID": grid(gq.IQ2_XS, np.uint8),
        "IQ2S_GRID": grid(gq.IQ2_S, np.uint8),
        "IQ3XXS_GRID": grid(gq.IQ3_XXS, np.uint8),
        "IQ3S_GRID": grid(gq.IQ3_S, np.uint8),
        "IQ1S_GRID": grid(gq.IQ1_S, np.int8),
        "KSIGNS_IQ2XS": bytes(gq.IQ2_XXS.ksigns),
        "KVALUES_IQ4NL": np.array(gq.IQ4_NL.kvalues, dtype=np.int8).tobytes(),
    }
    manifest = {
        "generator": "crates/quant/tests/iq_grids/gen_iq_grids.py",
        "gguf_version": version("gguf"),
        "numpy_version": np.__version__,
        "iq1s_delta": float(gq.IQ1_S.delta),
        "tables": {},
    }
    for name, data in tables.items():
        (OUT / f"{name}.bin").write_bytes(data)
        manifest["tables"][name] = len(data)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
