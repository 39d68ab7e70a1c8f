// CUDA kernels: pure compute, free functions on device pointers with an explicit stream (no
// devices-with-owners, configs or plugins). The same forward/backward pairs, argument order and
// semantics as triad/kernels/cpu.hpp: every backward ACCUMULATES (+=) into its gradient outputs
// unless it says "overwrites". Everything is asynchronous on `stream` unless it says otherwise.
// Errors (a failed launch, a cuBLAS status) throw std::runtime_error naming the kernel.
// Matmuls go through cuBLASLt.
//
// Element types. A template parameter E is the storage type of the activations, their
// gradients and the compute copy of the weights: float, bf16 or f16 (IEEE half); every such
// function is defined for exactly those three. Parameter gradients (dweight, dbias, dwte,
// dwpe), layernorm statistics, losses and lse are fp32 whatever E is, and every reduction and
// GEMM accumulates in fp32. With E = float everything is fp32 (GEMMs on TF32 tensor cores only
// where the Blas allows it); with a 16-bit E the GEMMs run on the tensor cores of that type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace triad::kernels::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;
// T in a non-deduced context: a parameter that may be passed nullptr takes its type from the
// other arguments.
template <class T>
struct SameType {
  using type = T;
};
template <class T>
using NoDeduce = typename SameType<T>::type;

// cuBLAS/cuBLASLt handles and a GEMM workspace, bound to one stream. Not thread-safe; one per
// device object. allow_tf32: let fp32 GEMMs use TF32 tensor cores (faster, ~1e-3 relative);
// off, they compute in full fp32 and reproduce the CPU to rounding.
class Blas {
 public:
  explicit Blas(cudaStream_t stream, bool allow_tf32 = false);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  cudaStream_t stream() const { return stream_; }
  bool allow_tf32() const { return allow_tf32_; }
  void* lt_handle() const { return lt_; }      // cublasLtHandle_t
  void* blas_handle() const { return blas_; }  // cublasHandle_t
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // cuBLASLt plans built so far: one per problem shape, types, epilogue and operand alignment,
  // each holding its descriptors and the heuristic's algorithm (or that it has none).
  struct LtPlans;
  LtPlans& lt_plans() { return *plans_; }
  size_t lt_plan_count() const;

 private:
  cudaStream_t stream_;
  bool allow_tf32_;
  void* lt_ = nullptr;
  void* blas_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::unique_ptr<LtPlans> plans_;
};

// Token + position embedding. out (B,T,C); tokens (B,T) on the device; wte (V,C); wpe (maxT,C)
// or null (rotary positions).
// Vocab-parallel (tensor parallelism), as kernels::cpu: wte holds only the vocabulary rows
// [vocab_start, vocab_start + vocab_rows); a token outside them looks up a zero row (another
// rank holds it) and adds nothing to dwte. vocab_rows < 0: wte holds every row.
template <class E>
void embedding_forward(E* out, const int32_t* tokens, const E* wte, const NoDeduce<E>* wpe, int B,
                       int T, int C, cudaStream_t stream, int64_t vocab_start = 0,
                       int vocab_rows = -1);
// Deterministic (no float atomics on wte rows): the same result on every run. dwte holds the
// V rows from vocab_start.
template <class E>
void embedding_backward(float* dwte, float* dwpe, const E* dout, const int32_t* tokens, int B,
                        int T, int C, int V, cudaStream_t stream, int64_t vocab_start = 0);

// LayerNorm over the last dim. inp/out (N,C); weight/bias (C); mean/rstd (N) saved for backward.
template <class E>
void layernorm_forward(E* out, float* mean, float* rstd, const E* inp, const E* weight,
                       const E* bias, int N, int C, float eps, cudaStream_t stream);
// accumulate = false: dinp is overwritten (never read); dweight and dbias accumulate.
template <class E>
void layernorm_backward(E* dinp, float* dweight, float* dbias, const E* dout, const E* inp,
                        const E* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream, bool accumulate = true);
// res = a + b, then layernorm_forward(out, mean, rstd, res) in the same pass: the same bits as
// residual_forward then layernorm_forward. res may alias a or b.
template <class E>
void residual_layernorm_forward(E* res, E* out, float* mean, float* rstd, const E* a, const E* b,
                                const E* weight, const E* bias, int N, int C, float eps,
                                cudaStream_t stream);

// out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC); bias may be null. Overwrites out.
template <class E>
void matmul_forward(Blas& blas, E* out, const E* inp, const E* weight, const NoDeduce<E>* bias,
                    int N, int C, int OC);
// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += sum_n dout.
// Any of dinp, dweight, dbias may be null (skipped). accumulate = false: dinp is overwritten
// (beta = 0); dweight and dbias accumulate either way.
template <class E>
void matmul_backward(Blas& blas, NoDeduce<E>* dinp, float* dweight, float* dbias, const E* dout,
                     const E* inp, const E* weight, int N, int C, int OC, bool accumulate = true);
