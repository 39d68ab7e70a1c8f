// Naive attention, as plugins/attention/naive (the CPU reference): for one batch element
// at a time, the H (T x T) score matrices go to the workspace through one strided-batched GEMM
// over the heads, a warp-per-row kernel softmaxes them (causal mask, lse), and a second batched
// GEMM multiplies by V. Backward recomputes P from the lse and runs four more batched GEMMs.
//
// Column-major bookkeeping (see blas.cuh): a head's (T,D) rows of q/k/v/out, D contiguous with
// row stride st, is the column-major (D,T) matrix with leading dim st; heads are st apart in
// the batch (stride sh). The workspace's row-major (T,T) matrix M[i][j] (query i, key j) is the
// column-major (T_j, T_i) matrix with leading dim T, i.e. M^T; heads are T*T apart.
//
// 16-bit views (bf16 or f16): the same steps, templated on the element type E of the views.
// The scores S, P, dP and the softmax stay fp32 (S = Q K^T and dP = dO V^T are E x E -> fp32
// GEMMs); the GEMMs that take P or dS as an operand (out = P V, dV = P^T dO, dQ = dS K,
// dK = dS^T Q) need it in E, so the softmax kernels also write an E copy into a staging area
// after the fp32 matrices (H*T*T elements), and those GEMMs run E x E -> E.
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "blas.cuh"
#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kRowsPerBlock = detail::kThreads / 32;

// Row `row` = h*T + i of the scores S (T x T per head): P = softmax over the keys j < n
// (n = i + 1 causal, T otherwise), masked entries 0, written to P (which may be S: in place;
// every element is read, then written, by one lane); lse = log sum exp(S).
template <class TP>
__global__ void softmax_rows_kernel(const float* S, TP* P, float* lse, int T, int rows,
                                    bool causal) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int i = row % T;
  const int n = causal ? i + 1 : T;
  const float* s = S + size_t(row) * T;
  TP* p = P + size_t(row) * T;
  float m = -INFINITY;
  for (int j = lane; j < n; j += 32) m = fmaxf(m, s[j]);
  m = detail::warp_max(m);
  float sum = 0.0f;
  for (int j = lane; j < n; j += 32) sum += expf(s[j] - m);
  sum = detail::warp_sum(sum);
  const float inv = 1.0f / sum;
  for (int j = lane; j < T; j += 32) p[j] = from_float<TP>(j < n ? expf(s[j] - m) * inv : 0.0f);
  if (lane == 0) lse[row] = m + logf(sum);
}

// P = exp(S - lse) in place (masked entries 0), H*T*T elements of one batch element; where
// `copy` is not null, also copy = E(P).
template <class E>
__global__ void probs_from_lse_kernel(float* S, E* copy, const float* lse, int T, size_t total,
                                      bool causal) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += size_t(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(e % T);
    const size_t row = e / T;
    const int i = static_cast<int>(row % T);
    const float p = (!causal || j <= i) ? expf(S[e] - lse[row]) : 0.0f;
    S[e] = p;
    if (copy) copy[e] = from_float<E>(p);
  }
}

// dS = P o (dP - rowsum(dO o O)), one warp per row h*T + i, written to dS (which may be dP: in
// place, each element read, then written, by one lane).
template <class E>
__global__ void softmax_backward_rows_kernel(E* dS, const float* dP, const float* P, const E* out,
                                             int64_t out_sh, int64_t out_st, const E* dout,
                                             int64_t dout_sh, int64_t dout_st, int T, int D,
                                             int rows, bool causal) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int h = row / T, i = row % T;
  const E* o = out + h * out_sh + i * out_st;
  const E* d = dout + h * dout_sh + i * dout_st;
  float di = 0.0f;
  for (int c = lane; c < D; c += 32) di += to_float(d[c]) * to_float(o[c]);
  di = detail::warp_sum(di);
  const int n = causal ? i + 1 : T;
  const float* p = P + size_t(row) * T;
  const float* dp = dP + size_t(row) * T;
  E* ds = dS + size_t(row) * T;
  for (int j = lane; j < T; j += 32) ds[j] = from_float<E>(j < n ? p[j] * (dp[j] - di) : 0.0f);
}

