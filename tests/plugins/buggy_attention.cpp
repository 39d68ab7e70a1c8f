// A test-only attention plugin, correct with `bug: none`, and with one planted defect per
// other value of `bug`, to prove the conformance suite catches each. Built with
// -fno-gnu-unique so that dlclose really unmaps it (the lifetime test checks that).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "triad/sdk/attention.hpp"

namespace {

using triad::sdk::View4;

const triad_param_spec_v1 kParams[] = {
    {"bug", TRIAD_PARAM_STRING, "none",
     "none | accumulate | no_scale | ignore_causal | no_lse | ws_overrun | no_checks | caps_d64 | "
     "abort | hang"},
};

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

class BuggyAttention : public triad::sdk::AttentionPlugin {
 public:
  BuggyAttention(triad::sdk::Services, triad::sdk::Params p) : bug_(p.get_string("bug")) {
    static const char* known[] = {"none",       "accumulate", "no_scale", "ignore_causal", "no_lse",
                                  "ws_overrun", "no_checks",  "caps_d64", "abort",         "hang"};
    for (const char* k : known)
      if (bug_ == k) return;
    throw triad::sdk::invalid("unknown bug '" + bug_ + "'");
  }

  triad_attention_caps_v1 capabilities() const override {
    triad_attention_caps_v1 c{};
    c.devices = 1u << kDLCPU;
    c.dtypes = TRIAD_DTYPE_BIT_FP32;
    c.max_head_dim = 256;
    if (bug_ == "caps_d64") c.num_head_dims = 1, c.head_dims[0] = 64, c.max_head_dim = 64;
    c.causal = c.non_causal = 1;
    return c;
  }

  void workspace_size(const triad_attention_shape_v1& s, size_t* f, size_t* b) const override {
    // ws_overrun asks for one row of scores per (b, h) and then writes one float too many.
    *f = bug_ == "ws_overrun" ? static_cast<size_t>(s.batch * s.heads * s.seq_len) * 4 : 0;
    *b = 0;
  }

  void forward(const triad_attention_fwd_args_v1& a) override {
    // A plugin that crashes, or never returns, in its forward.
    if (bug_ == "abort") std::abort();
    while (bug_ == "hang") std::this_thread::sleep_for(std::chrono::seconds(1));
    auto q = view(a.q, "q"), k = view(a.k, "k"), v = view(a.v, "v");
    auto o = triad::sdk::view4<float>(a.out, "out");
    if (bug_ != "no_checks") {
      triad::sdk::require_same_shape(q, k, "q", "k");
      triad::sdk::require_same_shape(q, v, "q", "v");
      triad::sdk::require_same_shape(q, o, "q", "out");
      if (bug_ == "ws_overrun" ? a.workspace_bytes < size_t(q.n[0] * q.n[1] * q.n[2]) * 4 : false)
        throw triad::sdk::invalid("workspace too small");
    }
    const int64_t B = q.n[0], H = q.n[1], T = q.n[2], D = q.n[3];
    float* lse = triad::sdk::lse_view(a.lse, B, H, T);
    const float scale = bug_ == "no_scale" ? 1.f : a.scale;
    const bool causal = bug_ == "ignore_causal" ? false : a.causal != 0;
    std::vector<float> s(T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i) {
          const int64_t n = causal ? i + 1 : T;
          float m = -std::numeric_limits<float>::infinity(), l = 0.f;
          for (int64_t j = 0; j < n; ++j)
            m = std::max(m, s[j] = scale * dot(q.row(b, h, i), k.row(b, h, j), D));
          for (int64_t j = 0; j < n; ++j) l += (s[j] = std::exp(s[j] - m));
          float* oi = o.row(b, h, i);
          for (int64_t d = 0; d < D; ++d) oi[d] = 0.f;
          for (int64_t j = 0; j < n; ++j)
            for (int64_t d = 0; d < D; ++d) oi[d] += s[j] / l * v.row(b, h, j)[d];
          if (bug_ != "no_lse") lse[(b * H + h) * T + i] = m + std::log(l);
        }
    if (bug_ == "ws_overrun") static_cast<float*>(a.workspace)[B * H * T] = 1.f;
  }

  void backward(const triad_attention_bwd_args_v1& a) override {
    auto q = view(a.q, "q"), k = view(a.k, "k"), v = view(a.v, "v");
    auto o = view(a.out, "out"), dout = view(a.dout, "dout");
    auto dq = triad::sdk::view4<float>(a.dq, "dq"), dk = triad::sdk::view4<float>(a.dk, "dk"),
         dv = triad::sdk::view4<float>(a.dv, "dv");
    if (bug_ != "no_checks")
      for (auto* g : {&dq, &dk, &dv}) triad::sdk::require_same_shape(q, *g, "q", "a gradient");
    const int64_t B = q.n[0], H = q.n[1], T = q.n[2], D = q.n[3];
    const float* lse = triad::sdk::lse_view(a.lse, B, H, T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        if (bug_ != "accumulate")
          for (int64_t t = 0; t < T; ++t)
            for (int64_t d = 0; d < D; ++d)
              dq.row(b, h, t)[d] = dk.row(b, h, t)[d] = dv.row(b, h, t)[d] = 0.f;
        for (int64_t i = 0; i < T; ++i) {
          const int64_t n = a.causal ? i + 1 : T;
          const float di = dot(dout.row(b, h, i), o.row(b, h, i), D);
          for (int64_t j = 0; j < n; ++j) {
            const float p = std::exp(a.scale * dot(q.row(b, h, i), k.row(b, h, j), D) -
                                     lse[(b * H + h) * T + i]);
            const float ds = p * (dot(dout.row(b, h, i), v.row(b, h, j), D) - di);
            for (int64_t d = 0; d < D; ++d) {
              dv.row(b, h, j)[d] += p * dout.row(b, h, i)[d];
              dq.row(b, h, i)[d] += a.scale * ds * k.row(b, h, j)[d];
              dk.row(b, h, j)[d] += a.scale * ds * q.row(b, h, i)[d];
            }
          }
        }
      }
  }

 private:
  static View4<const float> view(const DLTensor* t, const char* what) {
    return triad::sdk::view4<const float>(t, what);
  }
  std::string bug_;
};

}  // namespace

TRIAD_ATTENTION_PLUGIN(BuggyAttention, "buggy", "0", "test plugin with planted defects",
                       TRIAD_PARAMS(kParams))
