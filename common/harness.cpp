#include "harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <tuple>

#include "devstats.hpp"
#include "errors.hpp"
#include "memtrack.hpp"
#include "baseline.hpp"
#include "npy.hpp"
#include "reference.hpp"
#include "rng.hpp"
#include "timer.hpp"

#ifndef FA_DATA_DIR
#define FA_DATA_DIR "data"
#endif

namespace fa {

std::string default_data_dir() {
  if (const char* env = std::getenv("FA_DATA_DIR")) return env;
  return FA_DATA_DIR;
}

Inputs default_inputs(bool causal, float scale) {
  const std::string dir = default_data_dir();
  if (!std::filesystem::exists(dir + "/minilm_l0_q.npy"))
    throw InputError("default input " + dir, "data/minilm_l0_{q,k,v}.npy (or pass --q/--k/--v, or shape flags)",
                     "no such files (set FA_DATA_DIR to the repository's data/ folder)");
  Inputs in = load_inputs(dir + "/minilm_l0_q.npy", dir + "/minilm_l0_k.npy",
                          dir + "/minilm_l0_v.npy", causal, scale);
  in.source = "all-MiniLM-L6-v2 layer 0 Q/K/V of the Gettysburg Address, 256 tokens (data/minilm_l0_*.npy)";
  return in;
}

void check_finite(const Tensor& x, const std::string& arg) {
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!std::isfinite(x[i]))
      throw InputError(arg, "finite values", std::string(std::isnan(x[i]) ? "NaN" : "Inf") +
                                                  " at flat index " + std::to_string(i));
}

namespace {
// [N,d] -> [1,1,N,d], [H,N,d] -> [1,H,N,d], [B,H,N,d] unchanged; other ranks are an error.
void to_bhnd(Tensor& x, const std::string& arg) {
  const size_t r = x.shape.size();
  if (r < 2 || r > 4)
    throw InputError(arg, "a tensor of rank 2, 3 or 4 ([N,d], [H,N,d] or [B,H,N,d])",
                     "shape " + shape_str(x.shape));
  while (x.shape.size() < 4) x.shape.insert(x.shape.begin(), 1);
  for (int64_t e : x.shape)
    if (e < 1) throw InputError(arg, "no empty dimension", "shape " + shape_str(x.shape));
}

// Largest Euclidean norm of a row of x ([..., d]), in double.
double max_row_norm(const Tensor& x) {
  const int64_t d = x.shape.back();
  double mx = 0;
  for (int64_t r = 0; r < x.numel() / d; ++r) {
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += double(x[r * d + c]) * double(x[r * d + c]);
    mx = std::max(mx, s);
  }
  return std::sqrt(mx);
}

// InputError for a value past the float32 guard below: `found` is the value, as "1.23e+40".
[[noreturn]] void overflow_error(const std::string& arg, const std::string& expected, double found) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", found);
  throw InputError(arg, expected, buf);
}
}  // namespace

void check_float32_range(const Inputs& in) {
  // |partial sums of q . k| <= |q| |k| (Cauchy-Schwarz): below this no float32 dot product, and
  // no running output sum_j p_j v_j (|.| <= N_k max|v|), can overflow.
  const double limit = 1e37;
  const double qk = max_row_norm(in.Q) * max_row_norm(in.K) * std::max(1.0, double(in.p.resolved_scale()));
  if (qk > limit)
    overflow_error("--q/--k", "max |q_i| |k_j| max(1, scale) <= 1e37 (float32 dot products must not overflow)", qk);
  const double vmax = max_abs_finite(in.V.ptr(), in.V.numel()) * double(in.p.N_k);
  if (vmax > limit)
    overflow_error("--v", "max |v| * N_k <= 1e37 (float32 output sums must not overflow)", vmax);
}

