// dst_k[c] += sum_n term_k(n, c) for an (N,C) row-major operand, k < Term::kSums: the bias and
// weight gradients of matmul and layernorm. Deterministic (no atomics) in two passes, with
// double accumulation as the CPU's add_column_sums:
//   1. a (C/(32V), R) grid of 32x8 blocks: block (x, r) sums rows [r*rows, (r+1)*rows) of 32V
//      columns, each thread V adjacent columns (V = 8 bf16 or 4 floats: one 16-byte load, where
//      C and the operands allow it; else V = 1) of every 8th row, so that a warp reads 512
//      contiguous bytes of a row; the 8 partial sums are then added in a fixed order and
//      written to partial[r][k][c];
//   2. a (C/32) grid of 32x8 blocks: thread (x, y) adds the partials y, y+8, ... of column x in
//      order (a warp reads 32 contiguous doubles), the 8 sums are added in a fixed order, and
//      dst += float(sum).
// R depends only on N, so the summation order (and the result) is the same on every run.
// (Measured on an H100, GPT-2 124M bf16, B 16: one thread per column in pass 2 and 2-byte loads
// in pass 1 cost 2.2 ms of a 36 ms step.)
#pragma once

#include "common.cuh"

namespace triad::kernels::cuda::detail {

constexpr int kColTile = 32;     // threads along the columns of a block
constexpr int kColRowLanes = 8;  // threads along the rows of a block
constexpr int kColMaxSplits = 256;

// x[0..V) = the V elements at p (V == 1, or V == kVecOf<T> with p 16-byte aligned), as floats.
template <int V, class T>
__device__ inline void load_n(const T* p, float (&x)[V]) {
  if constexpr (V == 1)
    x[0] = to_float(*p);
  else
    load_vec(p, x);
}

// Term provides `static constexpr int kSums`, `bool vectors(int C)` (whether V = kVecOf<T> loads
// are legal for every row) and
// `template <int V> __device__ void add(int n, int c, double (&acc)[kSums][V])`, which adds
// term_k(n, c + v) to acc[k][v].
template <class Term, int V>
__global__ void column_partials_kernel(double* partial, Term term, int N, int C, int rows) {
  constexpr int K = Term::kSums;
  __shared__ double tile[kColRowLanes][kColTile + 1];
  const int c = (blockIdx.x * kColTile + threadIdx.x) * V;
  const int n0 = blockIdx.y * rows;
  const int n1 = min(N, n0 + rows);
  double acc[K][V];
  for (int k = 0; k < K; ++k)
    for (int v = 0; v < V; ++v) acc[k][v] = 0.0;
  if (c < C) {
#pragma unroll 4
    for (int n = n0 + threadIdx.y; n < n1; n += kColRowLanes) term.template add<V>(n, c, acc);
  }
  for (int k = 0; k < K; ++k)
    for (int v = 0; v < V; ++v) {
      tile[threadIdx.y][threadIdx.x] = acc[k][v];
      __syncthreads();
      if (threadIdx.y == 0 && c < C) {
        double s = 0.0;
        for (int y = 0; y < kColRowLanes; ++y) s += tile[y][threadIdx.x];
        partial[(size_t(blockIdx.y) * K + k) * C + c + v] = s;
      }
      __syncthreads();
    }
}

template <int K>
struct ColumnDst {
  float* dst[K];
};

template <int K>
__global__ void column_finish_kernel(ColumnDst<K> out, const double* partial, int R, int C) {
  __shared__ double tile[K][kColRowLanes][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  double acc[K];
  for (int k = 0; k < K; ++k) acc[k] = 0.0;
  if (c < C)
#pragma unroll 4
    for (int r = threadIdx.y; r < R; r += kColRowLanes)
      for (int k = 0; k < K; ++k) acc[k] += partial[(size_t(r) * K + k) * C + c];
  for (int k = 0; k < K; ++k) tile[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 0; k < K; ++k) {
      if (!out.dst[k]) continue;
      double s = 0.0;
      for (int y = 0; y < kColRowLanes; ++y) s += tile[k][y][threadIdx.x];
      out.dst[k][c] += float(s);
    }
  }
}

// dst.dst[k] may be null (that sum is skipped at the end; it is still computed). The result does
// not depend on V (the same rows go to the same partial, in the same order).
template <class Term>
void add_column_sums(ColumnDst<Term::kSums> dst, const Term& term, int N, int C,
                     cudaStream_t stream, const char* name) {
  constexpr int K = Term::kSums;
  constexpr int W = Term::kVec;
  if (N <= 0 || C <= 0) return;
  const int R =
      static_cast<int>(ceil_div(size_t(N), 64) < size_t(kColMaxSplits) ? ceil_div(size_t(N), 64)
                                                                       : size_t(kColMaxSplits));
  const int rows = static_cast<int>(ceil_div(size_t(N), size_t(R)));
  Scratch partial(size_t(R) * K * C * sizeof(double), stream, name);
  const dim3 block(kColTile, kColRowLanes);
  if (term.vectors(C)) {
    const dim3 grid(static_cast<unsigned>(ceil_div(size_t(C), size_t(kColTile) * W)),
                    static_cast<unsigned>(R));
    column_partials_kernel<Term, W>
        <<<grid, block, 0, stream>>>(partial.as<double>(), term, N, C, rows);
  } else {
    const dim3 grid(static_cast<unsigned>(ceil_div(size_t(C), kColTile)), static_cast<unsigned>(R));
    column_partials_kernel<Term, 1>
        <<<grid, block, 0, stream>>>(partial.as<double>(), term, N, C, rows);
  }
  check_launch(name);
  column_finish_kernel<K>
      <<<static_cast<unsigned>(ceil_div(size_t(C), kColTile)), block, 0, stream>>>(
          dst, partial.as<double>(), R, C);
  check_launch(name);
}

// dbias (C) += sum_n dout (N,C): matmul_backward's dbias and bias_backward.
template <class T>
struct BiasGradTerm {
  static constexpr int kSums = 1;
  static constexpr int kVec = kVecOf<T>;
  const T* dout;
  int C;
  bool vectors(int cols) const { return cols % kVec == 0 && misalign(dout) == 0; }
  template <int V>
  __device__ void add(int n, int c, double (&acc)[1][V]) const {
    float d[V];
    load_n<V>(dout + size_t(n) * C + c, d);
    for (int v = 0; v < V; ++v) acc[0][v] += d[v];
  }
};

template <class T>
void add_bias_grad(float* dbias, const T* dout, int N, int C, cudaStream_t stream,
                   const char* name) {
  add_column_sums(ColumnDst<1>{{dbias}}, BiasGradTerm<T>{dout, C}, N, C, stream, name);
}

}  // namespace triad::kernels::cuda::detail
