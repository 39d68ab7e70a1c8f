// An attention plugin written against the Triad SDK only. Forward is an online softmax: it
// walks the keys in blocks of `block_k`, keeping a running max, sum and output row, so it
// needs no (T x T) scratch. Backward recomputes each probability from the saved lse.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "triad/sdk/attention.hpp"

namespace {

using triad::sdk::View4;

constexpr int kMaxHeadDim = 256;

const triad_param_spec_v1 kParams[] = {
    {"block_k", TRIAD_PARAM_INT, "64", "keys per block of the online softmax (>= 1)"},
};

void require_host(const DLTensor* t, const char* what) {
  if (!t) throw triad::sdk::invalid(std::string(what) + " is null");
  if (t->device.device_type != kDLCPU)
    throw triad::sdk::unsupported(std::string(what) + " must be in host memory");
}

struct Inputs {
  View4<const float> q, k, v;
  int64_t B, H, T, D;
};

Inputs inputs(const DLTensor* q, const DLTensor* k, const DLTensor* v) {
  require_host(q, "q"), require_host(k, "k"), require_host(v, "v");
  Inputs in{triad::sdk::view4<const float>(q, "q"),
            triad::sdk::view4<const float>(k, "k"),
            triad::sdk::view4<const float>(v, "v"),
            0,
            0,
            0,
            0};
  triad::sdk::require_same_shape(in.q, in.k, "q", "k");
  triad::sdk::require_same_shape(in.q, in.v, "q", "v");
  in.B = in.q.n[0], in.H = in.q.n[1], in.T = in.q.n[2], in.D = in.q.n[3];
  if (in.D < 1 || in.D > kMaxHeadDim)
    throw triad::sdk::unsupported("head dim " + std::to_string(in.D) + " is not in 1..256");
  return in;
}

View4<float> output(const DLTensor* t, const char* what, const Inputs& in) {
  require_host(t, what);
  auto o = triad::sdk::view4<float>(t, what);
  triad::sdk::require_same_shape(in.q, o, "q", what);
  return o;
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

class ExampleAttention : public triad::sdk::AttentionPlugin {
 public:
  ExampleAttention(triad::sdk::Services services, triad::sdk::Params params)
      : block_k_(params.get_int("block_k")) {
    if (block_k_ < 1)
      throw triad::sdk::invalid("block_k must be at least 1, got " + std::to_string(block_k_));
    services.debug("block_k = " + std::to_string(block_k_));
  }

  triad_attention_caps_v1 capabilities() const override {
    triad_attention_caps_v1 c{};
    c.devices = 1u << kDLCPU;
    c.dtypes = TRIAD_DTYPE_BIT_FP32;
    c.max_head_dim = kMaxHeadDim;
    c.causal = c.non_causal = 1;
    return c;
  }

  void workspace_size(const triad_attention_shape_v1&, size_t* fwd, size_t* bwd) const override {
    *fwd = *bwd = 0;
  }

  void forward(const triad_attention_fwd_args_v1& a) override {
    Inputs in = inputs(a.q, a.k, a.v);
    View4<float> out = output(a.out, "out", in);
    require_host(a.lse, "lse");
    float* lse = triad::sdk::lse_view(a.lse, in.B, in.H, in.T);
    std::vector<float> s(block_k_);
    for (int64_t b = 0; b < in.B; ++b)
      for (int64_t h = 0; h < in.H; ++h)
        for (int64_t i = 0; i < in.T; ++i) {
          const int64_t n = a.causal ? i + 1 : in.T;
          const float* qi = in.q.row(b, h, i);
          float* oi = out.row(b, h, i);
          std::fill(oi, oi + in.D, 0.f);
          float m = -std::numeric_limits<float>::infinity(), l = 0.f;
          for (int64_t j0 = 0; j0 < n; j0 += block_k_) {
            const int64_t j1 = std::min(n, j0 + block_k_);
            float bm = m;
            for (int64_t j = j0; j < j1; ++j)
              bm = std::max(bm, s[j - j0] = a.scale * dot(qi, in.k.row(b, h, j), in.D));
            const float rescale = std::exp(m - bm);  // old terms relative to the new max
            l *= rescale;
            for (int64_t d = 0; d < in.D; ++d) oi[d] *= rescale;
            for (int64_t j = j0; j < j1; ++j) {
              const float p = std::exp(s[j - j0] - bm);
              const float* vj = in.v.row(b, h, j);
              l += p;
              for (int64_t d = 0; d < in.D; ++d) oi[d] += p * vj[d];
            }
            m = bm;
          }
          for (int64_t d = 0; d < in.D; ++d) oi[d] /= l;
          lse[(b * in.H + h) * in.T + i] = m + std::log(l);
        }
  }

  void backward(const triad_attention_bwd_args_v1& a) override {
    Inputs in = inputs(a.q, a.k, a.v);
    View4<float> out = output(a.out, "out", in), dout = output(a.dout, "dout", in);
    View4<float> dq = output(a.dq, "dq", in), dk = output(a.dk, "dk", in),
                 dv = output(a.dv, "dv", in);
    require_host(a.lse, "lse");
    const float* lse = triad::sdk::lse_view(a.lse, in.B, in.H, in.T);
    const int64_t D = in.D;
    for (int64_t b = 0; b < in.B; ++b)
      for (int64_t h = 0; h < in.H; ++h) {
        for (int64_t t = 0; t < in.T; ++t) {
          std::fill(dk.row(b, h, t), dk.row(b, h, t) + D, 0.f);
          std::fill(dv.row(b, h, t), dv.row(b, h, t) + D, 0.f);
        }
        for (int64_t i = 0; i < in.T; ++i) {
          const int64_t n = a.causal ? i + 1 : in.T;
          const float* qi = in.q.row(b, h, i);
          const float* doi = dout.row(b, h, i);
          const float di = dot(doi, out.row(b, h, i), D);
          const float li = lse[(b * in.H + h) * in.T + i];
          float* dqi = dq.row(b, h, i);
          std::fill(dqi, dqi + D, 0.f);
          for (int64_t j = 0; j < n; ++j) {
            const float* kj = in.k.row(b, h, j);
            const float* vj = in.v.row(b, h, j);
            const float p = std::exp(a.scale * dot(qi, kj, D) - li);
            const float ds = p * (dot(doi, vj, D) - di);
            float* dkj = dk.row(b, h, j);
            float* dvj = dv.row(b, h, j);
            for (int64_t d = 0; d < D; ++d) {
              dvj[d] += p * doi[d];
              dqi[d] += a.scale * ds * kj[d];
              dkj[d] += a.scale * ds * qi[d];
            }
          }
        }
      }
  }

 private:
  int64_t block_k_;
};

}  // namespace

// The exported descriptor, stamped with this SDK's plugin ABI and attention ABI versions.
TRIAD_ATTENTION_PLUGIN(ExampleAttention, "example", "0.1",
                       "example out-of-tree plugin: online softmax, no workspace, fp32 CPU",
                       TRIAD_PARAMS(kParams))