Tensor load_npy_as(const std::string& path, const std::string& arg, const std::vector<int64_t>& shape,
                   bool allow_neg_inf) {
  Tensor x = read_npy(path, arg);
  std::vector<int64_t> s = x.shape;
  while (s.size() < shape.size()) s.insert(s.begin(), 1);
  if (s != shape) throw InputError(arg + " " + path, "shape " + shape_str(shape), shape_str(x.shape));
  x.shape = shape;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!std::isfinite(x[i]) && !(allow_neg_inf && x[i] == -INFINITY))
      throw InputError(arg + " " + path, allow_neg_inf ? "finite values or -inf" : "finite values",
                       std::string(std::isnan(x[i]) ? "NaN" : "Inf") + " at flat index " + std::to_string(i));
  return x;
}

Inputs load_inputs(const std::string& q, const std::string& k, const std::string& v, bool causal,
                   float scale) {
  Inputs in;
  in.Q = read_npy(q, "--q");
  in.K = read_npy(k, "--k");
  in.V = read_npy(v, "--v");
  to_bhnd(in.Q, "--q");
  to_bhnd(in.K, "--k");
  to_bhnd(in.V, "--v");
  const auto &sq = in.Q.shape, &sk = in.K.shape, &sv = in.V.shape;
  if (sv != sk) throw InputError("--v", "the shape of --k " + shape_str(sk), shape_str(sv));
  if (sq[3] != sk[3])
    throw InputError("--q", "head dim " + std::to_string(sk[3]) + " (the last dim of --k)",
                     "shape " + shape_str(sq));
  if (sq[0] != sk[0])
    throw InputError("--q", "batch " + std::to_string(sk[0]) + " (the first dim of --k)",
                     "shape " + shape_str(sq));
  if (sq[1] % sk[1] != 0)
    throw InputError("--k", "a head count dividing the " + std::to_string(sq[1]) + " heads of --q",
                     "shape " + shape_str(sk));
  check_finite(in.Q, "--q " + q);
  check_finite(in.K, "--k " + k);
  check_finite(in.V, "--v " + v);
  in.p.B = sq[0];
  in.p.H = sq[1];
  in.p.N_q = sq[2];
  in.p.d = sq[3];
  in.p.H_kv = sk[1];
  in.p.N_k = sk[2];
  in.p.causal = causal;
  in.p.scale = scale;
  validate(in.p);
  check_float32_range(in);
  in.source = q + ", " + k + ", " + v;
  return in;
}

Inputs random_inputs(const AttnProblem& p, uint64_t seed) {
  validate(p);
  check_memory(estimate_run_bytes(p, 0, false, false), "--batch/--heads/--seq-q/--seq-k/--head-dim",
               "Q, K, V, O and LSE");
  Inputs in;
  in.p = p;
  in.Q = Tensor({p.B, p.H, p.N_q, p.d});
  in.K = Tensor({p.B, p.H_kv, p.N_k, p.d});
  in.V = Tensor({p.B, p.H_kv, p.N_k, p.d});
  Rng rng(seed);
  rng.fill_normal(in.Q);
  rng.fill_normal(in.K);
  rng.fill_normal(in.V);
  in.source = "random normal(0,1), seed " + std::to_string(seed);
  return in;
}

Inputs random_paged_inputs(const AttnProblem& p, const KvCacheHost& c, uint64_t seed) {
  validate(p);
  validate_kv_cache(p, c);
  Inputs in;
  in.p = p;
  in.cache = c;
  check_memory(4 * (2 * p.q_elems() + 2 * cache_elems(p, c) + p.lse_elems()), "--block-table/--batch/--seq-q/--head-dim",
               "Q, the paged K and V, O and LSE");
  in.Q = Tensor({p.B, p.H, p.N_q, p.d});
  in.K = Tensor({c.num_pages, p.H_kv, c.page_size, p.d});
  in.V = Tensor({c.num_pages, p.H_kv, c.page_size, p.d});
  Rng rng(seed);  // drawn in the order random_inputs() draws them
  rng.fill_normal(in.Q);
  rng.fill_normal(in.K);
  rng.fill_normal(in.V);
  in.source = "random normal(0,1), seed " + std::to_string(seed) + ", in " + std::to_string(c.num_pages) + " pages";
  return in;
}

