// Devices own memory and count it, and run every kernel. The model and engine allocate through a
// Device and call kernels through it; they never include a kernels/ header and never test which
// device it is. The CPU device is always built; the CUDA device where nvcc was found.
// Kernel semantics are those of triad/kernels/cpu.hpp (backward ACCUMULATES unless it says
// "overwrites"). Every call is ordered on the device's stream; only the calls that return a
// value to the host (to_host, sum, sum_squares) wait for it.
#pragma once

#include <dlpack/dlpack.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace triad {

// Element types of activations (and of the compute copy of the weights): fp32, bf16 and fp16
// (IEEE half, with the loss scaler).
enum class DType { f32, bf16, f16 };
inline size_t dtype_bytes(DType t) {
  return t == DType::f32 ? 4 : 2;
}
inline const char* dtype_name(DType t) {
  return t == DType::f32 ? "fp32" : t == DType::bf16 ? "bf16" : "fp16";
}
inline DLDataType dl_dtype(DType t) {
  return t == DType::f32    ? DLDataType{kDLFloat, 32, 1}
         : t == DType::bf16 ? DLDataType{kDLBfloat, 16, 1}
                            : DLDataType{kDLFloat, 16, 1};
}
// The activation dtype of a config's precision ("fp32", "bf16" or "fp16").
inline DType precision_dtype(const std::string& precision) {
  return precision == "bf16" ? DType::bf16 : precision == "fp16" ? DType::f16 : DType::f32;
}
// p advanced by n elements of t.
inline void* advance(void* p, size_t n, DType t) {
  return static_cast<char*>(p) + n * dtype_bytes(t);
}
inline const void* advance(const void* p, size_t n, DType t) {
  return static_cast<const char*>(p) + n * dtype_bytes(t);
}

// How a backward writes an input gradient: added to what the buffer holds (a gradient that sums
// several branches, such as the residual stream's) or written over it (a scratch gradient's
// first write, which then needs no zeroing pass before it).
enum class GradWrite { accumulate, overwrite };

// The vocabulary rows one rank holds (tensor parallelism splits the padded vocabulary): rows
// [start, start + rows), of which the first `valid` are real tokens and the rest padding.
// Without tensor parallelism: start 0, rows the padded vocabulary, valid the real one.
struct VocabShard {
  int64_t start = 0;
  int rows = 0;
  int valid = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DLDevice dl_device() const = 0;
  virtual std::string name() const = 0;
  // The stream plugins must order their work on (cudaStream_t); null on the CPU.
  virtual void* stream() const { return nullptr; }
  // Dense peak TFLOP/s of the unit this precision's GEMMs run on ("fp32" with or without TF32,
  // "bf16", "fp16"), from a table of known devices; 0 when unknown (MFU is then not reported).
  virtual double peak_tflops(const std::string& /*precision*/, bool /*tf32*/) const { return 0; }

