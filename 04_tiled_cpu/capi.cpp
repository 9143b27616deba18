// libfa04.so: the C ABI of fa04.h over stage 04's forward (tiled.hpp). Exceptions stop here:
// every failure becomes a status code and a message for fa04_last_error().
#include <unistd.h>

#include <cmath>
#include <new>
#include <sstream>
#include <string>

#include "errors.hpp"
#include "fa04.h"
#include "fma_peak.hpp"
#include "problem.hpp"
#include "tiled.hpp"
#include "varlen.hpp"

namespace {

thread_local std::string g_error;
volatile double g_sink;

// The message, as one line of at most 300 characters.
int fail(int status, const std::string& msg) {
  g_error = fa::one_line(msg, 300);
  return status;
}

// The arguments every forward checks before it looks at the problem: the pointers, the scale,
// the block sizes and the thread count.
int check_args(const float* Q, const float* K, const float* V, float* O, float* LSE, float scale, int64_t Br,
               int64_t Bc, int threads) {
  if (!Q || !K || !V || !O || !LSE)
    return fail(FA04_INVALID_ARGUMENT, "Q, K, V, O, LSE: expected pointers, found NULL");
  if (!(std::isfinite(scale) && scale >= 0.f) || std::signbit(scale)) {
    std::ostringstream found;
    found << scale;
    return fail(FA04_INVALID_ARGUMENT, "--scale: expected a finite number > 0 (or 0 for 1/sqrt(d)), found " + found.str());
  }
  if (Br < 0 || Bc < 0)
    return fail(FA04_INVALID_ARGUMENT, "--block-q/--block-k: expected block sizes >= 0 (0: the default), found Br=" +
                                           std::to_string(Br) + " Bc=" + std::to_string(Bc));
  if (threads < 0 || threads > 256)
    return fail(FA04_INVALID_ARGUMENT, "--threads: expected 0 (all) to 256, found " + std::to_string(threads));
  return FA04_OK;
}

// The block buffers of every thread (the blocks and threads stage 04 picks for p from blk),
// against the machine's memory: they are zero-filled, so an allocation that overcommit let
// through would be paid for in the OOM killer, not here. *use_out (if given) gets the blocks.
int check_memory(const fa::AttnProblem& p, const tiled::Blocks& blk, tiled::Blocks* use_out = nullptr) {
  const tiled::Blocks use = tiled::blocks_for(p, blk);
  if (use_out) *use_out = use;
  const double need = double(use.threads) * double(sizeof(float)) * double(tiled::sram_floats(p.d, use));
  const double phys = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (phys > 0 && need > 0.9 * phys)
    return fail(FA04_OUT_OF_MEMORY, "--block-q/--block-k/--threads: expected block buffers within 90% of the " +
                                        std::to_string(int64_t(phys / (1 << 20))) + " MiB of memory, found " +
                                        std::to_string(int64_t(need / (1 << 20))) + " MiB (" +
                                        std::to_string(use.threads) + " threads)");
  return FA04_OK;
}

// fa04_forward and fa04_forward_variant: the checks, then stage 04 on the problem p (its sizes,
// mask and scale from the caller; the window and softcap too for the variant).
int forward_problem(const float* Q, const float* K, const float* V, float* O, float* LSE, fa::AttnProblem p,
                    int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int causal,
                    float scale, int64_t Br, int64_t Bc, int threads) {
  if (int s = check_args(Q, K, V, O, LSE, scale, Br, Bc, threads)) return s;
  p.B = B, p.H = H, p.H_kv = H_kv, p.N_q = N_q, p.N_k = N_k, p.d = d;
  p.causal = causal != 0;
  p.scale = scale;
  try {
    fa::validate(p);  // sizes, H % H_kv, and a window side below -1 or a softcap < 0 or not finite
    tiled::Blocks blk, use;
    blk.Br = Br, blk.Bc = Bc, blk.threads = threads;
    if (int s = check_memory(p, blk, &use)) return s;
    tiled::forward<float>(p, Q, K, V, O, LSE, use);
    return FA04_OK;
  } catch (const fa::InputError& e) {
    return fail(FA04_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(FA04_OUT_OF_MEMORY, "host memory exhausted (the block buffers, O(threads * (Br + Bc) * d))");
  }
}

// fa04_forward_varlen: the same checks on the packed batch (common/varlen.hpp), then stage 04 on
// each sequence's offset pointers (varlen_forward), each with the blocks and threads stage 04
// picks for that sequence from the caller's Br, Bc, threads.
int forward_varlen(const float* Q, const float* K, const float* V, float* O, float* LSE, const int32_t* cu_q,
                   const int32_t* cu_k, int64_t B, int64_t total_q, int64_t total_k, fa::AttnProblem p, float scale,
                   int64_t Br, int64_t Bc, int threads) {
  if (int s = check_args(Q, K, V, O, LSE, scale, Br, Bc, threads)) return s;
  if (!cu_q || !cu_k) return fail(FA04_INVALID_ARGUMENT, "cu_seqlens_q, cu_seqlens_k: expected pointers, found NULL");
  p.scale = scale;
  try {
    const fa::VarlenHost v = fa::varlen_from_arrays(cu_q, cu_k, B, total_q, total_k);
    fa::validate_varlen_problem(p, v);  // heads, head dim, variants; each sequence's size
    tiled::Blocks blk;
    blk.Br = Br, blk.Bc = Bc, blk.threads = threads;
    // Every sequence's buffers, checked before the first sequence runs (no output half written).
    for (int64_t b = 0; b < v.batch(); ++b)
      if (v.n_q(b) > 0 && v.n_k(b) > 0)
        if (int s = check_memory(fa::sequence_problem(p, v, b), blk)) return s;
    fa::varlen_forward(
        [&](const fa::AttnProblem& q, const float* Qb, const float* Kb, const float* Vb, float* Ob, float* Lb) {
          tiled::forward<float>(q, Qb, Kb, Vb, Ob, Lb, blk);
        },
        p, v, Q, K, V, O, LSE);
    return FA04_OK;
  } catch (const fa::InputError& e) {
    return fail(FA04_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(FA04_OUT_OF_MEMORY, "host memory exhausted (the offsets' copies, or the block buffers, "
                                    "O(threads * (Br + Bc) * d))");
  }
}

}  // namespace

extern "C" {

int fa04_forward(const float* Q, const float* K, const float* V, float* O, float* LSE, int64_t B,
                 int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int causal,
                 float scale, int64_t Br, int64_t Bc, int threads) {
  g_error.clear();
  return forward_problem(Q, K, V, O, LSE, fa::AttnProblem{}, B, H, H_kv, N_q, N_k, d, causal, scale, Br, Bc, threads);
}

int fa04_forward_variant(const float* Q, const float* K, const float* V, float* O, float* LSE, int64_t B,
                         int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int causal,
                         float scale, int64_t Br, int64_t Bc, int threads, int64_t window_left,
                         int64_t window_right, float softcap) {
  g_error.clear();
  fa::AttnProblem p;
  p.window_left = window_left, p.window_right = window_right, p.softcap = softcap;
  return forward_problem(Q, K, V, O, LSE, p, B, H, H_kv, N_q, N_k, d, causal, scale, Br, Bc, threads);
}

int fa04_forward_varlen(const float* Q, const float* K, const float* V, float* O, float* LSE,
                        const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, int64_t B, int64_t total_q,
                        int64_t total_k, int64_t H, int64_t H_kv, int64_t d, int causal, float scale, int64_t Br,
                        int64_t Bc, int threads, int64_t window_left, int64_t window_right, float softcap) {
  g_error.clear();
  fa::AttnProblem p;
  p.H = H, p.H_kv = H_kv, p.d = d;
  p.causal = causal != 0;
  p.window_left = window_left, p.window_right = window_right, p.softcap = softcap;
  return forward_varlen(Q, K, V, O, LSE, cu_seqlens_q, cu_seqlens_k, B, total_q, total_k, p, scale, Br, Bc, threads);
}

int fa04_blocks_for(int64_t B, int64_t H, int64_t N_q, int64_t N_k, int64_t d, int causal, int threads,
                    int64_t* Br, int64_t* Bc) {
  g_error.clear();
  if (!Br || !Bc) return fail(FA04_INVALID_ARGUMENT, "Br, Bc: expected pointers, found NULL");
  if (threads < 0 || threads > 256)
    return fail(FA04_INVALID_ARGUMENT, "--threads: expected 0 (all) to 256, found " + std::to_string(threads));
  fa::AttnProblem p;
  p.B = B, p.H = H, p.H_kv = 1, p.N_q = N_q, p.N_k = N_k, p.d = d;
  p.causal = causal != 0;
  try {
    fa::validate(p);
  } catch (const fa::InputError& e) {
    return fail(FA04_INVALID_ARGUMENT, e.what());
  }
  tiled::Blocks blk;
  blk.threads = threads;
  const tiled::Blocks b = tiled::blocks_for(p, blk);
  *Br = b.Br, *Bc = b.Bc;
  return FA04_OK;
}

double fa04_fma_peak_gflops(int threads, int repeats) {
  g_error.clear();
  if (threads < 1 || threads > 256 || repeats < 1 || repeats > 100) {
    fail(FA04_INVALID_ARGUMENT, "threads, repeats: expected 1 to 256 and 1 to 100, found " +
                                    std::to_string(threads) + ", " + std::to_string(repeats));
    return -1;
  }
  double best = 0, sink = 0;
  for (int r = 0; r < repeats; ++r) best = std::max(best, tiled::measure_fma_peak(threads, 20'000'000, &sink));
  g_sink = sink;  // the loops' results are kept, so they cannot be optimised away
  return best;
}

const char* fa04_isa(void) { return tiled::mk::kIsa; }
int fa04_vector_floats(void) { return tiled::mk::VW; }
const char* fa04_last_error(void) { return g_error.c_str(); }

}  // extern "C"
