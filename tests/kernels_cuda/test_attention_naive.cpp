// Naive CUDA attention against a double-precision reference, with q, k, v interleaved in one
// (B,T,3C) buffer (sb = T*3C, sh = D, st = 3C) and out in (B,T,C), as the model lays them out;
// causal and not; every output poisoned first (forward and backward overwrite).
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "attention_reference.hpp"
#include "cuda_test_util.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

class AttentionNaive : public CudaTest {};

void run_case(cudaStream_t stream, const AttentionShape& s, bool causal, size_t off) {
  SCOPED_TRACE("B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) +
               " T=" + std::to_string(s.T) + " D=" + std::to_string(s.D) +
               (causal ? " causal" : " full") + " offset=" + std::to_string(off));
  const int B = s.B, H = s.H, T = s.T, D = s.D, C = H * D;
  const double scale = 1.0 / std::sqrt(double(D));
  const size_t n3 = size_t(B) * T * 3 * C, n1 = size_t(B) * T * C;
  const FVec qkv = randn(n3, 1), dout = randn(n1, 2);
  const Reference want = reference(qkv, dout, s, causal, scale);

  DFloat dqkv_in(qkv, off), ddout(dout, off + 1), dout_buf(n1, off), dlse(size_t(B) * H * T, off);
  DFloat dgrad(n3, off + 2);
  dout_buf.poison();
  dlse.poison();
  dgrad.poison();
  const int64_t sb3 = int64_t(T) * 3 * C, st3 = 3 * C, sb1 = int64_t(T) * C, st1 = C;
  const HeadView q{dqkv_in.get(), sb3, D, st3}, k{dqkv_in.get() + C, sb3, D, st3},
      v{dqkv_in.get() + 2 * C, sb3, D, st3};
  const HeadView out{dout_buf.get(), sb1, D, st1}, go{ddout.get(), sb1, D, st1};
  const HeadView dq{dgrad.get(), sb3, D, st3}, dk{dgrad.get() + C, sb3, D, st3},
      dv{dgrad.get() + 2 * C, sb3, D, st3};

  const size_t ws_bytes = attention_naive_workspace_bytes(B, H, T, D);
  DeviceArray<float> ws(ws_bytes / sizeof(float) + 1, 0);
  Blas blas(stream);
  attention_naive_forward(blas, out, dlse.get(), q, k, v, B, H, T, D, causal, float(scale),
                          ws.get(), ws_bytes);
  check(cudaStreamSynchronize(stream), "sync");
  EXPECT_TRUE(close_rel(dout_buf.download(), want.out, kTol)) << "out";
  EXPECT_TRUE(close_rel(dlse.download(), want.lse, kTol)) << "lse";

  attention_naive_backward(blas, dq, dk, dv, q, k, v, out, dlse.get(), go, B, H, T, D, causal,
                           float(scale), ws.get(), ws_bytes);
  check(cudaStreamSynchronize(stream), "sync");
  const FVec g = dgrad.download();
  // Each third separately, so a wrong dq cannot hide behind a large dv.
  for (int part = 0; part < 3; ++part) {
    FVec got_part;
    Vec want_part;
    for (size_t bt = 0; bt < size_t(B) * T; ++bt)
      for (int c = part * C; c < (part + 1) * C; ++c) {
        got_part.push_back(g[bt * 3 * C + c]);
        want_part.push_back(want.dqkv[bt * 3 * C + c]);
      }
    EXPECT_TRUE(close_rel(got_part, want_part, kTol, 0.05)) << (part == 0   ? "dq"
                                                                : part == 1 ? "dk"
                                                                            : "dv");
  }
  EXPECT_TRUE(dout_buf.guards_intact());
  EXPECT_TRUE(dlse.guards_intact());
  EXPECT_TRUE(dgrad.guards_intact());
  EXPECT_TRUE(dqkv_in.guards_intact());
}

TEST_F(AttentionNaive, ForwardBackwardCausal) {
  for (const AttentionShape& s : {AttentionShape{2, 3, 37, 24}, AttentionShape{1, 2, 128, 64},
                                  AttentionShape{3, 2, 1, 8}, AttentionShape{1, 4, 200, 80}})
    for (size_t off : {0, 1}) run_case(stream, s, true, off);
}

TEST_F(AttentionNaive, ForwardBackwardNonCausal) {
  for (const AttentionShape& s : {AttentionShape{2, 3, 37, 24}, AttentionShape{1, 2, 128, 64},
                                  AttentionShape{3, 2, 1, 8}, AttentionShape{1, 4, 200, 80}})
    for (size_t off : {0, 1}) run_case(stream, s, false, off);
}

TEST_F(AttentionNaive, RefusesASmallWorkspace) {
  const int B = 1, H = 2, T = 16, D = 8, C = H * D;
  DFloat qkv(randn(size_t(B) * T * 3 * C, 3), 0), out(size_t(B) * T * C, 0), lse(size_t(H) * T, 0);
  const int64_t sb3 = int64_t(T) * 3 * C;
  const HeadView q{qkv.get(), sb3, D, 3 * C}, k{qkv.get() + C, sb3, D, 3 * C},
      v{qkv.get() + 2 * C, sb3, D, 3 * C}, o{out.get(), int64_t(T) * C, D, C};
  const size_t need = attention_naive_workspace_bytes(B, H, T, D);
  EXPECT_GE(need, 2 * size_t(H) * T * T * sizeof(float));
  DFloat ws(need / sizeof(float), 0);
  Blas blas(stream);
  EXPECT_THROW(attention_naive_forward(blas, o, lse.get(), q, k, v, B, H, T, D, true, 0.3f,
                                       ws.get(), size_t(H) * T * T * sizeof(float) - 4),
               std::runtime_error);
  EXPECT_THROW(attention_naive_backward(blas, q, k, v, q, k, v, o, lse.get(), o, B, H, T, D, true,
                                        0.3f, ws.get(), need - 4),
               std::runtime_error);
}

}  // namespace
}  // namespace triad::kernels::cuda::test
