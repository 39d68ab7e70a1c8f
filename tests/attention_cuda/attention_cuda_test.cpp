// flash1 / flash2 CUDA kernels against a double-precision CPU reference computed from the same
// bf16/fp16-rounded inputs: forward (out, lse) and backward (dq, dk, dv), every mode, both
// layouts (contiguous (B,H,T,D) and the model's interleaved (B,T,3C) q/k/v with out (B,T,C)),
// outputs poisoned with NaN before each call, deterministic backward run twice and compared bit
// for bit. Skips cleanly without a CUDA device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "triad/kernels/cuda_flash.hpp"

namespace fl = triad::kernels::cuda::flash;

namespace {

bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x << ": " << cudaGetErrorString(x)

uint16_t to_bits(float x, fl::DType dt) {
  if (dt == fl::DType::kBF16) {
    const __nv_bfloat16_raw r = __float2bfloat16_rn(x);
    return r.x;
  }
  const __half_raw r = __float2half_rn(x);
  return r.x;
}
float from_bits(uint16_t b, fl::DType dt) {
  if (dt == fl::DType::kBF16) {
    __nv_bfloat16_raw r;
    r.x = b;
    return __bfloat162float(__nv_bfloat16(r));
  }
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

// A (B,H,T,D) view inside a 16-bit buffer.
struct Place {
  size_t offset;
  int64_t sb, sh, st;
  size_t index(int b, int h, int t, int d) const {
    return offset + static_cast<size_t>(b * sb + h * sh + t * st + d);
  }
};

struct Case {
  fl::DType dtype;
  int D;
  bool causal;
  int T;
  bool interleaved;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(c.dtype == fl::DType::kBF16 ? "bf16" : "fp16") + "_d" + std::to_string(c.D) +
         (c.causal ? "_causal" : "_full") + "_T" + std::to_string(c.T) +
         (c.interleaved ? "_interleaved" : "_contiguous");
}

// Reference in double on logical (B,H,T,D) arrays.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(int B, int H, int T, int D, bool causal, double scale,
                    const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& dout) {
  Reference r;
  const size_t n = static_cast<size_t>(B) * H * T * D;
  r.out.assign(n, 0.0);
  r.dq.assign(n, 0.0);
  r.dk.assign(n, 0.0);
  r.dv.assign(n, 0.0);
  r.lse.assign(static_cast<size_t>(B) * H * T, 0.0);
  auto one = [&](int bh) {
    const size_t base = static_cast<size_t>(bh) * T * D;
    std::vector<double> p(T), dp(T);
    for (int i = 0; i < T; ++i) {
      const int jn = causal ? i + 1 : T;
      const float* qi = &q[base + static_cast<size_t>(i) * D];
      double m = -INFINITY;
      for (int j = 0; j < jn; ++j) {
        const float* kj = &k[base + static_cast<size_t>(j) * D];
        double s = 0;
        for (int d = 0; d < D; ++d) s += static_cast<double>(qi[d]) * kj[d];
        p[j] = s * scale;
        m = std::max(m, p[j]);
      }
      double l = 0;
      for (int j = 0; j < jn; ++j) {
        p[j] = std::exp(p[j] - m);
        l += p[j];
      }
      r.lse[static_cast<size_t>(bh) * T + i] = m + std::log(l);
      double* oi = &r.out[base + static_cast<size_t>(i) * D];
      for (int j = 0; j < jn; ++j) {
        p[j] /= l;
        const float* vj = &v[base + static_cast<size_t>(j) * D];
        for (int d = 0; d < D; ++d) oi[d] += p[j] * vj[d];
      }
      const float* doi = &dout[base + static_cast<size_t>(i) * D];
      double di = 0;
      for (int d = 0; d < D; ++d) di += doi[d] * oi[d];
      double* dqi = &r.dq[base + static_cast<size_t>(i) * D];
      for (int j = 0; j < jn; ++j) {
        const float* vj = &v[base + static_cast<size_t>(j) * D];
        const float* kj = &k[base + static_cast<size_t>(j) * D];
        double s = 0;
        for (int d = 0; d < D; ++d) s += static_cast<double>(doi[d]) * vj[d];
        const double ds = p[j] * (s - di);
        double* dkj = &r.dk[base + static_cast<size_t>(j) * D];
        double* dvj = &r.dv[base + static_cast<size_t>(j) * D];
        for (int d = 0; d < D; ++d) {
          dqi[d] += scale * ds * kj[d];
          dkj[d] += scale * ds * qi[d];
          dvj[d] += p[j] * doi[d];
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int bh = 0; bh < B * H; ++bh) pool.emplace_back(one, bh);
  for (auto& th : pool) th.join();
  return r;
}

// ||a - b|| / ||b|| with a floor on ||b|| (1e-3 RMS) for references that are (close to) zero.
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  const double floor = 1e-6 * static_cast<double>(b.size());
  return std::sqrt(num) / std::sqrt(std::max(den, floor));
}

std::string fmt(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", x);
  return b;
}

template <typename X>
struct DevBuf {
  X* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) {
    if (cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(X)) != cudaSuccess) {
      throw std::runtime_error("cudaMalloc failed");
    }
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void poison() { cudaMemset(p, 0xff, n * sizeof(X)); }
  std::vector<X> host() const {
    std::vector<X> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(X), cudaMemcpyDeviceToHost);
    return h;
  }
};

class FlashCuda : public testing::TestWithParam<Case> {};

TEST_P(FlashCuda, MatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c = GetParam();
  const int T = c.T, D = c.D;
  const int B = T >= 1000 ? 1 : 2, H = 2;
  const int C = H * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const fl::DType dt = c.dtype;
  const size_t n = static_cast<size_t>(B) * H * T * D;

  // Logical (B,H,T,D) inputs, rounded to the dtype.
  std::mt19937 rng(1234u + static_cast<unsigned>(T * 7 + D + (c.causal ? 1 : 0)));
  std::normal_distribution<float> nd(0.f, 1.f);
  auto make = [&]() {
    std::vector<float> x(n);
    for (auto& e : x) e = from_bits(to_bits(nd(rng), dt), dt);
    return x;
  };
  const std::vector<float> q = make(), k = make(), v = make(), dout = make();

  // Device layout: qkv and dqkv buffers, out and dout buffers.
  Place pq, pk, pv, po;
  size_t qkv_elems, o_elems;
  if (c.interleaved) {
    qkv_elems = static_cast<size_t>(B) * T * 3 * C;
    o_elems = static_cast<size_t>(B) * T * C;
    const int64_t sb = static_cast<int64_t>(T) * 3 * C, st = 3 * C;
    pq = {0, sb, D, st};
    pk = {static_cast<size_t>(C), sb, D, st};
    pv = {static_cast<size_t>(2 * C), sb, D, st};
    po = {0, static_cast<int64_t>(T) * C, D, C};
  } else {
    qkv_elems = 3 * n;
    o_elems = n;
    const int64_t sb = static_cast<int64_t>(H) * T * D, sh = static_cast<int64_t>(T) * D;
    pq = {0, sb, sh, D};
    pk = {n, sb, sh, D};
    pv = {2 * n, sb, sh, D};
    po = {0, sb, sh, D};
  }
  std::vector<uint16_t> h_qkv(qkv_elems), h_do(o_elems);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int t = 0; t < T; ++t) {
        for (int d = 0; d < D; ++d) {
          const size_t li = ((static_cast<size_t>(b) * H + h) * T + t) * D + d;
          h_qkv[pq.index(b, h, t, d)] = to_bits(q[li], dt);
          h_qkv[pk.index(b, h, t, d)] = to_bits(k[li], dt);
          h_qkv[pv.index(b, h, t, d)] = to_bits(v[li], dt);
          h_do[po.index(b, h, t, d)] = to_bits(dout[li], dt);
        }
      }
    }
  }
  auto gather = [&](const std::vector<uint16_t>& buf, const Place& pl) {
    std::vector<double> x(n);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < H; ++h) {
        for (int t = 0; t < T; ++t) {
          for (int d = 0; d < D; ++d) {
            x[((static_cast<size_t>(b) * H + h) * T + t) * D + d] =
                from_bits(buf[pl.index(b, h, t, d)], dt);
          }
        }
      }
    }
    return x;
  };
  auto all_finite = [&](const std::vector<uint16_t>& buf) {
    for (uint16_t e : buf) {
      if (!std::isfinite(from_bits(e, dt))) return false;
    }
    return true;
  };

  const Reference ref = reference(B, H, T, D, c.causal, scale, q, k, v, dout);

  DevBuf<uint16_t> qkv(qkv_elems), dqkv(qkv_elems), o(o_elems), dO(o_elems);
  DevBuf<float> lse(static_cast<size_t>(B) * H * T);
  CUDA_OK(cudaMemcpy(qkv.p, h_qkv.data(), qkv_elems * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dO.p, h_do.data(), o_elems * 2, cudaMemcpyHostToDevice));
  const size_t ws_bytes = std::max({fl::flash1_forward_workspace_bytes(B, H, T, D),
                                    fl::flash1_backward_workspace_bytes(B, H, T, D),
                                    fl::flash2_backward_workspace_bytes(B, H, T, D)});
  DevBuf<unsigned char> ws(ws_bytes);

  fl::Problem pb;
  pb.batch = B;
  pb.heads = H;
  pb.seq_len = T;
  pb.head_dim = D;
  pb.causal = c.causal;
  pb.scale = static_cast<float>(scale);
  pb.dtype = dt;
  auto cview = [](const DevBuf<uint16_t>& buf, const Place& pl) {
    return fl::ConstView{buf.p + pl.offset, pl.sb, pl.sh, pl.st};
  };
  auto view = [](DevBuf<uint16_t>& buf, const Place& pl) {
    return fl::View{buf.p + pl.offset, pl.sb, pl.sh, pl.st};
  };
  const double tol = dt == fl::DType::kBF16 ? 1e-2 : 5e-3;

  for (int algo = 1; algo <= 2; ++algo) {
    SCOPED_TRACE("flash" + std::to_string(algo));
    fl::ForwardArgs fa;
    fa.problem = pb;
    fa.q = cview(qkv, pq);
    fa.k = cview(qkv, pk);
    fa.v = cview(qkv, pv);
    fa.out = view(o, po);
    fa.lse = lse.p;
    fa.workspace = ws.p;
    fa.workspace_bytes = ws_bytes;
    o.poison();
    lse.poison();
    ws.poison();
    if (algo == 1) {
      fl::flash1_forward(fa, nullptr);
    } else {
      fl::flash2_forward(fa, nullptr);
    }
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> h_o = o.host();
    const std::vector<float> h_lse = lse.host();
    ASSERT_TRUE(all_finite(h_o)) << "out has unwritten (NaN) elements";
    const std::vector<double> lse_d(h_lse.begin(), h_lse.end());
    for (float x : h_lse) ASSERT_TRUE(std::isfinite(x)) << "lse has unwritten elements";
    const double e_out = rel_err(gather(h_o, po), ref.out), e_lse = rel_err(lse_d, ref.lse);
    EXPECT_LE(e_out, tol) << "out";
    EXPECT_LE(e_lse, 1e-4) << "lse";
    std::string errs = "out " + fmt(e_out) + " lse " + fmt(e_lse);

    for (int det = 0; det <= 1; ++det) {
      SCOPED_TRACE(det ? "deterministic" : "default");
      fl::BackwardArgs ba;
      ba.problem = pb;
      ba.q = cview(qkv, pq);
      ba.k = cview(qkv, pk);
      ba.v = cview(qkv, pv);
      ba.out = cview(o, po);
      ba.dout = cview(dO, po);
      ba.lse = lse.p;
      ba.dq = view(dqkv, pq);
      ba.dk = view(dqkv, pk);
      ba.dv = view(dqkv, pv);
      ba.workspace = ws.p;
      ba.workspace_bytes = ws_bytes;
      ba.deterministic = det != 0;
      std::vector<uint16_t> first;
      for (int rep = 0; rep < (det ? 2 : 1); ++rep) {
        dqkv.poison();
        ws.poison();
        if (algo == 1) {
          fl::flash1_backward(ba, nullptr);
        } else {
          fl::flash2_backward(ba, nullptr);
        }
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<uint16_t> h_d = dqkv.host();
        ASSERT_TRUE(all_finite(h_d)) << "dq/dk/dv have unwritten (NaN) elements";
        if (rep == 0) {
          const double e_dq = rel_err(gather(h_d, pq), ref.dq);
          const double e_dk = rel_err(gather(h_d, pk), ref.dk);
          const double e_dv = rel_err(gather(h_d, pv), ref.dv);
          EXPECT_LE(e_dq, tol) << "dq";
          EXPECT_LE(e_dk, tol) << "dk";
          EXPECT_LE(e_dv, tol) << "dv";
          errs += std::string(det ? " | det" : " | atomic") + " dq " + fmt(e_dq) + " dk " +
                  fmt(e_dk) + " dv " + fmt(e_dv);
          first = std::move(h_d);
        } else {
          EXPECT_TRUE(first == h_d) << "deterministic backward differs between two runs";
        }
      }
    }
    std::printf("[rel err] flash%d %s\n", algo, errs.c_str());
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cs;
  for (fl::DType dt : {fl::DType::kBF16, fl::DType::kFP16}) {
    for (int D : {64, 128}) {
      for (bool causal : {false, true}) {
        for (int T : {1, 17, 128, 257, 1000}) {
          for (bool inter : {false, true}) cs.push_back({dt, D, causal, T, inter});
        }
      }
    }
  }
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Cases, FlashCuda, testing::ValuesIn(all_cases()), case_name);

