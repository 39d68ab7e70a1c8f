// The reference attention plugin: for each (batch, head) it writes the whole (T x T) score
// matrix into the workspace, softmaxes it row by row and multiplies by V. Memory grows as
// T^2, so it is for checking the fast backends and for small models, not for long contexts.
// Where the build has CUDA, tensors in GPU memory run the same algorithm with cuBLAS batched
// GEMMs and a softmax kernel (kernels/cuda), on the stream the core passed in.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "triad/sdk/attention.hpp"
#ifdef TRIAD_NAIVE_CUDA
#include "triad/kernels/cuda.hpp"
#endif

namespace {

using triad::sdk::invalid;
using triad::sdk::unsupported;
using triad::sdk::View4;

constexpr int kMaxHeadDim = 256;

struct Heads {
  View4<const float> q, k, v;
  int64_t B, H, T, D;
};

#ifdef TRIAD_NAIVE_CUDA
constexpr uint32_t kDevices = (1u << kDLCPU) | (1u << kDLCUDA);
#else
constexpr uint32_t kDevices = 1u << kDLCPU;
#endif

// Every tensor on a device naive runs on, with non-null data; throws the status the ABI asks
// for otherwise. (All tensors of one call must be on q's device: checked by the caller.)
void require_cpu(const DLTensor* t, const char* what) {
  if (!t) throw invalid(std::string(what) + " is null");
  if (!(kDevices & (1u << t->device.device_type)))
    throw unsupported(std::string(what) +
                      " is in memory naive cannot reach; this build of naive runs on " +
                      (kDevices & (1u << kDLCUDA) ? "the CPU and CUDA GPUs" : "the CPU only"));
  int64_t numel = 1;
  for (int i = 0; i < t->ndim; ++i) numel *= t->shape[i];
  if (!t->data && numel > 0) throw invalid(std::string(what) + " has no data");
}

Heads check_inputs(const DLTensor* q, const DLTensor* k, const DLTensor* v) {
  require_cpu(q, "q");
  require_cpu(k, "k");
  require_cpu(v, "v");
  Heads h{triad::sdk::view4<const float>(q, "q"),
          triad::sdk::view4<const float>(k, "k"),
          triad::sdk::view4<const float>(v, "v"),
          0,
          0,
          0,
          0};
  triad::sdk::require_same_shape(h.q, h.k, "q", "k");
  triad::sdk::require_same_shape(h.q, h.v, "q", "v");
  h.B = h.q.n[0], h.H = h.q.n[1], h.T = h.q.n[2], h.D = h.q.n[3];
  if (h.B < 0 || h.H < 0 || h.T < 0 || h.D < 1) throw invalid("q has a negative or zero size");
  if (h.D > kMaxHeadDim)
    throw unsupported("head dim " + std::to_string(h.D) + " is above naive's maximum of " +
                      std::to_string(kMaxHeadDim));
  return h;
}

View4<float> output(const DLTensor* t, const char* what, const Heads& h) {
  require_cpu(t, what);
  auto o = triad::sdk::view4<float>(t, what);
  triad::sdk::require_same_shape(h.q, o, "q", what);
  return o;
}

size_t score_bytes(int64_t B, int64_t H, int64_t T) {
  return static_cast<size_t>(B * H * T * T) * sizeof(float);
}

float* scores(void* ws, size_t have, const Heads& h) {
  size_t need = score_bytes(h.B, h.H, h.T);
  if (need && (!ws || have < need))
    throw invalid("workspace of " + std::to_string(have) + " bytes is smaller than the " +
                  std::to_string(need) + " bytes workspace_size() asked for");
  return static_cast<float*>(ws);
}

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

// y += a * x
inline void axpy(float a, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) y[d] += a * x[d];
}

class NaiveAttention : public triad::sdk::AttentionPlugin {
 public:
  NaiveAttention(triad::sdk::Services services, triad::sdk::Params)
      : threads_(services.num_threads() > 0 ? services.num_threads() : omp_get_max_threads()),
        stream_(services.stream()) {}

  triad_attention_caps_v1 capabilities() const override {
    triad_attention_caps_v1 c{};
    c.devices = kDevices;
    // bfloat16 and float16 only in GPU memory (checked per call); the CPU path is float32.
    c.dtypes = TRIAD_DTYPE_BIT_FP32 |
               (kDevices & (1u << kDLCUDA) ? TRIAD_DTYPE_BIT_BF16 | TRIAD_DTYPE_BIT_FP16 : 0u);
    c.num_head_dims = 0;
    c.max_head_dim = kMaxHeadDim;
    c.causal = 1;
    c.non_causal = 1;
    return c;
  }

