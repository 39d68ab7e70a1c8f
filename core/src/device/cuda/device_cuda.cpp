// The CUDA device: stream-ordered memory (cudaMallocAsync) counted like the CPU's, and every
// kernel from kernels/cuda on one stream. The model and engine see only the Device interface.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad {

namespace {

namespace k = kernels::cuda;

// Calls fn with a value of the C++ type of a 16-bit `act` (bf16 or f16), to pick the kernels'
// instantiation.
template <class Fn>
void typed_half(DType act, Fn&& fn) {
  if (act == DType::f16)
    fn(k::f16{});
  else
    fn(k::bf16{});
}
// The same for any `act` (float, bf16 or f16).
template <class Fn>
void typed(DType act, Fn&& fn) {
  if (act == DType::f32)
    fn(float{});
  else
    typed_half(act, fn);
}
template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}
template <class T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cuda device: ") + what + ": " + cudaGetErrorString(e));
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, bool allow_tf32) : ordinal_(ordinal) {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    blas_ = std::make_unique<k::Blas>(stream_, allow_tf32);
    check(cudaMallocAsync(reinterpret_cast<void**>(&scalar_), sizeof(double), stream_),
          "cudaMallocAsync (reduction scalar)");
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, ordinal_), "cudaGetDeviceProperties");
    gpu_name_ = p.name;
  }
  ~CudaDevice() override {
    cudaFreeAsync(scalar_, stream_);
    blas_.reset();
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  DLDevice dl_device() const override { return DLDevice{kDLCUDA, ordinal_}; }
  std::string name() const override {
    return "cuda:" + std::to_string(ordinal_) + " (" + gpu_name_ + ")";
  }
  void* stream() const override { return stream_; }
  std::string gemm_library() const override { return "cuBLAS"; }
  size_t memory_free() const override {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return free;
  }

  // Vendor datasheet dense peaks (no sparsity), TFLOP/s: fp32 on CUDA cores, TF32 and
  // bf16/fp16 on tensor cores. SXM parts unless the name says PCIe/NVL.
  double peak_tflops(const std::string& precision, bool tf32) const override {
    struct Peak {
      const char* name;
      double fp32, tf32, half;
    };
    static const Peak kPeaks[] = {
        {"H200", 66.9, 494.7, 989.4},     {"H100 PCIe", 51.2, 378.0, 756.0},
        {"H100 NVL", 60.0, 417.5, 835.0}, {"H100", 66.9, 494.7, 989.4},
        {"GH200", 66.9, 494.7, 989.4},    {"A100", 19.5, 156.0, 312.0},
        {"L40S", 91.6, 183.0, 366.0},     {"A10G", 31.2, 35.0, 70.0},
    };
    for (const Peak& p : kPeaks)
      if (gpu_name_.find(p.name) != std::string::npos)
        return precision == "fp32" ? (tf32 ? p.tf32 : p.fp32) : p.half;
    return 0;
  }

  void to_device(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
    // The host buffer may be reused at once (pageable memory): wait for the copy.
    check(cudaStreamSynchronize(stream_), "copy to device");
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
    check(cudaStreamSynchronize(stream_), "copy to host");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src)
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "device copy");
  }
  void fill_zero(void* ptr, size_t bytes) override {
    if (bytes) check(cudaMemsetAsync(ptr, 0, bytes, stream_), "memset");
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "synchronize"); }

  void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                         int T, int C, const VocabShard& vocab, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::embedding_forward(as<T_>(out), tokens, as<T_>(wte), as<T_>(wpe), B, T, C, stream_,
                           vocab.start, vocab.rows);
    });
  }
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B,
                          int T, int C, const VocabShard& vocab, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::embedding_backward(dwte, dwpe, as<T_>(dout), tokens, B, T, C, vocab.rows, stream_,
                            vocab.start);
    });
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                         const void* bias, int N, int C, float eps, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::layernorm_forward(as<T_>(out), mean, rstd, as<T_>(inp), as<T_>(weight), as<T_>(bias), N, C,
                           eps, stream_);
    });
  }
  void layernorm_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                          const void* inp, const void* weight, const float* mean, const float* rstd,
                          int N, int C, DType act, GradWrite write) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::layernorm_backward(as<T_>(dinp), dweight, dbias, as<T_>(dout), as<T_>(inp), as<T_>(weight),
                            mean, rstd, N, C, stream_, write == GradWrite::accumulate);
    });
  }
  void residual_layernorm_forward(void* res, void* out, float* mean, float* rstd, const void* a,
                                  const void* b, const void* weight, const void* bias, int N, int C,
                                  float eps, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::residual_layernorm_forward(as<T_>(res), as<T_>(out), mean, rstd, as<T_>(a), as<T_>(b),
                                    as<T_>(weight), as<T_>(bias), N, C, eps, stream_);
    });
  }
  void matmul_forward(void* out, const void* inp, const void* weight, const void* bias, int N,
                      int C, int OC, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::matmul_forward(*blas_, as<T_>(out), as<T_>(inp), as<T_>(weight), as<T_>(bias), N, C, OC);
    });
  }
  void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                       const void* weight, int N, int C, int OC, DType act,
                       GradWrite write) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::matmul_backward(*blas_, as<T_>(dinp), dweight, dbias, as<T_>(dout), as<T_>(inp),
                         as<T_>(weight), N, C, OC, write == GradWrite::accumulate);
    });
  }
  void matmul_gelu_forward(void* out, void* pre, const void* inp, const void* weight,
                           const void* bias, int N, int C, int OC, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::matmul_gelu_forward(*blas_, as<T_>(out), as<T_>(pre), as<T_>(inp), as<T_>(weight),
                             as<T_>(bias), N, C, OC);
    });
  }
  void matmul_backward_dgelu(void* dpre, void* dact, const void* pre, float* dweight, float* dbias,
                             const void* dout, const void* inp, const void* weight, int N, int C,
                             int OC, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::matmul_backward_dgelu(*blas_, as<T_>(dpre), as<T_>(dact), as<T_>(pre), dweight, dbias,
                               as<T_>(dout), as<T_>(inp), as<T_>(weight), N, C, OC);
    });
  }
  void gelu_forward(void* out, const void* inp, size_t n, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::gelu_forward(as<T_>(out), as<T_>(inp), n, stream_);
    });
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n, DType act,
                     GradWrite write) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::gelu_backward(as<T_>(dinp), as<T_>(inp), as<T_>(dout), n, stream_,
                       write == GradWrite::accumulate);
    });
  }
  void residual_forward(void* out, const void* a, const void* b, size_t n, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::residual_forward(as<T_>(out), as<T_>(a), as<T_>(b), n, stream_);
    });
  }
  void crossentropy_forward(float* losses, float* lse, const void* logits, const int32_t* targets,
                            int N, const VocabShard& vocab, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::crossentropy_forward(losses, lse, as<T_>(logits), targets, N, vocab.rows, stream_,
                              vocab.valid);
    });
  }
  void crossentropy_backward(void* dlogits, const void* logits, const float* lse,
                             const int32_t* targets, float dloss, int N, const VocabShard& vocab,
                             DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::crossentropy_backward(as<T_>(dlogits), as<T_>(logits), lse, targets, dloss, N, vocab.rows,
                               stream_, vocab.valid, vocab.start);
    });
  }
  // Tensor parallelism's kernels (vocab-parallel cross-entropy, the row-parallel bias), checked
  // against kernels::cpu in tests/kernels_cuda; tools/gpu-check runs tp 2 with them.
  void crossentropy_row_max(float* rowmax, const void* logits, int N, const VocabShard& vocab,
                            DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::crossentropy_row_max(rowmax, as<T_>(logits), N, vocab.rows, vocab.valid, stream_);
    });
  }
  void crossentropy_row_sums(float* sumexp, float* target_logit, const void* logits,
                             const float* rowmax, const int32_t* targets, int N,
                             const VocabShard& vocab, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::crossentropy_row_sums(sumexp, target_logit, as<T_>(logits), rowmax, targets, N, vocab.rows,
                               vocab.valid, vocab.start, stream_);
    });
  }
  void crossentropy_finish(float* losses, float* lse, const float* rowmax, const float* sumexp,
                           const float* target_logit, int N) override {
    k::crossentropy_finish(losses, lse, rowmax, sumexp, target_logit, N, stream_);
  }
  void bias_forward(void* out, const void* bias, int N, int C, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::bias_forward(as<T_>(out), as<T_>(bias), N, C, stream_);
    });
  }
  void bias_backward(float* dbias, const void* dout, int N, int C, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::bias_backward(dbias, as<T_>(dout), N, C, stream_);
    });
  }
  void rope_forward(void* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                    double base, int64_t pos0, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::rope_forward(as<T_>(x), B, T, H, D, sb, st, sh, base, stream_, pos0);
    });
  }
  void rope_backward(void* dx, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                     double base, int64_t pos0, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::rope_backward(as<T_>(dx), B, T, H, D, sb, st, sh, base, stream_, pos0);
    });
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int t, void* compute,
                    DType act) override {
    if (act == DType::f32 || !compute) {
      k::adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, stream_);
      if (compute && compute != params) copy(compute, params, n * sizeof(float));
    } else {
      typed_half(act, [&](auto z) {
        k::adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t,
                        as<decltype(z)>(compute), stream_);
      });
    }
  }
  // One launch per 64 tensors instead of one per tensor (GPT-2 124M: 148 tensors, 3 launches).
  void adamw_update_segments(float* params, const float* grads, float* m, float* v,
                             const AdamwSegment* segs, size_t count, float lr, float beta1,
                             float beta2, float eps, int t, void* compute, DType act) override {
    if (act == DType::f32 && compute && compute != params) {
      Device::adamw_update_segments(params, grads, m, v, segs, count, lr, beta1, beta2, eps, t,
                                    compute, act);
      return;
    }
    std::vector<k::AdamwSegment> ks(count);
    for (size_t i = 0; i < count; ++i) ks[i] = {segs[i].offset, segs[i].n, segs[i].weight_decay};
    typed_half(act, [&](auto z) {
      using H = decltype(z);
      k::adamw_update_segments(params, grads, m, v, ks.data(), count, lr, beta1, beta2, eps, t,
                               act == DType::f32 ? nullptr : as<H>(compute), stream_);
    });
  }
  void copy_rows(void* dst, const RowStrides& ds, const void* src, const RowStrides& ss,
                 const RowBox& box, bool accumulate, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::copy_rows(as<T_>(dst), {{ds.s[0], ds.s[1], ds.s[2]}}, as<T_>(src),
                   {{ss.s[0], ss.s[1], ss.s[2]}}, {{box.n[0], box.n[1], box.n[2]}, box.row},
                   accumulate, stream_);
    });
  }
  void attention_merge(void* out, const RowStrides& os, float* lse, const RowStrides& ls,
                       const void* part, const float* part_lse, int64_t B, int64_t H, int64_t S,
                       int64_t D, bool first, DType act) override {
    typed(act, [&](auto z) {
      using T_ = decltype(z);
      k::attention_merge(as<T_>(out), {{os.s[0], os.s[1], os.s[2]}}, lse,
                         {{ls.s[0], ls.s[1], ls.s[2]}}, as<T_>(part), part_lse, B, H, S, D, first,
                         stream_);
    });
  }
  void convert(void* dst, DType act, const float* src, size_t n) override {
    if (act == DType::f32)
      copy(dst, src, n * sizeof(float));
    else
      typed_half(act, [&](auto z) { k::convert(as<decltype(z)>(dst), src, n, stream_); });
  }
  double sum(const float* x, size_t n) override {
    k::sum(scalar_, x, n, stream_);
    return read_scalar();
  }
  double sum_squares(const float* x, size_t n) override {
    k::sum_squares(scalar_, x, n, stream_);
    return read_scalar();
  }
  void scale_inplace(float* x, size_t n, float s) override { k::scale_inplace(x, n, s, stream_); }

 protected:
  void* raw_allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaMallocAsync(&p, bytes == 0 ? 256 : bytes, stream_) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free out-of-memory error
      return nullptr;
    }
    // Zeroed, like the CPU device, so fresh arenas are deterministic.
    if (bytes) check(cudaMemsetAsync(p, 0, bytes, stream_), "memset");
    return p;
  }
  void raw_release(void* ptr) override { cudaFreeAsync(ptr, stream_); }

 private:
  double read_scalar() {
    double h = 0;
    to_host(&h, scalar_, sizeof h);
    return h;
  }

  int ordinal_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<k::Blas> blas_;
  double* scalar_ = nullptr;
  std::string gpu_name_;
};

}  // namespace

int cuda_devices_visible_here() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

std::unique_ptr<Device> make_cuda_device(int local_rank, bool allow_tf32) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw UserError(std::string("device 'cuda': no CUDA GPU is visible (") +
                    (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
                    "); run on a machine with an NVIDIA GPU and driver, or use device: cpu");
  return std::make_unique<CudaDevice>(local_rank % count, allow_tf32);
}

}  // namespace triad
