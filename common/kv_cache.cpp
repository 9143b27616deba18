#include "kv_cache.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "errors.hpp"
#include "reference.hpp"
#include "rng.hpp"

namespace fa {

void validate_kv_cache(const AttnProblem& p, const KvCacheHost& c) {
  const auto str = [](int64_t x) { return std::to_string(x); };
  if (c.has_lens()) {
    if (int64_t(c.lens.size()) != p.B)
      throw InputError("--cache-lens", str(p.B) + " lengths (one per sequence, --batch)",
                       str(int64_t(c.lens.size())));
    for (int64_t b = 0; b < p.B; ++b)
      if (c.lens[b] < 0 || c.lens[b] > p.N_k)
        throw InputError("--cache-lens", "lengths 0 ... N_k = " + str(p.N_k),
                         str(c.lens[b]) + " for sequence " + str(b));
  }
  if (!c.paged()) {
    // A table without a page size would be silently ignored: refuse it.
    if (!c.table.empty() || c.pages_per_seq != 0 || c.num_pages != 0)
      throw InputError("--block-table", "--page-size with a block table", "no page size");
    if (c.page_size < 0) throw InputError("--page-size", "16 ... 256", str(c.page_size));
    return;
  }
  if (c.page_size < 16 || c.page_size > 256) throw InputError("--page-size", "16 ... 256", str(c.page_size));
  if (c.pages_per_seq < 1 || int64_t(c.table.size()) != p.B * c.pages_per_seq)
    throw InputError("--block-table", "a table [B, pages_per_seq] = [" + str(p.B) + ", >= 1]",
                     str(int64_t(c.table.size())) + " entries for pages_per_seq " + str(c.pages_per_seq));
  if (c.pages_per_seq * c.page_size != p.N_k)
    throw InputError("--block-table", "pages_per_seq * page size = N_k (" + str(p.N_k) + ")",
                     str(c.pages_per_seq) + " * " + str(c.page_size));
  if (c.num_pages < 1) throw InputError("--block-table", "a cache of >= 1 pages", str(c.num_pages));
  for (int64_t b = 0; b < p.B; ++b)
    // Only the pages that hold a key of the sequence are read; the rest may hold anything.
    for (int64_t n = 0; n * c.page_size < c.len(p, b); ++n) {
      const int32_t page = c.table[b * c.pages_per_seq + n];
      if (page < 0 || page >= c.num_pages)
        throw InputError("--block-table", "pages 0 ... " + str(c.num_pages - 1) + " where a sequence reads",
                         str(page) + " at [" + str(b) + ", " + str(n) + "]");
    }
}

int64_t cache_offset(const AttnProblem& p, const KvCacheHost& c, int64_t b, int64_t g, int64_t j) {
  if (!c.paged()) return ((b * p.H_kv + g) * p.N_k + j) * p.d;
  // Key j of sequence b lives in slot j % P of the page the table names for keys j - j % P ...
  const int64_t page = c.table[b * c.pages_per_seq + j / c.page_size];
  return ((page * p.H_kv + g) * c.page_size + j % c.page_size) * p.d;
}

int64_t cache_elems(const AttnProblem& p, const KvCacheHost& c) {
  return c.paged() ? c.num_pages * p.H_kv * c.page_size * p.d : p.kv_elems();
}

KvCacheHost make_paged(const AttnProblem& p, int64_t page_size, uint64_t seed) {
  if (page_size < 16 || page_size > 256) throw InputError("--page-size", "16 ... 256", std::to_string(page_size));
  KvCacheHost c;
  c.page_size = page_size;
  c.pages_per_seq = (p.N_k + page_size - 1) / page_size;
  c.num_pages = p.B * c.pages_per_seq;
  c.table.resize(size_t(c.num_pages));
  for (int64_t i = 0; i < c.num_pages; ++i) c.table[i] = int32_t(i);
  // Fisher-Yates from the course's own Rng: the same seed gives the same table with any compiler.
  Rng rng(seed ^ 0x7061676573ull);  // "pages": apart from the draws of Q, K, V
  for (int64_t i = c.num_pages - 1; i > 0; --i) {
    const int64_t k = std::min(i, int64_t(rng.uniform() * double(i + 1)));
    std::swap(c.table[i], c.table[k]);
  }
  if (c.pages_per_seq * page_size != p.N_k) c.lens.assign(size_t(p.B), int32_t(p.N_k));
  return c;
}

AttnProblem cache_problem(const AttnProblem& p, const KvCacheHost& c) {
  AttnProblem q = p;
  if (c.paged()) q.N_k = c.pages_per_seq * c.page_size;
  return q;
}

Tensor page_kv(const AttnProblem& p, const KvCacheHost& c, const Tensor& X) {
  const AttnProblem pc = cache_problem(p, c);
  Tensor P({c.num_pages, p.H_kv, c.page_size, p.d});  // zeros: the slots no key lands in
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t g = 0; g < p.H_kv; ++g)
      for (int64_t j = 0; j < p.N_k; ++j) {
        const float* src = X.ptr() + ((b * p.H_kv + g) * p.N_k + j) * p.d;
        float* dst = P.ptr() + cache_offset(pc, c, b, g, j);
        for (int64_t x = 0; x < p.d; ++x) dst[x] = src[x];
      }
  return P;
}

