// CUDA kernels: pure compute, free functions on device pointers with an explicit stream (no
// devices-with-owners, configs or plugins). The same forward/backward pairs, argument order and
// semantics as triad/kernels/cpu.hpp: every backward ACCUMULATES (+=) into its gradient outputs
// unless it says "overwrites". Everything is asynchronous on `stream` unless it says otherwise.
// Errors (a failed launch, a cuBLAS status) throw std::runtime_error naming the kernel.
// fp32 storage and fp32 arithmetic here; matmuls go through cuBLASLt.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace triad::kernels::cuda {

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
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, cudaStream_t stream, int64_t vocab_start = 0,
                       int vocab_rows = -1);
// Deterministic (no float atomics on wte rows): the same result on every run. dwte holds the
// V rows from vocab_start.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int V, cudaStream_t stream, int64_t vocab_start = 0);

// LayerNorm over the last dim. inp/out (N,C); weight/bias (C); mean/rstd (N) saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps, cudaStream_t stream);
// accumulate = false: dinp is overwritten (never read); dweight and dbias accumulate.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream, bool accumulate = true);
// res = a + b, then layernorm_forward(out, mean, rstd, res) in the same pass: the same bits as
// residual_forward then layernorm_forward. res may alias a or b.
void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N,
                                int C, float eps, cudaStream_t stream);

// out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC); bias may be null. Overwrites out.
void matmul_forward(Blas& blas, float* out, const float* inp, const float* weight,
                    const float* bias, int N, int C, int OC);
// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += sum_n dout.
// Any of dinp, dweight, dbias may be null (skipped). accumulate = false: dinp is overwritten
// (beta = 0); dweight and dbias accumulate either way.
void matmul_backward(Blas& blas, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC,
                     bool accumulate = true);

// GELU, tanh approximation (GPT-2).
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
// accumulate = false: dinp is overwritten, never read.
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream,
                   bool accumulate = true);

// out = a + b (out may alias a or b); da += dout, db += dout.
void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream);
void residual_backward(float* da, float* db, const float* dout, size_t n, cudaStream_t stream);
// out (N,C) += bias (C) broadcast over the rows (a row-parallel matmul's bias, added after the
// tensor-parallel reduction); dbias (C) += sum_n dout (N,C), deterministic (matmul_backward's
// dbias: fixed-order double sums, no atomics).
void bias_forward(float* out, const float* bias, int N, int C, cudaStream_t stream);
void bias_backward(float* dbias, const float* dout, int N, int C, cudaStream_t stream);

// Fused softmax + cross-entropy over the vocabulary. logits (N,V); targets (N) on the device.
// Writes losses (N) and lse (N). Only the first `valid` columns are vocabulary (valid < 0: all
// V); the rest are padding (Megatron's padded vocabulary), never given probability.
void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                          int N, int V, cudaStream_t stream, int valid = -1);
// dlogits (N,V) OVERWRITES with dloss * (softmax(logits) - onehot(target)), 0 in the padding;
// may alias logits. Vocab-parallel: the columns are the vocabulary's [vocab_start,
// vocab_start + V) and lse is the whole row's; the target's column is target - vocab_start when
// that is one of the valid columns, else none here.
void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V, cudaStream_t stream,
                           int valid = -1, int64_t vocab_start = 0);
// Vocab-parallel cross-entropy, as kernels::cpu::crossentropy_row_max and friends: logits (N,V)
// are this rank's columns [vocab_start, vocab_start + V), the first `valid` real (valid < 0:
// all V). Each OVERWRITES its outputs (N), one row even where this rank has no valid column.
//   crossentropy_row_max   rowmax = max over the valid columns (-inf if none)
//   (all-reduce max)
//   crossentropy_row_sums  sumexp = sum exp(z - rowmax) over the valid columns; target_logit =
//                          z[target - vocab_start] when that is a valid column here, else 0
//   (all-reduce sum of both)
//   crossentropy_finish    lse = rowmax + log(sumexp); losses = lse - target_logit
void crossentropy_row_max(float* rowmax, const float* logits, int N, int V, int valid,
                          cudaStream_t stream);