Inputs load_paged_inputs(const std::string& q, const std::string& k, const std::string& v, bool causal,
                         float scale, KvCacheHost c) {
  Inputs in;
  in.Q = read_npy(q, "--q");
  to_bhnd(in.Q, "--q");
  in.K = read_npy(k, "--k");
  in.V = read_npy(v, "--v");
  // The pages have no batch: [num_pages, H_kv, P, d] exactly, no lower rank.
  const std::string want = "a paged cache [num_pages, H_kv, " + std::to_string(c.page_size) + " (--page-size), " +
                           std::to_string(in.Q.shape[3]) + " (the head dim of --q)]";
  const auto& sk = in.K.shape;
  if (sk.size() != 4 || sk[0] < 1 || sk[1] < 1 || sk[2] != c.page_size || sk[3] != in.Q.shape[3])
    throw InputError("--k " + k, want, "shape " + shape_str(sk));
  if (in.V.shape != sk) throw InputError("--v " + v, "the shape of --k " + shape_str(sk), shape_str(in.V.shape));
  if (in.Q.shape[1] % sk[1] != 0)
    throw InputError("--k " + k, "a head count dividing the " + std::to_string(in.Q.shape[1]) + " heads of --q",
                     "shape " + shape_str(sk));
  check_finite(in.Q, "--q " + q);
  check_finite(in.K, "--k " + k);
  check_finite(in.V, "--v " + v);
  c.num_pages = sk[0];
  in.p = make_problem(in.Q.shape[0], in.Q.shape[1], sk[1], in.Q.shape[2], c.pages_per_seq * c.page_size,
                      in.Q.shape[3], causal);
  in.p.scale = scale;
  validate(in.p);
  validate_kv_cache(in.p, c);
  in.cache = std::move(c);
  check_float32_range(in);
  in.source = q + ", " + k + ", " + v + " (" + std::to_string(sk[0]) + " pages)";
  return in;
}

Inputs random_varlen_inputs(const AttnProblem& p, const VarlenHost& v, uint64_t seed) {
  validate_varlen(v);
  Inputs in;
  in.p = varlen_problem(p, v);
  validate_varlen_problem(in.p, v);
  in.varlen = v;
  check_memory(estimate_varlen_run_bytes(in.p, v, 0, false, false), "--cu-seqlens-q/--cu-seqlens-k",
               "Q, K, V, O and LSE");
  in.Q = Tensor({v.total_q(), p.H, p.d});
  in.K = Tensor({v.total_k(), p.H_kv, p.d});
  in.V = Tensor({v.total_k(), p.H_kv, p.d});
  Rng rng(seed);  // drawn in the order random_inputs() draws them
  rng.fill_normal(in.Q);
  rng.fill_normal(in.K);
  rng.fill_normal(in.V);
  in.source = "random normal(0,1), seed " + std::to_string(seed) + ", a packed batch of " + std::to_string(v.batch()) +
              " sequences";
  return in;
}

