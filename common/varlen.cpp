#include "varlen.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "errors.hpp"
#include "reference.hpp"

namespace fa {

void validate_cu_seqlens(const std::vector<int32_t>& cu, const std::string& flag) {
  const auto str = [](int64_t x) { return std::to_string(x); };
  if (cu.size() < 2)
    throw InputError(flag, "B + 1 >= 2 offsets (cu_seqlens of B >= 1 sequences)", str(int64_t(cu.size())) + " entries");
  if (cu[0] != 0) throw InputError(flag, "cu[0] = 0", "cu[0] = " + str(cu[0]));
  for (size_t b = 1; b < cu.size(); ++b)
    if (cu[b] < cu[b - 1])
      throw InputError(flag, "non-decreasing offsets (a sequence length cu[b+1] - cu[b] >= 0)",
                       "cu[" + str(int64_t(b)) + "] = " + str(cu[b]) + " < cu[" + str(int64_t(b) - 1) + "] = " +
                           str(cu[b - 1]));
}

void validate_varlen(const VarlenHost& v) {
  validate_cu_seqlens(v.cu_q, "--cu-seqlens-q");
  validate_cu_seqlens(v.cu_k, "--cu-seqlens-k");
  if (v.cu_k.size() != v.cu_q.size())
    throw InputError("--cu-seqlens-k", std::to_string(v.cu_q.size()) + " offsets (as --cu-seqlens-q: B + 1)",
                     std::to_string(v.cu_k.size()));
  if (v.total_q() < 1) throw InputError("--cu-seqlens-q", "at least one query in the batch (cu[B] >= 1)", "cu[B] = 0");
  if (v.total_k() < 1) throw InputError("--cu-seqlens-k", "at least one key in the batch (cu[B] >= 1)", "cu[B] = 0");
}

VarlenHost varlen_from_arrays(const int32_t* cu_q, const int32_t* cu_k, int64_t B, int64_t total_q, int64_t total_k) {
  // B first: it sizes the copies (a garbage B would otherwise read past the caller's arrays or
  // ask for terabytes). int32 offsets cannot describe more than 2^31 - 1 tokens, nor need more
  // sequences than that plus empty ones; 2^31 - 2 keeps B + 1 an int32 count too.
  if (B < 1 || B > (int64_t(1) << 31) - 2)
    throw InputError("--cu-seqlens-q", "B >= 1 sequences (at most 2^31 - 2)", "B = " + std::to_string(B));
  VarlenHost v;
  v.cu_q.assign(cu_q, cu_q + B + 1);
  v.cu_k.assign(cu_k, cu_k + B + 1);
  validate_varlen(v);
  if (v.total_q() != total_q)
    throw InputError("--cu-seqlens-q", "cu[B] = total_q = " + std::to_string(total_q) + " (Q's tokens)",
                     "cu[" + std::to_string(B) + "] = " + std::to_string(v.total_q()));
  if (v.total_k() != total_k)
    throw InputError("--cu-seqlens-k", "cu[B] = total_k = " + std::to_string(total_k) + " (K's and V's tokens)",
                     "cu[" + std::to_string(B) + "] = " + std::to_string(v.total_k()));
  return v;
}

AttnProblem sequence_problem(const AttnProblem& p, const VarlenHost& v, int64_t b) {
  AttnProblem s = p;
  s.B = 1;
  s.N_q = v.n_q(b);
  s.N_k = v.n_k(b);
  s.token_major = true;
  s.lse_head_stride = v.total_q();
  return s;
}

void validate_varlen_problem(const AttnProblem& p, const VarlenHost& v) {
  AttnProblem one = p;  // everything but the sizes, on a problem of one token
  one.B = 1, one.N_q = 1, one.N_k = 1;
  validate(one);
  const int64_t limit = int64_t(1) << 40;
  for (int64_t b = 0; b < v.batch(); ++b) {
    const int64_t nq = std::max<int64_t>(1, v.n_q(b)), nk = std::max<int64_t>(1, v.n_k(b));
    const double scores = double(p.H) * double(nq) * double(nk);
    if (scores > double(limit))
      throw InputError("--cu-seqlens-q/--cu-seqlens-k", "sequences of H*N_q*N_k at most 2^40 scores",
                       "sequence " + std::to_string(b) + ": H=" + std::to_string(p.H) + " N_q=" + std::to_string(v.n_q(b)) +
                           " N_k=" + std::to_string(v.n_k(b)));
  }
  if (double(v.total_q()) * double(p.H) * double(p.d) > double(limit) ||
      double(v.total_k()) * double(p.H_kv) * double(p.d) > double(limit))
    throw InputError("--cu-seqlens-q/--cu-seqlens-k", "total_q*H*d and total_k*H_kv*d at most 2^40",
                     "total_q=" + std::to_string(v.total_q()) + " total_k=" + std::to_string(v.total_k()) +
                         " H=" + std::to_string(p.H) + " H_kv=" + std::to_string(p.H_kv) + " d=" + std::to_string(p.d));
}

AttnProblem varlen_problem(const AttnProblem& p, const VarlenHost& v) {
  AttnProblem s = p;
  s.B = v.batch();
  s.N_q = s.N_k = 0;
  for (int64_t b = 0; b < v.batch(); ++b) s.N_q = std::max(s.N_q, v.n_q(b)), s.N_k = std::max(s.N_k, v.n_k(b));
  s.token_major = false, s.lse_head_stride = 0;  // it describes the batch; no stage runs it
  return s;
}

void varlen_forward(const ForwardFn& f, const AttnProblem& p, const VarlenHost& v, const float* Q,
                    const float* K, const float* V, float* O, float* LSE) {
  const int64_t total_q = v.total_q();
  for (int64_t b = 0; b < v.batch(); ++b) {
    const int64_t t = v.cu_q[size_t(b)], n = v.n_q(b), u = v.cu_k[size_t(b)];
    if (n == 0) continue;  // no rows: nothing to write
    if (v.n_k(b) == 0) {   // rows that see no key: O = 0, LSE = -inf
      std::fill(O + t * p.H * p.d, O + (t + n) * p.H * p.d, 0.f);
      for (int64_t h = 0; h < p.H; ++h) std::fill(LSE + h * total_q + t, LSE + h * total_q + t + n, -INFINITY);
      continue;
    }
    f(sequence_problem(p, v, b), Q + t * p.H * p.d, K + u * p.H_kv * p.d, V + u * p.H_kv * p.d, O + t * p.H * p.d,
      LSE + t);
  }
}

void varlen_backward(const BackwardFn& f, const AttnProblem& p, const VarlenHost& v, const float* Q,
                     const float* K, const float* V, const float* O, const float* dO, const float* LSE,
                     float* dQ, float* dK, float* dV) {
  for (int64_t b = 0; b < v.batch(); ++b) {
    const int64_t t = v.cu_q[size_t(b)], n = v.n_q(b), u = v.cu_k[size_t(b)], m = v.n_k(b);
    const int64_t qo = t * p.H * p.d, ko = u * p.H_kv * p.d;
    if (n == 0 || m == 0) {  // no query sees these keys / these queries see no key: no gradient
      std::fill(dQ + qo, dQ + qo + n * p.H * p.d, 0.f);
      std::fill(dK + ko, dK + ko + m * p.H_kv * p.d, 0.f);
      std::fill(dV + ko, dV + ko + m * p.H_kv * p.d, 0.f);
      continue;
    }
    f(sequence_problem(p, v, b), Q + qo, K + ko, V + ko, O + qo, dO + qo, LSE + t, dQ + qo, dK + ko, dV + ko);
  }
}

namespace {

// The plain problem of sequence b, as the reference takes it: [1, H, N, d], contiguous.
AttnProblem plain_sequence(const AttnProblem& p, const VarlenHost& v, int64_t b) {
  AttnProblem s = p;
  s.B = 1, s.N_q = v.n_q(b), s.N_k = v.n_k(b);
  s.token_major = false, s.lse_head_stride = 0;
  return s;
}

// Rows t0 .. t0 + n - 1 of each head of an LSE [H, total] as [1, H, n], and back.
template <class T>
TensorT<T> gather_lse(const TensorT<T>& L, int64_t H, int64_t total, int64_t t0, int64_t n) {
  TensorT<T> Y({1, H, n});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < n; ++i) Y[h * n + i] = L[h * total + t0 + i];
  return Y;
}

}  // namespace