  // Memory. to_device/to_host copy between host memory and this device's memory; copy and
  // fill_zero stay on the device. to_host returns once the bytes are on the host.
  virtual void to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* ptr, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // Kernels. Shapes as in triad/kernels/cpu.hpp. `act` is the dtype of the activations, their
  // gradients and the compute copy of the weights (void* pointers); parameter gradients
  // (float* dweight, dbias, dwte, dwpe), layernorm statistics, losses and lse are always fp32.
  // A device refuses (UserError) an activation dtype it has no kernels for.
  // wte holds the vocabulary rows of `vocab` (all of them without tensor parallelism); a token
  // outside them looks up zeros and adds nothing to dwte.
  virtual void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                                 int B, int T, int C, const VocabShard& vocab, DType act) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                                  int B, int T, int C, const VocabShard& vocab, DType act) = 0;
  virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const void* weight, const void* bias, int N, int C, float eps,
                                 DType act) = 0;
  // dinp as `write` says; dweight and dbias always accumulate.
  virtual void layernorm_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                                  const void* inp, const void* weight, const float* mean,
                                  const float* rstd, int N, int C, DType act, GradWrite write) = 0;
  virtual void matmul_forward(void* out, const void* inp, const void* weight, const void* bias,
                              int N, int C, int OC, DType act) = 0;
  // dinp as `write` says (overwrite: the GEMM's beta is 0); dweight and dbias accumulate. Each of
  // the three may be null, and is then not computed (weight is read for dinp only).
  virtual void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                               const void* inp, const void* weight, int N, int C, int OC, DType act,
                               GradWrite write) = 0;
  virtual void gelu_forward(void* out, const void* inp, size_t n, DType act) = 0;
  virtual void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n, DType act,
                             GradWrite write) = 0;
  // The MLP's first GEMM and its GELU: pre = inp @ weight^T + bias, out = gelu(pre), both
  // (N,OC). A device may fuse them (the CUDA one does, in the GEMM's epilogue).
  virtual void matmul_gelu_forward(void* out, void* pre, const void* inp, const void* weight,
                                   const void* bias, int N, int C, int OC, DType act) {
    matmul_forward(pre, inp, weight, bias, N, C, OC, act);
    gelu_forward(out, pre, size_t(N) * OC, act);
  }
  // The backward of a GEMM whose input was gelu(pre) (N,C): dpre = (dout @ weight) * gelu'(pre),
  // overwritten; dweight and dbias accumulate. dact (N,C): scratch for the gradient at the GELU's
  // output, where the device does not fuse.
  virtual void matmul_backward_dgelu(void* dpre, void* dact, const void* pre, float* dweight,
                                     float* dbias, const void* dout, const void* inp,
                                     const void* weight, int N, int C, int OC, DType act) {
    matmul_backward(dact, dweight, dbias, dout, inp, weight, N, C, OC, act, GradWrite::overwrite);
    gelu_backward(dpre, pre, dact, size_t(N) * C, act, GradWrite::overwrite);
  }
  virtual void residual_forward(void* out, const void* a, const void* b, size_t n, DType act) = 0;
  // residual_forward(res, a, b) then layernorm_forward(out, mean, rstd, res), fused: one pass
  // over the rows instead of two, the same bits. res may alias a or b.
  virtual void residual_layernorm_forward(void* res, void* out, float* mean, float* rstd,
                                          const void* a, const void* b, const void* weight,
                                          const void* bias, int N, int C, float eps, DType act) = 0;
  // logits (N, vocab.rows). crossentropy_forward: the whole vocabulary is here (vocab.start
  // 0; columns past vocab.valid are padding, never given probability). The vocab-parallel
  // forward is row_max, (all-reduce max), row_sums, (all-reduce sum), finish; see
  // kernels::cpu::crossentropy_row_max. backward takes the whole row's lse either way and
  // writes 0 into the padding.
  virtual void crossentropy_forward(float* losses, float* lse, const void* logits,
                                    const int32_t* targets, int N, const VocabShard& vocab,
                                    DType act) = 0;
  virtual void crossentropy_backward(void* dlogits, const void* logits, const float* lse,
                                     const int32_t* targets, float dloss, int N,
                                     const VocabShard& vocab, DType act) = 0;
  virtual void crossentropy_row_max(float* rowmax, const void* logits, int N,
                                    const VocabShard& vocab, DType act) = 0;
  virtual void crossentropy_row_sums(float* sumexp, float* target_logit, const void* logits,
                                     const float* rowmax, const int32_t* targets, int N,
                                     const VocabShard& vocab, DType act) = 0;
  virtual void crossentropy_finish(float* losses, float* lse, const float* rowmax,
                                   const float* sumexp, const float* target_logit, int N) = 0;
  // out (N,C) += bias (C); dbias (C) += column sums of dout (N,C) (a row-parallel matmul's bias,
  // added after the tensor-parallel reduction).
  virtual void bias_forward(void* out, const void* bias, int N, int C, DType act) = 0;
  virtual void bias_backward(float* dbias, const void* dout, int N, int C, DType act) = 0;
  // Rotary positions on a strided (B,T,H,D) view; token t is at position pos0 + t.
  virtual void rope_forward(void* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                            double base, int64_t pos0, DType act) = 0;
  virtual void rope_backward(void* dx, int B, int T, int H, int D, int64_t sb, int64_t st,
                             int64_t sh, double base, int64_t pos0, DType act) = 0;
  // AdamW on fp32 master weights; when `compute` is not null it also receives the updated
  // weights rounded to `act` (the copy the next forward reads).
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            int t, void* compute, DType act) = 0;
  // adamw_update over many tensors of one arena: segs[i] is the range [offset, offset + n) of
  // params, grads, m, v and compute, decayed with its own weight_decay. The same bits as one
  // adamw_update per range, which is what this default does; a device may do it in fewer
  // launches.
  struct AdamwSegment {
    size_t offset = 0, n = 0;
    float weight_decay = 0.0f;
  };
  virtual void adamw_update_segments(float* params, const float* grads, float* m, float* v,
                                     const AdamwSegment* segs, size_t count, float lr, float beta1,
                                     float beta2, float eps, int t, void* compute, DType act) {
    for (size_t i = 0; i < count; ++i) {
      const size_t k = segs[i].offset;
      adamw_update(params + k, grads + k, m + k, v + k, segs[i].n, lr, beta1, beta2, eps,
                   segs[i].weight_decay, t, compute ? advance(compute, k, act) : nullptr, act);
    }
  }
  // Context parallelism's layout moves: a box of n[0] x n[1] x n[2] rows of `row` contiguous
  // elements of `act`, row (i, j, k) at i s[0] + j s[1] + k s[2] elements from each base. dst's
  // rows are OVERWRITTEN with src's (src null: zeros), or src's are added with accumulate.
  struct RowBox {
    int64_t n[3];
    int64_t row;
  };
  struct RowStrides {
    int64_t s[3];
  };
  virtual void copy_rows(void* dst, const RowStrides& ds, const void* src, const RowStrides& ss,
                         const RowBox& box, bool accumulate, DType act) = 0;
  // Ring attention's merge of a partial result into the running one, row by row (b, h, s) of
  // (B, H, S): with L = log(e^lse + e^part_lse), out = e^(lse-L) out + e^(part_lse-L) part and
  // lse = L; `first`: out = part, lse = part_lse. out (`act`, rows of D) and lse (fp32) strided;
  // part (B, H, S, D) and part_lse (B, H, S) contiguous.
  virtual void attention_merge(void* out, const RowStrides& os, float* lse, const RowStrides& ls,
                               const void* part, const float* part_lse, int64_t B, int64_t H,
                               int64_t S, int64_t D, bool first, DType act) = 0;
  // dst (n elements of `act`) = src rounded.
  virtual void convert(void* dst, DType act, const float* src, size_t n) = 0;
  // Sum of x and of its squares, accumulated in double; they wait for the result.
  virtual double sum(const float* x, size_t n) = 0;
  virtual double sum_squares(const float* x, size_t n) = 0;
  virtual void scale_inplace(float* x, size_t n, float s) = 0;
  // Bytes this device can still allocate, or 0 where it does not say (the CPU device: host
  // memory is the launcher's to check, before any rank starts).
  virtual size_t memory_free() const { return 0; }
  // The GEMM library the device's matmuls run on, as the run's log names it.
  virtual std::string gemm_library() const = 0;

  // Counts the bytes; on failure throws UserError naming what, how much and the peak so far.
  void* allocate(size_t bytes, const char* what);
  void release(void* ptr, size_t bytes);
  size_t current_bytes() const { return current_.load(); }
  size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_release(void* ptr) = 0;

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

