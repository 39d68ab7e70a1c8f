// Mixed precision (bf16 and fp16, each test once per type S) instantiations of the element-wise
// kernels, convert and AdamW with its compute copy, against kernels::cpu in double on the
// inputs rounded to S: sizes that are not
// multiples of 8, offsets that break 16-byte alignment (the same for every operand: head, 8-wide
// middle, tail; different ones: all scalar), poisoned outputs, pre-filled gradients.
#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

// n, offset of the output, offset of the input(s) (in elements).
const std::vector<std::tuple<size_t, size_t, size_t>> kCases = {
    {0, 0, 0},     {1, 0, 0},       {7, 1, 1},      {1003, 0, 0}, {1003, 1, 1},
    {1003, 7, 7},  {1003, 0, 1},    {1003, 2, 1},   {4099, 4, 4}, {4096, 0, 0},
    {4096, 3, 11}, {1000001, 5, 5}, {1000001, 0, 3}};

std::string trace(size_t n, size_t oo, size_t io) {
  return "n=" + std::to_string(n) + " offsets " + std::to_string(oo) + "," + std::to_string(io);
}

template <class S>
class HalfElementwise : public CudaTest {};
TYPED_TEST_SUITE(HalfElementwise, HalfStorages, StorageName);

TYPED_TEST(HalfElementwise, ConvertRoundsToNearestEven) {
  using S = TypeParam;
  // Ties (low half exactly 0x8000) both ways, just below/above them, signed zeros, infinities,
  // the largest float (rounds up to inf), subnormals, and random values over a wide range.
  auto from_bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  };
  const FVec special = {0.0f,
                        -0.0f,
                        1.0f,
                        -1.0f,
                        from_bits(0x3f808000u),  // tie, even below: down
                        from_bits(0x3f818000u),  // tie, odd below: up
                        from_bits(0x3f807fffu),
                        from_bits(0x3f808001u),
                        from_bits(0xbf818000u),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::max(),
                        -std::numeric_limits<float>::max(),
                        from_bits(0x7f7f7fffu),  // just below the largest bf16's tie
                        from_bits(0x00000001u),  // smallest subnormal: rounds to +0
                        from_bits(0x00018000u),  // subnormal tie, odd below: up
                        from_bits(0x00400000u),  // a subnormal bf16 exactly (fp16: zero)
                        1e-40f,
                        3.0e38f,
                        65504.0f,
                        65519.0f,                 // fp16: below the tie of the largest, stays
                        65520.0f,                 // fp16: the tie, rounds to infinity
                        from_bits(0x33000000u),   // 2^-25, fp16: half the smallest subnormal, to 0
                        from_bits(0x33c00000u),   // 1.5 x 2^-24, fp16: subnormal tie, up to 2^-23
                        from_bits(0x38800000u),   // 2^-14, fp16: the smallest normal
                        from_bits(0x3f801000u)};  // fp16: 1 + 2^-11, a tie, even below: down
  for (auto [n, oo, io] : kCases) {
    SCOPED_TRACE(trace(n, oo, io));
    FVec x = randn(n, 40 + n, 1.0);
    for (size_t i = 0; i < n; ++i) x[i] *= std::exp2(float(int(i % 61) - 30));
    for (size_t i = 0; i < std::min(n, special.size()); ++i) x[(i * 7919) % n] = special[i];
    DFloat src(x, io);
    typename S::Array dst(n, oo);
    dst.poison();
    convert(dst.ptr(), src.get(), n, this->stream);
    this->sync();
    EXPECT_TRUE(bit_equal(dst.download(), S::bits(x)));
    EXPECT_TRUE(dst.guards_intact());
  }
  // NaN stays NaN.
  const FVec nan = {std::numeric_limits<float>::quiet_NaN(),
                    -std::numeric_limits<float>::quiet_NaN()};
  DFloat src(nan, 0);
  typename S::Array dst(nan.size(), 0);
  convert(dst.ptr(), src.get(), nan.size(), this->stream);
  this->sync();
  for (float v : dst.values()) EXPECT_TRUE(std::isnan(v));
}

TYPED_TEST(HalfElementwise, GeluForward) {
  using S = TypeParam;
  for (auto [n, oo, io] : kCases) {
    SCOPED_TRACE(trace(n, oo, io));
    const FVec x = S::round(randn(n, 1, 2.0));
    typename S::Array din(x, io), dout(n, oo);
    dout.poison();
    gelu_forward(dout.ptr(), din.ptr(), n, this->stream);
    this->sync();
    Vec want(n);
    cpu::gelu_forward(want.data(), to_double(x).data(), n);
    EXPECT_TRUE(close_rel(dout.values(), want, S::kOut));
    EXPECT_TRUE(dout.guards_intact());
  }
}

