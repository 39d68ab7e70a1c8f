// GEMM helpers over the handles of a Blas: column-major, as cuBLAS thinks. A row-major (R,K)
// matrix with leading dimension K is, to cuBLAS, the column-major (K,R) matrix with the same
// leading dimension; every caller writes its transposes in those terms. Operands are fp32, bf16
// or fp16 (A and B of one type, C of its own); the arithmetic accumulates in fp32 always.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <library_types.h>

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

template <class T>
constexpr cudaDataType_t data_type();
template <>
constexpr cudaDataType_t data_type<float>() {
  return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t data_type<bf16>() {
  return CUDA_R_16BF;
}
template <>
constexpr cudaDataType_t data_type<f16>() {
  return CUDA_R_16F;
}

// C (m,n) = alpha op(A) op(B) + beta C [+ bias broadcast along columns], column-major.
// op(A) is (m,k): A is stored (m,k) with lda >= m, or (k,m) with lda >= k when ta.
// op(B) is (k,n): B is stored (k,n) with ldb >= k, or (n,k) with ldb >= n when tb.
// alpha and beta are fp32. ab_type is the type of A and B, c_type that of C and of the bias.
struct Gemm {
  bool ta = false, tb = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const void* A = nullptr;
  int64_t lda = 0;
  const void* B = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  void* C = nullptr;
  int64_t ldc = 0;
  const void* bias = nullptr;  // (m), cuBLASLt BIAS epilogue; null for none
  // (m,n) of c_type with leading dimension ldc: the GELU's input. Without dgelu it is written
  // (GELU_AUX[_BIAS] epilogue: C = gelu(aux), aux = op(A) op(B) [+ bias]); with dgelu it is read
  // (DGELU epilogue: C = op(A) op(B) * gelu'(aux), beta 0, no bias). Only through lt_gemm, which
  // returns false where cuBLASLt has no such algorithm. Null for none.
  void* aux = nullptr;
  bool dgelu = false;
  cudaDataType_t ab_type = CUDA_R_32F;
  cudaDataType_t c_type = CUDA_R_32F;
};

// fp32 operands follow the Blas's TF32 setting; 16-bit operands always accumulate in full fp32.
inline cublasComputeType_t compute_type(const Blas& blas, const Gemm& g) {
  return g.ab_type == CUDA_R_32F ? compute_type(blas) : CUBLAS_COMPUTE_32F;
}

// Through cuBLASLt; where its heuristic offers no algorithm (odd alignment of an operand or of
// the bias), through cublasGemmEx, with the bias seeded into C first. m, n, k > 0; no aux.
void gemm(Blas& blas, const Gemm& g, const char* name);

// Through cuBLASLt only; false (nothing launched) where its heuristic offers no algorithm.
bool lt_gemm(Blas& blas, const Gemm& g, const char* name);

// Strided-batched C_i = alpha op(A_i) op(B_i) + beta C_i (cublasGemmStridedBatchedEx), no bias.
void gemm_strided_batched(Blas& blas, const Gemm& g, int64_t stride_a, int64_t stride_b,
                          int64_t stride_c, int batch, const char* name);

}  // namespace triad::kernels::cuda::detail
