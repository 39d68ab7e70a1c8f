// Context parallelism's device kernels against kernels::cpu, in fp32, bf16 and fp16 storage:
// copy_rows over strided boxes (copies move bits; accumulation adds in float, rounded once; a
// null source writes zeros; rows outside the box untouched) and attention_merge (the first
// partial copied, later ones merged by their log-sum-exp into strided out and lse).
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

template <class S>
class ContextKernels : public CudaTest {};
TYPED_TEST_SUITE(ContextKernels, Storages, StorageName);

// A (B, H, T, D) view inside a wider row (as q inside qkv): row width W >= D, column c0.
struct Strided {
  int64_t B, H, T, D, W, c0;
  size_t elems() const { return size_t(B * T * W); }
  RowStrides rows() const { return {{T * W, D, W}}; }
  cpu::RowStrides cpu_rows() const { return {{T * W, D, W}}; }
};

TYPED_TEST(ContextKernels, CopyRowsCopiesAddsAndZeroes) {
  using S = TypeParam;
  // (B, H, T, D) strided inside rows of 3 H D, at column H D (k of a qkv), to and from a
  // contiguous (B, H, T, D).
  for (const Strided v : {Strided{2, 3, 5, 8, 72, 24}, Strided{1, 2, 7, 5, 30, 10}}) {
    SCOPED_TRACE("B=" + std::to_string(v.B) + " D=" + std::to_string(v.D));
    const RowBox box{{v.B, v.H, v.T}, v.D};
    const cpu::RowBox cbox{{v.B, v.H, v.T}, v.D};
    const RowStrides packed{{v.H * v.T * v.D, v.T * v.D, v.D}};
    const cpu::RowStrides cpacked{{v.H * v.T * v.D, v.T * v.D, v.D}};
    const size_t n = size_t(v.B * v.H * v.T * v.D);
    const FVec wide = S::round(randn(v.elems(), 1)), flat = S::round(randn(n, 2));
    for (int mode = 0; mode < 3; ++mode) {  // copy, accumulate, zeros
      SCOPED_TRACE("mode " + std::to_string(mode));
      typename S::Array dwide(wide, 1), dflat(flat, 3);
      copy_rows(S::ptr(dwide) + v.c0, v.rows(), mode == 2 ? nullptr : S::ptr(dflat), packed, box,
                mode == 1, this->stream);
      this->sync();
      Vec want = to_double(wide);
      const Vec src = to_double(flat);
      cpu::copy_rows(want.data() + v.c0, v.cpu_rows(), mode == 2 ? nullptr : src.data(), cpacked,
                     cbox, mode == 1);
      // A copy or a zero is exact; a sum is rounded once to the storage type.
      EXPECT_TRUE(close_rel(S::values(dwide), want, mode == 1 ? S::kOut : 0.0));
      EXPECT_TRUE(dwide.guards_intact());
    }
    // And back: the strided rows into a contiguous buffer.
    typename S::Array dwide(wide, 0), dflat(n, 2);
    dflat.poison();
    copy_rows(S::ptr(dflat), packed, S::ptr(dwide) + v.c0, v.rows(), box, false, this->stream);
    this->sync();
    Vec want(n);
    const Vec src = to_double(wide);
    cpu::copy_rows(want.data(), cpacked, src.data() + v.c0, v.cpu_rows(), cbox, false);
    EXPECT_TRUE(close_rel(S::values(dflat), want, 0.0));
    EXPECT_TRUE(dflat.guards_intact());
  }
}

TYPED_TEST(ContextKernels, AttentionMergeMatchesCpu) {
  using S = TypeParam;
  const int64_t B = 2, H = 3, S_ = 9, D = 20, Tl = 2 * S_;
  // out: (B, Tl, H D) rows (as the attention output), the merge writes its tokens [S_, 2 S_);
  // lse: (B, H, Tl).
  const RowStrides os{{Tl * H * D, D, H * D}}, ls{{H * Tl, Tl, 1}};
  const cpu::RowStrides cos{{Tl * H * D, D, H * D}}, cls{{H * Tl, Tl, 1}};
  const FVec out0 = S::round(randn(size_t(B * Tl * H * D), 1)),
             part = S::round(randn(size_t(B * H * S_ * D), 2));
  for (bool first : {true, false}) {
    SCOPED_TRACE(first ? "first" : "merge");
    FVec lse0 = randn(size_t(B * H * Tl), 3, 2.0), plse = randn(size_t(B * H * S_), 4, 2.0);
    if (!first) {
      // A row whose output has seen no keys yet takes the part; a part that saw none adds
      // nothing (both finite afterwards, no NaN from -inf - -inf).
      lse0[size_t(S_)] = -INFINITY;
      plse[1] = -INFINITY;
    }
    typename S::Array dout(out0, 1), dpart(part, 2);
    DFloat dlse(lse0, 3), dplse(plse, 0);
    attention_merge(S::ptr(dout) + S_ * H * D, os, dlse.get() + S_, ls, S::ptr(dpart), dplse.get(),
                    B, H, S_, D, first, this->stream);
    this->sync();
    Vec want_out = to_double(out0), want_lse = to_double(lse0);
    const Vec dp = to_double(part), dl = to_double(plse);
    cpu::attention_merge(want_out.data() + S_ * H * D, cos, want_lse.data() + S_, cls, dp.data(),
                         dl.data(), B, H, S_, D, first);
    EXPECT_TRUE(close_rel(S::values(dout), want_out, first ? 0.0 : S::kOut));
    EXPECT_TRUE(close_rel(dlse.download(), want_lse, first ? 0.0 : 1e-5));
    EXPECT_TRUE(dout.guards_intact());
    EXPECT_TRUE(dlse.guards_intact());
  }
}

}  // namespace
}  // namespace triad::kernels::cuda::test
