// Rotary embedding on q and k views inside an interleaved (B,T,3C) qkv buffer, against
// kernels::cpu in double; the v third of the buffer must stay untouched.
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

class Rope : public CudaTest {};

TEST_F(Rope, ForwardAndBackwardOnInterleavedQkv) {
  struct Shape {
    int B, T, H, D;
  };
  for (const Shape s : {Shape{2, 37, 3, 24}, Shape{1, 130, 2, 64}, Shape{3, 5, 4, 6}}) {
    SCOPED_TRACE("B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                 " H=" + std::to_string(s.H) + " D=" + std::to_string(s.D));
    const int C = s.H * s.D;
    const int64_t sb = int64_t(s.T) * 3 * C, st = 3 * C, sh = s.D;
    const size_t n = size_t(s.B) * s.T * 3 * C;
    const FVec qkv = randn(n, 1);
    for (bool backward : {false, true}) {
      DFloat d(qkv, 1);
      Vec want = to_double(qkv);
      for (int part = 0; part < 2; ++part) {  // q then k
        if (backward) {
          rope_backward(d.get() + part * C, s.B, s.T, s.H, s.D, sb, st, sh, 10000.0, stream);
          cpu::rope_backward(want.data() + part * C, s.B, s.T, s.H, s.D, sb, st, sh, 10000.0);
        } else {
          rope_forward(d.get() + part * C, s.B, s.T, s.H, s.D, sb, st, sh, 10000.0, stream);
          cpu::rope_forward(want.data() + part * C, s.B, s.T, s.H, s.D, sb, st, sh, 10000.0);
        }
      }
      sync();
      const FVec got = d.download();
      EXPECT_TRUE(close_rel(got, want, kTol)) << (backward ? "backward" : "forward");
      for (size_t bt = 0; bt < size_t(s.B) * s.T; ++bt)
        for (int c = 2 * C; c < 3 * C; ++c)
          ASSERT_EQ(got[bt * 3 * C + c], qkv[bt * 3 * C + c]) << "v was touched";
      EXPECT_TRUE(d.guards_intact());
    }
  }
}

TEST_F(Rope, BackwardUndoesForward) {
  const int B = 2, T = 37, H = 3, D = 24;
  const size_t n = size_t(B) * T * H * D;
  const FVec x = randn(n, 2);
  DFloat d(x, 0);
  const int64_t sb = int64_t(T) * H * D, st = H * D, sh = D;
  rope_forward(d.get(), B, T, H, D, sb, st, sh, 10000.0, stream);
  rope_backward(d.get(), B, T, H, D, sb, st, sh, 10000.0, stream);
  sync();
  EXPECT_TRUE(close_rel(d.download(), to_double(x), kTol));
}

}  // namespace
}  // namespace triad::kernels::cuda::test