Inputs load_varlen_inputs(const std::string& q, const std::string& k, const std::string& v, bool causal, float scale,
                          VarlenHost cu, const std::string& cu_q_file, const std::string& cu_k_file) {
  Inputs in;
  in.Q = read_npy(q, "--q");
  in.K = read_npy(k, "--k");
  in.V = read_npy(v, "--v");
  // Token-major and rank 3 exactly: [total, heads, d] (a rank-3 file is [H, N, d] without varlen).
  for (auto [x, flag, file] : {std::tuple{&in.Q, "--q", &q}, {&in.K, "--k", &k}, {&in.V, "--v", &v}}) {
    const auto& sh = x->shape;
    if (sh.size() != 3 || sh[1] < 1 || sh[2] < 1)
      throw InputError(std::string(flag) + " " + *file, "a packed batch [total_tokens, heads, d] (rank 3, with --cu-seqlens-q/-k)",
                       "shape " + shape_str(sh));
  }
  const auto &sq = in.Q.shape, &sk = in.K.shape;
  if (in.V.shape != sk) throw InputError("--v " + v, "the shape of --k " + shape_str(sk), shape_str(in.V.shape));
  if (sq[2] != sk[2])
    throw InputError("--q " + q, "head dim " + std::to_string(sk[2]) + " (the last dim of --k)", "shape " + shape_str(sq));
  if (sq[1] % sk[1] != 0)
    throw InputError("--k " + k, "a head count dividing the " + std::to_string(sq[1]) + " heads of --q",
                     "shape " + shape_str(sk));
  // The last offset is the token count of the file it describes.
  if (cu.total_q() != sq[0])
    throw InputError("--cu-seqlens-q " + cu_q_file, "a last offset cu[B] = " + std::to_string(sq[0]) + " (the tokens of --q)",
                     std::to_string(cu.total_q()));
  if (cu.total_k() != sk[0])
    throw InputError("--cu-seqlens-k " + cu_k_file, "a last offset cu[B] = " + std::to_string(sk[0]) + " (the tokens of --k)",
                     std::to_string(cu.total_k()));
  check_finite(in.Q, "--q " + q);
  check_finite(in.K, "--k " + k);
  check_finite(in.V, "--v " + v);
  AttnProblem p = make_problem(1, sq[1], sk[1], 1, 1, sq[2], causal);
  p.scale = scale;
  in.p = varlen_problem(p, cu);
  validate_varlen_problem(in.p, cu);
  in.varlen = std::move(cu);
  check_float32_range(in);
  in.source = q + ", " + k + ", " + v + " (a packed batch of " + std::to_string(in.varlen.batch()) + " sequences)";
  return in;
}

std::vector<int64_t> o_shape(const Inputs& in) {
  if (in.varlen.any()) return {in.varlen.total_q(), in.p.H, in.p.d};
  return {in.p.B, in.p.H, in.p.N_q, in.p.d};
}

std::vector<int64_t> lse_shape(const Inputs& in) {
  if (in.varlen.any()) return {in.p.H, in.varlen.total_q()};
  return {in.p.B, in.p.H, in.p.N_q};
}

void add_grad_output(Inputs& in, const std::string& path, uint64_t seed) {
  if (!path.empty()) {
    in.dO = read_npy(path, "--do");
    if (!in.varlen.any()) to_bhnd(in.dO, "--do");  // a packed batch's dO is [total_q, H, d] exactly
    if (in.dO.shape != in.Q.shape)
      throw InputError("--do " + path, "the shape of Q " + shape_str(in.Q.shape),
                       shape_str(in.dO.shape));
    check_finite(in.dO, "--do " + path);
    // The gradients multiply dO by V (dP), by K or Q (dQ, dK) and sum over up to N keys or
    // queries: bound that product as check_float32_range() bounds q . k.
    double qk = 1.0;
    for (const Tensor* t : {&in.Q, &in.K}) qk = std::max(qk, max_row_norm(*t) * double(in.p.resolved_scale()));
    const double g = max_row_norm(in.dO) * std::max(1.0, max_row_norm(in.V)) * qk *
                     double(std::max(in.p.N_q, in.p.N_k));
    if (g > 1e37)
      overflow_error("--do " + path, "max |dO_i| |V_j| max(1, scale |Q|, scale |K|) max(N_q, N_k) <= 1e37 (float32 gradients must not overflow)", g);
    return;
  }
  in.dO = Tensor(in.Q.shape);
  Rng rng(seed ^ 0x9e3779b97f4a7c15ull);
  rng.fill_normal(in.dO);
}

int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return -1;
}

void check_memory(int64_t need, const std::string& arg, const std::string& what) {
  const int64_t avail = available_memory_bytes();
  if (avail < 0 || need <= avail - avail / 10) return;
  auto gib = [](int64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(b) / double(int64_t(1) << 30));
    return std::string(buf);
  };
  throw InputError(arg, "a problem that fits in the " + gib(avail) + " of memory available",
                   gib(need) + " needed (" + what + ")");
}