TYPED_TEST(HalfElementwise, GeluForwardInPlace) {
  using S = TypeParam;
  const size_t n = 1003;
  const FVec x = S::round(randn(n, 2, 2.0));
  typename S::Array d(x, 3);
  gelu_forward(d.ptr(), d.ptr(), n, this->stream);
  this->sync();
  Vec want(n);
  cpu::gelu_forward(want.data(), to_double(x).data(), n);
  EXPECT_TRUE(close_rel(d.values(), want, S::kOut));
}

TYPED_TEST(HalfElementwise, GeluBackwardAccumulates) {
  using S = TypeParam;
  for (auto [n, oo, io] : kCases) {
    SCOPED_TRACE(trace(n, oo, io));
    const FVec x = S::round(randn(n, 3, 2.0)), g = S::round(randn(n, 4)),
               g0 = S::round(randn(n, 5));
    // dout shares the input's alignment mod 16 (8 elements on): the vector path when oo == io.
    typename S::Array dx(x, io), dg(g, io + 8), ddinp(g0, oo);
    gelu_backward(ddinp.ptr(), dx.ptr(), dg.ptr(), n, this->stream);
    this->sync();
    Vec want = to_double(g0);
    cpu::gelu_backward(want.data(), to_double(x).data(), to_double(g).data(), n);
    EXPECT_TRUE(close_rel(ddinp.values(), want, S::kOut));
    EXPECT_TRUE(ddinp.guards_intact());
  }
}