template <class View>
struct ViewElem;
template <class E>
struct ViewElem<HeadViewOf<E>> {
  using type = E;
};
template <class View>
using elem_t = typename ViewElem<View>::type;

template <class View>
elem_t<View>* at(const View& v, int b) {
  return v.data + b * v.sb;
}

size_t scores_elems(int H, int T) {
  return size_t(H) * size_t(T) * size_t(T);
}

size_t scores_bytes(int H, int T) {
  return scores_elems(H, T) * sizeof(float);
}

// fp32 views: S (forward) or P, dP (backward), H*T*T floats each. 16-bit views: the same plus
// the H*T*T staging matrix of E after them.
template <class E>
size_t workspace_need(int H, int T, bool backward) {
  const size_t fp32 = (backward ? 2 : 1) * scores_bytes(H, T);
  return std::is_same_v<E, float> ? fp32 : fp32 + scores_elems(H, T) * sizeof(E);
}

float* require_workspace(void* ws, size_t have, size_t need, const char* name, const char* sizing) {
  if (need && (!ws || have < need))
    throw std::runtime_error(std::string(name) + ": workspace of " + std::to_string(have) +
                             " bytes is smaller than the " + std::to_string(need) + " bytes " +
                             sizing + " asks for");
  return static_cast<float*>(ws);
}

template <class E>
const char* sizing_name() {
  return std::is_same_v<E, float> ? "attention_naive_workspace_bytes"
                                  : "attention_naive_workspace_bytes_half";
}

bool empty_or_bad(int B, int H, int T, int D, const char* name) {
  if (B < 0 || H < 0 || T < 0 || D < 1)
    throw std::runtime_error(std::string(name) + ": bad shape B=" + std::to_string(B) +
                             " H=" + std::to_string(H) + " T=" + std::to_string(T) +
                             " D=" + std::to_string(D));
  return B == 0 || H == 0 || T == 0;
}

// S_h = scale * Q_h K_h^T (fp32) for every head of batch element b, into S (H x T x T).
// Column-major S_h^T (T_j,T_i) = K_h^T (T_j,D) @ Q_h (D,T_i): A = K transposed, B = Q.
template <class View>
void scores(Blas& blas, float* S, const View& q, const View& k, int b, int H, int T, int D,
            float scale, const char* name) {
  detail::Gemm g;
  g.ta = true;
  g.m = T, g.n = T, g.k = D;
  g.alpha = scale;
  g.A = at(k, b), g.lda = k.st;
  g.B = at(q, b), g.ldb = q.st;
  g.beta = 0.0f;
  g.C = S, g.ldc = T;
  g.ab_type = detail::data_type<elem_t<View>>();
  g.c_type = CUDA_R_32F;
  detail::gemm_strided_batched(blas, g, k.sh, q.sh, int64_t(T) * T, H, name);
}

template <class View>
void forward(Blas& blas, View out, float* lse, View q, View k, View v, int B, int H, int T, int D,
             bool causal, float scale, void* workspace, size_t workspace_bytes) {
  using E = elem_t<View>;
  const char* name = "attention_naive_forward";
  if (empty_or_bad(B, H, T, D, name)) return;
  float* S = require_workspace(workspace, workspace_bytes, workspace_need<E>(H, T, false), name,
                               sizing_name<E>());
  // P: in place over S (fp32), or the E staging after S.
  E* P;
  if constexpr (std::is_same_v<E, float>)
    P = S;
  else
    P = reinterpret_cast<E*>(S + scores_elems(H, T));
  const int rows = H * T;
  const unsigned blocks = static_cast<unsigned>(detail::ceil_div(rows, kRowsPerBlock));
  for (int b = 0; b < B; ++b) {
    scores(blas, S, q, k, b, H, T, D, scale, name);
    softmax_rows_kernel<E><<<blocks, detail::kThreads, 0, blas.stream()>>>(
        S, P, lse + size_t(b) * H * T, T, rows, causal);
    detail::check_launch(name);
    // out_h (T_i,D) = P_h (T_i,T_j) @ V_h (T_j,D). Column-major: out_h (D,T_i) =
    // V_h (D,T_j) @ P_h^T (T_j,T_i), and P_h^T is how the workspace stores P_h: no transposes.
    detail::Gemm g;
    g.m = D, g.n = T, g.k = T;
    g.A = at(v, b), g.lda = v.st;
    g.B = P, g.ldb = T;
    g.beta = 0.0f;
    g.C = at(out, b), g.ldc = out.st;
    g.ab_type = g.c_type = detail::data_type<E>();
    detail::gemm_strided_batched(blas, g, v.sh, int64_t(T) * T, out.sh, H, name);
  }
}