int64_t estimate_varlen_run_bytes(const AttnProblem& p, const VarlenHost& v, int nxn_stage, bool backward, bool check) {
  const int64_t f = sizeof(float), q = v.total_q() * p.H * p.d, kv = v.total_k() * p.H_kv * p.d;
  int64_t io = f * (2 * q + 2 * kv + v.total_q() * p.H);  // Q, K, V, O, LSE
  if (backward) io += f * (2 * q + 2 * kv);                // dO, dQ, dK, dV
  int64_t nxn = 0;  // the largest sequence's N_q x N_k matrices, per head
  for (int64_t b = 0; b < v.batch(); ++b) nxn = std::max(nxn, f * p.H * v.n_q(b) * v.n_k(b));
  const int nxn_baseline = check ? (backward ? 4 : 2) : 0;
  int64_t need = io + std::max(nxn_stage, nxn_baseline) * nxn;
  if (check) need += 2 * io;
  return need;
}

int64_t estimate_run_bytes(const AttnProblem& p, int nxn_stage, bool backward, bool check) {
  const int64_t f = sizeof(float);
  int64_t io = f * (2 * p.q_elems() + 2 * p.kv_elems() + p.lse_elems());  // Q, K, V, O, LSE
  if (backward) io += f * (2 * p.q_elems() + 2 * p.kv_elems());           // dO, dQ, dK, dV
  const int64_t nxn = f * p.B * p.H * p.N_q * p.N_k;
  const int nxn_baseline = check ? (backward ? 4 : 2) : 0;  // stage 01, run by the checks
  int64_t need = io + std::max(nxn_stage, nxn_baseline) * nxn;
  if (check) need += 2 * io;  // stage 01's outputs and the float64 reference's
  return need;
}

double max_logit(const Inputs& in, bool abs_terms) {
  if (in.varlen.any()) {  // sequence by sequence, each a plain problem of its own
    double mx = 0;
    const VarlenHost& v = in.varlen;
    for (int64_t b = 0; b < v.batch(); ++b) {
      if (v.n_q(b) == 0 || v.n_k(b) == 0) continue;
      Inputs s;
      s.p = in.p;
      s.p.B = 1, s.p.N_q = v.n_q(b), s.p.N_k = v.n_k(b);
      s.Q = gather_rows(in.Q, in.p.H, in.p.d, v.cu_q[size_t(b)], v.n_q(b));
      s.K = gather_rows(in.K, in.p.H_kv, in.p.d, v.cu_k[size_t(b)], v.n_k(b));
      mx = std::max(mx, max_logit(s, abs_terms));
    }
    return mx;
  }
  if (in.cache.any()) {  // sequence by sequence, each on its own keys
    double mx = 0;
    for (int64_t b = 0; b < in.p.B; ++b) {
      Inputs s;
      s.p = in.p;
      s.p.B = 1, s.p.N_k = in.cache.len(in.p, b);
      if (s.p.N_k == 0) continue;
      const int64_t n = in.p.H * in.p.N_q * in.p.d;
      s.Q = Tensor({1, in.p.H, in.p.N_q, in.p.d});
      for (int64_t i = 0; i < n; ++i) s.Q[i] = in.Q[b * n + i];
      s.K = gather_sequence(in.p, in.cache, in.K, b);
      mx = std::max(mx, max_logit(s, abs_terms));
    }
    return mx;
  }
  const AttnProblem& p = in.p;
  const double scale = p.resolved_scale();
  double mx = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i)
        for (int64_t j = p.key_begin(i); j < p.key_end(i); ++j) {
          const float* q = in.Q.ptr() + p.q_offset(b, h, i);
          const float* k = in.K.ptr() + p.kv_offset(b, h, j);
          double s = 0;
          for (int64_t c = 0; c < p.d; ++c) {
            const double t = double(q[c]) * double(k[c]);
            s += abs_terms ? std::fabs(t) : t;
          }
          mx = std::max(mx, std::fabs(scale * s));
        }
  return mx;
}