// Argument checks run before any CUDA call, so they are tested without a device too.
TEST(FlashCudaArgs, RejectsUnsupportedHeadDim) {
  fl::ForwardArgs fa;
  fa.problem.batch = 1;
  fa.problem.heads = 1;
  fa.problem.seq_len = 8;
  fa.problem.head_dim = 96;
  fa.problem.scale = 0.1f;
  try {
    fl::flash2_forward(fa, nullptr);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("flash2_forward"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fl::supports_head_dim(64));
  EXPECT_TRUE(fl::supports_head_dim(128));
  EXPECT_FALSE(fl::supports_head_dim(96));
}

TEST(FlashCudaArgs, RejectsMisalignedStrides) {
  alignas(16) static unsigned char dummy[64];
  fl::ForwardArgs fa;
  fa.problem.batch = 1;
  fa.problem.heads = 1;
  fa.problem.seq_len = 8;
  fa.problem.head_dim = 64;
  fa.problem.scale = 0.125f;
  fa.q = {dummy, 0, 0, 68};  // row stride not a multiple of 8
  fa.k = fa.v = {dummy, 0, 0, 64};
  fa.out = {dummy, 0, 0, 64};
  fa.lse = reinterpret_cast<float*>(dummy);
  EXPECT_THROW(fl::flash1_forward(fa, nullptr), std::runtime_error);
}

}  // namespace
