// Stage 05's FP8 forward (issue 35): v15 (kernels/v15_fp8.cuh), FlashAttention-3's FP8 forward on
// Hopper, behind two entry points.
//
//   fa05::forward_fp8(p, Q, K, V, O, LSE, {}, stream);        // bf16 in, quantised here, bf16 out
//   fa05::forward_fp8_e4m3(p, in, O, LSE, {}, stream);        // e4m3 + scales in (already quantised)
//
// Layout as every stage's (common/problem.hpp): Q, O [B,H,N_q,d]; K, V [B,H_kv,N_k,d]; LSE
// [B,H,N_q] float32, natural log. O is bf16. Bottom-right causal, GQA, any N_q and N_k; d = 128.
//
// The quantisation (FlashAttention-3's block scales, with power-of-two scales: common/fp8.hpp,
// e4m3_pow2_scale): Q has one scale per 64 query rows of a (b, h), K and V one per 128 keys of a
// (b, kv head); element x is stored as e4m3(x / s) and means e4m3 s. A query block of v15 (128
// rows) holds two Q blocks, one per consumer warpgroup; a key block of v15 is one K and V block.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "problem.hpp"
#include "runner.hpp"

namespace fa05 {

constexpr int64_t kFp8RowsQ = 64;    // query rows per Q scale
constexpr int64_t kFp8RowsKV = 128;  // keys per K scale and per V scale

// The key that column k of V^T holds, within each group of 16 (v15's transposed V, made by the
// pre-pass): 0 1 8 9 2 3 10 11 4 5 12 13 6 7 14 15. Why: the thread that holds scores of keys
// 2 t, 2 t + 1, 8 + 2 t, 9 + 2 t (the fp32 accumulator of S, t = lane % 4) must hand them to P V as
// k = 4 t ... 4 t + 3 (the 8-bit A operand); storing V^T's keys in this order makes those the same
// keys, with no shuffle of P (v15_fp8.cuh, pack_p). A permutation: P V sums over keys in any order.
FA_HOST_DEVICE constexpr int vt_key(int k) { return (k & ~15) | (2 * ((k >> 2) & 3) + (k & 1) + 8 * ((k >> 1) & 1)); }

// Scale blocks per slice: Q's ceil(N_q / 64) per (b, h), K's and V's ceil(N_k / 128) per (b, kv head).
inline int64_t fp8_q_blocks(const fa::AttnProblem& p) { return (p.N_q + kFp8RowsQ - 1) / kFp8RowsQ; }
inline int64_t fp8_kv_blocks(const fa::AttnProblem& p) { return (p.N_k + kFp8RowsKV - 1) / kFp8RowsKV; }

// Device tensors of forward_fp8_e4m3(): e4m3 bytes (__nv_fp8_e4m3, torch.float8_e4m3fn) in the
// layout above, and float32 scales: sQ [B H, fp8_q_blocks], sK and sV [B H_kv, fp8_kv_blocks]
// (the (b, h) or (b, kv head) slice major). Scales must be finite and positive, and a slice's V
// scales within about 2^100 of each other; none of this is checked on the device (the host
// wrappers make powers of two from the data): a zero, non-finite or far-spread scale gives
// meaningless or NaN rows.
struct Fp8Inputs {
  const void* Q = nullptr;
  const void* K = nullptr;
  const void* V = nullptr;
  const float* sQ = nullptr;
  const float* sK = nullptr;
  const float* sV = nullptr;
};

// How v15 runs a problem (host arithmetic; no GPU needed, tested in CI).
struct Fp8Plan {
  std::string runs = "v15";
  int64_t Br = 0, Bc = 0;         // 128 x 128
  int64_t threads = 0;            // 384: a producer warpgroup and two consumer warpgroups
  int64_t tiles = 0;              // query blocks B H ceil(N_q / Br), walked by persistent blocks
  int64_t blocks = 0;             // persistent thread blocks: min(tiles, SMs, Config::persistent_blocks)
  int64_t smem_bytes = 0;         // per thread block
  int64_t N_k16 = 0;              // V^T's row length: N_k rounded up to 16 (16-byte TMA rows)
  int64_t workspace_bytes = 0;    // V^T (B H_kv d N_k16 bytes) and the tile counter; forward_fp8
                                  // adds the e4m3 copies of Q, K, V and their scales
};

// Throws fa::InputError for an invalid problem (fa::validate) and Unsupported, naming the flag,
// for one v15 does not run: d != 128 (--head-dim), a window or a softcap (--window, --softcap), a
// packed batch, a GPU that is not sm_90 or a build without sm_90a code (--dtype: "fp8 needs
// Hopper"), sizes past the copy engine's 32-bit coordinates (N_q, N_k, B H >= 2^31), or
// Config::Br/Bc other than 128.
Fp8Plan plan_fp8(const fa::AttnProblem& p, const Config& cfg = {});

// v15 on e4m3 inputs with their scales (Fp8Inputs): transposes V into the workspace (the pre-pass)
// and runs the kernel on `stream`, without waiting. O [B,H,N_q,d] bf16, LSE float32. Needs Q, K, V,
// O 16-byte aligned (Unsupported otherwise), LSE and the scales 4-byte aligned (fa::InputError
// otherwise), checked before any launch. Throws as plan_fp8, fa::CudaError when CUDA fails.
void forward_fp8_e4m3(const fa::AttnProblem& p, const Fp8Inputs& in, void* O, float* LSE, const Config& cfg,
                      cudaStream_t stream);

// The same from bf16 Q, K, V: quantises them on the GPU (one power-of-two scale per block, as
// above: the same bytes and scales common/fp8.hpp's quantize_e4m3_blocks makes on the host) into
// workspace, then forward_fp8_e4m3 (the same alignment, checked before the quantisers run). A
// non-finite input gives a non-finite scale and NaN rows.
void forward_fp8(const fa::AttnProblem& p, const void* Q, const void* K, const void* V, void* O, float* LSE,
                 const Config& cfg, cudaStream_t stream);
// Workspace bytes of forward_fp8 (plan_fp8's, plus the e4m3 copies and their scales).
int64_t fp8_workspace_bytes(const fa::AttnProblem& p, const Config& cfg = {});

}  // namespace fa05
