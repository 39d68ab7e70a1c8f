// dst_k[c] += sum_n term_k(n, c) for an (N,C) row-major operand, k < Term::kSums: the bias and
// weight gradients of matmul and layernorm. Deterministic (no atomics) in two passes, with
// double accumulation as the CPU's add_column_sums:
//   1. a (C/32, R) grid: block (x, r) sums rows [r*rows, (r+1)*rows) of 32 columns; its 32x8
//      threads take every 8th row (a warp reads 128 contiguous bytes of one row), then the 8
//      partial sums are added in a fixed order and written to partial[r][k][c];
//   2. one thread per column adds the R partials in order and does dst += float(sum).
// R depends only on N, so the summation order (and the result) is the same on every run.
#pragma once

#include "common.cuh"

namespace triad::kernels::cuda::detail {

constexpr int kColTile = 32;     // columns per block
constexpr int kColRowLanes = 8;  // threads along the rows of a block
constexpr int kColMaxSplits = 128;

// Term provides `static constexpr int kSums` and `__device__ void add(int n, int c, double* acc)`.
template <class Term>
__global__ void column_partials_kernel(double* partial, Term term, int N, int C, int rows) {
  constexpr int K = Term::kSums;
  __shared__ double tile[K][kColRowLanes][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int n0 = blockIdx.y * rows;
  const int n1 = min(N, n0 + rows);
  double acc[K];
  for (int k = 0; k < K; ++k) acc[k] = 0.0;
  if (c < C)
    for (int n = n0 + threadIdx.y; n < n1; n += kColRowLanes) term.add(n, c, acc);
  for (int k = 0; k < K; ++k) tile[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 0; k < K; ++k) {
      double s = 0.0;
      for (int y = 0; y < kColRowLanes; ++y) s += tile[k][y][threadIdx.x];
      partial[(size_t(blockIdx.y) * K + k) * C + c] = s;
    }
  }
}

template <int K>
struct ColumnDst {
  float* dst[K];
};

template <int K>
__global__ void column_finish_kernel(ColumnDst<K> out, const double* partial, int R, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int k = 0; k < K; ++k) {
    if (!out.dst[k]) continue;
    double s = 0.0;
    for (int r = 0; r < R; ++r) s += partial[(size_t(r) * K + k) * C + c];
    out.dst[k][c] += float(s);
  }
}

// dst.dst[k] may be null (that sum is skipped at the end; it is still computed).
template <class Term>
void add_column_sums(ColumnDst<Term::kSums> dst, const Term& term, int N, int C,
                     cudaStream_t stream, const char* name) {
  constexpr int K = Term::kSums;
  if (N <= 0 || C <= 0) return;
  const int R =
      static_cast<int>(ceil_div(size_t(N), 128) < size_t(kColMaxSplits) ? ceil_div(size_t(N), 128)
                                                                        : size_t(kColMaxSplits));
  const int rows = static_cast<int>(ceil_div(size_t(N), size_t(R)));
  Scratch partial(size_t(R) * K * C * sizeof(double), stream, name);
  const dim3 grid(static_cast<unsigned>(ceil_div(size_t(C), kColTile)), static_cast<unsigned>(R));
  column_partials_kernel<<<grid, dim3(kColTile, kColRowLanes), 0, stream>>>(partial.as<double>(),
                                                                            term, N, C, rows);
  check_launch(name);
  column_finish_kernel<K>
      <<<static_cast<unsigned>(ceil_div(size_t(C), kThreads)), kThreads, 0, stream>>>(
          dst, partial.as<double>(), R, C);
  check_launch(name);
}

// dbias (C) += sum_n dout (N,C): matmul_backward's dbias and bias_backward.
template <class T>
struct BiasGradTerm {
  static constexpr int kSums = 1;
  const T* dout;
  int C;
  __device__ void add(int n, int c, double* acc) const {
    acc[0] += to_float(dout[size_t(n) * C + c]);
  }
};

template <class T>
void add_bias_grad(float* dbias, const T* dout, int N, int C, cudaStream_t stream,
                   const char* name) {
  add_column_sums(ColumnDst<1>{{dbias}}, BiasGradTerm<T>{dout, C}, N, C, stream, name);
}

}  // namespace triad::kernels::cuda::detail