void crossentropy_row_sums(float* sumexp, float* target_logit, const float* logits,
                           const float* rowmax, const int32_t* targets, int N, int V, int valid,
                           int64_t vocab_start, cudaStream_t stream);
void crossentropy_finish(float* losses, float* lse, const float* rowmax, const float* sumexp,
                         const float* target_logit, int N, cudaStream_t stream);

// Rotary embedding in place on a strided (B,T,H,D) view, as kernels::cpu::rope_forward.
void rope_forward(float* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                  double base, cudaStream_t stream, int64_t pos0 = 0);
void rope_backward(float* dx, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                   double base, cudaStream_t stream, int64_t pos0 = 0);

// AdamW (decoupled weight decay, PyTorch semantics) on a flat range; step t starts at 1.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t,
                  cudaStream_t stream);

// *out (one double on the device) OVERWRITES with sum(x) / sum(x*x), accumulated in double.
void sum(double* out, const float* x, size_t n, cudaStream_t stream);
void sum_squares(double* out, const float* x, size_t n, cudaStream_t stream);
// x *= s, with s read from the host.
void scale_inplace(float* x, size_t n, float s, cudaStream_t stream);
// x[i] = value.
void fill(float* x, size_t n, float value, cudaStream_t stream);

// Naive attention: scores in a workspace, cuBLAS batched GEMMs + a softmax kernel. A (B,H,T,D)
// view has element strides sb, sh, st (D contiguous). lse (B,H,T) contiguous fp32, natural log.
struct HeadView {
  float* data;
  int64_t sb, sh, st;
};
size_t attention_naive_workspace_bytes(int B, int H, int T, int D);
// out, lse OVERWRITE.
void attention_naive_forward(Blas& blas, HeadView out, float* lse, HeadView q, HeadView k,
                             HeadView v, int B, int H, int T, int D, bool causal, float scale,
                             void* workspace, size_t workspace_bytes);
// dq, dk, dv OVERWRITE.
void attention_naive_backward(Blas& blas, HeadView dq, HeadView dk, HeadView dv, HeadView q,
                              HeadView k, HeadView v, HeadView out, const float* lse, HeadView dout,
                              int B, int H, int T, int D, bool causal, float scale, void* workspace,
                              size_t workspace_bytes);

// ---------------------------------------------------------------------------------------------
// Mixed precision (bf16): activations, their gradients and the compute copy of the weights are
// bf16; parameter gradients (dweight, dbias, dwte, dwpe), layernorm statistics, losses and lse
// stay fp32; every reduction and GEMM accumulates in fp32. Same shapes and semantics as the
// fp32 overloads above (backward ACCUMULATES into dinp and into the fp32 parameter gradients).
using bf16 = __nv_bfloat16;

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                       int T, int C, cudaStream_t stream, int64_t vocab_start = 0,
                       int vocab_rows = -1);
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                        int T, int C, int V, cudaStream_t stream, int64_t vocab_start = 0);
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int N, int C, float eps, cudaStream_t stream);
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream, bool accumulate = true);
void residual_layernorm_forward(bf16* res, bf16* out, float* mean, float* rstd, const bf16* a,
                                const bf16* b, const bf16* weight, const bf16* bias, int N, int C,
                                float eps, cudaStream_t stream);
// bf16 tensor cores, fp32 accumulation; dweight/dbias accumulate into fp32.
void matmul_forward(Blas& blas, bf16* out, const bf16* inp, const bf16* weight, const bf16* bias,
                    int N, int C, int OC);
void matmul_backward(Blas& blas, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC,
                     bool accumulate = true);
void gelu_forward(bf16* out, const bf16* inp, size_t n, cudaStream_t stream);
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, cudaStream_t stream,
                   bool accumulate = true);

// The MLP's first GEMM and its GELU, fp32 and bf16: pre = inp @ weight^T + bias and
// out = gelu(pre), both (N,OC), in the GEMM's epilogue (cuBLASLt GELU_AUX[_BIAS]) where cuBLASLt
// has an algorithm, else matmul_forward then gelu_forward (the epilogue takes the GELU of the
// fp32 accumulator: within rounding of the unfused pair, not bit for bit). Only the bf16
// overloads fuse: fp32 runs stay the unfused pair, the one checked against the CPU's.
void matmul_gelu_forward(Blas& blas, float* out, float* pre, const float* inp, const float* weight,
                         const float* bias, int N, int C, int OC);
