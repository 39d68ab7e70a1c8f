// FlashAttention-1 and FlashAttention-2 on CUDA tensor cores (sm_80+: mma.sync m16n8k16, ldmatrix,
// cp.async). Pure compute: free functions on device pointers with an explicit stream; everything
// is asynchronous on `stream`. A bad argument or a CUDA error throws std::runtime_error naming
// the kernel.
//
// Tensors q, k, v, out, dout, dq, dk, dv are (B, H, T, D) views in bf16 or fp16 (all of one
// call in the same dtype) with element strides sb, sh, st and D contiguous; the data pointers
// must be 16-byte aligned and the strides multiples of 8. In the model q/k/v sit interleaved
// in one (B, T, 3C) buffer: sb = T*3C, sh = D, st = 3C, with out (B, T, C). lse is fp32
// (B, H, T) contiguous, natural log: lse[b,h,i] = log sum_j exp(scale * q_i . k_j) over the
// unmasked j (causal: j <= i). Accumulation is fp32. Head dims 64 and 128; any T >= 1.
//
// Forward writes out and lse. Backward OVERWRITES dq, dk, dv (never accumulates), given q, k, v,
// out, dout and the lse forward wrote. The workspace is caller-owned device scratch of at least
// the *_workspace_bytes the call's shape needs, valid for the one call (nullptr when 0 bytes).
//
// flash1: the original FlashAttention tiling. Forward: K/V blocks in the outer loop, Q blocks in
//   the inner loop; O, the running max and the running sum go back to the (fp32) workspace after
//   every K/V block and are rescaled when read again. Thread blocks split (batch, head) and
//   contiguous chunks of Q blocks. Backward: K/V blocks outer, Q blocks inner, dQ read, updated
//   and written back in an fp32 accumulator; one thread block per (batch, head) runs the K/V
//   blocks in turn when `deterministic` (plain read-modify-write, bit-identical across runs),
//   otherwise the K/V blocks are split over more thread blocks and dQ is added atomically.
// flash2: FlashAttention-2. Forward: one thread block per (Q block, batch, head), K/V blocks in
//   the inner loop, normalisation deferred to the end, warps split along Q (no inter-warp
//   reduction). Backward: one thread block per (K/V block, batch, head) computes dK, dV; dQ is
//   either added with fp32 atomics into the workspace (default, `deterministic` false) or, when
//   `deterministic`, computed by a second kernel parallel over Q blocks (no atomics,
//   bit-identical across runs).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace triad::kernels::cuda::flash {

enum class DType { kBF16, kFP16 };

// (B, H, T, D) views: element strides on B, H and T; D is contiguous.
struct ConstView {
  const void* data = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
};
struct View {
  void* data = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
};

struct Problem {
  int64_t batch = 0, heads = 0, seq_len = 0, head_dim = 0;
  bool causal = false;
  float scale = 0.f;  // > 0, usually 1/sqrt(D)
  DType dtype = DType::kBF16;
};

struct ForwardArgs {
  Problem problem;
  ConstView q, k, v;
  View out;
  float* lse = nullptr;  // (B, H, T) fp32, contiguous
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

struct BackwardArgs {
  Problem problem;
  ConstView q, k, v, out, dout;
  const float* lse = nullptr;  // as forward wrote it
  View dq, dk, dv;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool deterministic = false;  // bit-identical results across runs (no float atomics)
};

// Head dims these kernels are built for (64 and 128).
bool supports_head_dim(int64_t head_dim);

// Scratch bytes per call; backward's covers both the deterministic and the atomic mode.
size_t flash1_forward_workspace_bytes(int64_t B, int64_t H, int64_t T, int64_t D);
size_t flash1_backward_workspace_bytes(int64_t B, int64_t H, int64_t T, int64_t D);
size_t flash2_forward_workspace_bytes(int64_t B, int64_t H, int64_t T, int64_t D);  // 0
size_t flash2_backward_workspace_bytes(int64_t B, int64_t H, int64_t T, int64_t D);

void flash1_forward(const ForwardArgs& args, cudaStream_t stream);
void flash1_backward(const BackwardArgs& args, cudaStream_t stream);
void flash2_forward(const ForwardArgs& args, cudaStream_t stream);
void flash2_backward(const BackwardArgs& args, cudaStream_t stream);

}  // namespace triad::kernels::cuda::flash
