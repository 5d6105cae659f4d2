#!/usr/bin/env python3
"""Writes a synthetic GGUF of REAL shape with random weights, for speed benchmarks only.

  --kind moe           qwen15-moe-a27b-synth-q4_k_m.gguf: GGUF arch `qwen2moe` with the exact
                       dimensions of Qwen/Qwen1.5-MoE-A2.7B (hidden 2048, 24 layers, 16 heads / 16
                       KV heads of 128, 60 routed experts of FFN 1408 with 4 used per token, a shared
                       expert of FFN 5632 behind its sigmoid gate ffn_gate_inp_shexp, vocab 151936,
                       context 8192, rope theta 1e6, rms eps 1e-6, q/k/v biases, untied output):
                       14.3 B parameters.
  --kind dense         qwen2-dense-a27b-synth-q4_k_m.gguf: a dense `qwen2` twin with the same ACTIVE
                       parameters per token: same hidden/layers/heads/vocab/biases, FFN width
                       4*1408 + 5632 = 11264 (2.7 B parameters).
  --kind llama-3.2-1b  llama32-1b-synth-*.gguf: `llama`, meta-llama/Llama-3.2-1B's config (hidden
                       2048, 16 layers, 32 heads / 8 KV heads of 64, FFN 8192, vocab 128256,
                       context 131072, rope theta 5e5, rms eps 1e-5, tied embeddings): 1.24 B.
  --kind qwen2.5-3b    qwen25-3b-synth-*.gguf: `qwen2`, Qwen/Qwen2.5-3B's config (hidden 2048, 36
                       layers, 16 heads / 2 KV heads of 128, FFN 11008, vocab 151936, context 32768,
                       rope theta 1e6, rms eps 1e-6, q/k/v biases, tied embeddings): 3.09 B.
  --kind llama-3.1-8b  llama31-8b-synth-*.gguf: `llama`, meta-llama/Llama-3.1-8B's config (hidden
                       4096, 32 layers, 32 heads / 8 KV heads of 128, FFN 14336, vocab 128256,
                       context 131072, rope theta 5e5, rms eps 1e-5, untied output): 8.03 B.
The Llama 3 shapes leave out its long-context RoPE scaling (the `rope_freqs` tensor), which
changes no shape or cost at the contexts benchmarked.

Tensor names, shapes, dtypes and metadata keys are the ones convert_hf_to_gguf.py writes for
these architectures (and llama.cpp's loader asks for): blk.N.attn_{q,k,v}.{weight,bias} (biases
for Qwen only), attn_output, attn_norm, ffn_norm, ffn_gate_inp (router, F32),
ffn_{gate,up,down}_exps stacked 3-D, ffn_gate_inp_shexp (F32, ne {2048,1}),
ffn_{gate,up,down}_shexp, ffn_{gate,up,down}, token_embd, output_norm, output (absent when tied).
The tokenizer is synthetic but complete: `gpt2` BPE laid out like the model's own (256 byte
tokens, then merges building 2- and 3-character tokens over [Ġa-zA-Z0-9]). Qwen: 151643 BPE
tokens, <|endoftext|> <|im_start|> <|im_end|> as CONTROL tokens 151643-151645, [PADn] UNUSED up to
151935, pre-tokenizer `qwen2`, bos=eos=pad=151643, no BOS added, ChatML template. Llama 3: 128000
BPE tokens, then 256 CONTROL specials named as Llama 3's (<|begin_of_text|> 128000,
<|end_of_text|> 128001, <|eot_id|> 128009, <|reserved_special_token_N|>), pre-tokenizer
`llama-bpe`, BOS 128000 added, EOS 128001, no template (base models). Text generated from these
files is garbage by construction; only speed is meaningful.

Method: a Q8_0 GGUF is written tensor by tensor straight from random int8 quants and fp16 block
scales (no float copy of the model; peak memory is about one tensor, <= ~1 GB), matrices with an
element std of ~0.02 (norms ~1, biases std 0.02, router std 0.02 so experts are used about
uniformly), then `nice -n 10 llama-quantize --allow-requantize Q8_0.gguf OUT.gguf Q4_K_M N`
gives llama.cpp's real Q4_K_M type mix (its fallbacks included, e.g. for ffn_down_exps whose
1408 columns are not a multiple of 256), and the Q8_0 intermediate is deleted (--keep-q8 keeps
it: a Q8_0 file of the same model, every matrix Q8_0, for the Q8_0 rows of a sweep). The output is
deterministic for a given --seed (each tensor has its own generator seeded by (seed, index)).

Usage:
  scripts/gen-synthetic-gguf.py --kind moe   --out-dir /root/.cache/models --seed 0
  scripts/gen-synthetic-gguf.py --kind dense --out-dir /root/.cache/models --seed 0
  scripts/gen-synthetic-gguf.py --kind llama-3.1-8b --keep-q8
On 2 cores with llama.cpp b11312: moe writes 14.2 GiB of Q8_0 in ~80 s, llama-quantize takes ~11 min,
result 8.84 GiB (Q4_K 193, F32 169, Q6_K 25, Q8_0 12, Q5_0 12 tensors); dense writes 2.7 GiB in
~15 s, quantizes in ~1.5 min, result 1.57 GiB (Q4_K 145, F32 121, Q6_K 25). Peak disk is the
intermediate plus the result (~23 GiB for moe).
Options: --llama-quantize PATH (default: $LLAMA_QUANTIZE, then llama-quantize on PATH, then
~/.cache/llamacpp-ref/build/bin/llama-quantize), --threads N for llama-quantize (default 2),
--q8-only (stop after the Q8_0 file), --keep-q8 (keep the intermediate), --ftype (default Q4_K_M).
Needs numpy and gguf (pip install gguf numpy).
"""
import argparse, os, shutil, subprocess, sys, time
from collections import Counter
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIALS = [{0: "<|begin_of_text|>", 1: "<|end_of_text|>", 6: "<|start_header_id|>",
                    7: "<|end_header_id|>", 9: "<|eot_id|>"}.get(i, f"<|reserved_special_token_{i}|>")
                   for i in range(256)]
