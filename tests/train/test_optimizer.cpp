// The optimizer step on a small arena against a hand computation in double: the gradient norm,
// clipping, AdamW with decoupled weight decay on the decayed tensors only, two steps (the
// moments and bias corrections carry over), a ZeRO-1 shard that steps its own range only, and
// the offloaded step equal to the step on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "triad/core/device/device.hpp"
#include "triad/core/model/model_state.hpp"
#include "triad/core/model/param_spec.hpp"
#include "triad/core/train/optimizer.hpp"

using namespace triad;

namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.num_layers = 1;
  m.hidden_size = 8;
  m.num_attention_heads = 2;
  m.seq_length = 4;
  m.vocab_size = 16;
  m.make_vocab_size_divisible_by = 1;
  return m;
}

OptimizerConfig adamw(double clip) {
  OptimizerConfig o;
  o.adam_beta1 = 0.9;
  o.adam_beta2 = 0.95;
  o.adam_eps = 1e-8;
  o.weight_decay = 0.1;
  o.clip_grad = clip;
  return o;
}

// Deterministic values of both signs, different per element and per call.
std::vector<float> pattern(size_t n, double scale, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(scale * std::sin(0.37 * double(i) + salt));
  return v;
}

// AdamW in double over one element (PyTorch's decoupled weight decay and bias corrections).
struct HandAdam {
  double p, m = 0, v = 0;
  void step(double g, double lr, double wd, const OptimizerConfig& o, int t) {
    m = o.adam_beta1 * m + (1 - o.adam_beta1) * g;
    v = o.adam_beta2 * v + (1 - o.adam_beta2) * g * g;
    const double mhat = m / (1 - std::pow(o.adam_beta1, t));
    const double denom = std::sqrt(v) / std::sqrt(1 - std::pow(o.adam_beta2, t)) + o.adam_eps;
    p = p * (1 - lr * wd) - lr * mhat / denom;
  }
};

struct Arena {
  std::unique_ptr<Device> dev = make_device("cpu");
  ParamSpec spec = build_param_spec(tiny_model(), Placement{});
  GptLayout arena = arena_layout(spec);
  ModelState state{spec, *dev, DType::f32, /*optimizer=*/false, /*gradients=*/false};
  // own_n 0: the whole arena; host: the optimizer offloaded to it.
  explicit Arena(size_t own_off = 0, size_t own_n = 0, Device* host = nullptr) {
    // The weights first: an offloaded optimizer takes its master copy of them (as the run's
    // set-up initialises the model before sharding the optimizer).
    const std::vector<float> p = pattern(spec.total, 0.05, 1);
    dev->to_device(state.params(), p.data(), p.size() * sizeof(float));
    if (host) state.offload_optimizer(*host);
    state.shard_optimizer(own_off, own_n ? own_n : spec.total);
  }
  void set_grads(int salt) {
    const std::vector<float> g = pattern(spec.total, 0.3, salt);
    dev->to_device(state.grads(), g.data(), g.size() * sizeof(float));
  }
  std::vector<float> params() const {
    std::vector<float> p(spec.total);
    dev->to_host(p.data(), state.params(), p.size() * sizeof(float));
    return p;
  }
  // Whether arena element i is in a tensor AdamW decays.
  bool decayed(size_t i) const {
    for (const TensorSpec& t : spec.tensors)
      if (i >= t.offset && i < t.offset + t.numel) return t.weight_decay;
    return false;
  }
};

}  // namespace

TEST(Optimizer, NormClipAndAdamWAgainstAHandComputation) {
  Arena a;
  const OptimizerConfig o = adamw(/*clip=*/1.0);
  Optimizer opt(a.state, a.spec, a.arena, o, {}, nullptr);
  const size_t n = a.spec.total;
  std::vector<HandAdam> hand(n);
  const std::vector<float> p0 = a.params();
  for (size_t i = 0; i < n; ++i) hand[i].p = p0[i];
  size_t decayed = 0;
  for (size_t i = 0; i < n; ++i) decayed += a.decayed(i);
  ASSERT_GT(decayed, 0u);
  ASSERT_LT(decayed, n);  // biases and layernorms are not decayed
  const double lrs[] = {1e-3, 5e-4};
  for (int t = 1; t <= 2; ++t) {
    a.set_grads(t);
    const std::vector<float> g = pattern(n, 0.3, t);
    double sq = 0;
    for (float x : g) sq += double(x) * x;
    const double norm = std::sqrt(sq);
    ASSERT_GT(norm, 1.0);  // the step clips
    EXPECT_NEAR(opt.grad_norm(), norm, 1e-6 * norm);
    opt.step(norm, lrs[t - 1], t);
    const double clip = 1.0 / (norm + 1e-6);
    for (size_t i = 0; i < n; ++i)
      hand[i].step(double(g[i]) * clip, lrs[t - 1], a.decayed(i) ? o.weight_decay : 0.0, o, t);
    const std::vector<float> p = a.params();
    double worst = 0;
    for (size_t i = 0; i < n; ++i)
      worst = std::max(worst, std::abs(p[i] - hand[i].p) / (std::abs(hand[i].p) + 1e-3));
    EXPECT_LT(worst, 1e-5) << "step " << t;
    // And it moved: every element by about lr (Adam's step size).
    for (size_t i = 0; i < n; ++i) EXPECT_NE(p[i], p0[i]) << i;
  }
  EXPECT_EQ(opt.offloaded_bytes(), 0u);
}