TYPED_TEST(HalfElementwise, ResidualForward) {
  using S = TypeParam;
  for (auto [n, oo, io] : kCases) {
    SCOPED_TRACE(trace(n, oo, io));
    const FVec a = S::round(randn(n, 6)), b = S::round(randn(n, 7));
    typename S::Array da(a, io), db(b, io), dout(n, oo);
    dout.poison();
    residual_forward(dout.ptr(), da.ptr(), db.ptr(), n, this->stream);
    this->sync();
    Vec want(n);
    cpu::residual_forward(want.data(), to_double(a).data(), to_double(b).data(), n);
    EXPECT_TRUE(close_rel(dout.values(), want, S::kOut));
    // One float addition of two 16-bit values, rounded once: exactly the host's.
    FVec sum(n);
    for (size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
    EXPECT_TRUE(bit_equal(dout.download(), S::bits(sum)));
    EXPECT_TRUE(dout.guards_intact());
  }
}

TYPED_TEST(HalfElementwise, ResidualForwardAliases) {
  using S = TypeParam;
  const size_t n = 1003;
  const FVec a = S::round(randn(n, 8)), b = S::round(randn(n, 9));
  FVec sum(n);
  for (size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
  {
    typename S::Array da(a, 1), db(b, 2);
    residual_forward(da.ptr(), da.ptr(), db.ptr(), n, this->stream);  // out = a
    this->sync();
    EXPECT_TRUE(bit_equal(da.download(), S::bits(sum)));
  }
  {
    typename S::Array da(a, 3), db(b, 3);
    residual_forward(db.ptr(), da.ptr(), db.ptr(), n, this->stream);  // out = b
    this->sync();
    EXPECT_TRUE(bit_equal(db.download(), S::bits(sum)));
  }
}

TYPED_TEST(HalfElementwise, AdamwWritesTheComputeCopy) {
  using S = TypeParam;
  for (auto [n, oo, io] : kCases) {
    if (n > 100000) continue;
    SCOPED_TRACE(trace(n, oo, io));
    const FVec p0 = randn(n, 13), m0 = randn(n, 14, 0.01);
    FVec v0 = randn(n, 15, 0.01);
    for (auto& x : v0) x = x * x;
    // The mixed overload and the fp32 one on the same fp32 state; the compute copy at the
    // output offset (aligned with the parameters or not).
    DFloat dp(p0, oo), dm(m0, oo), dv(v0, oo), rp(p0, oo), rm(m0, oo), rv(v0, oo);
    typename S::Array dc(n, io);
    for (int t = 1; t <= 3; ++t) {
      const FVec g = randn(n, 100 + t);
      DFloat dg(g, oo);
      dc.poison();
      adamw_update(dp.get(), dg.get(), dm.get(), dv.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t,
                   dc.ptr(), this->stream);
      adamw_update(rp.get(), dg.get(), rm.get(), rv.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t,
                   this->stream);
      this->sync();
    }
    // The fp32 master state is exactly the fp32 update's.
    const FVec p = dp.download();
    EXPECT_TRUE(bit_equal(p, rp.download()));
    EXPECT_TRUE(bit_equal(dm.download(), rm.download()));
    EXPECT_TRUE(bit_equal(dv.download(), rv.download()));
    // The compute copy is the rounded master, bit for bit: as convert() and as the host rounds.
    const BVec c = dc.download();
    EXPECT_TRUE(bit_equal(c, S::bits(p)));
    typename S::Array conv(n, io);
    convert(conv.ptr(), dp.get(), n, this->stream);
    this->sync();
    EXPECT_TRUE(bit_equal(c, conv.download()));
    EXPECT_TRUE(dc.guards_intact());
    EXPECT_TRUE(dp.guards_intact());
  }
}

// Many tensors of one arena in a few launches give the bits of one adamw_update per tensor,
// with and without the compute copy: more tensors than one launch takes (64), sizes from 1 to
// past a block's share, every alignment, per-tensor decay, and gaps between tensors untouched.
TYPED_TEST(HalfElementwise, AdamwSegmentsEqualOneUpdatePerTensor) {
  using S = TypeParam;
  std::vector<AdamwSegment> segs;
  size_t at = 0;
  std::mt19937 rng(7);
  const size_t sizes[] = {1, 3, 4, 7, 768, 2304, 5000, 100003};
  for (int i = 0; i < 150; ++i) {
    at += rng() % 3;  // a gap of 0-2 elements
    const size_t n = i < 8 ? sizes[i] : 1 + rng() % 3000;
    segs.push_back({at, n, rng() % 2 ? 0.1f : 0.0f});
    at += n;
  }
  const size_t total = at + 5;
  for (auto [oo, io] : {std::pair<size_t, size_t>{0, 0}, {1, 3}, {0, 1}}) {
    for (bool with_compute : {true, false}) {
      SCOPED_TRACE("offsets " + std::to_string(oo) + "/" + std::to_string(io) +
                   (with_compute ? " compute copy" : " fp32"));
      const FVec p0 = randn(total, 21), m0 = randn(total, 22, 0.01);
      FVec v0 = randn(total, 23, 0.01);
      for (auto& x : v0) x = x * x;
      DFloat dp(p0, oo), dm(m0, oo), dv(v0, oo), rp(p0, oo), rm(m0, oo), rv(v0, oo);
      typename S::Array dc(total, io), rc(total, io);
      dc.poison();
      rc.poison();
      for (int t = 1; t <= 2; ++t) {
        const FVec g = randn(total, 200 + t);
        DFloat dg(g, oo);
        adamw_update_segments(dp.get(), dg.get(), dm.get(), dv.get(), segs.data(), segs.size(),
                              1e-3f, 0.9f, 0.95f, 1e-8f, t, with_compute ? dc.ptr() : nullptr,
                              this->stream);
        for (const AdamwSegment& sg : segs) {
          const size_t k = sg.offset;
          if (with_compute)
            adamw_update(rp.get() + k, dg.get() + k, rm.get() + k, rv.get() + k, sg.n, 1e-3f, 0.9f,
                         0.95f, 1e-8f, sg.weight_decay, t, rc.ptr() + k, this->stream);
          else
            adamw_update(rp.get() + k, dg.get() + k, rm.get() + k, rv.get() + k, sg.n, 1e-3f, 0.9f,
                         0.95f, 1e-8f, sg.weight_decay, t, this->stream);
        }
        this->sync();
      }
      const FVec p = dp.download();
      EXPECT_TRUE(bit_equal(p, rp.download()));
      EXPECT_TRUE(bit_equal(dm.download(), rm.download()));
      EXPECT_TRUE(bit_equal(dv.download(), rv.download()));
      EXPECT_TRUE(bit_equal(dc.download(), rc.download()));
      EXPECT_FALSE(bit_equal(p, p0));          // something was updated
      EXPECT_EQ(p[total - 1], p0[total - 1]);  // past the last tensor: untouched
      EXPECT_TRUE(dp.guards_intact());
      EXPECT_TRUE(dc.guards_intact());
    }
  }
}

}  // namespace
}  // namespace triad::kernels::cuda::test