  void workspace_size(const triad_attention_shape_v1& s, size_t* fwd, size_t* bwd) const override {
    if (s.batch < 0 || s.heads < 0 || s.seq_len < 0) throw invalid("negative size in shape");
    // Forward holds the scores, backward the probabilities (then dS in place): one T x T
    // matrix per (b, h) so every head can run on its own thread.
    size_t bytes = score_bytes(s.batch, s.heads, s.seq_len);
#ifdef TRIAD_NAIVE_CUDA
    if (s.device.device_type == kDLCUDA)
      bytes = s.dtype.bits == 16 ? triad::kernels::cuda::attention_naive_workspace_bytes_half(
                                       int(s.batch), int(s.heads), int(s.seq_len), int(s.head_dim))
                                 : triad::kernels::cuda::attention_naive_workspace_bytes(
                                       int(s.batch), int(s.heads), int(s.seq_len), int(s.head_dim));
#endif
    if (fwd) *fwd = bytes;
    if (bwd) *bwd = bytes;
  }

  void forward(const triad_attention_fwd_args_v1& a) override {
#ifdef TRIAD_NAIVE_CUDA
    if (half_of(a.q) != Half::none) {
      if (half_of(a.q) == Half::bf16)
        forward_half<triad::kernels::cuda::bf16>(a);
      else
        forward_half<triad::kernels::cuda::f16>(a);
      return;
    }
#endif
    Heads h = check_inputs(a.q, a.k, a.v);
    View4<float> out = output(a.out, "out", h);
    require_cpu(a.lse, "lse");
    float* lse = triad::sdk::lse_view(a.lse, h.B, h.H, h.T);
    require_same_device(a.q, {a.k, a.v, a.out, a.lse});
#ifdef TRIAD_NAIVE_CUDA
    if (a.q->device.device_type == kDLCUDA) {
      namespace kc = triad::kernels::cuda;
      kc::attention_naive_forward(blas(), head(out), lse, head(h.q), head(h.k), head(h.v), int(h.B),
                                  int(h.H), int(h.T), int(h.D), a.causal != 0, a.scale, a.workspace,
                                  a.workspace_bytes);
      return;
    }
#endif
    float* ws = scores(a.workspace, a.workspace_bytes, h);
    const bool causal = a.causal != 0;
    const float scale = a.scale;
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads_)
    for (int64_t b = 0; b < h.B; ++b)
      for (int64_t hd = 0; hd < h.H; ++hd)
        forward_head(h, out, lse + (b * h.H + hd) * h.T, ws + (b * h.H + hd) * h.T * h.T, b, hd,
                     causal, scale);
  }

  void backward(const triad_attention_bwd_args_v1& a) override {
#ifdef TRIAD_NAIVE_CUDA
    if (half_of(a.q) != Half::none) {
      if (half_of(a.q) == Half::bf16)
        backward_half<triad::kernels::cuda::bf16>(a);
      else
        backward_half<triad::kernels::cuda::f16>(a);
      return;
    }
#endif
    Heads h = check_inputs(a.q, a.k, a.v);
    View4<float> out = output(a.out, "out", h), dout = output(a.dout, "dout", h);
    View4<float> dq = output(a.dq, "dq", h), dk = output(a.dk, "dk", h), dv = output(a.dv, "dv", h);
    require_cpu(a.lse, "lse");
    const float* lse = triad::sdk::lse_view(a.lse, h.B, h.H, h.T);
    require_same_device(a.q, {a.k, a.v, a.out, a.lse, a.dout, a.dq, a.dk, a.dv});
#ifdef TRIAD_NAIVE_CUDA
    if (a.q->device.device_type == kDLCUDA) {
      namespace kc = triad::kernels::cuda;
      kc::attention_naive_backward(blas(), head(dq), head(dk), head(dv), head(h.q), head(h.k),
                                   head(h.v), head(out), lse, head(dout), int(h.B), int(h.H),
                                   int(h.T), int(h.D), a.causal != 0, a.scale, a.workspace,
                                   a.workspace_bytes);
      return;
    }
#endif
    float* ws = scores(a.workspace, a.workspace_bytes, h);
    const bool causal = a.causal != 0;
    const float scale = a.scale;
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads_)
    for (int64_t b = 0; b < h.B; ++b)
      for (int64_t hd = 0; hd < h.H; ++hd)
        backward_head(h, out, dout, dq, dk, dv, lse + (b * h.H + hd) * h.T,
                      ws + (b * h.H + hd) * h.T * h.T, b, hd, causal, scale);
  }

 private:
  // S = scale * Q K^T (masked), P = softmax(S), out = P V, lse = log rowsum exp(S).
  static void forward_head(const Heads& h, const View4<float>& out, float* lse, float* S, int64_t b,
                           int64_t hd, bool causal, float scale) {
    const int64_t T = h.T, D = h.D;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t n = causal ? i + 1 : T;
      const float* qi = h.q.row(b, hd, i);
      float* s = S + i * T;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        s[j] = scale * dot(qi, h.k.row(b, hd, j), D);
        m = std::max(m, s[j]);
      }
      float sum = 0.f;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - m);
        sum += s[j];
      }
      const float inv = 1.f / sum;
      float* oi = out.row(b, hd, i);
      for (int64_t d = 0; d < D; ++d) oi[d] = 0.f;
      for (int64_t j = 0; j < n; ++j) axpy(s[j] * inv, h.v.row(b, hd, j), oi, D);
      lse[i] = m + std::log(sum);
    }
  }

  // P = exp(S - lse); dV = P^T dO; dS = P o (dO V^T - rowsum(dO o O));
  // dQ = scale dS K; dK = scale dS^T Q. Row i of P becomes row i of dS in place.
  static void backward_head(const Heads& h, const View4<float>& out, const View4<float>& dout,
                            const View4<float>& dq, const View4<float>& dk, const View4<float>& dv,
                            const float* lse, float* P, int64_t b, int64_t hd, bool causal,
                            float scale) {
    const int64_t T = h.T, D = h.D;
    // dk and dv rows of this head are sums over queries: start from zero (overwrite).
    for (int64_t j = 0; j < T; ++j) {
      float* dkj = dk.row(b, hd, j);
      float* dvj = dv.row(b, hd, j);
      for (int64_t d = 0; d < D; ++d) dkj[d] = dvj[d] = 0.f;
    }
    for (int64_t i = 0; i < T; ++i) {
      const int64_t n = causal ? i + 1 : T;
      const float* qi = h.q.row(b, hd, i);
      const float* doi = dout.row(b, hd, i);
      const float di = dot(doi, out.row(b, hd, i), D);
      float* p = P + i * T;
      for (int64_t j = 0; j < n; ++j)
        p[j] = std::exp(scale * dot(qi, h.k.row(b, hd, j), D) - lse[i]);
      for (int64_t j = 0; j < n; ++j) axpy(p[j], doi, dv.row(b, hd, j), D);
      for (int64_t j = 0; j < n; ++j) p[j] *= dot(doi, h.v.row(b, hd, j), D) - di;
      float* dqi = dq.row(b, hd, i);
      for (int64_t d = 0; d < D; ++d) dqi[d] = 0.f;
      for (int64_t j = 0; j < n; ++j) {
        axpy(scale * p[j], h.k.row(b, hd, j), dqi, D);
        axpy(scale * p[j], qi, dk.row(b, hd, j), D);
      }
    }
  }

  static void require_same_device(const DLTensor* q, std::initializer_list<const DLTensor*> ts) {
    for (const DLTensor* t : ts)
      if (t->device.device_type != q->device.device_type ||
          t->device.device_id != q->device.device_id)
        throw invalid("tensors of one call are on different devices (q on device type " +
                      std::to_string(q->device.device_type) + ", another on " +
                      std::to_string(t->device.device_type) + ")");
  }