TEST(Optimizer, NoClippingBelowTheThreshold) {
  Arena a, b;
  a.set_grads(3);
  b.set_grads(3);
  Optimizer clipped(a.state, a.spec, a.arena, adamw(1e9), {}, nullptr);
  Optimizer plain(b.state, b.spec, b.arena, adamw(0), {}, nullptr);
  clipped.step(clipped.grad_norm(), 1e-3, 1);
  plain.step(plain.grad_norm(), 1e-3, 1);
  EXPECT_EQ(a.params(), b.params());
}

TEST(Optimizer, AZeroShardStepsItsOwnRangeOnly) {
  Arena whole, untouched;
  const size_t n = whole.spec.total, off = n / 3, count = n / 3;
  Arena part(off, count);
  whole.set_grads(2);
  part.set_grads(2);
  Optimizer a(whole.state, whole.spec, whole.arena, adamw(0), {}, nullptr);
  Optimizer b(part.state, part.spec, part.arena, adamw(0), {}, nullptr);
  a.step(1.0, 1e-3, 1);
  b.step(1.0, 1e-3, 1);
  const std::vector<float> p0 = untouched.params(), pw = whole.params(), pp = part.params();
  for (size_t i = 0; i < n; ++i) {
    if (i >= off && i < off + count)
      EXPECT_EQ(pp[i], pw[i]) << i;  // stepped as in the whole arena
    else
      EXPECT_EQ(pp[i], p0[i]) << i;  // another rank's
  }
}

TEST(Optimizer, OffloadedStepEqualsTheDeviceStep) {
  std::unique_ptr<Device> host = make_device("cpu");
  Arena dev_side, offloaded(0, 0, host.get());
  Optimizer a(dev_side.state, dev_side.spec, dev_side.arena, adamw(1.0), {}, nullptr);
  Optimizer b(offloaded.state, offloaded.spec, offloaded.arena, adamw(1.0), {}, nullptr);
  for (int t = 1; t <= 3; ++t) {
    dev_side.set_grads(t);
    offloaded.set_grads(t);
    a.step(a.grad_norm(), 1e-3, t);
    b.step(b.grad_norm(), 1e-3, t);
  }
  EXPECT_EQ(dev_side.params(), offloaded.params());
  EXPECT_EQ(b.offloaded_bytes(), 3 * offloaded.spec.total * sizeof(float));
}

// Gradients that hold 2^k times the true ones (fp16's loss scale), with their true norm: the same
// step, bit for bit, as the unscaled gradients (a power of two scales exactly), with clipping.
TEST(Optimizer, ScaledGradientsStepAsTheUnscaled) {
  Arena a, b;
  a.set_grads(5);
  b.set_grads(5);
  const double scale = 65536;
  b.dev->scale_inplace(b.state.grads(), b.spec.total, float(scale));
  Optimizer plain(a.state, a.spec, a.arena, adamw(1.0), {}, nullptr);
  Optimizer scaled(b.state, b.spec, b.arena, adamw(1.0), {}, nullptr);
  const double norm = plain.grad_norm();
  EXPECT_EQ(scaled.grad_norm(scale), norm);
  plain.step(norm, 1e-3, 1);
  scaled.step(scaled.grad_norm(scale), 1e-3, 1, scale);
  EXPECT_EQ(a.params(), b.params());
}

// A skipped step leaves the weights as they were.
TEST(Optimizer, ASkippedStepChangesNothing) {
  Arena a;
  a.set_grads(2);
  const std::vector<float> p0 = a.params();
  Optimizer opt(a.state, a.spec, a.arena, adamw(1.0), {}, nullptr);
  opt.skip();
  EXPECT_EQ(a.params(), p0);
}
