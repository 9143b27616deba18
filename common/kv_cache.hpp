// A KV cache for decode (issue 33): every sequence of the batch its own number of cached keys, and
// optionally a paged layout, the cache cut into fixed-size pages that a block table maps to each
// sequence (as vLLM's PagedAttention and FlashInfer store it: Kwon et al. 2023, Section 4.1).
//
// Semantics (design.md, "Semantics every stage shares"):
//   - lens[b] (0 <= lens[b] <= N_k) is sequence b's key count: its query rows see keys 0 .. lens[b]-1
//     only, and the bottom-right causal diagonal is aligned to lens[b] (query i sees key j iff
//     j <= i + lens[b] - N_q), as FlashAttention's flash_attn_with_kvcache(cache_seqlens=...).
//     A row that sees no key (lens[b] = 0, or causal with lens[b] < N_q) gives O = 0, LSE = -inf.
//     No lens: every sequence has N_k keys (the plain problem).
//   - Paged (page_size P > 0): K and V are [num_pages, H_kv, P, d] (each page a small [H_kv, P, d]
//     cache in the course's head-major layout; vLLM and FlashAttention store pages token-major,
//     [num_pages, P, H_kv, d], a permute away). table[b, n] is the page that holds keys
//     n P .. n P + P - 1 of sequence b; N_k is the capacity pages_per_seq * P. Pages may be shared
//     between sequences (a common prompt prefix). Table entries past a sequence's last key are
//     never read and may hold anything.
//   - Contiguous (page_size 0): K and V are [B, H_kv, N_k, d] as everywhere in the course.
#pragma once
#include <cstdint>
#include <vector>

#include "problem.hpp"
#include "stage.hpp"
#include "tensor.hpp"

namespace fa {

struct KvCacheHost {
  std::vector<int32_t> lens;   // [B]; empty: every sequence N_k keys
  std::vector<int32_t> table;  // [B, pages_per_seq], row-major; empty: contiguous
  int64_t page_size = 0;       // P: 16 ... 256 when paged, else 0
  int64_t pages_per_seq = 0;   // the table's row length
  int64_t num_pages = 0;       // pages in K and V
  bool has_lens() const { return !lens.empty(); }
  bool paged() const { return page_size > 0; }
  bool any() const { return has_lens() || paged(); }  // false: the plain problem
  // Keys of sequence b.
  int64_t len(const AttnProblem& p, int64_t b) const { return has_lens() ? lens[b] : p.N_k; }
};

// Throws InputError naming the flag (--cache-lens, --block-table, --page-size) for: lens not B
// entries, a length < 0 or > N_k; a page size outside 16 ... 256; a table not
// [B, pages_per_seq] or N_k != pages_per_seq * P; an entry a sequence reads (n P < lens[b]) outside
// 0 ... num_pages - 1.
void validate_kv_cache(const AttnProblem& p, const KvCacheHost& c);

// Element offset of key j (0 <= j < len(b)) of kv head g of sequence b in K or V.
int64_t cache_offset(const AttnProblem& p, const KvCacheHost& c, int64_t b, int64_t g, int64_t j);

// Elements of K (or V) as the cache holds them: num_pages H_kv P d when paged, else B H_kv N_k d.
int64_t cache_elems(const AttnProblem& p, const KvCacheHost& c);

// A paged layout for the plain problem p: pages_per_seq = ceil(N_k / P) pages per sequence,
// num_pages = B pages_per_seq, and the table a seeded random permutation of all of them, so a
// sequence's pages lie scattered through the buffer as a paged cache's do after many requests.
// The cache's capacity pages_per_seq P may exceed N_k: then lens is N_k for every sequence (the
// last page's tail is padding no query may see), else lens stays empty. Its problem is p with
// N_k = the capacity (cache_problem()).
KvCacheHost make_paged(const AttnProblem& p, int64_t page_size, uint64_t seed);

// p with N_k = the cache's capacity, pages_per_seq P, when paged; p itself when not.
AttnProblem cache_problem(const AttnProblem& p, const KvCacheHost& c);

// X, a contiguous [B, H_kv, N_k, d] K or V of the plain problem p, laid out in c's pages:
// [num_pages, H_kv, P, d], zeros in every slot no key of X lands in. A page two sequences share
// holds the keys of the later one.
Tensor page_kv(const AttnProblem& p, const KvCacheHost& c, const Tensor& X);

// The len(b) keys (or values) of sequence b, gathered from the cache X into a contiguous
// [1, H_kv, len(b), d]: the plain layout of a problem with B = 1 and N_k = len(b).
Tensor gather_sequence(const AttnProblem& p, const KvCacheHost& c, const Tensor& X, int64_t b);

// The float64 reference on a cache: sequence by sequence, its keys gathered (gather_sequence())
// and reference_forward() run on the problem with B = 1, N_k = len(b), so the causal diagonal
// and a window are aligned to len(b). len(b) = 0: O = 0 and LSE = -inf for every row (the plain
// reference takes no N_k = 0). Q [B,H,N_q,d]; K, V the cache; O, LSE resized as by
// reference_forward(). Throws InputError as validate_kv_cache().
void reference_kv_cache(const AttnProblem& p, const KvCacheHost& c, const Tensor& Q, const Tensor& K,
                        const Tensor& V, TensorD& O, TensorD& LSE);

// FLOPs of the forward on the cache by the FlashAttention convention (problem.hpp), counting
// each sequence's own len(b) keys (an empty one counts 0).
double cache_forward_flops(const AttnProblem& p, const KvCacheHost& c);

// Any plain forward made to run on a cache the same way (per sequence, keys gathered, len 0
// giving O = 0 and LSE = -inf): stage 01's float32 baseline on a cache, for the "vs stage 01"
// comparisons.
CacheForwardFn per_sequence(ForwardFn f);

}  // namespace fa
