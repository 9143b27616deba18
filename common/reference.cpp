#include "reference.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "fp8.hpp"

namespace fa {
namespace {

// The mask, written out from the documented rule (problem.hpp's header, docs/math.md) and not
// from problem.hpp's key_range(), so that a bug there cannot hide in both: query i sees key j iff
//   causal:       j <= i + N_k - N_q
//   window left:  j >= i + N_k - N_q - left    (left >= 0)
//   window right: j <= i + N_k - N_q + right   (right >= 0)
bool sees(const AttnProblem& p, int64_t i, int64_t j) {
  const int64_t off = j - i - (p.N_k - p.N_q);  // how far key j lies right of row i's diagonal
  if (p.causal && off > 0) return false;
  if (p.window_left >= 0 && off < -p.window_left) return false;
  if (p.window_right >= 0 && off > p.window_right) return false;
  return true;
}

// The softcap on one scaled score, in double: c tanh(s / c) (Gemma 2); s without a cap.
double cap(const AttnProblem& p, double s) {
  return p.softcap > 0.f ? double(p.softcap) * std::tanh(s / double(p.softcap)) : s;
}

// One (b, h) pair at a time, with plain index arithmetic written out here on purpose (no helper
// shared with the stages), so a bug in problem.hpp cannot hide in both.
// store_P(x) is applied to each normalised weight P_ij before it multiplies V (identity for the
// reference itself; reference_forward_stored() rounds it to a 16-bit type). With `rows`,
// only those query rows are computed, and row r of O and LSE holds query row rows[r]
// (reference_forward_rows()).
template <class In>
void forward_impl(const AttnProblem& p, const In* Q, const In* K, const In* V, double* O,
                  double* LSE, double (*store_P)(double) = nullptr, const std::vector<int64_t>* rows = nullptr,
                  double (*store_unnormalised)(double) = nullptr) {
  const int64_t B = p.B, H = p.H, Hkv = p.H_kv, Nq = p.N_q, Nk = p.N_k, d = p.d;
  const double scale = p.scale != 0.f ? double(p.scale) : 1.0 / std::sqrt(double(d));
  const int64_t group = H / Hkv;
  const int64_t Nr = rows ? int64_t(rows->size()) : Nq;  // rows of O and LSE per (b, h)
  std::vector<double> s(static_cast<size_t>(Nk));
  std::vector<char> seen(static_cast<size_t>(Nk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      for (int64_t r = 0; r < Nr; ++r) {
        const int64_t i = rows ? (*rows)[size_t(r)] : r;
        const In* q = Q + ((b * H + h) * Nq + i) * d;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Nk; ++j) {
          seen[j] = sees(p, i, j);  // causal (bottom-right aligned) and the window
          if (!seen[j]) continue;
          const In* k = K + ((b * Hkv + hk) * Nk + j) * d;
          double acc = 0;
          for (int64_t c = 0; c < d; ++c) acc += double(q[c]) * double(k[c]);
          s[j] = cap(p, scale * acc);
          mx = std::max(mx, s[j]);
        }
        double* o = O + ((b * H + h) * Nr + r) * d;
        for (int64_t c = 0; c < d; ++c) o[c] = 0;
        double& lse = LSE[(b * H + h) * Nr + r];
        if (mx == -std::numeric_limits<double>::infinity()) {  // no visible key
          lse = -std::numeric_limits<double>::infinity();
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < Nk; ++j)
          if (seen[j]) sum += std::exp(s[j] - mx);
        for (int64_t j = 0; j < Nk; ++j) {
          if (!seen[j]) continue;
          // store_unnormalised (FP8): the weight e^(s - m) in [0, 1] is what a kernel stores
          double pj = store_unnormalised ? store_unnormalised(std::exp(s[j] - mx)) / sum : std::exp(s[j] - mx) / sum;
          if (store_P) pj = store_P(pj);
          const In* v = V + ((b * Hkv + hk) * Nk + j) * d;
          for (int64_t c = 0; c < d; ++c) o[c] += pj * double(v[c]);
        }
        lse = mx + std::log(sum);
      }
    }
}

}  // namespace

void reference_forward(const AttnProblem& p, const Tensor& Q, const Tensor& K, const Tensor& V,
                       TensorD& O, TensorD& LSE) {
  O = TensorD({p.B, p.H, p.N_q, p.d});
  LSE = TensorD({p.B, p.H, p.N_q});
  forward_impl(p, Q.ptr(), K.ptr(), V.ptr(), O.ptr(), LSE.ptr());
}

void reference_forward(const AttnProblem& p, const TensorD& Q, const TensorD& K, const TensorD& V,
                       TensorD& O, TensorD& LSE) {
  O = TensorD({p.B, p.H, p.N_q, p.d});
  LSE = TensorD({p.B, p.H, p.N_q});
  forward_impl(p, Q.ptr(), K.ptr(), V.ptr(), O.ptr(), LSE.ptr());
}

void reference_forward_rows(const AttnProblem& p, const Tensor& Q, const Tensor& K, const Tensor& V,
                            const std::vector<int64_t>& rows, TensorD& O, TensorD& LSE) {
  for (int64_t i : rows)
    if (i < 0 || i >= p.N_q)
      throw std::invalid_argument("reference_forward_rows: row " + std::to_string(i) + " is not in 0 .. " +
                                  std::to_string(p.N_q - 1));
  const int64_t n = int64_t(rows.size());
  O = TensorD({p.B, p.H, n, p.d});
  LSE = TensorD({p.B, p.H, n});
  forward_impl(p, Q.ptr(), K.ptr(), V.ptr(), O.ptr(), LSE.ptr(), nullptr, &rows);
}

void reference_forward_stored(const AttnProblem& p, const Tensor& Q, const Tensor& K,
                              const Tensor& V, DType P_dtype, DType O_dtype, TensorD& O,
                              TensorD& LSE) {
  O = TensorD({p.B, p.H, p.N_q, p.d});
  LSE = TensorD({p.B, p.H, p.N_q});
  double (*store_P)(double) = nullptr;
  if (P_dtype == DType::fp16) store_P = [](double x) { return double(float(lowp::Half(x))); };
  if (P_dtype == DType::bf16) store_P = [](double x) { return double(float(lowp::BFloat16(x))); };
  forward_impl(p, Q.ptr(), K.ptr(), V.ptr(), O.ptr(), LSE.ptr(), store_P);
  for (double& o : O.data) o = round_to(O_dtype, o);
}

void reference_forward_stored_fp8(const AttnProblem& p, const Tensor& Q, const Tensor& K, const Tensor& V,
                                  TensorD& O, TensorD& LSE) {
  O = TensorD({p.B, p.H, p.N_q, p.d});
  LSE = TensorD({p.B, p.H, p.N_q});
  forward_impl(p, Q.ptr(), K.ptr(), V.ptr(), O.ptr(), LSE.ptr(), nullptr, nullptr,
               [](double x) { return fp8::e4m3_round(256 * x) / 256; });
  for (double& o : O.data) o = round_to(DType::bf16, o);
}

void reference_backward(const AttnProblem& p, const TensorD& Q, const TensorD& K,
                        const TensorD& V, const TensorD& dO, TensorD& dQ, TensorD& dK,
                        TensorD& dV, bool lse_in_float32, const BackwardStorage& stored) {
  const int64_t B = p.B, H = p.H, Hkv = p.H_kv, Nq = p.N_q, Nk = p.N_k, d = p.d;
  const double scale = p.scale != 0.f ? double(p.scale) : 1.0 / std::sqrt(double(d));
  const int64_t group = H / Hkv;
  TensorD O, LSE;
  reference_forward(p, Q, K, V, O, LSE);
  dQ = TensorD({B, H, Nq, d});
  dK = TensorD({B, Hkv, Nk, d});
  dV = TensorD({B, Hkv, Nk, d});
  std::vector<double> P(static_cast<size_t>(Nk)), dP(static_cast<size_t>(Nk)), slope(static_cast<size_t>(Nk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < Nq; ++i) {
        const int64_t qi = ((b * H + h) * Nq + i) * d;
        double lse = LSE[(b * H + h) * Nq + i];
        if (lse_in_float32) lse = double(float(lse));  // what a backward fed a float32 LSE sees
        if (stored.LSE) lse = double((*stored.LSE)[(b * H + h) * Nq + i]);  // the LSE it was fed
        if (lse == -std::numeric_limits<double>::infinity()) continue;  // row sees nothing
        double D = 0;  // D_i = dO_i . O_i
        for (int64_t c = 0; c < d; ++c)
          D += dO[qi + c] * (stored.O ? round_to(stored.dtype, double((*stored.O)[qi + c])) : O[qi + c]);
        for (int64_t j = 0; j < Nk; ++j) {
          P[j] = 0;
          dP[j] = 0;
          slope[j] = 0;
          if (!sees(p, i, j)) continue;
          const int64_t kj = ((b * Hkv + hk) * Nk + j) * d;
          double s = 0, dp = 0;
          for (int64_t c = 0; c < d; ++c) {
            s += Q[qi + c] * K[kj + c];
            dp += dO[qi + c] * V[kj + c];
          }
          // Softcap: S = c tanh(x / c) with x = scale q.k; dS/dx = 1 - tanh^2(x / c).
          const double Sc = cap(p, scale * s);
          slope[j] = p.softcap > 0.f ? 1.0 - std::pow(std::tanh(scale * s / double(p.softcap)), 2) : 1.0;
          P[j] = std::exp(Sc - lse);
          dP[j] = dp;
        }
        for (int64_t j = 0; j < Nk; ++j) {
          if (P[j] == 0) continue;
          const int64_t kj = ((b * Hkv + hk) * Nk + j) * d;
          double dS = P[j] * (dP[j] - D) * slope[j];  // through the softcap to x = scale q.k
          double Pj = P[j];
          if (stored.P_in_dtype) Pj = round_to(stored.dtype, Pj), dS = round_to(stored.dtype, dS);
          for (int64_t c = 0; c < d; ++c) {
            dV[kj + c] += Pj * dO[qi + c];
            dQ[qi + c] += scale * dS * K[kj + c];
            dK[kj + c] += scale * dS * Q[qi + c];
          }
        }
      }
    }
  if (stored.dtype != DType::fp32)
    for (TensorD* g : {&dQ, &dK, &dV})
      for (double& x : g->data) x = round_to(stored.dtype, x);
}

}  // namespace fa
