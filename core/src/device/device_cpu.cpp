#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad {

namespace k = kernels::cpu;

#ifdef TRIAD_HAVE_CUDA
std::unique_ptr<Device> make_cuda_device(int local_rank, bool allow_tf32);  // device_cuda.cpp
int cuda_devices_visible_here();                                            // device_cuda.cpp
#endif

namespace {

std::string mib(size_t b) {
  return std::to_string(b / (1024 * 1024)) + " MiB";
}

// The CPU computes in fp32 only; mixed precision needs the CUDA device.
DType fp32_only(DType act) {
  if (act != DType::f32)
    throw UserError(std::string("precision ") + dtype_name(act) +
                    " has no CPU kernels; use precision: fp32 on device: cpu, or device: cuda");
  return act;
}
float* f(void* p, DType act) {
  fp32_only(act);
  return static_cast<float*>(p);
}
const float* f(const void* p) {
  return static_cast<const float*>(p);
}
const float* f(const void* p, DType act) {
  fp32_only(act);
  return static_cast<const float*>(p);
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(k::Gemm gemm) : gemm_(gemm) {}
  DLDevice dl_device() const override { return DLDevice{kDLCPU, 0}; }
  std::string name() const override { return "cpu"; }
  std::string gemm_library() const override {
    return gemm_ == k::Gemm::onednn ? "onednn" : "openblas";
  }

  void to_device(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* ptr, size_t bytes) override {
    if (bytes) std::memset(ptr, 0, bytes);
  }
  void synchronize() override {}

  void embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                         int T, int C, const VocabShard& vocab, DType act) override {
    k::embedding_forward(f(out, act), tokens, f(wte), f(wpe), B, T, C, vocab.start, vocab.rows);
  }
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B,
                          int T, int C, const VocabShard& vocab, DType act) override {
    k::embedding_backward(dwte, dwpe, f(dout, act), tokens, B, T, C, vocab.start, vocab.rows);
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                         const void* bias, int N, int C, float eps, DType act) override {
    k::layernorm_forward(f(out, act), mean, rstd, f(inp), f(weight), f(bias), N, C, eps);
  }
  void layernorm_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                          const void* inp, const void* weight, const float* mean, const float* rstd,
                          int N, int C, DType act, GradWrite write) override {
    k::layernorm_backward(f(dinp, act), dweight, dbias, f(dout), f(inp), f(weight), mean, rstd, N,
                          C, write == GradWrite::accumulate);
  }
  void residual_layernorm_forward(void* res, void* out, float* mean, float* rstd, const void* a,
                                  const void* b, const void* weight, const void* bias, int N, int C,
                                  float eps, DType act) override {
    k::residual_layernorm_forward(f(res, act), f(out, act), mean, rstd, f(a), f(b), f(weight),
                                  f(bias), N, C, eps);
  }
  void matmul_forward(void* out, const void* inp, const void* weight, const void* bias, int N,
                      int C, int OC, DType act) override {
    k::matmul_forward(f(out, act), f(inp), f(weight), f(bias), N, C, OC, gemm_);
  }
  void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                       const void* weight, int N, int C, int OC, DType act,
                       GradWrite write) override {
    k::matmul_backward(f(dinp, act), dweight, dbias, f(dout), f(inp), f(weight), N, C, OC, gemm_,
                       write == GradWrite::accumulate);
  }
  void gelu_forward(void* out, const void* inp, size_t n, DType act) override {
    k::gelu_forward(f(out, act), f(inp), n);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n, DType act,
                     GradWrite write) override {
    k::gelu_backward(f(dinp, act), f(inp), f(dout), n, write == GradWrite::accumulate);
  }
  void residual_forward(void* out, const void* a, const void* b, size_t n, DType act) override {
    k::residual_forward(f(out, act), f(a), f(b), n);
  }
  void crossentropy_forward(float* losses, float* lse, const void* logits, const int32_t* targets,
                            int N, const VocabShard& vocab, DType act) override {
    k::crossentropy_forward(losses, lse, f(logits, act), targets, N, vocab.rows, vocab.valid);
  }
  void crossentropy_backward(void* dlogits, const void* logits, const float* lse,
                             const int32_t* targets, float dloss, int N, const VocabShard& vocab,
                             DType act) override {
    k::crossentropy_backward(f(dlogits, act), f(logits), lse, targets, dloss, N, vocab.rows,
                             vocab.valid, vocab.start);
  }
  void crossentropy_row_max(float* rowmax, const void* logits, int N, const VocabShard& vocab,
                            DType act) override {
    k::crossentropy_row_max(rowmax, f(logits, act), N, vocab.rows, vocab.valid);
  }
  void crossentropy_row_sums(float* sumexp, float* target_logit, const void* logits,
                             const float* rowmax, const int32_t* targets, int N,
                             const VocabShard& vocab, DType act) override {
    k::crossentropy_row_sums(sumexp, target_logit, f(logits, act), rowmax, targets, N, vocab.rows,
                             vocab.valid, vocab.start);
  }
  void crossentropy_finish(float* losses, float* lse, const float* rowmax, const float* sumexp,
                           const float* target_logit, int N) override {
    k::crossentropy_finish(losses, lse, rowmax, sumexp, target_logit, N);
  }
  void bias_forward(void* out, const void* bias, int N, int C, DType act) override {
    k::bias_forward(f(out, act), f(bias), N, C);
  }
  void bias_backward(float* dbias, const void* dout, int N, int C, DType act) override {
    k::bias_backward(dbias, f(dout, act), N, C);
  }
  void rope_forward(void* x, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                    double base, int64_t pos0, DType act) override {
    k::rope_forward(f(x, act), B, T, H, D, sb, st, sh, base, pos0);
  }
  void rope_backward(void* dx, int B, int T, int H, int D, int64_t sb, int64_t st, int64_t sh,
                     double base, int64_t pos0, DType act) override {
    k::rope_backward(f(dx, act), B, T, H, D, sb, st, sh, base, pos0);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int t, void* compute,
                    DType act) override {
    k::adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
    if (compute && compute != params) copy(compute, params, n * dtype_bytes(fp32_only(act)));
  }
  void copy_rows(void* dst, const RowStrides& ds, const void* src, const RowStrides& ss,
                 const RowBox& box, bool accumulate, DType act) override {
    k::copy_rows(f(dst, act), {{ds.s[0], ds.s[1], ds.s[2]}}, f(src, act),
                 {{ss.s[0], ss.s[1], ss.s[2]}}, {{box.n[0], box.n[1], box.n[2]}, box.row},
                 accumulate);
  }
  void attention_merge(void* out, const RowStrides& os, float* lse, const RowStrides& ls,
                       const void* part, const float* part_lse, int64_t B, int64_t H, int64_t S,
                       int64_t D, bool first, DType act) override {
    k::attention_merge(f(out, act), {{os.s[0], os.s[1], os.s[2]}}, lse,
                       {{ls.s[0], ls.s[1], ls.s[2]}}, f(part, act), part_lse, B, H, S, D, first);
  }
  void convert(void* dst, DType act, const float* src, size_t n) override {
    copy(dst, src, n * dtype_bytes(fp32_only(act)));
  }
  double sum(const float* x, size_t n) override {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
  double sum_squares(const float* x, size_t n) override { return k::sum_squares(x, n); }
  void scale_inplace(float* x, size_t n, float s) override { k::scale_inplace(x, n, s); }

 protected:
  void* raw_allocate(size_t bytes) override {
    // 64-byte alignment for vector loads; zeroed so fresh arenas are deterministic.
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p) std::memset(p, 0, rounded);
    return p;
  }
  void raw_release(void* ptr) override { std::free(ptr); }

 private:
  k::Gemm gemm_;
};

