// CPU kernels: pure compute, free functions on raw pointers (no devices, configs or plugins).
// Forward/backward pairs. Every backward ACCUMULATES (+=) into its gradient outputs unless it
// says "overwrites", so micro-batches accumulate for free. Instantiated for float and double
// (double is used by the finite-difference tests). Threaded with OpenMP where it pays;
// matmuls go through a GEMM library (oneDNN or OpenBLAS for float, BLAS dgemm for double).
#pragma once

#include <cstddef>
#include <cstdint>

namespace triad::kernels::cpu {

// Token + position embedding. out (B,T,C); tokens (B,T); wte (V,C); wpe (maxT,C) or null
// (no learned positions, e.g. rotary).
// Vocab-parallel (tensor parallelism): wte holds only the vocabulary rows
// [vocab_start, vocab_start + vocab_rows); a token outside them looks up a zero row (another
// rank holds it) and adds nothing to dwte. vocab_rows < 0: wte holds every row.
template <class F>
void embedding_forward(F* out, const int32_t* tokens, const F* wte, const F* wpe, int B, int T,
                       int C, int64_t vocab_start = 0, int vocab_rows = -1);
template <class F>
void embedding_backward(F* dwte, F* dwpe, const F* dout, const int32_t* tokens, int B, int T, int C,
                        int64_t vocab_start = 0, int vocab_rows = -1);

// LayerNorm over the last dim. inp/out (N,C); weight/bias (C); mean/rstd (N) saved for backward.
template <class F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C, F eps = F(1e-5));
// accumulate = false: dinp OVERWRITES (its first write into a scratch buffer, which then needs
// no zeroing pass); dweight and dbias accumulate either way.
template <class F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                        const F* mean, const F* rstd, int N, int C, bool accumulate = true);
// The residual add and the layernorm that reads its sum, in one pass over the rows:
// res (N,C) = a + b, then out, mean, rstd = layernorm_forward(res). The same bits as
// residual_forward then layernorm_forward. res may alias a or b.
template <class F>
void residual_layernorm_forward(F* res, F* out, F* mean, F* rstd, const F* a, const F* b,
                                const F* weight, const F* bias, int N, int C, F eps = F(1e-5));

// The library that runs the float GEMMs. oneDNN uses AVX-512 where the CPU has it; OpenBLAS
// runs the kernels its OPENBLAS_CORETYPE names (AVX2 where the environment pins Haswell).
// Both share the OpenMP thread pool. Double always runs BLAS's dgemm.
enum class Gemm { onednn, openblas };

// out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC); bias may be null.
template <class F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC,
                    Gemm gemm = Gemm::onednn);
// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += sum_n dout.
// dinp and dbias may be null (skipped). accumulate = false: dinp OVERWRITES (the GEMM runs with
// beta = 0, so a scratch dinp needs no zeroing first); dweight and dbias accumulate either way.
template <class F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                     int N, int C, int OC, Gemm gemm = Gemm::onednn, bool accumulate = true);

// GELU, tanh approximation (GPT-2).
template <class F>
void gelu_forward(F* out, const F* inp, size_t n);
// accumulate = false: dinp OVERWRITES.
template <class F>
void gelu_backward(F* dinp, const F* inp, const F* dout, size_t n, bool accumulate = true);

// out = a + b.
template <class F>
void residual_forward(F* out, const F* a, const F* b, size_t n);
template <class F>
void residual_backward(F* da, F* db, const F* dout, size_t n);

// Softmax + cross-entropy over the vocabulary, fused. logits (N,V); targets (N).
// Writes losses (N) and lse (N) (log-sum-exp of each row, needed by backward).
// Only the first `valid` columns of each row are vocabulary (valid < 0: all V); the rest are
// padding (Megatron's padded vocabulary) that never receives probability mass.
template <class F>
void crossentropy_forward(F* losses, F* lse, const F* logits, const int32_t* targets, int N, int V,
                          int valid = -1);
