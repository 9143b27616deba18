// Stage 05's one entry point: every kernel version behind one signature, so that one program
// (main.cpp), one test (test_cuda_tiled.cpp), one benchmark (bench_cuda_tiled.cpp), the tour and
// the C ABI (fa05.h, for PyTorch via ctypes) serve every version a later step adds.
//
//   fa05::forward("v1", p, DType::bf16, Q, K, V, O, LSE, {}, stream);   // device pointers
//
// Layout (common/problem.hpp): Q, O [B,H,N_q,d]; K, V [B,H_kv,N_k,d] in the dtype; LSE [B,H,N_q]
// float32, natural log. Bottom-right causal, GQA, any N_q and N_k.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtype.hpp"
#include "errors.hpp"
#include "problem.hpp"
#include "varlen.hpp"

namespace fa05 {

// Knobs (0 = the default). v1 takes all three; v5 ... v13 take Br and Bc among block_shapes().
struct Config {
  int64_t sram_bytes = 0;  // v1: M, the shared memory (bytes) the blocks are sized from (default 48 KiB)
  int64_t Br = 0;          // query rows per block (v1 default: from M, FA1 Alg. 1 line 1)
  int64_t Bc = 0;          // key/value rows per block (v1 default: from M)
  // The GPU planned for, for plan() alone (forward() always plans for the current device):
  int sm = 0;                // compute capability major * 10 + minor (v7 ... v12 need 90: wgmma); 0: the
                             // current device's (fa::gpu_compute_capability()), 90 without one
  int64_t smem_optin = 0;    // shared memory one block may opt in to, bytes; 0: the current
                             // device's (fa::gpu_smem_optin_bytes()), kMaxSmemSm90 without one
  int64_t persistent_blocks = 0;  // v8, v10 ... v12: at most this many persistent blocks (0: as many as stay
                                  // resident); the tests use a few, so each walks many tiles
  int sm_count = 0;  // for plan() alone: the GPU's SMs, which v14's split count fills (0: the current
                     // device's, fa::gpu_sm_count(); 132, an H200's, without one)
  int64_t splits = 0;  // v14: the key ranges per (batch, kv head) (0: plan() chooses from the SMs)
};

// A KV cache for decode (issue 33; common/kv_cache.hpp gives the semantics): device pointers, read
// by v14 only. The problem's N_k is the cache's capacity per sequence. forward() does not read the
// arrays on the host (that would cost a synchronisation per decode step): validate them with
// fa::validate_kv_cache() where they are made. The kernel still clamps a length to 0 ... N_k and
// reads zeros for a page outside 0 ... num_pages - 1, so a bad table cannot read past the cache.
struct KvCache {
  const int32_t* lens = nullptr;         // [B]: sequence b has keys 0 .. lens[b] - 1; nullptr: N_k each
  const int32_t* block_table = nullptr;  // [B, pages_per_seq]: the page of keys n P .. n P + P - 1 of
                                         // sequence b; nullptr: K, V contiguous [B, H_kv, N_k, d]
  int64_t page_size = 0;                 // P, 16 ... 256, when block_table is set
  int64_t pages_per_seq = 0;             // the table's row length: N_k = pages_per_seq P
  int64_t num_pages = 0;                 // K and V are [num_pages, H_kv, P, d]
  bool has_lens() const { return lens != nullptr; }
  bool paged() const { return block_table != nullptr; }
  bool any() const { return has_lens() || paged(); }
};
// A packed variable-length batch (issue 34; common/varlen.hpp gives the semantics): device
// pointers, read by v13 only, in one launch. The problem's B is the number of sequences, its N_q
// and N_k the longest sequence's (fa::varlen_problem(): the padded problem the batch avoids,
// which sizes the grid); Q and O are [total_q, H, d], K and V [total_k, H_kv, d], LSE [H, total_q].
// forward_varlen() does not read the arrays on the host (a synchronisation per call): validate them
// where they are made (fa::validate_varlen). The kernel clamps each offset to 0 ... total and each
// length to the longest, so bad offsets cannot read or write outside the tensors.
using Varlen = fa::VarlenDevice;  // common/varlen.hpp
// A block shape, rows: Br query rows (16 per warp), Bc keys per K/V block.
struct BlockShape {
  int64_t Br, Bc;
};
// The shapes a version with a choice of block shape (v5 ... v13) is compiled for at native width d
// (its sweep runs them all; empty for the others), and the one it uses by default for d and a
// problem of N_q query rows and N_k keys (the sweep's winner; only v13's depends on N: its larger
// blocks win on long sequences only; N_q = N_k = 0, the default, asks for the short-sequence one).
std::vector<BlockShape> block_shapes(const std::string& kernel, int64_t d);
BlockShape default_shape(const std::string& kernel, int64_t d, int64_t N_q = 0, int64_t N_k = 0);

struct KernelInfo {
  std::string name;   // what --kernel takes: "v1", "cublas"
  std::string file;   // where it lives, relative to 05_cuda_tiled/
  std::string idea;   // the one new idea, a line
  bool P_in_dtype;    // multiplies P in 16 bits when the dtype is fp16/bf16 (the battery's
                      // baseline then rounds P too: conformance.hpp)
  int64_t max_d;      // largest head dimension it supports
  // What plan() and the launch need to know about it (kernels(): one row per version says it once):
  bool tensor_cores = false;  // fp16/bf16 only, at its native widths and padded ones (v2 ... v13; else v1 runs)
  bool wgmma = false;         // sm_90a only (v7 ... v13; else v5 runs, at the same block shape)
  bool shaped = false;        // takes --block-q/--block-k among block_shapes() (v5 ... v13)
  bool persistent = false;    // as many blocks as stay resident, each walking tiles; takes
                              // --persistent-blocks (v8, v10 ... v12)
  bool tile_counter = false;  // its tiles come from a 4-byte counter, the call's workspace (v10 ... v12)
  int64_t extra_threads = 0;  // threads launched beyond its compute warps (v12: the producer warpgroup)
};

// Every kernel, in course order ("auto" is not one: plan() resolves it to one of these).
const std::vector<KernelInfo>& kernels();
// Throws fa::InputError("--kernel", ...) for an unknown name (and for "auto").
const KernelInfo& kernel_info(const std::string& name);

// A problem a kernel does not support (head dim, size): an InputError, reported by the C ABI as
// FA05_UNSUPPORTED rather than FA05_INVALID_ARGUMENT.
struct Unsupported : fa::InputError {
  using fa::InputError::InputError;
};

// How a kernel runs a problem. Host arithmetic: no GPU needed (tested in CI); for v7 ... v12 it asks the
// current device's compute capability unless Config::sm gives one.
struct Plan {
  std::string runs;             // the kernel that runs: the one asked for, or v1 (v5 for v7 ... v12) where it cannot
  std::string note;             // why it fell back ("" if it did not)
  int64_t Br = 0, Bc = 0;       // block sizes, rows
  int64_t threads = 0;          // threads per thread block of the main kernel
  int64_t blocks = 0;           // thread blocks of the main kernel; v8, v10 ... v12: its tiles (query blocks), which
                                // min(tiles, SMs x resident blocks per SM) persistent blocks run
  int64_t persistent_blocks = 0;  // v8, v10 ... v12: Config::persistent_blocks, the cap on those blocks
  int64_t smem_bytes = 0;       // shared memory per thread block, bytes
  int64_t workspace_bytes = 0;  // extra GPU memory the call allocates, bytes (v10 ... v13: the tile counter;
                                // and the padded copies below)
  // Head-dim padding (common/cuda/pad_columns.hpp). d_kernel: the native width the kernel that runs
  // is compiled for, the smallest of its widths >= d (v13: 32, 64, 96, 128, 192, 256; v2 ... v12: 64,
  // 128; v1, cublas: d itself). d_buffers: the row width of the tensors it reads: d, or (where the
  // kernel cannot pad by itself) d rounded up, in zero-padded workspace copies of Q, K, V and O.
  // v13 reads rows of any d that is a multiple of 8 (TMA fills the rest of its width with zeros).
  int64_t d_kernel = 0, d_buffers = 0;
  bool padded_copies = false;  // d_buffers != d: the kernel reads the workspace copies, not Q, K, V, O
  // v14 (split-KV decode): the keys of each (batch, kv head) in `splits` ranges of keys_per_split
  // (a multiple of its 64-key tile), one thread block each; splits > 1 adds the partial states
  // (O_s in fp32 and LSE_s, splits x B H N_q x (d_buffers + 1) floats) to the workspace and a
  // second kernel that merges them. row_tiles: tiles of 16 packed rows ((H / H_kv) N_q per kv head).
  int64_t splits = 0, keys_per_split = 0, row_tiles = 0;
};

// "auto": the kernel plan() runs when asked for "auto", for this dtype, d and GPU (Config::sm), with
// the measurement that chose it (the lab notebook's tables, docs/lab/05_cuda_tiled.md).
struct AutoChoice {
  std::string kernel, why;
};
AutoChoice auto_kernel(const fa::AttnProblem& p, fa::DType dtype, const Config& cfg = {});

// The shared memory one thread block may use on an sm_90 GPU (H100/H200), bytes. forward()
// checks against the running device's own limit.
inline constexpr int64_t kMaxSmemSm90 = 227 * 1024;

// Throws fa::InputError for an invalid problem (fa::validate) and Unsupported for one the kernel
// cannot run (d > max_d, blocks whose shared memory exceeds kMaxSmemSm90, a grid past 2^31 - 1
// blocks, a block shape it is not compiled for, a knob the kernel does not take); the message
// names the flag. The tensor-core versions run fp16/bf16: v2 ... v12 at d <= 128 (padded to 64 or
// 128), v13 at every d <= 256; for anything else they fall back to v1 (v12 at d > 128: v13), and the
// plan says so (runs, note). kernel "auto" is auto_kernel()'s choice; its note says which and why. v7 ... v12 (wgmma) run on sm_90 only, and
// only in a build for sm_90a; elsewhere it falls back to v5, at its own block shape where that fits
// the GPU's shared memory, and says so. Without --block-q/--block-k, v5 and v7 ... v12 take their default
// shape, or the largest compiled one that fits the GPU's shared memory (an A100's 163 KiB holds
// no 128 x 128 block at d = 128).
Plan plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const Config& cfg = {});
// The same for a call with a KV cache (only its sizes and which pointers are set are read): v14 and
// auto take one (auto then runs v14); every other kernel is Unsupported ("--cache-lens" or
// "--block-table"), as is a paged cache whose d is not a multiple of 8 (padding would copy the cache)
// or whose sizes disagree with N_k (pages_per_seq P != N_k).
Plan plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const Config& cfg,
          const KvCache& cache);