k::Gemm cpu_gemm(const std::string& name) {
  if (name == "onednn") return k::Gemm::onednn;
  if (name == "openblas") return k::Gemm::openblas;
  throw UserError("device.gemm '" + name +
                  "' is unknown; use device: {name: cpu, gemm: onednn} or gemm: openblas");
}

}  // namespace

void* Device::allocate(size_t bytes, const char* what) {
  void* p = raw_allocate(bytes);
  if (!p)
    throw UserError("out of " + name() + " memory allocating " + mib(bytes) + " for " + what +
                    " (peak so far " + mib(peak_bytes()) +
                    "); reduce micro_batch_size, seq_length or the model size");
  const size_t now = current_.fetch_add(bytes) + bytes;
  size_t prev = peak_.load();
  while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
  }
  return p;
}

void Device::release(void* ptr, size_t bytes) {
  if (!ptr) return;
  raw_release(ptr);
  current_.fetch_sub(bytes);
}

int cuda_devices_visible() {
#ifdef TRIAD_HAVE_CUDA
  return cuda_devices_visible_here();
#else
  return 0;
#endif
}

std::unique_ptr<Device> make_device(const std::string& name, int local_rank, bool allow_tf32,
                                    const std::string& gemm) {
  if (name == "cpu") return std::make_unique<CpuDevice>(cpu_gemm(gemm));
#ifdef TRIAD_HAVE_CUDA
  if (name == "cuda") return make_cuda_device(local_rank, allow_tf32);
#else
  (void)local_rank;
  (void)allow_tf32;
  if (name == "cuda")
    throw UserError(
        "device 'cuda' is not available: this build found no CUDA toolkit (nvcc); rebuild "
        "where nvcc is on PATH, or use device: cpu");
#endif
  throw UserError("device '" + name + "' is unknown; use device: cpu or device: cuda");
}

}  // namespace triad
