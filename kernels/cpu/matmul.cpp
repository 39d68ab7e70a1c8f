// Fully connected layer through a GEMM library: out = inp @ weight^T + bias, weight (OC,C).
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "column_sums.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {
namespace {

// Row-major C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta * C, dense leading dims.
void gemm(Gemm lib, bool ta, bool tb, int M, int N, int K, float beta, const float* A,
          const float* B, float* Cm) {
  const int lda = ta ? M : K, ldb = tb ? K : N;
  if (lib == Gemm::openblas) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, 1.0f, A, lda, B, ldb, beta, Cm, N);
    return;
  }
  // dnnl_sgemm rather than the matmul primitive: within noise of it on most of GPT-2 small's
  // shapes here and well ahead where K is the vocabulary, with no cache of primitives per shape
  // (docs/performance.md, "GEMMs"). It is row-major, as cblas with CblasRowMajor.
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, Cm, N);
  // Only invalid arguments fail, and the shapes are checked by our callers: a bug, not a user's.
  if (st != dnnl_success)
    throw std::logic_error("dnnl_sgemm failed (status " + std::to_string(int(st)) + ") for M " +
                           std::to_string(M) + ", N " + std::to_string(N) + ", K " +
                           std::to_string(K));
}
// oneDNN has no double GEMM; double is the tests' precision, never the hot path.
void gemm(Gemm, bool ta, bool tb, int M, int N, int K, double beta, const double* A,
          const double* B, double* Cm) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0, A, ta ? M : K, B, tb ? K : N, beta, Cm, N);
}

}  // namespace

template <class F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC,
                    Gemm lib) {
  if (N <= 0 || OC <= 0) return;
  // Seeding out with the bias and letting gemm add to it (beta = 1) replaces a second
  // read-modify-write pass over out.
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) std::copy(bias, bias + OC, out + size_t(n) * OC);
  }
  if (C <= 0) {
    if (!bias) std::fill(out, out + size_t(N) * OC, F(0));
    return;
  }
  gemm(lib, false, true, N, OC, C, bias ? F(1) : F(0), inp, weight, out);
}

template <class F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                     int N, int C, int OC, Gemm lib, bool accumulate) {
  if (N <= 0) return;
  if (OC <= 0) {  // nothing flows back; an overwritten dinp is zero
    if (dinp && !accumulate && C > 0) std::fill(dinp, dinp + size_t(N) * C, F(0));
    return;
  }
  if (C > 0) {
    // (N,OC) @ (OC,C); beta = 0 overwrites without reading dinp (0 + x = x: the same bits as
    // accumulating into zeros).
    if (dinp) gemm(lib, false, false, N, C, OC, accumulate ? F(1) : F(0), dout, weight, dinp);
    if (dweight) gemm(lib, true, false, OC, C, N, F(1), dout, inp, dweight);  // (OC,N) @ (N,C)
  }
  if (dbias)
    detail::add_column_sums(dbias, N, OC, [=](int n, int o) { return dout[size_t(n) * OC + o]; });
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int,
                                    Gemm);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int,
                                     int, Gemm);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int, Gemm, bool);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int, int, int, Gemm, bool);

}  // namespace triad::kernels::cpu