// The same for a packed batch (only its totals and whether cu_q is set are read): v13 and auto
// (which runs v13 on a Hopper build and GPU) take one, in fp16/bf16; every other kernel, fp32 and a
// GPU without wgmma are Unsupported ("--cu-seqlens-q"), as is a KV cache with it.
Plan plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const Config& cfg,
          const KvCache& cache, const Varlen& packed);

// Throws fa::InputError unless Q, K, V, O are aligned to the dtype's element size and LSE to 4
// bytes, and Unsupported unless they are 16-byte aligned where pl runs a tensor-core version
// (v2 ... v12). No CUDA call.
void check_alignment(const Plan& pl, fa::DType dtype, const void* Q, const void* K, const void* V,
                     const void* O, const float* LSE);

// Runs `kernel` on device pointers (layout above) on `stream`, without waiting for it.
// p.scale 0 means 1/sqrt(d). The tensor-core versions need Q, K, V, O 16-byte aligned.
// Plans for the current device (cfg.sm and cfg.smem_optin are ignored).
// Throws as plan() (and Unsupported for misaligned pointers), fa::CudaError when CUDA or
// cuBLAS fails.
void forward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
             const void* K, const void* V, void* O, float* LSE, const Config& cfg,
             cudaStream_t stream);
// Decode on a KV cache (above): K, V are the cache ([B, H_kv, N_k, d], or [num_pages, H_kv, P, d]
// when paged), Q, O [B, H, N_q, d], LSE [B, H, N_q]. Throws as plan() with the cache.
void forward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
             const void* K, const void* V, void* O, float* LSE, const KvCache& cache,
             const Config& cfg, cudaStream_t stream);
// A packed variable-length batch (above), in one launch of v13: Q, O [total_q, H, d], K, V
// [total_k, H_kv, d], LSE [H, total_q]; p is fa::varlen_problem()'s (B sequences, N_q and N_k the
// longest). Rows that see no key get O = 0 and LSE = -inf. Throws as plan() with the batch.
void forward_varlen(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
                    const void* K, const void* V, void* O, float* LSE, const Varlen& packed,
                    const Config& cfg, cudaStream_t stream);

}  // namespace fa05
