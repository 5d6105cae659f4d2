"""Writes rope_goldens.json: inverse frequencies and attention factors from
HF transformers' ROPE_INIT_FUNCTIONS for a few rope_parameters sets, used by
crates/model/tests/rope.rs. Run: /work/venv/bin/python gen_rope_goldens.py"""
import json

import transformers
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

CASES = [
    {"name": "yarn_qwen", "head_dim": 64, "max_pos": 131072,
     "rope": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
              "original_max_position_embeddings": 32768}},
    {"name": "yarn_betas_attn", "head_dim": 32, "max_pos": 8192,
     "rope": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
              "original_max_position_embeddings": 1024, "beta_fast": 16.0,
              "beta_slow": 2.0, "attention_factor": 1.25}},
    {"name": "llama3", "head_dim": 64, "max_pos": 131072,
     "rope": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}},
    {"name": "linear", "head_dim": 16, "max_pos": 4096,
     "rope": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
]

# LongRoPE (Phi-3): factors per rotated pair, attention factor from the ratio
# of max_position_embeddings to original_max_position_embeddings; transformers
# uses the short factors up to the original context (seq_len None here).
LONGROPE = {"name": "longrope_phi3", "head_dim": 16, "partial_rotary_factor": 0.5,
            "max_pos": 131072, "original_max_pos": 4096,
            "rope": {"rope_type": "longrope", "rope_theta": 10000.0,
                     "short_factor": [1.0, 1.25, 2.5, 4.0],
                     "long_factor": [1.5, 3.0, 6.0, 12.0]}}

out = {"transformers": transformers.__version__, "cases": []}
for c in CASES:
    cfg = LlamaConfig(hidden_size=c["head_dim"] * 4, num_attention_heads=4,
                      head_dim=c["head_dim"], max_position_embeddings=c["max_pos"],
                      rope_parameters=dict(c["rope"]))
    inv_freq, attn = ROPE_INIT_FUNCTIONS[c["rope"]["rope_type"]](cfg, "cpu")
    out["cases"].append({**c, "inv_freq": [float(x) for x in inv_freq.tolist()],
                         "attention_factor": float(attn)})
from transformers import Phi3Config
c = LONGROPE
cfg = Phi3Config(hidden_size=c["head_dim"] * 4, num_attention_heads=4, num_key_value_heads=4,
                 max_position_embeddings=c["max_pos"],
                 original_max_position_embeddings=c["original_max_pos"],
                 partial_rotary_factor=c["partial_rotary_factor"],
                 rope_parameters=dict(c["rope"]))
inv_freq, attn = ROPE_INIT_FUNCTIONS["longrope"](cfg, "cpu")
out["cases"].append({**c, "inv_freq": [float(x) for x in inv_freq.tolist()],
                     "attention_factor": float(attn)})
with open("rope_goldens.json", "w") as f:
    json.dump(out, f, indent=1)