N_EXPERT, N_EXPERT_USED, N_FF_EXP, N_FF_SHEXP = 60, 4, 1408, 5632  # Qwen1.5-MoE-A2.7B


class Shape:
    """One architecture's dimensions (from its config.json) and tokenizer layout."""

    def __init__(self, stem, arch, name, embd, layers, heads, kv_heads, head_dim, ff, vocab, ctx,
                 theta, eps, qkv_bias, tied, moe=False):
        self.stem, self.arch, self.name = stem, arch, name
        self.embd, self.layers, self.heads, self.kv_heads, self.head_dim = embd, layers, heads, kv_heads, head_dim
        self.ff, self.vocab, self.ctx, self.theta, self.eps = ff, vocab, ctx, theta, eps
        self.qkv_bias, self.tied, self.moe = qkv_bias, tied, moe
        self.llama3 = arch == "llama"
        self.specials = LLAMA3_SPECIALS if self.llama3 else QWEN_SPECIALS
        self.vocab_real = 128000 if self.llama3 else 151643  # BPE ids below the specials
        self.eos_id = 128001 if self.llama3 else self.vocab_real
        self.bos_id = 128000 if self.llama3 else self.vocab_real


SHAPES = {
    # Qwen/Qwen1.5-MoE-A2.7B; `ff` is intermediate_size, written as feed_forward_length like
    # convert_hf_to_gguf does.
    "moe": Shape("qwen15-moe-a27b-synth", "qwen2moe", "Qwen1.5-MoE-A2.7B synthetic (random weights)",
                 2048, 24, 16, 16, 128, 5632, 151936, 8192, 1e6, 1e-6, True, False, moe=True),
    # Same active FFN parameters per token as the MoE: 4 * 1408 + 5632 = 11264.
    "dense": Shape("qwen2-dense-a27b-synth", "qwen2",
                   "Qwen2 dense twin of Qwen1.5-MoE-A2.7B active parameters, synthetic (random weights)",
                   2048, 24, 16, 16, 128, N_EXPERT_USED * N_FF_EXP + N_FF_SHEXP, 151936, 8192, 1e6, 1e-6,
                   True, False),
    "llama-3.2-1b": Shape("llama32-1b-synth", "llama", "Llama-3.2-1B shape, synthetic (random weights)",
                          2048, 16, 32, 8, 64, 8192, 128256, 131072, 5e5, 1e-5, False, True),
    "qwen2.5-3b": Shape("qwen25-3b-synth", "qwen2", "Qwen2.5-3B shape, synthetic (random weights)",
                        2048, 36, 16, 2, 128, 11008, 151936, 32768, 1e6, 1e-6, True, True),
    "llama-3.1-8b": Shape("llama31-8b-synth", "llama", "Llama-3.1-8B shape, synthetic (random weights)",
                          4096, 32, 32, 8, 128, 14336, 128256, 131072, 5e5, 1e-5, False, False),
}
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