namespace {
// One timed, memory-measured call(O, LSE) on outputs poisoned with NaN.
template <class Call>
ForwardRun run_forward_with(const Inputs& in, const Call& call) {
  ForwardRun r;
  r.O = Tensor(o_shape(in));
  r.LSE = Tensor(lse_shape(in));
  r.O.poison();
  r.LSE.poison();
  ExtraMemory mem;
  ExtraDeviceMemory gpu;
  Timer t;
  call(r.O.ptr(), r.LSE.ptr());
  r.ms = t.ms();
  r.extra_bytes = mem.peak_bytes();
  if (gpu.gpu_ms() >= 0) r.gpu_ms = gpu.gpu_ms(), r.gpu_extra_bytes = gpu.peak_bytes();
  return r;
}
}  // namespace

ForwardRun run_forward(const ForwardFn& f, const Inputs& in) {
  if (in.varlen.any())
    return run_forward_with(in, [&](float* O, float* LSE) {
      varlen_forward(f, in.p, in.varlen, in.Q.ptr(), in.K.ptr(), in.V.ptr(), O, LSE);
    });
  return run_forward_with(in, [&](float* O, float* LSE) { f(in.p, in.Q.ptr(), in.K.ptr(), in.V.ptr(), O, LSE); });
}

ForwardRun run_forward(const CacheForwardFn& f, const Inputs& in) {
  return run_forward_with(in, [&](float* O, float* LSE) { f(in.p, in.cache, in.Q.ptr(), in.K.ptr(), in.V.ptr(), O, LSE); });
}

ForwardRun run_forward(const VarlenForwardFn& f, const Inputs& in) {
  if (!in.varlen.any()) throw std::invalid_argument("run_forward: a VarlenForwardFn needs a packed batch");
  return run_forward_with(in, [&](float* O, float* LSE) { f(in.p, in.varlen, in.Q.ptr(), in.K.ptr(), in.V.ptr(), O, LSE); });
}

namespace {
// run_backward's outputs poisoned, call(dQ, dK, dV) timed with its extra memory.
template <class Call>
BackwardRun run_backward_with(const Inputs& in, const ForwardRun& fwd, const Call& call) {
  // A caller that forgot add_grad_output() would hand the backward a null dO.
  const int64_t lse_elems = in.varlen.any() ? in.p.H * in.varlen.total_q() : in.p.lse_elems();
  if (in.dO.numel() != in.Q.numel() || fwd.O.numel() != in.Q.numel() || fwd.LSE.numel() != lse_elems)
    throw std::invalid_argument("run_backward: dO (add_grad_output), O and LSE must match the problem");
  BackwardRun r;
  r.dQ = Tensor(in.Q.shape);
  r.dK = Tensor(in.K.shape);
  r.dV = Tensor(in.V.shape);
  r.dQ.poison();
  r.dK.poison();
  r.dV.poison();
  ExtraMemory mem;
  ExtraDeviceMemory gpu;
  Timer t;
  call(r.dQ.ptr(), r.dK.ptr(), r.dV.ptr());
  r.ms = t.ms();
  r.extra_bytes = mem.peak_bytes();
  if (gpu.gpu_ms() >= 0) r.gpu_ms = gpu.gpu_ms(), r.gpu_extra_bytes = gpu.peak_bytes();
  return r;
}
}  // namespace

BackwardRun run_backward(const BackwardFn& f, const Inputs& in, const ForwardRun& fwd) {
  return run_backward_with(in, fwd, [&](float* dQ, float* dK, float* dV) {
    if (in.varlen.any())  // sequence by sequence
      varlen_backward(f, in.p, in.varlen, in.Q.ptr(), in.K.ptr(), in.V.ptr(), fwd.O.ptr(), in.dO.ptr(), fwd.LSE.ptr(),
                      dQ, dK, dV);
    else
      f(in.p, in.Q.ptr(), in.K.ptr(), in.V.ptr(), fwd.O.ptr(), in.dO.ptr(), fwd.LSE.ptr(), dQ, dK, dV);
  });
}