template <class View>
void backward(Blas& blas, View dq, View dk, View dv, View q, View k, View v, View out,
              const float* lse, View dout, int B, int H, int T, int D, bool causal, float scale,
              void* workspace, size_t workspace_bytes) {
  using E = elem_t<View>;
  constexpr cudaDataType_t kType = detail::data_type<E>();
  const char* name = "attention_naive_backward";
  if (empty_or_bad(B, H, T, D, name)) return;
  float* P = require_workspace(workspace, workspace_bytes, workspace_need<E>(H, T, true), name,
                               sizing_name<E>());
  const size_t elems = scores_elems(H, T);
  float* dP = P + elems;
  // The GEMM operands P and dS: fp32 in place (P, then dS over dP), or one E staging matrix
  // after dP that holds E(P) until dV is queued and E(dS) after it (the stream orders the
  // reuse).
  E* copy = nullptr;
  E* P_op;
  E* dS_op;
  if constexpr (std::is_same_v<E, float>) {
    P_op = P;
    dS_op = dP;
  } else {
    copy = reinterpret_cast<E*>(dP + elems);
    P_op = copy;
    dS_op = copy;
  }
  const int rows = H * T;
  const unsigned blocks = static_cast<unsigned>(detail::ceil_div(rows, kRowsPerBlock));
  for (int b = 0; b < B; ++b) {
    // P = exp(scale Q K^T - lse), recomputed.
    scores(blas, P, q, k, b, H, T, D, scale, name);
    probs_from_lse_kernel<E><<<detail::grid_for(elems), detail::kThreads, 0, blas.stream()>>>(
        P, copy, lse + size_t(b) * H * T, T, elems, causal);
    detail::check_launch(name);
    {
      // dV_h (T_j,D) = P_h^T (T_j,T_i) @ dO_h (T_i,D). Column-major: dV_h (D,T_j) =
      // dO_h (D,T_i) @ P_h (T_i,T_j); the workspace holds P_h^T, so B is transposed.
      detail::Gemm g;
      g.tb = true;
      g.m = D, g.n = T, g.k = T;
      g.A = at(dout, b), g.lda = dout.st;
      g.B = P_op, g.ldb = T;
      g.beta = 0.0f;
      g.C = at(dv, b), g.ldc = dv.st;
      g.ab_type = g.c_type = kType;
      detail::gemm_strided_batched(blas, g, dout.sh, int64_t(T) * T, dv.sh, H, name);
    }
    {
      // dP_h (T_i,T_j) = dO_h (T_i,D) @ V_h^T (D,T_j). Column-major, stored as dP_h^T (T_j,T_i)
      // = V_h^T (T_j,D) @ dO_h (D,T_i): A = V transposed, B = dO. fp32 output.
      detail::Gemm g;
      g.ta = true;
      g.m = T, g.n = T, g.k = D;
      g.A = at(v, b), g.lda = v.st;
      g.B = at(dout, b), g.ldb = dout.st;
      g.beta = 0.0f;
      g.C = dP, g.ldc = T;
      g.ab_type = kType;
      g.c_type = CUDA_R_32F;
      detail::gemm_strided_batched(blas, g, v.sh, dout.sh, int64_t(T) * T, H, name);
    }
    softmax_backward_rows_kernel<E><<<blocks, detail::kThreads, 0, blas.stream()>>>(
        dS_op, dP, P, at(out, b), out.sh, out.st, at(dout, b), dout.sh, dout.st, T, D, rows,
        causal);
    detail::check_launch(name);
    // dS_op now holds dS (unscaled); the softmax scale enters as alpha.
    {
      // dQ_h (T_i,D) = scale dS_h (T_i,T_j) @ K_h (T_j,D). Column-major: dQ_h (D,T_i) =
      // K_h (D,T_j) @ dS_h^T (T_j,T_i), and dS_h^T is how the workspace stores dS_h.
      detail::Gemm g;
      g.m = D, g.n = T, g.k = T;
      g.alpha = scale;
      g.A = at(k, b), g.lda = k.st;
      g.B = dS_op, g.ldb = T;
      g.beta = 0.0f;
      g.C = at(dq, b), g.ldc = dq.st;
      g.ab_type = g.c_type = kType;
      detail::gemm_strided_batched(blas, g, k.sh, int64_t(T) * T, dq.sh, H, name);
    }
    {
      // dK_h (T_j,D) = scale dS_h^T (T_j,T_i) @ Q_h (T_i,D). Column-major: dK_h (D,T_j) =
      // Q_h (D,T_i) @ dS_h (T_i,T_j); the workspace holds dS_h^T, so B is transposed.
      detail::Gemm g;
      g.tb = true;
      g.m = D, g.n = T, g.k = T;
      g.alpha = scale;
      g.A = at(q, b), g.lda = q.st;
      g.B = dS_op, g.ldb = T;
      g.beta = 0.0f;
      g.C = at(dk, b), g.ldc = dk.st;
      g.ab_type = g.c_type = kType;
      detail::gemm_strided_batched(blas, g, q.sh, int64_t(T) * T, dk.sh, H, name);
    }
  }
}

}  // namespace