#ifdef TRIAD_NAIVE_CUDA
  // The 16-bit type of a tensor, if it has one.
  enum class Half{none, bf16, f16};
  static Half half_of(const DLTensor* t) {
    if (!t || t->dtype.bits != 16 || t->dtype.lanes != 1) return Half::none;
    return t->dtype.code == kDLBfloat  ? Half::bf16
           : t->dtype.code == kDLFloat ? Half::f16
                                       : Half::none;
  }
  template <class H>
  static constexpr Half half_kind() {
    return std::is_same_v<H, triad::kernels::cuda::bf16> ? Half::bf16 : Half::f16;
  }
  template <class H>
  static const char* half_name() {
    return half_kind<H>() == Half::bf16 ? "bfloat16" : "float16";
  }
  // A 16-bit (B,H,T,D) view of H in GPU memory, D contiguous. Without q it is q itself (its
  // head dim is checked); with q it must have q's shape and type.
  template <class H>
  static View4<H> gpu_half(const DLTensor* t, const char* what, const View4<H>* q) {
    if (t && t->device.device_type != kDLCUDA)
      throw unsupported(std::string(what) + " is " + half_name<H>() +
                        " outside GPU memory; naive computes bfloat16 and float16 on CUDA GPUs "
                        "only (float32 on the CPU)");
    if (t && half_of(t) != half_kind<H>())
      throw invalid(std::string(what) + " is not " + half_name<H>() + " like q");
    const View4<H> v = triad::sdk::strided_view4<H>(t, what);
    if (q) {
      triad::sdk::require_same_shape(*q, v, "q", what);
    } else if (v.n[3] < 1 || v.n[3] > kMaxHeadDim) {
      throw unsupported("head dim " + std::to_string(v.n[3]) + " is outside naive's 1.." +
                        std::to_string(kMaxHeadDim));
    }
    return v;
  }
  template <class H>
  static triad::kernels::cuda::HeadViewOf<H> head16(const View4<H>& v) {
    return {v.data, v.s[0], v.s[1], v.s[2]};
  }
  template <class H>
  void forward_half(const triad_attention_fwd_args_v1& a) {
    const View4<H> q = gpu_half<H>(a.q, "q", nullptr);
    auto like_q = [&](const DLTensor* t, const char* what) {
      return head16(gpu_half<H>(t, what, &q));
    };
    const auto k = like_q(a.k, "k"), v = like_q(a.v, "v"), out = like_q(a.out, "out");
    require_same_device(a.q, {a.lse});
    float* lse = triad::sdk::lse_view(a.lse, q.n[0], q.n[1], q.n[2]);
    triad::kernels::cuda::attention_naive_forward(
        blas(), out, lse, head16(q), k, v, int(q.n[0]), int(q.n[1]), int(q.n[2]), int(q.n[3]),
        a.causal != 0, a.scale, a.workspace, a.workspace_bytes);
  }
  template <class H>
  void backward_half(const triad_attention_bwd_args_v1& a) {
    const View4<H> q = gpu_half<H>(a.q, "q", nullptr);
    auto like_q = [&](const DLTensor* t, const char* what) {
      return head16(gpu_half<H>(t, what, &q));
    };
    const auto k = like_q(a.k, "k"), v = like_q(a.v, "v"), out = like_q(a.out, "out"),
               dout = like_q(a.dout, "dout"), dq = like_q(a.dq, "dq"), dk = like_q(a.dk, "dk"),
               dv = like_q(a.dv, "dv");
    require_same_device(a.q, {a.lse});
    const float* lse = triad::sdk::lse_view(a.lse, q.n[0], q.n[1], q.n[2]);
    triad::kernels::cuda::attention_naive_backward(
        blas(), dq, dk, dv, head16(q), k, v, out, lse, dout, int(q.n[0]), int(q.n[1]), int(q.n[2]),
        int(q.n[3]), a.causal != 0, a.scale, a.workspace, a.workspace_bytes);
  }
  template <class T>
  static triad::kernels::cuda::HeadView head(const View4<T>& v) {
    return {const_cast<float*>(v.data), v.s[0], v.s[1], v.s[2]};
  }
  // cuBLAS handles on the core's stream, made at the first GPU call.
  triad::kernels::cuda::Blas& blas() {
    if (!blas_)
      blas_ = std::make_unique<triad::kernels::cuda::Blas>(static_cast<cudaStream_t>(stream_),
                                                           /*allow_tf32=*/false);
    return *blas_;
  }
  std::unique_ptr<triad::kernels::cuda::Blas> blas_;
#endif
  int threads_;
  void* stream_;
};

}  // namespace

TRIAD_ATTENTION_PLUGIN(NaiveAttention, "naive", "1.0",
                       "reference attention: materialises the T x T scores; fp32 on the CPU, "
                       "fp32, bf16 and fp16 on CUDA GPUs where built with CUDA; any head dim up to "
                       "256, causal or not",
                       TRIAD_NO_PARAMS)
