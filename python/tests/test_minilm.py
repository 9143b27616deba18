"""all-MiniLM-L6-v2 with its attention replaced by fa_course.attention (python/examples/minilm.py),
on the CPU in float32, against the same model with SDPA math: both against the model in float64.

Rule (the course's): fa_course's error to float64 is at most twice SDPA math's in float32, plus a
floor of 1e-6 (for gradients: relative to the largest float64 gradient) — for the sentence embedding of the course's text
(data/text.txt, 256 tokens) and for one fine-tuning step's gradients of every weight.

Also the float16 copy that travels to the GPU machine (tools/minilm_fp16.py): made afresh, its
sha256 is the one minilm.py pins, its values are the float16 rounding of the published ones, a
wrong digest or an unkept word piece is refused, and minilm.py's own comparison passes on it."""
import hashlib
import json
import os
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from util import max_err

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import minilm  # noqa: E402
import minilm_fp16  # noqa: E402


class MiniLMDropIn(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ref, cls.tok = minilm.load("sdpa_math", torch.float64)
        cls.fa = minilm.load("fa", torch.float32)[0]
        cls.sdpa = minilm.load("sdpa_math", torch.float32)[0]
        text = (minilm.REPO / "data" / "text.txt").read_text(encoding="utf-8")
        cls.x = minilm.ids_of(cls.tok, text, 256)
        cls.y = minilm.ids_of(cls.tok, minilm.PAIR_TEXT)

    def test_published_example(self):
        # The model card's embedding of this sentence (as tools/extract_qkv.py checks it).
        e = self.fa.embed(minilm.ids_of(self.tok, minilm.EXAMPLE_TEXT))[0, :6]
        pub = torch.tensor([0.0676569194, 0.0634959638, 0.0487131178, 0.0793049559, 0.0374480858, 0.00265275244])
        self.assertLess(max_err(e, pub), 1e-6)

    def test_embeddings(self):
        with torch.no_grad():
            e64, efa, e32 = self.ref.embed(self.x), self.fa.embed(self.x), self.sdpa.embed(self.x)
        cos = float(F.cosine_similarity(efa.double(), e64, dim=-1))
        err_fa, err_32 = max_err(efa, e64), max_err(e32, e64)
        print(f"\nembedding, N = {self.x.shape[1]}: cosine(fa, float64) = {cos:.9f}; max error fa {err_fa:.2e}, "
              f"SDPA math fp32 {err_32:.2e}")
        self.assertGreater(cos, 1 - 1e-9)
        self.assertLessEqual(err_fa, 2 * err_32 + 1e-6)

    def test_finetune_step_gradients(self):
        _, g64 = minilm.finetune_grads(self.ref, self.x, self.y)
        _, gfa = minilm.finetune_grads(self.fa, self.x, self.y)
        _, g32 = minilm.finetune_grads(self.sdpa, self.x, self.y)

        top = max(float(g.abs().max()) for g in g64.values())

        def rel(g):  # the worst weight's max |g - g64|, relative to the largest gradient of all
            return max(max_err(g[k], g64[k]) for k in g64) / top
        r_fa, r_32 = rel(gfa), rel(g32)
        print(f"\ngradients of {len(g64)} weights: largest relative error fa {r_fa:.2e}, SDPA math fp32 {r_32:.2e}")
        self.assertLessEqual(r_fa, 2 * r_32 + 1e-6)


class Fp16Copy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src, cls.dir = minilm.model_dir(), Path(cls.tmp.name) / "minilm16"
        cls.info = minilm_fp16.make_copy(cls.src, cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def tampered(self, name, edit):
        """A copy of the folder with the file `name` changed by edit(bytes) -> bytes."""
        d = Path(self.tmp.name) / f"tampered_{name}"
        shutil.copytree(self.dir, d, dirs_exist_ok=True)
        (d / name).write_bytes(edit((d / name).read_bytes()))
        return d

    def test_digest_is_the_pinned_one(self):
        digest = hashlib.sha256((self.dir / "model.safetensors").read_bytes()).hexdigest()
        self.assertEqual(digest, self.info["sha256"])
        self.assertEqual(digest, minilm.WEIGHTS16_SHA256)
        self.assertEqual(self.info["source_sha256"], minilm.WEIGHTS_SHA256)

    def test_values_are_the_fp16_rounding(self):
        from safetensors.numpy import load_file
        data = (self.dir / "model.safetensors").read_bytes()
        ours, meta = minilm.read_safetensors(data)
        theirs = load_file(str(self.dir / "model.safetensors"))  # the format's own reader agrees
        self.assertEqual(ours.keys(), theirs.keys())
        for k in ours:
            self.assertTrue(np.array_equal(ours[k], theirs[k]) and ours[k].dtype == theirs[k].dtype, k)
        self.assertEqual(meta["source_sha256"], minilm.WEIGHTS_SHA256)
        pub, _ = minilm.read_weights(self.src)
        w, source = minilm.read_weights(self.dir)
        rows = source["rows"]
        self.assertEqual(w.keys(), pub.keys())
        for k in pub:
            want = pub[k].astype(np.float16).astype(np.float32)
            if k == "embeddings.word_embeddings.weight":
                self.assertTrue(np.array_equal(w[k][rows], want[rows]))
                self.assertEqual(np.count_nonzero(np.delete(w[k], rows, axis=0)), 0)
            else:
                self.assertTrue(np.array_equal(w[k], want), k)
        tok = minilm.tokenizer(self.src)
        for t in (minilm.course_text(), minilm.PAIR_TEXT, minilm.EXAMPLE_TEXT):  # kept: what minilm.py embeds
            self.assertTrue(np.isin(tok.encode(t).ids, rows).all())

    def test_refuses_wrong_digests(self):
        bad_source = self.tampered(minilm.FP16_INFO, lambda b: b.replace(minilm.WEIGHTS_SHA256.encode(), b"0" * 64))
        with self.assertRaisesRegex(RuntimeError, "source_sha256"):
            minilm.read_weights(bad_source)
        flipped = self.tampered("model.safetensors", lambda b: b[:-1] + bytes([b[-1] ^ 1]))
        with self.assertRaisesRegex(RuntimeError, "expected sha256"):
            minilm.read_weights(flipped)

    def test_refuses_word_pieces_not_kept(self):
        m, tok = minilm.load("sdpa_math", weights_dir=self.dir)
        with self.assertRaisesRegex(ValueError, "ids: expected word pieces"):
            m.embed(minilm.ids_of(tok, "quantum chromodynamics"))

    def test_main_on_the_copy(self):
        # minilm.py's comparison (fa vs SDPA math, float32, on the fp16-rounded weights), as the GPU runs it.
        out = Path(self.tmp.name) / "minilm.json"
        self.assertEqual(minilm.main(["--weights", str(self.dir), "--json", str(out)]), 0)
        r = json.loads(out.read_text())
        self.assertTrue(r["pass"])
        self.assertIn("float16 rounding", r["weights"]["weights"])
        self.assertEqual(r["runs"][0]["gradients"]["weights"], 101)


if __name__ == "__main__":
    unittest.main(verbosity=2)