// dlogits (N,V) OVERWRITES with dloss * (softmax(logits) - onehot(target)), 0 in the padding
// columns. dlogits may alias logits (in place), which saves a second (N,V) buffer.
// Vocab-parallel: the row holds the vocabulary columns [vocab_start, vocab_start + V) of a
// larger row, lse is the whole row's, and a target outside them contributes no onehot.
template <class F>
void crossentropy_backward(F* dlogits, const F* logits, const F* lse, const int32_t* targets,
                           F dloss, int N, int V, int valid = -1, int64_t vocab_start = 0);
// Vocab-parallel cross-entropy in three steps around two reductions over the tensor group:
//   crossentropy_row_max     rowmax (N) = max over this rank's valid columns (-inf if none)
//   (all-reduce max)
//   crossentropy_row_sums    sumexp (N) = sum exp(z - rowmax); target (N) = z[target] when
//                            the target is one of this rank's columns, else 0
//   (all-reduce sum of both)
//   crossentropy_finish      lse = rowmax + log(sumexp); losses = lse - target
template <class F>
void crossentropy_row_max(F* rowmax, const F* logits, int N, int V, int valid);
template <class F>
void crossentropy_row_sums(F* sumexp, F* target_logit, const F* logits, const F* rowmax,
                           const int32_t* targets, int N, int V, int valid, int64_t vocab_start);
template <class F>
void crossentropy_finish(F* losses, F* lse, const F* rowmax, const F* sumexp, const F* target_logit,
                         int N);

// out (N,C) += bias (C) broadcast over the rows; dbias (C) += sum_n dout (N,C).
template <class F>
void bias_forward(F* out, const F* bias, int N, int C);
template <class F>
void bias_backward(F* dbias, const F* dout, int N, int C);

// Rotary position embedding (GPT-NeoX / LLaMA "rotate half" form), in place on a strided
// (B,T,H,D) view: x[b,t,h,:] is at x + b*sb + t*st + h*sh, D contiguous, D even.
// Position of token t is pos0 + t (a context-parallel rank's tokens start past 0); frequencies
// theta_i = base^(-2i/D), i in [0, D/2).
// forward:  (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) with x1 = x[:D/2], x2 = x[D/2:]
// backward: the transpose rotation (applied in place to the gradient).
template <class F>
void rope_forward(F* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                  double base = 10000.0, int64_t pos0 = 0);
template <class F>
void rope_backward(F* dx, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                   double base = 10000.0, int64_t pos0 = 0);

// AdamW (decoupled weight decay, PyTorch semantics) on a flat range; step t starts at 1.
template <class F>
void adamw_update(F* params, const F* grads, F* m, F* v, size_t n, F lr, F beta1, F beta2, F eps,
                  F weight_decay, int t);

// Context parallelism's layout moves: a box of n[0] x n[1] x n[2] rows of `row` contiguous
// elements, row (i, j, k) at i s[0] + j s[1] + k s[2] elements from each base. copy_rows
// OVERWRITES dst's rows with src's (src null: zeros), or adds src's with accumulate.
struct RowBox {
  int64_t n[3];
  int64_t row;
};
struct RowStrides {
  int64_t s[3];
};
template <class F>
void copy_rows(F* dst, const RowStrides& ds, const F* src, const RowStrides& ss, const RowBox& box,
               bool accumulate);
// Ring attention's merge of a partial result into the running one, row by row (b, h, s) of
// (B, H, S): with l = lse, p = part_lse and L = log(e^l + e^p) (formed from their max),
// out = e^(l-L) out + e^(p-L) part and lse = L; `first`: out = part, lse = part_lse. out and lse
// are strided (os over (B, H, S) rows of D; ls over elements), part (B, H, S, D) and part_lse
// (B, H, S) contiguous.
template <class F>
void attention_merge(F* out, const RowStrides& os, F* lse, const RowStrides& ls, const F* part,
                     const F* part_lse, int64_t B, int64_t H, int64_t S, int64_t D, bool first);

// Sum of squares (accumulated in double), and x *= s.
template <class F>
double sum_squares(const F* x, size_t n);
template <class F>
void scale_inplace(F* x, size_t n, F s);

}  // namespace triad::kernels::cpu