// The MLP's first GEMM and its GELU: pre = inp @ weight^T + bias and out = gelu(pre), both
// (N,OC), in the GEMM's epilogue (cuBLASLt GELU_AUX[_BIAS]) where cuBLASLt has an algorithm,
// else matmul_forward then gelu_forward (the epilogue takes the GELU of the fp32 accumulator:
// within rounding of the unfused pair, not bit for bit). Only 16-bit E fuses: fp32 runs stay
// the unfused pair, the one checked against the CPU's.
template <class E>
void matmul_gelu_forward(Blas& blas, E* out, E* pre, const E* inp, const E* weight,
                         const NoDeduce<E>* bias, int N, int C, int OC);
// The backward of the GEMM that reads gelu(pre) (N,C): dinp = (dout @ weight) * gelu'(pre),
// OVERWRITTEN, in the dinp GEMM's epilogue (cuBLASLt DGELU) where it has an algorithm (16-bit E
// only), else through dact (N,C), scratch; dweight and dbias accumulate as matmul_backward's.
template <class E>
void matmul_backward_dgelu(Blas& blas, E* dinp, E* dact, const E* pre, float* dweight, float* dbias,
                           const E* dout, const E* inp, const E* weight, int N, int C, int OC);

// GELU, tanh approximation (GPT-2).
template <class E>
void gelu_forward(E* out, const E* inp, size_t n, cudaStream_t stream);
// accumulate = false: dinp is overwritten, never read.
template <class E>
void gelu_backward(E* dinp, const E* inp, const E* dout, size_t n, cudaStream_t stream,
                   bool accumulate = true);

// out = a + b (out may alias a or b).
template <class E>
void residual_forward(E* out, const E* a, const E* b, size_t n, cudaStream_t stream);
// da += dout, db += dout (fp32: the parameter-gradient sums that need it).
void residual_backward(float* da, float* db, const float* dout, size_t n, cudaStream_t stream);
// out (N,C) += bias (C) broadcast over the rows (a row-parallel matmul's bias, added after the
// tensor-parallel reduction); dbias (C) += sum_n dout (N,C), deterministic (matmul_backward's
// dbias: fixed-order double sums, no atomics).
template <class E>
void bias_forward(E* out, const E* bias, int N, int C, cudaStream_t stream);
template <class E>
void bias_backward(float* dbias, const E* dout, int N, int C, cudaStream_t stream);

// Fused softmax + cross-entropy over the vocabulary. logits (N,V); targets (N) on the device.
// Writes losses (N) and lse (N). Only the first `valid` columns are vocabulary (valid < 0: all
// V); the rest are padding (Megatron's padded vocabulary), never given probability.
template <class E>
void crossentropy_forward(float* losses, float* lse, const E* logits, const int32_t* targets, int N,
                          int V, cudaStream_t stream, int valid = -1);
// dlogits (N,V) OVERWRITES with dloss * (softmax(logits) - onehot(target)), 0 in the padding;
// may alias logits. Vocab-parallel: the columns are the vocabulary's [vocab_start,
// vocab_start + V) and lse is the whole row's; the target's column is target - vocab_start when
// that is one of the valid columns, else none here.
template <class E>
void crossentropy_backward(E* dlogits, const E* logits, const float* lse, const int32_t* targets,
                           float dloss, int N, int V, cudaStream_t stream, int valid = -1,
                           int64_t vocab_start = 0);
// Vocab-parallel cross-entropy, as kernels::cpu::crossentropy_row_max and friends: logits (N,V)
// are this rank's columns [vocab_start, vocab_start + V), the first `valid` real (valid < 0:
// all V). Each OVERWRITES its outputs (N), one row even where this rank has no valid column.
//   crossentropy_row_max   rowmax = max over the valid columns (-inf if none)
//   (all-reduce max)
//   crossentropy_row_sums  sumexp = sum exp(z - rowmax) over the valid columns; target_logit =
//                          z[target - vocab_start] when that is a valid column here, else 0
//   (all-reduce sum of both)
//   crossentropy_finish    lse = rowmax + log(sumexp); losses = lse - target_logit
template <class E>
void crossentropy_row_max(float* rowmax, const E* logits, int N, int V, int valid,
                          cudaStream_t stream);
template <class E>
void crossentropy_row_sums(float* sumexp, float* target_logit, const E* logits, const float* rowmax,
                           const int32_t* targets, int N, int V, int valid, int64_t vocab_start,
                           cudaStream_t stream);
void crossentropy_finish(float* losses, float* lse, const float* rowmax, const float* sumexp,
                         const float* target_logit, int N, cudaStream_t stream);

