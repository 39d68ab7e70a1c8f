// flash1 and flash2 against a double-precision reference (forward out and lse, dq/dk/dv),
// across tile sizes that do and do not divide T, strided views, causal and not; plus the
// promises the ABI and the brief make: backward overwrites, results are bit-identical for any
// thread count, the workspace is all the memory used and is checked, bad inputs are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attention_reference.hpp"
#include "plugin_handle.hpp"

namespace flash_test {
namespace {

std::string plugin_path(const std::string& name) {
  return name == "flash1" ? TRIAD_FLASH1_SO : TRIAD_FLASH2_SO;
}

struct Case {
  int B, H, T, D;
  bool causal;
  std::map<std::string, std::string> params;
  float magnitude = 1.f;  // inputs uniform in [-magnitude, magnitude]
};

// Everything one forward + backward call reads and writes.
struct Problem {
  Strided q, k, v, out, dout, dq, dk, dv;
  Lse lse;
  Problem(const Case& c, unsigned seed)
      : q(c.B, c.H, c.T, c.D),
        k(c.B, c.H, c.T, c.D),
        v(c.B, c.H, c.T, c.D),
        out(c.B, c.H, c.T, c.D, 1),
        dout(c.B, c.H, c.T, c.D, 5),
        dq(c.B, c.H, c.T, c.D, 2),
        dk(c.B, c.H, c.T, c.D, 0),
        dv(c.B, c.H, c.T, c.D, 7),
        lse(c.B, c.H, c.T) {
    std::mt19937 rng(seed);
    q.fill_uniform(rng, -c.magnitude, c.magnitude);
    k.fill_uniform(rng, -c.magnitude, c.magnitude);
    v.fill_uniform(rng, -1.f, 1.f);
    dout.fill_uniform(rng, -1.f, 1.f);
    // backward overwrites: garbage in the gradients must not survive.
    dq.fill(1e30f), dk.fill(-7.f), dv.fill(std::numeric_limits<float>::quiet_NaN());
  }
};

triad_attention_shape_v1 shape_of(const Case& c) {
  triad_attention_shape_v1 s{};
  s.batch = c.B, s.heads = c.H, s.seq_len = c.T, s.head_dim = c.D;
  s.causal = c.causal;
  s.dtype = {kDLFloat, 32, 1};
  s.device = {kDLCPU, 0};
  return s;
}

// Runs forward then backward; workspaces sized exactly as asked, at an odd address, followed
// by guard bytes that must come back untouched.
void run(PluginHandle& p, const Case& c, Problem& x) {
  size_t fb = 0, bb = 0;
  auto shape = shape_of(c);
  ASSERT_EQ(p.ops().workspace_size(p.handle(), &shape, &fb, &bb), TRIAD_OK) << p.last_error();
  constexpr size_t kGuard = 256;
  std::vector<char> fws(fb + 4 + kGuard, '\x5a'), bws(bb + 4 + kGuard, '\x5a');
  auto guard_intact = [](const std::vector<char>& ws, size_t used) {
    for (size_t i = 4 + used; i < ws.size(); ++i)
      if (ws[i] != '\x5a') return false;
    return true;
  };
  const float scale = 1.f / std::sqrt(static_cast<float>(c.D));
  triad_attention_fwd_args_v1 f{&x.q.t,   &x.k.t, &x.v.t,         &x.out.t, &x.lse.t,
                                c.causal, scale,  fws.data() + 4, fb};
  ASSERT_EQ(p.ops().forward(p.handle(), &f), TRIAD_OK) << p.last_error();
  ASSERT_TRUE(guard_intact(fws, fb)) << "forward wrote past its workspace";
  triad_attention_bwd_args_v1 b{&x.q.t,    &x.k.t,         &x.v.t,  &x.out.t, &x.lse.t,
                                &x.dout.t, &x.dq.t,        &x.dk.t, &x.dv.t,  c.causal,
                                scale,     bws.data() + 4, bb};
  ASSERT_EQ(p.ops().backward(p.handle(), &b), TRIAD_OK) << p.last_error();
  ASSERT_TRUE(guard_intact(bws, bb)) << "backward wrote past its workspace";
}

class FlashVsReference : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

std::vector<Case> reference_cases() {
  const std::map<std::string, std::string> small = {
      {"block_q", "16"}, {"block_k", "16"}, {"bwd_block_q", "16"}, {"bwd_block_k", "16"}};
  const std::map<std::string, std::string> odd = {
      {"block_q", "48"}, {"block_k", "32"}, {"bwd_block_q", "13"}, {"bwd_block_k", "48"}};
  std::vector<Case> cs;
  for (bool causal : {false, true}) {
    cs.push_back({1, 1, 1, 32, causal, {}});
    cs.push_back({2, 3, 7, 64, causal, {}});
    cs.push_back({1, 2, 65, 80, causal, {}});
    cs.push_back({2, 1, 129, 128, causal, {}});
    cs.push_back({1, 2, 100, 17, causal, small});      // D with a column tail, many tiles
    cs.push_back({2, 2, 97, 40, causal, odd});         // tiles that divide nothing
    cs.push_back({1, 1, 70, 256, causal, odd});        // the largest head dim
    cs.push_back({1, 2, 90, 64, causal, small, 4.f});  // peaked softmax (scores up to ~64)
  }
  return cs;
}

TEST_P(FlashVsReference, ForwardAndBackwardMatchDouble) {
  const auto& [name, index] = GetParam();
  const Case c = reference_cases()[index];
  PluginHandle p(plugin_path(name), 2, c.params);
  ASSERT_EQ(p.create_status(), TRIAD_OK) << p.create_error();
  Problem x(c, 1234 + index);
  run(p, c, x);
  const double scale = 1.0 / std::sqrt(static_cast<float>(c.D));
  ErrorMeter out, lse, dq, dk, dv;
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h) {
      const HeadRef r = reference_head(x.q, x.k, x.v, x.dout, b, h, c.causal, scale);
      for (int i = 0; i < c.T; ++i) {
        lse.add(x.lse.buf[(b * c.H + h) * c.T + i], r.lse[i]);
        for (int d = 0; d < c.D; ++d) {
          out.add(x.out.at(b, h, i, d), r.out[i * c.D + d]);
          dq.add(x.dq.at(b, h, i, d), r.dq[i * c.D + d]);
          dk.add(x.dk.at(b, h, i, d), r.dk[i * c.D + d]);
          dv.add(x.dv.at(b, h, i, d), r.dv[i * c.D + d]);
        }
      }
    }
  // fp32 with fp32 accumulation over <= 256 terms: measured <= 4e-6 relative to each tensor's
  // scale (the peaked-softmax cases); a masking or rescaling slip gives 1e-2 and up.
  const double tol = 1e-5;
  EXPECT_LT(out.relative(), tol) << "out";
  EXPECT_LT(lse.relative(), tol) << "lse";
  EXPECT_LT(dq.relative(), tol) << "dq";
  EXPECT_LT(dk.relative(), tol) << "dk";
  EXPECT_LT(dv.relative(), tol) << "dv";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FlashVsReference,
    ::testing::Combine(::testing::Values("flash1", "flash2"),
                       ::testing::Range(0, static_cast<int>(reference_cases().size()))),
    [](const auto& info) {
      const Case c = reference_cases()[std::get<1>(info.param)];
      return std::get<0>(info.param) + "_T" + std::to_string(c.T) + "_D" + std::to_string(c.D) +
             (c.causal ? "_causal" : "_full") + "_" + std::to_string(std::get<1>(info.param));
    });

class FlashPlugin : public ::testing::TestWithParam<std::string> {};

bool same_bits(const Strided& a, const Strided& b) {
  return a.buf.size() == b.buf.size() &&
         std::memcmp(a.buf.data(), b.buf.data(), a.buf.size() * sizeof(float)) == 0;
}

TEST_P(FlashPlugin, BitIdenticalForAnyThreadCountAndRun) {
  for (bool causal : {false, true}) {
    // Small backward tiles: many K tiles per head, so flash2's tasks really do overlap.
    const Case c{2, 1, 300, 64, causal, {{"bwd_block_q", "32"}, {"bwd_block_k", "32"}}};
    PluginHandle one(plugin_path(GetParam()), 1, c.params);
    PluginHandle two(plugin_path(GetParam()), 2, c.params);
    PluginHandle five(plugin_path(GetParam()), 5, c.params);  // more threads than cores
    ASSERT_EQ(one.create_status(), TRIAD_OK) << one.create_error();
    ASSERT_EQ(two.create_status(), TRIAD_OK) << two.create_error();
    ASSERT_EQ(five.create_status(), TRIAD_OK) << five.create_error();
    Problem a(c, 7), b(c, 7), again(c, 7), many(c, 7);
    run(one, c, a);
    run(two, c, b);
    run(two, c, again);
    run(five, c, many);
    for (const Problem* y : {&b, &again, &many}) {
      EXPECT_TRUE(same_bits(a.out, y->out));
      EXPECT_EQ(a.lse.buf, y->lse.buf);
      EXPECT_TRUE(same_bits(a.dq, y->dq));
      EXPECT_TRUE(same_bits(a.dk, y->dk));
      EXPECT_TRUE(same_bits(a.dv, y->dv));
    }
  }
}

// A query that sees one key has a one-hot softmax, so its dq is exactly 0; so are dq and dk
// when T = 1. The plugins get exact zeros, not rounding residue, because delta and dP round
// alike (row_deltas).
TEST_P(FlashPlugin, OneHotRowsHaveExactlyZeroGradient) {
  PluginHandle p(plugin_path(GetParam()), 2);
  ASSERT_EQ(p.create_status(), TRIAD_OK) << p.create_error();
  const Case causal{2, 3, 150, 80, true, {}, 2.f};
  Problem x(causal, 11);
  run(p, causal, x);
  for (int b = 0; b < causal.B; ++b)
    for (int h = 0; h < causal.H; ++h)
      for (int d = 0; d < causal.D; ++d) ASSERT_EQ(x.dq.at(b, h, 0, d), 0.f) << b << h << d;
  const Case single{2, 2, 1, 64, false, {}, 2.f};
  Problem y(single, 12);
  run(p, single, y);
  for (int b = 0; b < single.B; ++b)
    for (int h = 0; h < single.H; ++h)
      for (int d = 0; d < single.D; ++d) {
        ASSERT_EQ(y.dq.at(b, h, 0, d), 0.f);
        ASSERT_EQ(y.dk.at(b, h, 0, d), 0.f);
      }
}

TEST_P(FlashPlugin, WorkspaceIsLinearInSequenceLength) {
  PluginHandle p(plugin_path(GetParam()), 2);
  ASSERT_EQ(p.create_status(), TRIAD_OK) << p.create_error();
  size_t f1, b1, f2, b2;
  auto s = shape_of({1, 8, 4096, 128, true, {}});
  ASSERT_EQ(p.ops().workspace_size(p.handle(), &s, &f1, &b1), TRIAD_OK);
  s.seq_len = 8192;
  ASSERT_EQ(p.ops().workspace_size(p.handle(), &s, &f2, &b2), TRIAD_OK);
  // Doubling T at most doubles the workspace (quadratic growth would quadruple it), and at
  // T=4096 it is far below the T x T scores of one head.
  EXPECT_LE(f2, 2 * f1);
  EXPECT_LE(b2, 2 * b1);
  EXPECT_LT(std::max(f1, b1), size_t{4096} * 4096 * sizeof(float) / 8);
}

TEST_P(FlashPlugin, SmallWorkspaceIsRefused) {
  PluginHandle p(plugin_path(GetParam()), 2);
  ASSERT_EQ(p.create_status(), TRIAD_OK) << p.create_error();
  const Case c{1, 2, 50, 32, false, {}};
  Problem x(c, 3);
  size_t fb = 0, bb = 0;
  auto shape = shape_of(c);
  ASSERT_EQ(p.ops().workspace_size(p.handle(), &shape, &fb, &bb), TRIAD_OK);
  std::vector<char> ws(fb);
  triad_attention_fwd_args_v1 f{&x.q.t, &x.k.t, &x.v.t,    &x.out.t, &x.lse.t,
                                0,      0.1f,   ws.data(), fb - 1};
  EXPECT_EQ(p.ops().forward(p.handle(), &f), TRIAD_ERR_INVALID);
  EXPECT_NE(p.last_error().find("workspace"), std::string::npos) << p.last_error();
}

TEST_P(FlashPlugin, RefusesWhatItDoesNotSupport) {
  PluginHandle p(plugin_path(GetParam()), 2);
  ASSERT_EQ(p.create_status(), TRIAD_OK) << p.create_error();
  triad_attention_caps_v1 caps{};
  ASSERT_EQ(p.ops().capabilities(p.handle(), &caps), TRIAD_OK);
#ifdef TRIAD_HAVE_CUDA
  // GPU memory runs the tensor-core kernels (16-bit dtypes); the CPU stays float32.
  EXPECT_EQ(caps.devices, (1u << kDLCPU) | (1u << kDLCUDA));
  EXPECT_EQ(caps.dtypes, TRIAD_DTYPE_BIT_FP32 | TRIAD_DTYPE_BIT_BF16 | TRIAD_DTYPE_BIT_FP16);
#else
  EXPECT_EQ(caps.devices, 1u << kDLCPU);
  EXPECT_EQ(caps.dtypes, TRIAD_DTYPE_BIT_FP32);
#endif
  EXPECT_EQ(caps.max_head_dim, 256);
  EXPECT_TRUE(caps.causal && caps.non_causal);

  const Case wide{1, 1, 4, 257, false, {}};
  Problem x(wide, 1);
  std::vector<char> ws(1 << 20);
  triad_attention_fwd_args_v1 f{&x.q.t, &x.k.t, &x.v.t,    &x.out.t, &x.lse.t,
                                0,      0.1f,   ws.data(), ws.size()};
  EXPECT_EQ(p.ops().forward(p.handle(), &f), TRIAD_ERR_UNSUPPORTED);
  EXPECT_NE(p.last_error().find("257"), std::string::npos) << p.last_error();

  const Case ok{1, 1, 4, 8, false, {}};
  Problem y(ok, 1);
  y.q.t.device = {kDLCUDA, 0};
  f = {&y.q.t, &y.k.t, &y.v.t, &y.out.t, &y.lse.t, 0, 0.1f, ws.data(), ws.size()};
  // float32 in GPU memory: no build runs it.
  EXPECT_EQ(p.ops().forward(p.handle(), &f), TRIAD_ERR_UNSUPPORTED);
#ifdef TRIAD_HAVE_CUDA
  // ... and workspace_size says so before any run (capabilities are per plugin, not device).
  triad_attention_shape_v1 gpu_fp32{1, 1, 8, 64, 0, {kDLFloat, 32, 1}, {kDLCUDA, 0}};
  size_t wf = 0, wb = 0;
  EXPECT_EQ(p.ops().workspace_size(p.handle(), &gpu_fp32, &wf, &wb), TRIAD_ERR_UNSUPPORTED);
#endif
}

TEST_P(FlashPlugin, BadBlockSizeIsACreateErrorNamingIt) {
  PluginHandle p(plugin_path(GetParam()), 2, {{"block_k", "40"}});
  EXPECT_EQ(p.create_status(), TRIAD_ERR_INVALID);
  EXPECT_NE(p.create_error().find("block_k = 40"), std::string::npos) << p.create_error();
}

INSTANTIATE_TEST_SUITE_P(Plugins, FlashPlugin, ::testing::Values("flash1", "flash2"));

}  // namespace
}  // namespace flash_test
