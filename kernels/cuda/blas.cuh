// GEMM helpers over the handles of a Blas: column-major, as cuBLAS thinks. A row-major (R,K)
// matrix with leading dimension K is, to cuBLAS, the column-major (K,R) matrix with the same
// leading dimension; every caller writes its transposes in those terms.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>

#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::detail {

inline void check_cublas(cublasStatus_t s, const char* name) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cublas", name, cublasGetStatusString(s));
}

inline cublasComputeType_t compute_type(const Blas& blas) {
  return blas.allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// C (m,n) = alpha op(A) op(B) + beta C [+ bias broadcast along columns], column-major.
// op(A) is (m,k): A is stored (m,k) with lda >= m, or (k,m) with lda >= k when ta.
// op(B) is (k,n): B is stored (k,n) with ldb >= k, or (n,k) with ldb >= n when tb.
struct Gemm {
  bool ta = false, tb = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const float* A = nullptr;
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* C = nullptr;
  int64_t ldc = 0;
  const float* bias = nullptr;  // (m), cuBLASLt BIAS epilogue; null for none
};

// Through cuBLASLt; where its heuristic offers no algorithm (odd alignment of an operand or of
// the bias), through cublasGemmEx, with the bias seeded into C first. m, n, k > 0.
void gemm(Blas& blas, const Gemm& g, const char* name);

// Strided-batched C_i = alpha op(A_i) op(B_i) + beta C_i (cublasGemmStridedBatchedEx), no bias.
void gemm_strided_batched(Blas& blas, const Gemm& g, int64_t stride_a, int64_t stride_b,
                          int64_t stride_c, int batch, const char* name);

}  // namespace triad::kernels::cuda::detail