// Rotary embedding in place on a strided (B,T,H,D) view, as kernels::cpu::rope_forward.
template <class E>
void rope_forward(E* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh, double base,
                  cudaStream_t stream, int64_t pos0 = 0);
template <class E>
void rope_backward(E* dx, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                   double base, cudaStream_t stream, int64_t pos0 = 0);

// AdamW (decoupled weight decay, PyTorch semantics) on a flat range of fp32 master weights;
// step t starts at 1.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t,
                  cudaStream_t stream);
// The same, also writing the updated weights, rounded, into `compute` (the 16-bit copy the next
// forward reads), in the same pass. H is bf16 or f16.
template <class H>
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t, H* compute,
                  cudaStream_t stream);
// AdamW over many tensors of one arena in as few launches as fit (64 tensors each): tensor i
// is the range [segs[i].offset, + segs[i].n) of params, grads, m, v (and compute when not
// null), with its own weight decay. The same bits as adamw_update on each range. H is bf16 or
// f16 (with compute null, either).
struct AdamwSegment {
  size_t offset = 0, n = 0;
  float weight_decay = 0.0f;
};
template <class H>
void adamw_update_segments(float* params, const float* grads, float* m, float* v,
                           const AdamwSegment* segs, size_t count, float lr, float beta1,
                           float beta2, float eps, int t, H* compute, cudaStream_t stream);
// dst[i] = round-to-nearest-even(src[i]); H is bf16 or f16.
template <class H>
void convert(H* dst, const float* src, size_t n, cudaStream_t stream);

// Context parallelism's layout moves and ring attention's merge, as kernels::cpu's (see there):
// a box of n[0] x n[1] x n[2] rows of `row` contiguous elements, row (i, j, k) at
// i s[0] + j s[1] + k s[2] elements from each base.
struct RowBox {
  int64_t n[3];
  int64_t row;
};
struct RowStrides {
  int64_t s[3];
};
// dst's rows OVERWRITTEN with src's (src null: zeros), or += src's with accumulate (in fp32,
// rounded once to E).
template <class E>
void copy_rows(E* dst, const RowStrides& ds, const NoDeduce<E>* src, const RowStrides& ss,
               const RowBox& box, bool accumulate, cudaStream_t stream);
// out = e^(l-L) out + e^(p-L) part, lse = L = log(e^l + e^p), row by row of (B, H, S); `first`:
// out = part, lse = part_lse. lse and part_lse fp32; part (B,H,S,D), part_lse (B,H,S) contiguous.
template <class E>
void attention_merge(E* out, const RowStrides& os, float* lse, const RowStrides& ls, const E* part,
                     const float* part_lse, int64_t B, int64_t H, int64_t S, int64_t D, bool first,
                     cudaStream_t stream);

// *out (one double on the device) OVERWRITES with sum(x) / sum(x*x), accumulated in double.
void sum(double* out, const float* x, size_t n, cudaStream_t stream);
void sum_squares(double* out, const float* x, size_t n, cudaStream_t stream);
// x *= s, with s read from the host.
void scale_inplace(float* x, size_t n, float s, cudaStream_t stream);
// x[i] = value.
void fill(float* x, size_t n, float value, cudaStream_t stream);

// Naive attention: scores in a workspace, cuBLAS batched GEMMs + a softmax kernel. A (B,H,T,D)
// view of E has element strides sb, sh, st (D contiguous). lse (B,H,T) contiguous fp32,
// natural log. With a 16-bit E the scores, the softmax and the workspace stay fp32.
template <class E>
struct HeadViewOf {
  E* data;
  int64_t sb, sh, st;
};
using HeadView = HeadViewOf<float>;
using HeadViewBf16 = HeadViewOf<bf16>;
using HeadViewF16 = HeadViewOf<f16>;
// Bytes of workspace for fp32 views, and for any E (16-bit views need extra fp32 staging).
size_t attention_naive_workspace_bytes(int B, int H, int T, int D);
size_t attention_naive_workspace_bytes_half(int B, int H, int T, int D);
// out, lse OVERWRITE.
template <class E>
void attention_naive_forward(Blas& blas, HeadViewOf<E> out, float* lse, HeadViewOf<E> q,
                             HeadViewOf<E> k, HeadViewOf<E> v, int B, int H, int T, int D,
                             bool causal, float scale, void* workspace, size_t workspace_bytes);
// dq, dk, dv OVERWRITE.
template <class E>
void attention_naive_backward(Blas& blas, HeadViewOf<E> dq, HeadViewOf<E> dk, HeadViewOf<E> dv,
                              HeadViewOf<E> q, HeadViewOf<E> k, HeadViewOf<E> v, HeadViewOf<E> out,
                              const float* lse, HeadViewOf<E> dout, int B, int H, int T, int D,
                              bool causal, float scale, void* workspace, size_t workspace_bytes);

}  // namespace triad::kernels::cuda
