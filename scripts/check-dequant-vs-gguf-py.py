#!/usr/bin/env python3
"""Checks that `anedvd inspect --tensor NAME --dequantize OUT` equals gguf-py's
dequantization bit for bit, for every tensor of a GGUF file.

Usage: scripts/check-dequant-vs-gguf-py.py MODEL.gguf [--anedvd target/release/anedvd]
Needs numpy and gguf (pip install gguf numpy). Exit status 1 on any mismatch.
"""
import argparse, os, subprocess, sys, tempfile
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("model")
ap.add_argument("--anedvd", default="target/release/anedvd")
a = ap.parse_args()
reader = GGUFReader(a.model)
bad = 0
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "t.f32")
    for i, t in enumerate(reader.tensors):
        ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        subprocess.run([a.anedvd, "inspect", a.model, "--tensor", t.name, "--dequantize", out], check=True,
                       stdout=subprocess.DEVNULL)
        ours = np.fromfile(out, dtype="<f4")
        same = ours.shape == ref.shape and np.array_equal(ours.view(np.uint32), ref.view(np.uint32))
        if not same:
            nan_same = ours.shape == ref.shape and np.array_equal(np.isnan(ours), np.isnan(ref)) and \
                np.array_equal(ours[~np.isnan(ours)].view(np.uint32), ref[~np.isnan(ref)].view(np.uint32))
            if not nan_same:
                bad += 1
                print(f"MISMATCH {t.name} ({t.tensor_type.name}): {ours.shape} vs {ref.shape}")
        print(f"\r{i + 1}/{len(reader.tensors)} tensors checked", end="", file=sys.stderr)
print(file=sys.stderr)
types = sorted({t.tensor_type.name for t in reader.tensors})
print(f"{len(reader.tensors)} tensors ({', '.join(types)}): {len(reader.tensors) - bad} bit-identical, {bad} mismatched")
sys.exit(1 if bad else 0)
