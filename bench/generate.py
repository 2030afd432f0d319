#!/usr/bin/python3
"""Greedy text generation from the char GPT, ctrain against PyTorch, side by side in one run.

The model is examples/char_gpt.yaml's (4 layers, 4 heads, d_model 128, context 128, vocab 256,
tied head) with random weights (N(0, 0.1), so the logits are not flat), written once as a
safetensors file under nanoGPT's names and loaded by every side:

  ctrain           bench/bench_generate: ct_model_decoder with the key/value cache (no graph,
                   no autograd), the prompts' pass then one token per step;
  ctrain no cache  the same decoder recomputing each window through the model's graph;
  nanoGPT loop     PyTorch running nanoGPT's GPT module and its `generate` loop (greedy): the
                   whole window (cropped to the context) again for every token;
  PyTorch + cache  a short twin of the same module with a key/value cache (prefill, then one
                   token per step against the cached keys and values).

Past the context every side slides the window as nanoGPT does (the positions of the kept tokens
change, so the cached sides compute the window again), so all four generate the same tokens;
the table says whether row 0's first 64 tokens agree. Each row: tokens/s over the whole
generation (batch * tokens / wall time, the prompts' pass included), the time to the first
token (the prompts' pass, after one untimed warm-up pass) and the median time of a later
step; ratios are ctrain's tokens/s over each other side's. Prompts: --prompt-len bytes of a
fixed text, row r from offset 7r (all rows the same length: nanoGPT's loop takes no padding).
Both sides run --threads threads (default 1). torch.no_grad() on the PyTorch side.

    /usr/bin/python3 bench/generate.py [--build build] [--batches 1,16] [--tokens 256]
                                       [--prompt-len 32] [--threads 1] [--repeats 3]

A tiny run to check that it works: --tokens 8 --batches 1,2 --repeats 1.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
L, H, C, T, V = 4, 4, 128, 128, 256
TEXT = (b"It was the best of times, it was the worst of times, it was the age of wisdom, it was "
        b"the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it "
        b"was the season of Light, it was the season of Darkness, it was the spring of hope.")


def cpu_line():
    model, flags = "?", []
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and model == "?":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            have = line.split(":", 1)[1].split()
            flags = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if f in have]
            break
    return "cpu: %s (%d cores; %s)" % (model, os.cpu_count(), " ".join(flags))


# ---- nanoGPT's model (its names, its inference forward) ----

def nanogpt(torch):
    import math
    import torch.nn as nn
    import torch.nn.functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

        def forward(self, x):
            B, t, _ = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            k = k.view(B, t, H, C // H).transpose(1, 2)
            q = q.view(B, t, H, C // H).transpose(1, 2)
            v = v.view(B, t, H, C // H).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, t, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(C, 4 * C)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(C)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
                h=nn.ModuleList([Block() for _ in range(L)]), ln_f=nn.LayerNorm(C)))
            self.lm_head = nn.Linear(C, V, bias=False)
            self.transformer.wte.weight = self.lm_head.weight

        def forward(self, idx):
            pos = torch.arange(0, idx.size(1), dtype=torch.long)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            return self.lm_head(x[:, [-1], :])  # nanoGPT at inference: the last position only

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, on_token):
            """nanoGPT's loop, greedy (its top_k=1): the cropped window again for each token."""
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= T else idx[:, -T:]
                logits = self(idx_cond)[:, -1, :]
                idx_next = torch.argmax(logits, dim=-1, keepdim=True)
                idx = torch.cat((idx, idx_next), dim=1)
                on_token()
            return idx

    return GPT


