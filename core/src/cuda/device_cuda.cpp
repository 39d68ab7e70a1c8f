// The CUDA device: stream-ordered memory (cudaMallocAsync) counted like the CPU's, and every
// kernel from kernels/cuda on one stream. The model and engine see only the Device interface.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "triad/core/device.hpp"
#include "triad/core/error.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad {

namespace {

namespace k = kernels::cuda;

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

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override {
    k::embedding_forward(out, tokens, wte, wpe, B, T, C, stream_);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                          int T, int C, int V) override {
    k::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, V, stream_);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C, float eps) override {
    k::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, stream_);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    k::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream_);
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC) override {
    k::matmul_forward(*blas_, out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC) override {
    k::matmul_backward(*blas_, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void gelu_forward(float* out, const float* inp, size_t n) override {
    k::gelu_forward(out, inp, n, stream_);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    k::gelu_backward(dinp, inp, dout, n, stream_);
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    k::residual_forward(out, a, b, n, stream_);
  }
  void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                            int N, int V) override {
    k::crossentropy_forward(losses, lse, logits, targets, N, V, stream_);
  }
  void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                             const int32_t* targets, float dloss, int N, int V) override {
    k::crossentropy_backward(dlogits, logits, lse, targets, dloss, N, V, stream_);
  }
  void rope_forward(float* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                    double base) override {
    k::rope_forward(x, B, T, H, D, sb, st, sh, base, stream_);
  }
  void rope_backward(float* dx, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                     double base) override {
    k::rope_backward(dx, B, T, H, D, sb, st, sh, base, stream_);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int t) override {
    k::adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, stream_);
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