namespace {
// reference_varlen_forward() with `ref` (reference_forward or a stored variant) per sequence.
template <class Ref>
void varlen_reference_with(const AttnProblem& p, const VarlenHost& v, const Tensor& Q, const Tensor& K,
                           const Tensor& V, TensorD& O, TensorD& LSE, const Ref& ref) {
  validate_varlen(v);
  const int64_t total_q = v.total_q();
  O = TensorD({total_q, p.H, p.d});  // zeros: the rows of a sequence without keys
  LSE = TensorD({p.H, total_q}, -INFINITY);
  for (int64_t b = 0; b < v.batch(); ++b) {
    const int64_t t = v.cu_q[size_t(b)], n = v.n_q(b), u = v.cu_k[size_t(b)], m = v.n_k(b);
    if (n == 0 || m == 0) continue;
    TensorD Ob, Lb;
    ref(plain_sequence(p, v, b), gather_rows(Q, p.H, p.d, t, n), gather_rows(K, p.H_kv, p.d, u, m),
        gather_rows(V, p.H_kv, p.d, u, m), Ob, Lb);
    scatter_rows(Ob, p.H, p.d, t, n, O);
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < n; ++i) LSE[h * total_q + t + i] = Lb[h * n + i];
  }
}
}  // namespace

void reference_varlen_forward(const AttnProblem& p, const VarlenHost& v, const Tensor& Q, const Tensor& K,
                              const Tensor& V, TensorD& O, TensorD& LSE) {
  varlen_reference_with(p, v, Q, K, V, O, LSE,
                        [](const AttnProblem& s, const Tensor& q, const Tensor& k, const Tensor& x, TensorD& o,
                           TensorD& l) { reference_forward(s, q, k, x, o, l); });
}

