"""A small GPT (python/examples/gpt.py) trained on the CPU with fa_course.attention and with SDPA
math: the loss falls, and the two loss curves agree within a tolerance derived from float64.

The tolerance. Two float32 runs of the same training differ only by rounding, and rounding
differences grow as training goes on (every step feeds the next), so no fixed number is right
for every length. The yardstick is measured instead: the same training in float64 (SDPA math,
the whole model in float64) is the truth, and SDPA math in float32 shows how far float32
rounding alone moves the curve. fa_course's curve must stay within twice that distance (plus
1e-6 relative), the course's rule for every stage (err <= 2 x err of a plain implementation in
the same precision + a floor), applied to the loss at every step."""
import os
import sys
import unittest

from util import max_err  # noqa: F401  (puts python/ on the path)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import gpt  # noqa: E402

CFG = dict(steps=40, ctx=32, batch=8, dim=32, heads=2, layers=2, lr=3e-3, seed=0)


class Training(unittest.TestCase):
    def test_curves_agree_and_loss_falls(self):
        fa = gpt.train("fa", **CFG)
        math32 = gpt.train("sdpa_math", **CFG)
        math64 = gpt.train("sdpa_math", dtype="fp64", **CFG)
        gap_fa = max(abs(a - b) / b for a, b in zip(fa["losses"], math64["losses"]))
        gap_32 = max(abs(a - b) / b for a, b in zip(math32["losses"], math64["losses"]))
        print(f"\nloss {fa['losses'][0]:.4f} -> {fa['losses'][-1]:.4f}; max relative gap to float64: "
              f"fa_course {gap_fa:.3e}, SDPA math fp32 {gap_32:.3e}; fa vs SDPA fp32 "
              f"{gpt.max_rel_gap(fa['losses'], math32['losses']):.3e}")
        self.assertLessEqual(gap_fa, 2 * gap_32 + 1e-6)
        last = sum(fa["losses"][-5:]) / 5
        self.assertLess(last, 0.8 * fa["losses"][0], "the loss did not fall")


if __name__ == "__main__":
    unittest.main(verbosity=2)
