// The bug zoo (docs/bug_zoo.md): classic FlashAttention bugs, each injectable at the one place
// it would live, to show that the course's tests catch it. The correct code is written as it
// would be without the zoo; each bug is a named hook on its own line beside it, marked by a
// trailing `// zoo: <the bug>` comment, that compiles to nothing in a normal build:
//
//   m[r] = neg_inf, l[r] = 0.f;
//   FA_ZOO(FINITE_NEG_INF_INIT, m[r] = -1e4f);  // zoo: the running max starts finite
//
//   FA_ZOO(NAME, code);        in the build made with -DFA_BUG_ID=NAME, `code` runs here. Right
//                              after the correct line it overwrites what that line did; right
//                              before it, it acts first (a `return` or `continue`, or an input
//                              changed before it is read).
//   FA_ZOO_INSTEAD(NAME, code) in NAME's build, `code` runs instead of the statement on the next
//                              line (note: no semicolon). Only where that statement's effect
//                              cannot be undone after it: a barrier, a wait.
//
// The zoo builds (CMake option FA_BUG_ZOO, ctest label `zoo`) compile a stage's tests once per
// bug and pass only if those tests FAIL.
#pragma once

namespace fa::zoo {

enum Bug {
  NONE,
  RESCALE_BY_NEW_KEY,   // stage 03: rescale the running sum against the new key, not the new max
  NAN_ON_MASKED_ROW,    // stage 03: exp(-inf - -inf) on a row that has seen no key yet
  LSE_LOG2,             // stage 04: LSE = m + log2(l), base 2 instead of e
  HARDCODED_SCALE,      // stage 04: 1/sqrt(d) instead of the problem's scale
  FINITE_NEG_INF_INIT,  // stage 04: the running max starts at -1e4 instead of -inf
  FINITE_MASK,          // stage 04: masked scores set to -1e4 instead of -inf
  CAUSAL_TOP_LEFT,      // stage 04: causal aligned top-left (j <= i) instead of bottom-right
  KV_HEAD_MOD,          // stage 04: query head h reads kv head h % H_kv instead of h / (H / H_kv)
  DIVIDE_BY_L_IN_LOOP,  // stage 04: O_i divided by l after every key block, the old l never multiplied back
  D_FROM_DO_ONLY,       // stage 06: D = rowsum(dO * dO) instead of rowsum(dO * O)
  GQA_FIRST_HEAD_ONLY,  // stage 06: dK, dV from the first query head of a GQA group only
  BWD_CAUSAL_TOP_LEFT,  // stage 06: the backward's dK, dV pass masks top-left while the forward is bottom-right
  // The GPU entries (stage 05; built with -DFA_BUG_ZOO_GPU=ON, run by scripts/gpu_check.sh):
  MISSING_SYNC,         // v1: no barrier before the next K_j, V_j overwrite the tiles others read
  OFFSET_32BIT,         // v1: Q's offset in 32 bits, which wraps past 2^31 elements
  RAGGED_NO_MASK,       // v2: keys past N_k in the last (ragged, zero-filled) block not masked
  FP16_ROWSUM,          // v2: the running row sum l kept in fp16 (rounded; at long N it stops growing)
  FP16_O_ACCUM,         // v2: the unnormalised O rounded to fp16 after every key block (overflows past 65504)
  MBAR_WRONG_PARITY,    // v12: a tile's first K_j waited for at the parity of the buffer's previous use
};

#ifndef FA_BUG_ID
#define FA_BUG_ID NONE
#endif
inline constexpr Bug kBug = FA_BUG_ID;

}  // namespace fa::zoo

// `if constexpr` on a constant: in every other build the hook's code is discarded at compile
// time (never instantiated in a template), so the normal build's code is exactly the correct code.
#define FA_ZOO(name, ...) \
  if constexpr (::fa::zoo::kBug == ::fa::zoo::name) { __VA_ARGS__; } else static_cast<void>(0)
#define FA_ZOO_INSTEAD(name, ...) \
  if constexpr (::fa::zoo::kBug == ::fa::zoo::name) { __VA_ARGS__; } else
