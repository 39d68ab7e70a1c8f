// AttentionBackend: creation, capability checks, errors, and the library's lifetime.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "test_helpers.hpp"
#include "triad/core/conformance/conformance.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/plugin_instance.hpp"
#include "triad/core/plugins/services.hpp"

namespace triad {
namespace {

using test::user_error;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kBuggy = std::string(TRIAD_TEST_PLUGIN_DIR) + "/libtriad-attention-buggy.so";

std::unique_ptr<AttentionBackend> make_backend(const std::string& path,
                                               const CoreServices& services,
                                               std::map<std::string, std::string> params = {}) {
  auto p = PluginLoader(std::vector<std::string>{}).load_file(path, "attention");
  return std::make_unique<AttentionBackend>(p, resolve_params(p->descriptor(), params, "attention"),
                                            services.c_services());
}

triad_attention_shape_v1 shape(int64_t D, bool causal, DLDataType dt = {kDLFloat, 32, 1},
                               DLDeviceType dev = kDLCPU) {
  triad_attention_shape_v1 s{};
  s.batch = 2, s.heads = 2, s.seq_len = 16, s.head_dim = D, s.causal = causal;
  s.dtype = dt;
  s.device = {dev, 0};
  return s;
}

// One small contiguous problem run through the backend; returns max |out - reference|.
double forward_error(AttentionBackend& be) {
  conformance::AttentionProblem p;
  p.B = 1, p.H = 2, p.T = 5, p.D = 8, p.causal = true;
  p.scale = static_cast<float>(1.0 / std::sqrt(8.0));
  std::mt19937 rng(3);
  std::normal_distribution<float> n;
  for (auto* x : {&p.q, &p.k, &p.v, &p.dout}) {
    x->resize(p.B * p.H * p.T * p.D);
    for (auto& e : *x) e = n(rng);
  }
  auto ref = conformance::reference_attention(p);
  std::vector<float> out(p.q.size()), lse(p.B * p.H * p.T);
  int64_t s4[4] = {p.B, p.H, p.T, p.D}, s3[3] = {p.B, p.H, p.T};
  auto t4 = [&](std::vector<float>& x) {
    return DLTensor{x.data(), {kDLCPU, 0}, 4, {kDLFloat, 32, 1}, s4, nullptr, 0};
  };
  auto q = p.q, k = p.k, v = p.v;
  DLTensor tq = t4(q), tk = t4(k), tv = t4(v), to = t4(out);
  DLTensor tl{lse.data(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, s3, nullptr, 0};
  triad_attention_shape_v1 sh = shape(p.D, true);
  sh.batch = p.B, sh.heads = p.H, sh.seq_len = p.T;
  size_t fwd = 0, bwd = 0;
  be.workspace_size(sh, &fwd, &bwd);
  std::vector<char> ws(fwd + 1);
  be.forward({&tq, &tk, &tv, &to, &tl, 1, static_cast<float>(p.scale), ws.data(), fwd});
  double err = 0;
  for (size_t i = 0; i < out.size(); ++i) err = std::max(err, std::abs(out[i] - ref.out[i]));
  return err;
}

TEST(AttentionBackend, ReportsCapabilitiesAndChecksShapes) {
  CoreServices services;
  auto be = make_backend(TRIAD_NAIVE_PLUGIN, services);
  EXPECT_EQ(be->name(), "naive");
  EXPECT_EQ(be->capabilities().max_head_dim, 256);
  // naive runs on CUDA GPUs too where the build has CUDA.
  const std::string devices = cuda_device_built() ? "cpu, cuda" : "cpu";
  const std::string dtypes = cuda_device_built() ? "float32, bfloat16, float16" : "float32";
  EXPECT_EQ(describe_capabilities(be->capabilities()),
            "devices " + devices + "; dtypes " + dtypes + "; head dims 1..256; causal, non-causal");
  EXPECT_NO_THROW(be->check_supported(shape(256, true)));
  EXPECT_NO_THROW(be->check_supported(shape(1, false)));
  EXPECT_THAT(user_error([&] { be->check_supported(shape(300, true)); }),
              AllOf(HasSubstr("attention backend 'naive' does not support head dim 300"),
                    HasSubstr("supports 1..256")));
  EXPECT_THAT(
      user_error([&] {
        be->check_supported(shape(64, true, {kDLFloat, 64, 1}));
      }),
      AllOf(HasSubstr("'naive' does not support dtype float64"), HasSubstr("supports " + dtypes)));
  EXPECT_THAT(
      user_error([&] {
        be->check_supported(shape(64, true, {kDLFloat, 32, 1}, kDLROCM));
      }),
      AllOf(HasSubstr("'naive' does not run on device rocm"), HasSubstr("supports " + devices)));
}

TEST(AttentionBackend, ListedHeadDimsAndMaskModes) {
  CoreServices services;
  auto be = make_backend(kBuggy, services, {{"bug", "caps_d64"}});
  EXPECT_NO_THROW(be->check_supported(shape(64, false)));
  EXPECT_THAT(user_error([&] { be->check_supported(shape(80, false)); }),
              AllOf(HasSubstr("'buggy' does not support head dim 80"), HasSubstr("supports 64)")));
}

TEST(AttentionBackend, PluginErrorsCarryTheLastErrorMessage) {
  CoreServices services;
  auto be = make_backend(TRIAD_NAIVE_PLUGIN, services);
  triad_attention_fwd_args_v1 bad{};
  // A call failing during the run is the plugin's to answer for: one line (exit 2) naming the
  // plugin's file and the harness that checks it, not an internal error of Triad's.
  EXPECT_THAT(
      user_error([&] { be->forward(bad); }),
      AllOf(HasSubstr("attention backend 'naive' forward failed (INVALID)"), HasSubstr("q is null"),
            HasSubstr("triad-plugin-test attention " TRIAD_NAIVE_PLUGIN)));
  EXPECT_EQ(be->try_forward(bad), TRIAD_ERR_INVALID);
  EXPECT_THAT(be->last_error(), HasSubstr("q is null"));
}

// The C ABI lets no exception out of a plugin; one that escapes a raw slot anyway becomes a
// failed call naming the slot, instead of ending the process (std::terminate through noexcept).
TEST(AttentionBackend, AnExceptionEscapingASlotIsAFailedCall) {
  CoreServices services;
  PluginLoader loader({TRIAD_TEST_PLUGIN_DIR});
  auto plugin = loader.load("attention", "buggy");
  PluginInstance inst(plugin, "attention", resolve_params(plugin->descriptor(), {}, "attention"),
                      services.c_services());
  const int status = inst.call("forward", []() -> int { throw std::runtime_error("raw throw"); });
  EXPECT_EQ(status, TRIAD_ERR_INTERNAL);
  EXPECT_THAT(inst.last_error(),
              AllOf(HasSubstr("its forward slot threw a C++ exception out of the .so (raw throw)"),
                    HasSubstr("catch it inside the plugin")));
  EXPECT_EQ(inst.call("backward", []() -> int { throw 42; }), TRIAD_ERR_INTERNAL);
  EXPECT_THAT(inst.last_error(), HasSubstr("not a std::exception"));
  // The next call that returns is the plugin's own again.
  EXPECT_EQ(inst.call("forward", [] { return TRIAD_OK; }), TRIAD_OK);
  EXPECT_THAT(inst.last_error(), Not(HasSubstr("threw")));
}

TEST(AttentionBackend, RefusedCreateIsAUserError) {
  CoreServices services;
  EXPECT_THAT(user_error([&] {
                make_backend(kBuggy, services, {{"bug", "bogus"}});
              }),
              AllOf(HasSubstr("attention plugin 'buggy'"), HasSubstr("failed to start (INVALID)"),
                    HasSubstr("unknown bug 'bogus'")));
}

// The core passes a plugin only the parameters it declares: a plugin reading another hears which
// plugin, which parameter and the fix, not "not passed".
TEST(AttentionBackend, PluginReadingAnUndeclaredParameterIsToldTheFix) {
  CoreServices services;
  const std::string chatty = std::string(TRIAD_TEST_PLUGIN_DIR) + "/libtriad-attention-chatty.so";
  EXPECT_NE(make_backend(chatty, services), nullptr);
  EXPECT_THAT(user_error([&] {
                make_backend(chatty, services, {{"read_undeclared", "true"}});
              }),
              AllOf(HasSubstr("attention plugin 'chatty' (" + chatty +
                              ") failed to start (INVALID): plugin 'chatty' reads parameter "
                              "'volume', which its parameter table does not declare"),
                    HasSubstr("declare 'volume' in the plugin's parameter table (TRIAD_PARAMS)")));
}

TEST(AttentionBackend, LibraryStaysLoadedWhileABackendExists) {
  CoreServices services;
  std::unique_ptr<AttentionBackend> be;
  std::string path;
  {
    PluginLoader loader({TRIAD_TEST_PLUGIN_DIR});
    auto plugin = loader.load("attention", "buggy");
    path = plugin->path();
    be = std::make_unique<AttentionBackend>(
        plugin, resolve_params(plugin->descriptor(), {}, "attention"), services.c_services());
    EXPECT_TRUE(test::is_loaded(path));
  }  // the loader and every LoadedPlugin handle are gone; the backend holds the library
  EXPECT_TRUE(test::is_loaded(path));
  EXPECT_LT(forward_error(*be), 1e-5);
  be.reset();
  // The test plugin is built with -fno-gnu-unique, so the last release really unmaps it.
  EXPECT_FALSE(test::is_loaded(path));
}

TEST(AttentionBackend, NaiveSurvivesItsLoader) {
  CoreServices services;
  std::unique_ptr<AttentionBackend> be;
  {
    PluginLoader loader;
    auto p = loader.load("attention", "naive");
    be = std::make_unique<AttentionBackend>(p, resolve_params(p->descriptor(), {}, "attention"),
                                            services.c_services());
  }
  EXPECT_TRUE(test::is_loaded(TRIAD_NAIVE_PLUGIN));
  EXPECT_LT(forward_error(*be), 1e-5);
}

}  // namespace
}  // namespace triad
