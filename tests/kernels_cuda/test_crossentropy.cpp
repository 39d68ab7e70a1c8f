// Fused softmax + cross-entropy against kernels::cpu in double: odd and float4-friendly
// vocabularies, unaligned rows, poisoned outputs, and the in-place (aliased) backward.
#include <tuple>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

// N, V, offset of the logits.
const std::vector<std::tuple<int, int, size_t>> kShapes = {
    {37, 1003, 1}, {37, 1003, 0}, {37, 1004, 0}, {37, 1004, 1},
    {3, 50304, 2}, {2, 50304, 0}, {5, 1, 0},     {9, 7, 3}};

class CrossEntropy : public CudaTest {};

TEST_F(CrossEntropy, ForwardMatchesCpu) {
  for (auto [N, V, off] : kShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V));
    const FVec z = randn(size_t(N) * V, 1, 3.0);
    const auto t = rand_tokens(N, 0, V, 2);
    DFloat dz(z, off), dloss(N, 1), dlse(N, 2);
    DeviceArray<int32_t> dt(t, 0);
    dloss.poison();
    dlse.poison();
    crossentropy_forward(dloss.get(), dlse.get(), dz.get(), dt.get(), N, V, stream);
    sync();
    Vec loss(N), lse(N);
    cpu::crossentropy_forward(loss.data(), lse.data(), to_double(z).data(), t.data(), N, V);
    EXPECT_TRUE(close_rel(dloss.download(), loss, kTol));
    EXPECT_TRUE(close_rel(dlse.download(), lse, kTol));
    EXPECT_TRUE(dloss.guards_intact());
    EXPECT_TRUE(dlse.guards_intact());
  }
}

TEST_F(CrossEntropy, ForwardHandlesLargeLogits) {
  const int N = 4, V = 1003;
  FVec z = randn(size_t(N) * V, 3, 1.0);
  for (int n = 0; n < N; ++n) z[size_t(n) * V + 17 * n] = 80.0f + 5.0f * n;  // exp overflows
  const std::vector<int32_t> t = {0, 17, 500, 1002};
  DFloat dz(z, 0), dloss(N, 0), dlse(N, 0);
  DeviceArray<int32_t> dt(t, 0);
  crossentropy_forward(dloss.get(), dlse.get(), dz.get(), dt.get(), N, V, stream);
  sync();
  Vec loss(N), lse(N);
  cpu::crossentropy_forward(loss.data(), lse.data(), to_double(z).data(), t.data(), N, V);
  EXPECT_TRUE(close_rel(dloss.download(), loss, kTol));
  EXPECT_TRUE(close_rel(dlse.download(), lse, kTol));
}

TEST_F(CrossEntropy, BackwardMatchesCpuSeparateAndInPlace) {
  for (auto [N, V, off] : kShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V));
    const size_t NV = size_t(N) * V;
    const FVec z = randn(NV, 4, 3.0);
    const auto t = rand_tokens(N, 0, V, 5);
    const float dloss = 1.0f / float(N);
    // lse from the double forward, rounded: both sides get the same float inputs.
    Vec loss_d(N), lse_d(N);
    cpu::crossentropy_forward(loss_d.data(), lse_d.data(), to_double(z).data(), t.data(), N, V);
    const FVec lse(lse_d.begin(), lse_d.end());
    Vec want(NV);
    cpu::crossentropy_backward(want.data(), to_double(z).data(), to_double(lse).data(), t.data(),
                               double(dloss), N, V);
    DeviceArray<int32_t> dt(t, 0);
    DFloat dlse(lse, 1);
    {
      DFloat dz(z, off), dgrad(NV, off == 0 ? 1 : 0);  // different alignment from the logits
      dgrad.poison();
      crossentropy_backward(dgrad.get(), dz.get(), dlse.get(), dt.get(), dloss, N, V, stream);
      sync();
      EXPECT_TRUE(close_rel(dgrad.download(), want, kTol));
      EXPECT_TRUE(dgrad.guards_intact());
      EXPECT_TRUE(bit_equal(dz.download(), z));  // the logits are only read
    }
    {
      DFloat dz(z, off);
      crossentropy_backward(dz.get(), dz.get(), dlse.get(), dt.get(), dloss, N, V, stream);
      sync();
      EXPECT_TRUE(close_rel(dz.download(), want, kTol));
      EXPECT_TRUE(dz.guards_intact());
    }
    {
      DFloat dz(z, off), dgrad(NV, off);  // same alignment as the logits: the float4 path
      dgrad.poison();
      crossentropy_backward(dgrad.get(), dz.get(), dlse.get(), dt.get(), dloss, N, V, stream);
      sync();
      EXPECT_TRUE(close_rel(dgrad.download(), want, kTol));
      EXPECT_TRUE(dgrad.guards_intact());
    }
  }
}

}  // namespace
}  // namespace triad::kernels::cuda::test
