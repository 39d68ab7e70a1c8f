// The GPU half of the flash1 and flash2 plugins: tensors in CUDA memory run the tensor-core
// kernels of kernels/cuda/flash (bf16 or fp16, head dims 64 and 128) on the stream the core
// passed in. The CPU kernels stay float32; the capabilities the plugins declare are the union,
// and workspace_size refuses the combinations neither half runs (float32 on a GPU, a 16-bit
// dtype on the CPU), so the core reports them before a run starts.
#pragma once

#ifdef TRIAD_FLASH_CUDA

#include <string>

#include "triad/kernels/cuda_flash.hpp"
#include "triad/sdk/attention.hpp"

namespace triad::flash_cuda {

namespace fk = triad::kernels::cuda::flash;

inline bool on_gpu(const DLTensor* t) {
  return t && t->device.device_type == kDLCUDA;
}

// The 16-bit dtype of a GPU call; throws UNSUPPORTED for anything else.
inline fk::DType gpu_dtype(DLDataType t, const char* plugin) {
  if (t.lanes == 1 && t.bits == 16 && t.code == kDLBfloat) return fk::DType::kBF16;
  if (t.lanes == 1 && t.bits == 16 && t.code == kDLFloat) return fk::DType::kFP16;
  throw sdk::unsupported(std::string(plugin) + " on a CUDA GPU takes bfloat16 or float16 (got " +
                         sdk::dl_dtype_name(t) +
                         "); use precision: bf16, or attention: naive for float32");
}

// Refuses a shape the GPU kernels cannot run; true when the shape is for the GPU.
inline bool check_shape(const triad_attention_shape_v1& s, const char* plugin) {
  if (s.device.device_type != kDLCUDA) {
    if (s.dtype.code != kDLFloat || s.dtype.bits != 32)
      throw sdk::unsupported(std::string(plugin) + " on the CPU computes float32 only (got " +
                             sdk::dl_dtype_name(s.dtype) + ")");
    return false;
  }
  gpu_dtype(s.dtype, plugin);
  if (!fk::supports_head_dim(s.head_dim))
    throw sdk::unsupported(std::string(plugin) +
                           " on a CUDA GPU supports head dims 64 and 128 (got " +
                           std::to_string(s.head_dim) + ")");
  return true;
}

inline void workspace(bool flash2, const triad_attention_shape_v1& s, size_t* fwd, size_t* bwd) {
  *fwd = flash2 ? fk::flash2_forward_workspace_bytes(s.batch, s.heads, s.seq_len, s.head_dim)
                : fk::flash1_forward_workspace_bytes(s.batch, s.heads, s.seq_len, s.head_dim);
  *bwd = flash2 ? fk::flash2_backward_workspace_bytes(s.batch, s.heads, s.seq_len, s.head_dim)
                : fk::flash1_backward_workspace_bytes(s.batch, s.heads, s.seq_len, s.head_dim);
}

// A (B,H,T,D) view of t in GPU memory, D contiguous, with q's dtype and shape (q itself passes
// as its own reference, so view q before reading its shape).
template <class V>
V view(const DLTensor* t, const char* what, const DLTensor* q) {
  if (t && !on_gpu(t)) throw sdk::invalid(std::string(what) + " is not in GPU memory like q");
  if (t && (t->dtype.code != q->dtype.code || t->dtype.bits != q->dtype.bits))
    throw sdk::invalid(std::string(what) + " has a different dtype from q");
  const sdk::View4<char> s = sdk::strided_view4<char>(t, what);
  for (int i = 0; i < 4; ++i)
    if (s.n[i] != q->shape[i])
      throw sdk::invalid(std::string(what) + " has a different shape from q");
  V v;
  v.data = s.data;
  v.sb = s.s[0], v.sh = s.s[1], v.st = s.s[2];
  return v;
}

inline fk::Problem problem(const DLTensor* q, bool causal, float scale, const char* plugin) {
  fk::Problem p;
  p.batch = q->shape[0], p.heads = q->shape[1], p.seq_len = q->shape[2], p.head_dim = q->shape[3];
  p.causal = causal;
  p.scale = scale;
  p.dtype = gpu_dtype(q->dtype, plugin);
  return p;
}

inline float* lse_of(const DLTensor* t, const fk::Problem& p) {
  if (!on_gpu(t)) throw sdk::invalid("lse is not in GPU memory like q");
  return sdk::lse_view(t, p.batch, p.heads, p.seq_len);
}

inline void forward(bool flash2, const triad_attention_fwd_args_v1& a, void* stream,
                    const char* plugin) {
  fk::ForwardArgs f;
  f.q = view<fk::ConstView>(a.q, "q", a.q);
  f.problem = problem(a.q, a.causal != 0, a.scale, plugin);
  f.k = view<fk::ConstView>(a.k, "k", a.q);
  f.v = view<fk::ConstView>(a.v, "v", a.q);
  f.out = view<fk::View>(a.out, "out", a.q);
  f.lse = lse_of(a.lse, f.problem);
  f.workspace = a.workspace;
  f.workspace_bytes = a.workspace_bytes;
  auto s = static_cast<cudaStream_t>(stream);
  flash2 ? fk::flash2_forward(f, s) : fk::flash1_forward(f, s);
}

inline void backward(bool flash2, const triad_attention_bwd_args_v1& a, bool deterministic,
                     void* stream, const char* plugin) {
  fk::BackwardArgs b;
  b.q = view<fk::ConstView>(a.q, "q", a.q);
  b.problem = problem(a.q, a.causal != 0, a.scale, plugin);
  b.k = view<fk::ConstView>(a.k, "k", a.q);
  b.v = view<fk::ConstView>(a.v, "v", a.q);
  b.out = view<fk::ConstView>(a.out, "out", a.q);
  b.dout = view<fk::ConstView>(a.dout, "dout", a.q);
  b.dq = view<fk::View>(a.dq, "dq", a.q);
  b.dk = view<fk::View>(a.dk, "dk", a.q);
  b.dv = view<fk::View>(a.dv, "dv", a.q);
  b.lse = lse_of(a.lse, b.problem);
  b.workspace = a.workspace;
  b.workspace_bytes = a.workspace_bytes;
  b.deterministic = deterministic;
  auto s = static_cast<cudaStream_t>(stream);
  flash2 ? fk::flash2_backward(b, s) : fk::flash1_backward(b, s);
}

// Capabilities: the CPU's float32 plus the GPU's 16-bit dtypes.
inline void add_gpu_caps(triad_attention_caps_v1& c) {
  c.devices |= 1u << kDLCUDA;
  c.dtypes |= TRIAD_DTYPE_BIT_BF16 | TRIAD_DTYPE_BIT_FP16;
}

}  // namespace triad::flash_cuda

#endif  // TRIAD_FLASH_CUDA