BackwardRun run_backward(const VarlenBackwardFn& f, const Inputs& in, const ForwardRun& fwd) {
  if (!in.varlen.any()) throw std::invalid_argument("run_backward: a VarlenBackwardFn needs a packed batch");
  return run_backward_with(in, fwd, [&](float* dQ, float* dK, float* dV) {
    f(in.p, in.varlen, in.Q.ptr(), in.K.ptr(), in.V.ptr(), fwd.O.ptr(), in.dO.ptr(), fwd.LSE.ptr(), dQ, dK, dV);
  });
}

Baselines::Baselines(const Inputs& in, bool with_backward) {
  if (in.cache.any()) {  // stage 01 and the reference, each sequence on its own keys (no backward)
    if (with_backward) throw std::invalid_argument("Baselines: no backward on a KV cache");
    naive_ = run_forward(per_sequence(baseline_forward), in);
    reference_kv_cache(in.p, in.cache, in.Q, in.K, in.V, O64_, LSE64_);
    max_abs_logit_ = max_logit(in);
    return;
  }
  naive_ = run_forward(baseline_forward, in);  // sequence by sequence on a packed batch
  if (in.varlen.any()) {  // the float64 reference, sequence by sequence
    reference_varlen_forward(in.p, in.varlen, in.Q, in.K, in.V, O64_, LSE64_);
    if (with_backward) {
      naive_bwd_ = run_backward(baseline_backward, in, naive_);
      reference_varlen_backward(in.p, in.varlen, convert<double>(in.Q), convert<double>(in.K), convert<double>(in.V),
                                convert<double>(in.dO), dQ64_, dK64_, dV64_);
    }
    max_abs_logit_ = max_logit(in);
    return;
  }
  reference_forward(in.p, in.Q, in.K, in.V, O64_, LSE64_);
  if (with_backward) {
    naive_bwd_ = run_backward(baseline_backward, in, naive_);
    reference_backward(in.p, convert<double>(in.Q), convert<double>(in.K), convert<double>(in.V),
                       convert<double>(in.dO), dQ64_, dK64_, dV64_);
  }
  max_abs_logit_ = max_logit(in);
}

ForwardErrors Baselines::compare(const ForwardRun& r) const {
  ForwardErrors e;
  e.O_vs_01 = fa::compare(r.O.ptr(), naive_.O.ptr(), r.O.numel());
  e.LSE_vs_01 = fa::compare(r.LSE.ptr(), naive_.LSE.ptr(), r.LSE.numel());
  e.O_vs_f64 = fa::compare(r.O.ptr(), O64_.ptr(), r.O.numel());
  e.LSE_vs_f64 = fa::compare(r.LSE.ptr(), LSE64_.ptr(), r.LSE.numel());
  return e;
}

BackwardErrors Baselines::compare(const BackwardRun& r) const {
  BackwardErrors e;
  e.dQ_vs_01 = fa::compare(r.dQ.ptr(), naive_bwd_.dQ.ptr(), r.dQ.numel());
  e.dK_vs_01 = fa::compare(r.dK.ptr(), naive_bwd_.dK.ptr(), r.dK.numel());
  e.dV_vs_01 = fa::compare(r.dV.ptr(), naive_bwd_.dV.ptr(), r.dV.numel());
  e.dQ_vs_f64 = fa::compare(r.dQ.ptr(), dQ64_.ptr(), r.dQ.numel());
  e.dK_vs_f64 = fa::compare(r.dK.ptr(), dK64_.ptr(), r.dK.numel());
  e.dV_vs_f64 = fa::compare(r.dV.ptr(), dV64_.ptr(), r.dV.numel());
  return e;
}

}  // namespace fa