// "cpu" or "cuda" (GPU local_rank modulo the visible GPUs); throws UserError for a device this
// build or machine cannot provide. allow_tf32: fp32 GEMMs may use TF32 tensor cores. gemm: the
// library of the CPU device's GEMMs, "onednn" or "openblas" (config device.gemm; the CUDA
// device always uses cuBLAS).
std::unique_ptr<Device> make_device(const std::string& name, int local_rank = 0,
                                    bool allow_tf32 = false, const std::string& gemm = "onednn");
// True when this build has the CUDA device (whether or not a GPU is present). TRIAD_HAVE_CUDA is
// defined for the whole build where nvcc was found.
// The CUDA GPUs this process sees (0 without CUDA in the build or without a GPU).
int cuda_devices_visible();

constexpr bool cuda_device_built() {
#ifdef TRIAD_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

// An owned, zero-initialised array of T on a device, or a view of n elements of memory another
// Buffer owns (the pieces of an activation set carved out of its stage's ActivationPool), which
// it never releases.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device& dev, size_t n, const char* what) : dev_(&dev), n_(n) {
    ptr_ = static_cast<T*>(dev.allocate(n * sizeof(T), what));
  }
  static Buffer view(T* ptr, size_t n) {
    Buffer b;
    b.ptr_ = ptr;
    b.n_ = n;
    return b;
  }
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    reset();
    swap(o);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* data() const { return ptr_; }
  size_t size() const { return n_; }
  void reset() {
    if (ptr_ && dev_) dev_->release(ptr_, n_ * sizeof(T));
    ptr_ = nullptr;
    n_ = 0;
  }

 private:
  void swap(Buffer& o) {
    std::swap(dev_, o.dev_);
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
  }
  Device* dev_ = nullptr;
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace triad
