// Naive CUDA attention against a double-precision reference, with q, k, v interleaved in one
// (B,T,3C) buffer (sb = T*3C, sh = D, st = 3C) and out in (B,T,C), as the model lays them out;
// causal and not; every output poisoned first (forward and backward overwrite).
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

struct Shape {
  int B, H, T, D;
};

// Everything the reference produces, in the device layouts: out (B,T,C), lse (B,H,T),
// dqkv (B,T,3C).
struct Reference {
  Vec out, lse, dqkv;
};

Reference reference(const FVec& qkv, const FVec& dout, const Shape& s, bool causal, double scale) {
  const int B = s.B, H = s.H, T = s.T, D = s.D, C = H * D;
  auto q = [&](int b, int h, int i, int d) {
    return double(qkv[(size_t(b) * T + i) * 3 * C + h * D + d]);
  };
  auto k = [&](int b, int h, int i, int d) {
    return double(qkv[(size_t(b) * T + i) * 3 * C + C + h * D + d]);
  };
  auto v = [&](int b, int h, int i, int d) {
    return double(qkv[(size_t(b) * T + i) * 3 * C + 2 * C + h * D + d]);
  };
  auto go = [&](int b, int h, int i, int d) {
    return double(dout[(size_t(b) * T + i) * C + h * D + d]);
  };
  Reference r;
  r.out.assign(size_t(B) * T * C, 0.0);
  r.lse.assign(size_t(B) * H * T, 0.0);
  r.dqkv.assign(size_t(B) * T * 3 * C, 0.0);
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        const int n = causal ? i + 1 : T;
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q(b, h, i, d) * k(b, h, j, d);
          p[j] = scale * dot;
          m = std::max(m, p[j]);
        }
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - m));
        for (int j = 0; j < n; ++j) p[j] /= sum;
        r.lse[(size_t(b) * H + h) * T + i] = m + std::log(sum);
        double* o = &r.out[(size_t(b) * T + i) * C + h * D];
        for (int j = 0; j < n; ++j)
          for (int d = 0; d < D; ++d) o[d] += p[j] * v(b, h, j, d);
        // dP = dO V^T; dS = P (dP - rowsum(dO o O)); dQ = scale dS K, dK = scale dS^T Q,
        // dV = P^T dO. rowsum(dO o O) = sum_j P dP.
        double delta = 0;
        for (int j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += go(b, h, i, d) * v(b, h, j, d);
          dp[j] = dot;
          delta += p[j] * dot;
        }
        double* dq = &r.dqkv[(size_t(b) * T + i) * 3 * C + h * D];
        for (int j = 0; j < n; ++j) {
          const double ds = p[j] * (dp[j] - delta) * scale;
          double* dk = &r.dqkv[(size_t(b) * T + j) * 3 * C + C + h * D];
          double* dv = &r.dqkv[(size_t(b) * T + j) * 3 * C + 2 * C + h * D];
          for (int d = 0; d < D; ++d) {
            dq[d] += ds * k(b, h, j, d);
            dk[d] += ds * q(b, h, i, d);
            dv[d] += p[j] * go(b, h, i, d);
          }
        }
      }
  return r;
}

class AttentionNaive : public CudaTest {};

void run_case(cudaStream_t stream, const Shape& s, bool causal, size_t off) {
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
  for (const Shape& s :
       {Shape{2, 3, 37, 24}, Shape{1, 2, 128, 64}, Shape{3, 2, 1, 8}, Shape{1, 4, 200, 80}})
    for (size_t off : {0, 1}) run_case(stream, s, true, off);
}

TEST_F(AttentionNaive, ForwardBackwardNonCausal) {
  for (const Shape& s :
       {Shape{2, 3, 37, 24}, Shape{1, 2, 128, 64}, Shape{3, 2, 1, 8}, Shape{1, 4, 200, 80}})
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