namespace {

// gather_sequence() from the cache's raw elements.
Tensor gather(const AttnProblem& p, const KvCacheHost& c, const float* X, int64_t b) {
  const int64_t len = c.len(p, b);
  Tensor S({1, p.H_kv, len, p.d});
  for (int64_t g = 0; g < p.H_kv; ++g)
    for (int64_t j = 0; j < len; ++j) {
      const float* src = X + cache_offset(p, c, b, g, j);
      float* dst = S.ptr() + (g * len + j) * p.d;
      for (int64_t x = 0; x < p.d; ++x) dst[x] = src[x];
    }
  return S;
}

// Sequence b as a plain problem: one sequence, its own keys only.
AttnProblem sequence_problem(const AttnProblem& p, const KvCacheHost& c, int64_t b) {
  AttnProblem q = p;
  q.B = 1;
  q.N_k = c.len(p, b);
  return q;
}

// Q's rows of sequence b, [1, H, N_q, d] (Q is [B, H, N_q, d]: a sequence is one contiguous block).
Tensor sequence_rows(const AttnProblem& p, const float* Q, int64_t b) {
  Tensor Qb({1, p.H, p.N_q, p.d});
  const int64_t n = Qb.numel();
  for (int64_t i = 0; i < n; ++i) Qb[i] = Q[b * n + i];
  return Qb;
}

}  // namespace

Tensor gather_sequence(const AttnProblem& p, const KvCacheHost& c, const Tensor& X, int64_t b) {
  return gather(p, c, X.ptr(), b);
}

void reference_kv_cache(const AttnProblem& p, const KvCacheHost& c, const Tensor& Q, const Tensor& K,
                        const Tensor& V, TensorD& O, TensorD& LSE) {
  validate_kv_cache(p, c);
  O = TensorD({p.B, p.H, p.N_q, p.d});                   // zeros: the rows of an empty sequence
  LSE = TensorD({p.B, p.H, p.N_q}, -INFINITY);
  const int64_t o_seq = p.H * p.N_q * p.d, l_seq = p.H * p.N_q;  // elements of one sequence
  for (int64_t b = 0; b < p.B; ++b) {
    if (c.len(p, b) == 0) continue;
    TensorD Ob, Lb;
    reference_forward(sequence_problem(p, c, b), sequence_rows(p, Q.ptr(), b), gather_sequence(p, c, K, b),
                      gather_sequence(p, c, V, b), Ob, Lb);
    for (int64_t i = 0; i < o_seq; ++i) O[b * o_seq + i] = Ob[i];
    for (int64_t i = 0; i < l_seq; ++i) LSE[b * l_seq + i] = Lb[i];
  }
}

double cache_forward_flops(const AttnProblem& p, const KvCacheHost& c) {
  double flops = 0;
  for (int64_t b = 0; b < p.B; ++b)
    if (c.len(p, b) > 0) flops += sequence_problem(p, c, b).forward_flops();
  return flops;
}

CacheForwardFn per_sequence(ForwardFn f) {
  return [f = std::move(f)](const AttnProblem& p, const KvCacheHost& c, const float* Q, const float* K,
                            const float* V, float* O, float* LSE) {
    const int64_t o_seq = p.H * p.N_q * p.d, l_seq = p.H * p.N_q;
    for (int64_t b = 0; b < p.B; ++b) {
      float* Ob = O + b * o_seq;
      float* Lb = LSE + b * l_seq;
      if (c.len(p, b) == 0) {  // no key at all: nothing to call f on
        for (int64_t i = 0; i < o_seq; ++i) Ob[i] = 0.f;
        for (int64_t i = 0; i < l_seq; ++i) Lb[i] = -INFINITY;
        continue;
      }
      const Tensor Qb = sequence_rows(p, Q, b), Kb = gather(p, c, K, b), Vb = gather(p, c, V, b);
      f(sequence_problem(p, c, b), Qb.ptr(), Kb.ptr(), Vb.ptr(), Ob, Lb);
    }
  };
}

}  // namespace fa
