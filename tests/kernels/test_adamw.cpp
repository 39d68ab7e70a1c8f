#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu::test {
namespace {

// Two torch.optim.AdamW steps (PyTorch 1.13, lr 0.01, betas (0.9, 0.95), eps 1e-8,
// weight_decay 0.1) on these params and grads, printed by PyTorch in float64 and float32.
const Vec kP0 = {0.5, -1.25, 2.0, 0.0, 3e-3};
const Vec kG1 = {0.1, -0.2, 0.05, 1.0, -3.0};
const Vec kG2 = {-0.3, 0.4, 0.05, 0.0, 2.5};
const Vec kTorchP2f64 = {0.49390345845786243, -1.2411449898902382, 1.9760120039979991,
                         -0.016776477270977884, 0.013366090476509766};
const Vec kTorchM2f64 = {-0.020999999999999994, 0.021999999999999995, 0.009499999999999998,
                         0.08999999999999998, -0.020000000000000018};
const Vec kTorchV2f64 = {0.004975000000000005, 0.00990000000000001, 0.0002437500000000002,
                         0.04750000000000004, 0.7400000000000007};
const std::vector<float> kTorchP2f32 = {0.4939034581184387f, -1.2411450147628784f,
                                        1.976012110710144f, -0.01677647978067398f,
                                        0.013366090133786201f};

template <class F>
void two_steps(std::vector<F>& p, std::vector<F>& m, std::vector<F>& v) {
  p = cast<F>(kP0);
  m.assign(p.size(), F(0));
  v.assign(p.size(), F(0));
  int t = 0;
  for (const Vec* g : {&kG1, &kG2}) {
    const auto fg = cast<F>(*g);
    adamw_update(p.data(), fg.data(), m.data(), v.data(), p.size(), F(0.01), F(0.9), F(0.95),
                 F(1e-8), F(0.1), ++t);
  }
}

TEST(AdamW, MatchesPyTorchInDouble) {
  std::vector<double> p, m, v;
  two_steps(p, m, v);
  expect_close(p, kTorchP2f64, 1e-14, 1e-16, "param");
  expect_close(m, kTorchM2f64, 1e-14, 1e-16, "exp_avg");
  expect_close(v, kTorchV2f64, 1e-14, 1e-16, "exp_avg_sq");
}

TEST(AdamW, MatchesPyTorchInFloatToRounding) {
  std::vector<float> p, m, v;
  two_steps(p, m, v);
  for (size_t i = 0; i < p.size(); ++i)
    EXPECT_LE(std::abs(p[i] - kTorchP2f32[i]),
              2 * std::abs(std::nextafter(kTorchP2f32[i], 1e9f) - kTorchP2f32[i]))
        << i;
}

// The textbook form: p *= 1 - lr wd; p -= lr mhat / (sqrt(vhat) + eps), on a longer vector
// and several steps (the threaded path), all in double.
TEST(AdamW, MatchesBiasCorrectedFormula) {
  const size_t n = 1000;
  const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  Vec p = randn(n, 1), m(n), v(n);
  Vec rp = p, rm(n), rv(n);
  for (int t = 1; t <= 3; ++t) {
    const Vec g = randn(n, 10 + t);
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t);
    for (size_t i = 0; i < n; ++i) {
      rm[i] = b1 * rm[i] + (1 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1 - b2) * g[i] * g[i];
      const double mhat = rm[i] / (1 - std::pow(b1, t)), vhat = rv[i] / (1 - std::pow(b2, t));
      rp[i] *= 1 - lr * wd;
      rp[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  expect_close(p, rp, 1e-12, 1e-14, "param");
  expect_close(m, rm, 1e-12, 1e-14, "m");
  expect_close(v, rv, 1e-12, 1e-14, "v");
}

}  // namespace
}  // namespace triad::kernels::cpu::test