void reference_varlen_forward_stored(const AttnProblem& p, const VarlenHost& v, const Tensor& Q, const Tensor& K,
                                     const Tensor& V, DType P_dtype, DType O_dtype, TensorD& O, TensorD& LSE) {
  varlen_reference_with(p, v, Q, K, V, O, LSE,
                        [&](const AttnProblem& s, const Tensor& q, const Tensor& k, const Tensor& x, TensorD& o,
                            TensorD& l) { reference_forward_stored(s, q, k, x, P_dtype, O_dtype, o, l); });
}

void reference_varlen_backward(const AttnProblem& p, const VarlenHost& v, const TensorD& Q, const TensorD& K,
                               const TensorD& V, const TensorD& dO, TensorD& dQ, TensorD& dK, TensorD& dV,
                               bool lse_in_float32, const Tensor* O, const Tensor* LSE_f32) {
  validate_varlen(v);
  dQ = TensorD({v.total_q(), p.H, p.d});  // zeros: no gradient where a sequence has no query or no key
  dK = TensorD({v.total_k(), p.H_kv, p.d});
  dV = TensorD({v.total_k(), p.H_kv, p.d});
  for (int64_t b = 0; b < v.batch(); ++b) {
    const int64_t t = v.cu_q[size_t(b)], n = v.n_q(b), u = v.cu_k[size_t(b)], m = v.n_k(b);
    if (n == 0 || m == 0) continue;
    Tensor Ob, Lb;
    BackwardStorage st;
    if (O) Ob = gather_rows(*O, p.H, p.d, t, n), st.O = &Ob;
    if (LSE_f32) Lb = gather_lse(*LSE_f32, p.H, v.total_q(), t, n), st.LSE = &Lb;
    TensorD dQb, dKb, dVb;
    reference_backward(plain_sequence(p, v, b), gather_rows(Q, p.H, p.d, t, n), gather_rows(K, p.H_kv, p.d, u, m),
                       gather_rows(V, p.H_kv, p.d, u, m), gather_rows(dO, p.H, p.d, t, n), dQb, dKb, dVb,
                       lse_in_float32, st);
    scatter_rows(dQb, p.H, p.d, t, n, dQ);
    scatter_rows(dKb, p.H_kv, p.d, u, m, dK);
    scatter_rows(dVb, p.H_kv, p.d, u, m, dV);
  }
}

double varlen_forward_flops(const AttnProblem& p, const VarlenHost& v) {
  double flops = 0;
  for (int64_t b = 0; b < v.batch(); ++b)
    if (v.n_q(b) > 0 && v.n_k(b) > 0) flops += plain_sequence(p, v, b).forward_flops();
  return flops;
}

Tensor pad_packed(const Tensor& X, const std::vector<int32_t>& cu, int64_t heads, int64_t d, int64_t N) {
  const int64_t B = int64_t(cu.size()) - 1;
  Tensor Y({B, heads, N, d});  // zeros past each sequence's end
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = cu[size_t(b) + 1] - cu[size_t(b)];
    const Tensor Yb = gather_rows(X, heads, d, cu[size_t(b)], n);
    for (int64_t h = 0; h < heads; ++h)
      std::copy(Yb.ptr() + h * n * d, Yb.ptr() + (h + 1) * n * d, Y.ptr() + ((b * heads + h) * N) * d);
  }
  return Y;
}

}  // namespace fa