def cached_generate(torch, model, idx, max_new_tokens, on_token):
    """The twin with a key/value cache: the same weights, prefill then one token per step."""
    import torch.nn.functional as F
    tr = model.transformer
    B = idx.size(0)
    kc = torch.zeros(L, B, H, T, C // H)
    vc = torch.zeros(L, B, H, T, C // H)
    scale = 1.0 / (C // H) ** 0.5

    def run(tokens, start):
        # tokens [B, t] at positions start..start+t-1; keys/values of those positions cached
        t = tokens.size(1)
        x = tr.wte(tokens) + tr.wpe(torch.arange(start, start + t))
        end = start + t
        for i, blk in enumerate(tr.h):
            q, k, v = blk.attn.c_attn(blk.ln_1(x)).split(C, dim=2)
            q = q.view(B, t, H, C // H).transpose(1, 2)
            kc[i, :, :, start:end] = k.view(B, t, H, C // H).transpose(1, 2)
            vc[i, :, :, start:end] = v.view(B, t, H, C // H).transpose(1, 2)
            att = (q @ kc[i, :, :, :end].transpose(-2, -1)) * scale
            if t > 1:
                mask = torch.ones(t, end, dtype=torch.bool).tril(diagonal=start)
                att = att.masked_fill(~mask, float("-inf"))
            y = (F.softmax(att, dim=-1) @ vc[i, :, :, :end]).transpose(1, 2).reshape(B, t, C)
            x = x + blk.attn.c_proj(y)
            x = x + blk.mlp(blk.ln_2(x))
        return model.lm_head(tr.ln_f(x[:, -1, :]))

    with torch.no_grad():
        window = idx[:, -T:]
        n = window.size(1)
        logits = run(window, 0)
        for k in range(max_new_tokens):
            nxt = torch.argmax(logits, dim=-1, keepdim=True)
            idx = torch.cat((idx, nxt), dim=1)
            on_token()
            if k + 1 == max_new_tokens:
                break
            if n < T:  # room in the cache: one token
                logits = run(nxt, n)
                n += 1
            else:  # the window slides: every position changes, compute it again
                logits = run(idx[:, -T:], 0)
    return idx


def timed(gen, *args):
    """Runs gen(..., on_token): tokens/s, first token ms, median later step ms, the tokens."""
    stamps = []

    def on_token():
        stamps.append(time.perf_counter())
    t0 = time.perf_counter()
    out = gen(*args, on_token)
    total = stamps[-1] - t0
    steps = [b - a for a, b in zip(stamps, stamps[1:])]
    return total, (stamps[0] - t0) * 1e3, (statistics.median(steps) if steps else 0) * 1e3, out


def torch_side(weights, batch, tokens, plen, threads, kind):
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    model = nanogpt(torch)()
    model.eval()
    sd = {k: torch.from_numpy(v) for k, v in read_safetensors(np, weights).items()}
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    for i in range(L):  # nanoGPT's causal-mask buffers on torch < 2.0: not weights
        sd["transformer.h.%d.attn.bias" % i] = model.state_dict()["transformer.h.%d.attn.bias" % i]
    model.load_state_dict(sd)
    idx = torch.tensor([[TEXT[7 * r + j] for j in range(plen)] for r in range(batch)])
    if kind == "loop":
        gen = model.generate
    else:
        def gen(i, n, cb):
            return cached_generate(torch, model, i, n, cb)
    gen(idx, 1, lambda: None)  # warm-up: the prompts' pass once
    total, ttft, per, out = timed(gen, idx, tokens)
    return {"tokens_per_s": batch * tokens / total, "ttft_ms": ttft, "per_token_ms": per,
            "tokens": out[0, plen:plen + 64].tolist()}


# ---- weights ----

def read_safetensors(np, path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(d["shape"]).copy()
    return out


def write_weights(path):
    """Random nanoGPT weights (N(0, 0.1), LayerNorms 1 and 0, biases 0.01 N) under its names."""
    import numpy as np
    rng = np.random.default_rng(0)
    shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}
    for i in range(L):
        p = "transformer.h.%d." % i
        shapes.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                       p + "attn.c_attn.weight": (3 * C, C), p + "attn.c_attn.bias": (3 * C,),
                       p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                       p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                       p + "mlp.c_fc.weight": (4 * C, C), p + "mlp.c_fc.bias": (4 * C,),
                       p + "mlp.c_proj.weight": (C, 4 * C), p + "mlp.c_proj.bias": (C,)})
    shapes.update({"transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)})
    header, blobs, off = {}, [], 0
    for name, shape in shapes.items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            a = np.ones(shape, np.float32)
        elif name.endswith(("ln_1.bias", "ln_2.bias", "ln_f.bias")):
            a = np.zeros(shape, np.float32)
        elif len(shape) == 1:
            a = (0.01 * rng.standard_normal(shape)).astype(np.float32)
        else:
            a = (0.1 * rng.standard_normal(shape)).astype(np.float32)
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def ctrain_side(exe, weights, batch, tokens, plen, threads, cache):
    args = [exe, "--weights", weights, "--batch", str(batch), "--tokens", str(tokens),
            "--prompt-len", str(plen), "--threads", str(threads)]
    if not cache:
        args.append("--no-cache")
    res = subprocess.run(args, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("generate.py: bench_generate failed (exit %d):\n%s" % (res.returncode,
                                                                       res.stderr[-3000:]))
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) == 8 and sys.argv[1] == "--torch":
        r = torch_side(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                       int(sys.argv[6]), sys.argv[7])
        print(json.dumps(r))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    exe = os.path.join(a.build, "bench", "bench_generate")
    import torch
    print(cpu_line())
    print("PyTorch %s, %d thread(s) each side; %d tokens after a %d-byte prompt; median of %d"
          % (torch.__version__, a.threads, a.tokens, a.prompt_len, a.repeats))
    with tempfile.TemporaryDirectory(prefix="ctrain-generate-") as tmp:
        weights = os.path.join(tmp, "gpt.safetensors")
        write_weights(weights)
        print("%-6s %-16s %10s %10s %12s %9s  %s" % ("batch", "side", "tokens/s", "TTFT ms",
                                                       "ms/token", "ctrain x", "same tokens"))
        for batch in [int(b) for b in a.batches.split(",")]:
            runs = {k: [] for k in ("ctrain", "ctrain no cache", "nanoGPT loop",
                                     "PyTorch + cache")}
            for _ in range(a.repeats):  # alternating, so a busy moment hits every side
                runs["ctrain"].append(ctrain_side(exe, weights, batch, a.tokens, a.prompt_len,
                                                  a.threads, True))
                runs["ctrain no cache"].append(ctrain_side(exe, weights, batch, a.tokens,
                                                           a.prompt_len, a.threads, False))
                for kind, name in (("loop", "nanoGPT loop"), ("cache", "PyTorch + cache")):
                    res = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch",
                                          weights, str(batch), str(a.tokens),
                                          str(a.prompt_len), str(a.threads), kind],
                                         capture_output=True, text=True)
                    if res.returncode != 0:
                        sys.exit("generate.py: the PyTorch side failed:\n" + res.stderr[-3000:])
                    runs[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
            med = {k: {f: statistics.median(r[f] for r in v)
                       for f in ("tokens_per_s", "ttft_ms", "per_token_ms")}
                   for k, v in runs.items()}
            ref = runs["ctrain"][0]["tokens"]
            for name, m in med.items():
                same = runs[name][0]["tokens"] == ref
                print("%-6d %-16s %10.0f %10.2f %12.3f %9.2f  %s" % (
                    batch, name, m["tokens_per_s"], m["ttft_ms"], m["per_token_ms"],
                    med["ctrain"]["tokens_per_s"] / m["tokens_per_s"], "yes" if same else "NO"))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