W_STD = 0.02  # element std of every matrix
Q8_BLOCK, Q8_BYTES = gguf.GGML_QUANT_SIZES[QT.Q8_0]  # 32 values, 34 bytes (fp16 d + 32 int8)
Q8_STD = np.sqrt(((np.arange(-128, 128, dtype=np.float64)) ** 2).mean())  # std of a uniform int8


def bytes_to_unicode():
    """GPT-2's byte -> printable character map, in Qwen's token order (token 0 is '!')."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def synthetic_vocab(sh):
    tokens = bytes_to_unicode()
    alphabet = ["Ġ"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
        [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [chr(c) for c in range(ord("0"), ord("9") + 1)]
    merges = []
    pairs = [a + b for a in alphabet for b in alphabet]
    for a in alphabet:
        for b in alphabet:
            merges.append(f"{a} {b}")
    tokens += pairs
    need = sh.vocab_real - len(tokens)
    for p in pairs:
        for c in alphabet:
            if need == 0:
                break
            tokens.append(p + c)
            merges.append(f"{p} {c}")
            need -= 1
    assert len(tokens) == sh.vocab_real and len(set(tokens)) == len(tokens)
    types = [gguf.TokenType.NORMAL] * sh.vocab_real
    tokens += sh.specials
    types += [gguf.TokenType.CONTROL] * len(sh.specials)
    for i in range(len(tokens), sh.vocab):
        tokens.append(f"[PAD{i}]")
        types.append(gguf.TokenType.UNUSED)
    assert len(tokens) == sh.vocab and len(merges) == sh.vocab_real - 256
    return tokens, types, merges


def tensor_plan(sh):
    """[(name, numpy shape (outermost first, i.e. reversed ggml ne), 'q8'|'norm'|'f32')] in convert order."""
    E, q, kv = sh.embd, sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim
    plan = [("token_embd.weight", (sh.vocab, E), "q8")]
    for i in range(sh.layers):
        b = f"blk.{i}."
        plan.append((b + "attn_norm.weight", (E,), "norm"))
        for t, rows in (("q", q), ("k", kv), ("v", kv)):
            plan.append((b + f"attn_{t}.weight", (rows, E), "q8"))
            if sh.qkv_bias:
                plan.append((b + f"attn_{t}.bias", (rows,), "f32"))
        plan += [(b + "attn_output.weight", (E, q), "q8"), (b + "ffn_norm.weight", (E,), "norm")]
        if sh.moe:
            plan += [
                (b + "ffn_gate_inp.weight", (N_EXPERT, E), "f32"),
                (b + "ffn_gate_exps.weight", (N_EXPERT, N_FF_EXP, E), "q8"),
                (b + "ffn_up_exps.weight", (N_EXPERT, N_FF_EXP, E), "q8"),
                (b + "ffn_down_exps.weight", (N_EXPERT, E, N_FF_EXP), "q8"),
                (b + "ffn_gate_inp_shexp.weight", (1, E), "f32"),
                (b + "ffn_gate_shexp.weight", (N_FF_SHEXP, E), "q8"),
                (b + "ffn_up_shexp.weight", (N_FF_SHEXP, E), "q8"),
                (b + "ffn_down_shexp.weight", (E, N_FF_SHEXP), "q8"),
            ]
        else:
            plan += [
                (b + "ffn_gate.weight", (sh.ff, E), "q8"),
                (b + "ffn_up.weight", (sh.ff, E), "q8"),
                (b + "ffn_down.weight", (E, sh.ff), "q8"),
            ]
    plan.append(("output_norm.weight", (E,), "norm"))
    if not sh.tied:
        plan.append(("output.weight", (sh.vocab, E), "q8"))
    return plan


def make_tensor(rng, shape, how):
    n = int(np.prod(shape))
    if how == "norm":
        return (1.0 + 0.05 * rng.standard_normal(n)).astype(np.float32).reshape(shape)
    if how == "f32":
        return (W_STD * rng.standard_normal(n)).astype(np.float32).reshape(shape)
    # Q8_0: per block of 32, an fp16 scale d (jittered +-25% around W_STD / std(int8)) and 32 uniform int8
    nb = n // Q8_BLOCK
    out = np.empty((nb, Q8_BYTES), dtype=np.uint8)
    d = (W_STD / Q8_STD * rng.uniform(0.75, 1.25, nb)).astype(np.float16)
    out[:, :2] = d.view(np.uint8).reshape(nb, 2)
    step = 1 << 21  # blocks per chunk of random bytes (64 MiB)
    for s in range(0, nb, step):
        e = min(nb, s + step)
        out[s:e, 2:] = np.frombuffer(rng.bytes((e - s) * Q8_BLOCK), dtype=np.uint8).reshape(e - s, Q8_BLOCK)
    return out


def write_q8(path, kind, seed):
    sh = SHAPES[kind]
    w = gguf.GGUFWriter(str(path), sh.arch)
    w.add_type("model")
    w.add_name(sh.name)
    w.add_description(f"SYNTHETIC: random weights of real shape for speed benchmarks only, written by "
                      f"anedvd scripts/gen-synthetic-gguf.py --kind {kind} --seed {seed}")
    w.add_context_length(sh.ctx)
    w.add_embedding_length(sh.embd)
    w.add_block_count(sh.layers)
    w.add_feed_forward_length(sh.ff)
    w.add_head_count(sh.heads)
    w.add_head_count_kv(sh.kv_heads)
    w.add_rope_freq_base(sh.theta)
    w.add_layer_norm_rms_eps(sh.eps)
    if sh.llama3:
        w.add_rope_dimension_count(sh.head_dim)
        w.add_vocab_size(sh.vocab)
    if sh.moe:
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_EXPERT_USED)
        w.add_expert_feed_forward_length(N_FF_EXP)
        w.add_expert_shared_feed_forward_length(N_FF_SHEXP)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    t0 = time.time()
    tokens, types, merges = synthetic_vocab(sh)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe" if sh.llama3 else "qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(sh.bos_id)
    w.add_eos_token_id(sh.eos_id)
    if sh.llama3:
        w.add_add_bos_token(True)
    else:
        w.add_pad_token_id(sh.eos_id)
        w.add_add_bos_token(False)
        w.add_chat_template(CHATML)
    print(f"vocab: {len(tokens)} tokens, {len(merges)} merges ({time.time() - t0:.1f}s)", flush=True)

    plan = tensor_plan(sh)
    total = 0
    for name, shape, how in plan:
        if how == "q8":
            n = int(np.prod(shape))
            assert shape[-1] % Q8_BLOCK == 0
            nbytes = n // Q8_BLOCK * Q8_BYTES
            w.add_tensor_info(name, (*shape[:-1], shape[-1] // Q8_BLOCK * Q8_BYTES), np.dtype(np.uint8), nbytes,
                              raw_dtype=QT.Q8_0)
        else:
            nbytes = int(np.prod(shape)) * 4
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes)
        total += nbytes
    n_params = sum(int(np.prod(s)) for _, s, _ in plan)
    print(f"{path.name}: {len(plan)} tensors, {n_params / 1e9:.3f} B parameters, {total / 2**30:.2f} GiB of Q8_0/F32 data",
          flush=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    t0 = time.time()
    done = 0
    for idx, (name, shape, how) in enumerate(plan):
        data = make_tensor(np.random.default_rng([seed, idx]), shape, how)
        w.write_tensor_data(data)
        done += data.nbytes
        del data
        if not name.startswith("blk.") or name.endswith(("ffn_down.weight", "ffn_down_shexp.weight")):
            el = time.time() - t0
            print(f"  [{idx + 1}/{len(plan)}] {name:32s} {done / 2**30:6.2f}/{total / 2**30:.2f} GiB "
                  f"{el:6.1f}s ({done / 2**20 / max(el, 1e-9):.0f} MiB/s)", flush=True)
    w.close()
    print(f"wrote {path} ({path.stat().st_size / 2**30:.2f} GiB) in {time.time() - t0:.1f}s", flush=True)


def find_quantize(explicit):
    for c in [explicit, os.environ.get("LLAMA_QUANTIZE"), shutil.which("llama-quantize"),
              str(Path.home() / ".cache/llamacpp-ref/build/bin/llama-quantize")]:
        if c and Path(c).is_file():
            return c
    sys.exit("llama-quantize not found: pass --llama-quantize PATH (or set LLAMA_QUANTIZE)")


def type_mix(path):
    r = gguf.GGUFReader(str(path))
    mix = Counter(t.tensor_type.name for t in r.tensors)
    return len(r.tensors), mix


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=str(Path.home() / ".cache/models"))
    ap.add_argument("--kind", choices=list(SHAPES), required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ftype", default="Q4_K_M", help="llama-quantize type (default Q4_K_M)")
    ap.add_argument("--threads", type=int, default=2, help="llama-quantize threads (default 2)")
    ap.add_argument("--llama-quantize", default=None)
    ap.add_argument("--q8-only", action="store_true", help="stop after writing the Q8_0 GGUF")
    ap.add_argument("--keep-q8", action="store_true", help="keep the Q8_0 intermediate")
    a = ap.parse_args()

    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = SHAPES[a.kind].stem
    q8 = out_dir / f"{stem}-q8_0.gguf"
    out = out_dir / f"{stem}-{a.ftype.lower()}.gguf"
    quantize = None if a.q8_only else find_quantize(a.llama_quantize)

    t_all = time.time()
    print(f"step 1/2: writing {q8}", flush=True)
    t0 = time.time()
    write_q8(q8, a.kind, a.seed)
    t_write = time.time() - t0
    if a.q8_only:
        print(f"done: {q8} (Q8_0 write {t_write:.0f}s)")
        return
    cmd = ["nice", "-n", "10", quantize, "--allow-requantize", str(q8), str(out), a.ftype, str(a.threads)]
    print(f"step 2/2: {' '.join(cmd)}", flush=True)
    t0 = time.time()
    subprocess.run(cmd, check=True)
    t_quant = time.time() - t0
    if not a.keep_q8:
        q8.unlink()
        print(f"deleted {q8}", flush=True)
    n, mix = type_mix(out)
    print(f"done: {out} ({out.stat().st_size / 2**30:.2f} GiB, {out.stat().st_size} bytes), {n} tensors: "
          + ", ".join(f"{k} {v}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1])))
    print(f"wall time: Q8_0 write {t_write:.0f}s, llama-quantize {t_quant:.0f}s, total {time.time() - t_all:.0f}s")


if __name__ == "__main__":
    main()