void matmul_gelu_forward(Blas& blas, bf16* out, bf16* pre, const bf16* inp, const bf16* weight,
                         const bf16* bias, int N, int C, int OC);
// The backward of the GEMM that reads gelu(pre) (N,C): dinp = (dout @ weight) * gelu'(pre),
// OVERWRITTEN, in the dinp GEMM's epilogue (cuBLASLt DGELU) where it has an algorithm, else
// through dact (N,C), scratch; dweight and dbias accumulate as matmul_backward's.
void matmul_backward_dgelu(Blas& blas, float* dinp, float* dact, const float* pre, float* dweight,
                           float* dbias, const float* dout, const float* inp, const float* weight,
                           int N, int C, int OC);
void matmul_backward_dgelu(Blas& blas, bf16* dinp, bf16* dact, const bf16* pre, float* dweight,
                           float* dbias, const bf16* dout, const bf16* inp, const bf16* weight,
                           int N, int C, int OC);
void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t stream);
void bias_forward(bf16* out, const bf16* bias, int N, int C, cudaStream_t stream);
void bias_backward(float* dbias, const bf16* dout, int N, int C, cudaStream_t stream);
void crossentropy_forward(float* losses, float* lse, const bf16* logits, const int32_t* targets,
                          int N, int V, cudaStream_t stream, int valid = -1);
void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* lse,
                           const int32_t* targets, float dloss, int N, int V, cudaStream_t stream,
                           int valid = -1, int64_t vocab_start = 0);
void crossentropy_row_max(float* rowmax, const bf16* logits, int N, int V, int valid,
                          cudaStream_t stream);
void crossentropy_row_sums(float* sumexp, float* target_logit, const bf16* logits,
                           const float* rowmax, const int32_t* targets, int N, int V, int valid,
                           int64_t vocab_start, cudaStream_t stream);
void rope_forward(bf16* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                  double base, cudaStream_t stream, int64_t pos0 = 0);
void rope_backward(bf16* dx, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                   double base, cudaStream_t stream, int64_t pos0 = 0);
// AdamW on fp32 master weights that also writes the updated weights, rounded, into `compute`
// (the bf16 copy the next forward reads), in the same pass.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t, bf16* compute,
                  cudaStream_t stream);
// AdamW over many tensors of one arena in as few launches as fit (64 tensors each): tensor i
// is the range [segs[i].offset, + segs[i].n) of params, grads, m, v (and compute when not
// null), with its own weight decay. The same bits as adamw_update on each range.
struct AdamwSegment {
  size_t offset = 0, n = 0;
  float weight_decay = 0.0f;
};
void adamw_update_segments(float* params, const float* grads, float* m, float* v,
                           const AdamwSegment* segs, size_t count, float lr, float beta1,
                           float beta2, float eps, int t, bf16* compute, cudaStream_t stream);
// dst[i] = round-to-nearest-even(src[i]).
void convert(bf16* dst, const float* src, size_t n, cudaStream_t stream);

// Naive attention on bf16 views (scores, softmax and the workspace in fp32).
struct HeadViewBf16 {
  bf16* data;
  int64_t sb, sh, st;
};
void attention_naive_forward(Blas& blas, HeadViewBf16 out, float* lse, HeadViewBf16 q,
                             HeadViewBf16 k, HeadViewBf16 v, int B, int H, int T, int D,
                             bool causal, float scale, void* workspace, size_t workspace_bytes);
void attention_naive_backward(Blas& blas, HeadViewBf16 dq, HeadViewBf16 dk, HeadViewBf16 dv,
                              HeadViewBf16 q, HeadViewBf16 k, HeadViewBf16 v, HeadViewBf16 out,
                              const float* lse, HeadViewBf16 dout, int B, int H, int T, int D,
                              bool causal, float scale, void* workspace, size_t workspace_bytes);
// Bytes for either dtype (the bf16 path may need extra fp32 staging; this covers it).
size_t attention_naive_workspace_bytes_bf16(int B, int H, int T, int D);

}  // namespace triad::kernels::cuda
