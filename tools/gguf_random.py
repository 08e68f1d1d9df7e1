#!/usr/bin/env python3
"""gguf_random.py: a random-weight GGUF with the shape of a Hugging Face Llama config.json (one of
bench/configs/), for llama.cpp speed runs beside `cinfer bench --random-weights` on the same config. Values
do not change the speed of either engine. Matrices F16 (quantize with llama-quantize), norms F32; a byte-level
vocabulary with placeholder tokens so llama.cpp loads it.
usage: PYTHONPATH=<llama.cpp>/gguf-py python3 tools/gguf_random.py CONFIG.json OUT.gguf"""
import json
import sys

import numpy as np
import gguf

cfg = json.load(open(sys.argv[1]))
out = sys.argv[2]
D, L, F = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
H, KV, V = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"]), cfg["vocab_size"]
HD = cfg.get("head_dim") or D // H
tied = cfg.get("tie_word_embeddings", False)
bos, eos = cfg.get("bos_token_id", 1), cfg.get("eos_token_id", 2)
eos = eos[0] if isinstance(eos, list) else eos
rng = np.random.default_rng(1234)


def mat(rows, cols):
    return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)


w = gguf.GGUFWriter(out, "llama")
w.add_context_length(min(cfg.get("max_position_embeddings", 8192), 8192))
w.add_embedding_length(D)
w.add_block_count(L)
w.add_feed_forward_length(F)
w.add_head_count(H)
w.add_head_count_kv(KV)
w.add_key_length(HD)
w.add_value_length(HD)
w.add_rope_dimension_count(HD)
w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
w.add_vocab_size(V)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

# GPT-2 byte-level alphabet for ids 0-255, placeholders after, two control tokens
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
tokens = [chr(c) for _, c in sorted(zip(bs, cs))] + ["t%d" % i for i in range(256, V)]
types = [gguf.TokenType.NORMAL] * V
for i in (bos, eos):
    tokens[i] = "<|special_%d|>" % i
    types[i] = gguf.TokenType.CONTROL
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("llama-bpe")
w.add_token_list(tokens)
w.add_token_types(types)
w.add_token_merges(["\u0120 t"])
w.add_bos_token_id(bos)
w.add_eos_token_id(eos)

w.add_tensor("token_embd.weight", mat(V, D))
for i in range(L):
    p = "blk.%d." % i
    w.add_tensor(p + "attn_norm.weight", np.ones(D, dtype=np.float32))
    w.add_tensor(p + "attn_q.weight", mat(H * HD, D))
    w.add_tensor(p + "attn_k.weight", mat(KV * HD, D))
    w.add_tensor(p + "attn_v.weight", mat(KV * HD, D))
    w.add_tensor(p + "attn_output.weight", mat(D, H * HD))
    w.add_tensor(p + "ffn_norm.weight", np.ones(D, dtype=np.float32))
    w.add_tensor(p + "ffn_gate.weight", mat(F, D))
    w.add_tensor(p + "ffn_up.weight", mat(F, D))
    w.add_tensor(p + "ffn_down.weight", mat(D, F))
w.add_tensor("output_norm.weight", np.ones(D, dtype=np.float32))
if not tied:
    w.add_tensor("output.weight", mat(V, D))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
