#!/usr/bin/env python3
"""Writes small seed inputs for the fuzz targets with the reference writers:
gguf-py's GGUFWriter (every metadata value type, a few tensor types) and the
Python `safetensors` package.

Usage: /work/venv/bin/python fuzz/seeds/gen_seeds.py
"""
import os

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def gguf_seed(path, alignment=None):
    w = GGUFWriter(path, "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 0.5)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 0.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_array("t.arr", ["a", "bc"])
    w.add_array("t.arr_i", [1, 2, 3])
    w.add_tensor("f32", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.add_tensor("f16", np.ones((3,), dtype=np.float16))
    w.add_tensor(
        "q8_0",
        np.zeros((1, 34), dtype=np.uint8),
        raw_dtype=GGMLQuantizationType.Q8_0,
    )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    gguf_seed(os.path.join(HERE, "gguf_parse", "tiny_v3.bin"))
    gguf_seed(os.path.join(HERE, "gguf_parse", "tiny_align64.bin"), alignment=64)
    save_file(
        {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], dtype=np.int64)},
        os.path.join(HERE, "safetensors_header", "tiny.safetensors"),
        metadata={"format": "np"},
    )
    save_file({}, os.path.join(HERE, "safetensors_header", "empty.safetensors"))


if __name__ == "__main__":
    main()
