"""all-MiniLM-L6-v2 with its attention replaced by fa_course.attention (python/examples/minilm.py),
on the CPU in float32, against the same model with SDPA math: both against the model in float64.

Rule (the course's): fa_course's error to float64 is at most twice SDPA math's in float32, plus a
floor of 1e-6 (for gradients: relative to the largest float64 gradient) — for the sentence embedding of the course's text
(data/text.txt, 256 tokens) and for one fine-tuning step's gradients of every weight."""
import os
import sys
import unittest

import torch
import torch.nn.functional as F

from util import max_err

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import minilm  # noqa: E402


class MiniLMDropIn(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ref, cls.tok = minilm.load("sdpa_math", torch.float64)
        cls.fa = minilm.load("fa", torch.float32)[0]
        cls.sdpa = minilm.load("sdpa_math", torch.float32)[0]
        text = (minilm.REPO / "data" / "text.txt").read_text(encoding="utf-8")
        cls.x = minilm.ids_of(cls.tok, text, 256)
        cls.y = minilm.ids_of(cls.tok, "Four score and seven years ago our fathers brought forth a new nation.")

    def test_published_example(self):
        # The model card's embedding of this sentence (as tools/extract_qkv.py checks it).
        e = self.fa.embed(minilm.ids_of(self.tok, "This is an example sentence"))[0, :6]
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