// Backward holds P and dP of one batch element (forward uses the first half only).
size_t attention_naive_workspace_bytes(int /*B*/, int H, int T, int /*D*/) {
  if (H <= 0 || T <= 0) return 0;
  return workspace_need<float>(H, T, true);
}

// The fp32 P and dP plus the 16-bit staging matrix: covers every dtype and both directions.
size_t attention_naive_workspace_bytes_half(int /*B*/, int H, int T, int /*D*/) {
  if (H <= 0 || T <= 0) return 0;
  return workspace_need<bf16>(H, T, true);
}

template <class E>
void attention_naive_forward(Blas& blas, HeadViewOf<E> out, float* lse, HeadViewOf<E> q,
                             HeadViewOf<E> k, HeadViewOf<E> v, int B, int H, int T, int D,
                             bool causal, float scale, void* workspace, size_t workspace_bytes) {
  forward(blas, out, lse, q, k, v, B, H, T, D, causal, scale, workspace, workspace_bytes);
}

template <class E>
void attention_naive_backward(Blas& blas, HeadViewOf<E> dq, HeadViewOf<E> dk, HeadViewOf<E> dv,
                              HeadViewOf<E> q, HeadViewOf<E> k, HeadViewOf<E> v, HeadViewOf<E> out,
                              const float* lse, HeadViewOf<E> dout, int B, int H, int T, int D,
                              bool causal, float scale, void* workspace, size_t workspace_bytes) {
  backward(blas, dq, dk, dv, q, k, v, out, lse, dout, B, H, T, D, causal, scale, workspace,
           workspace_bytes);
}

#define TRIAD_INSTANTIATE(E)                                                                    \
  template void attention_naive_forward(Blas&, HeadViewOf<E>, float*, HeadViewOf<E>,            \
                                        HeadViewOf<E>, HeadViewOf<E>, int, int, int, int, bool, \
                                        float, void*, size_t);                                  \
  template void attention_naive_backward(Blas&, HeadViewOf<E>, HeadViewOf<E>, HeadViewOf<E>,    \
                                         HeadViewOf<E>, HeadViewOf<E>, HeadViewOf<E>,           \
                                         HeadViewOf<E>, const float*, HeadViewOf<E>, int, int,  \
                                         int, int, bool, float, void*, size_t);
TRIAD_INSTANTIATE(float)
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

}  // namespace triad::kernels::cuda
