#include "reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "triad/sdk/half.hpp"
#include "triad/sdk/transport_v1.h"

namespace triad::ucx {

namespace {

struct Sum {
  static float apply(float x, float y) { return x + y; }
};
struct Max {
  static float apply(float x, float y) { return x > y ? x : y; }
};

template <class Op>
void reduce_f32(void* dst, const void* a, const void* b, size_t n) {
  auto* d = static_cast<float*>(dst);
  auto* x = static_cast<const float*>(a);
  auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = Op::apply(x[i], y[i]);
}

template <class Op>
void reduce_bf16(void* dst, const void* a, const void* b, size_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i)
    d[i] = sdk::float_to_bf16(Op::apply(sdk::bf16_to_float(x[i]), sdk::bf16_to_float(y[i])));
}

// With the compiler's _Float16 where it has one (its conversions are the CPU's F16C instructions
// where the build targets them, one element at a time), else by bit manipulation; both round the
// same way.
template <class Op>
void reduce_f16(void* dst, const void* a, const void* b, size_t n) {
#if defined(__FLT16_MANT_DIG__)
  auto* d = static_cast<_Float16*>(dst);
  auto* x = static_cast<const _Float16*>(a);
  auto* y = static_cast<const _Float16*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = _Float16(Op::apply(float(x[i]), float(y[i])));
#else
  auto* d = static_cast<uint16_t*>(dst);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i)
    d[i] = sdk::float_to_fp16(Op::apply(sdk::fp16_to_float(x[i]), sdk::fp16_to_float(y[i])));
#endif
}

}  // namespace

ReduceFn reduce_fn(DLDataType t, int op) {
  if (t.lanes != 1 || (op != TRIAD_REDUCE_SUM && op != TRIAD_REDUCE_MAX)) return nullptr;
  bool sum = op == TRIAD_REDUCE_SUM;
  if (t.code == kDLFloat && t.bits == 32) return sum ? &reduce_f32<Sum> : &reduce_f32<Max>;
  if (t.code == kDLBfloat && t.bits == 16) return sum ? &reduce_bf16<Sum> : &reduce_bf16<Max>;
  if (t.code == kDLFloat && t.bits == 16) return sum ? &reduce_f16<Sum> : &reduce_f16<Max>;
  return nullptr;
}

void fold(ReduceFn f, void* dst, const void* const* parts, int k, size_t n, size_t esize) {
  if (k <= 0 || n == 0) return;
  if (k == 1) {
    if (dst != parts[0]) std::memmove(dst, parts[0], n * esize);
    return;
  }
  // The partial result of a tile stays in L1 while every part streams through it once;
  // it lives apart from dst because dst may be one of the parts still to be read.
  alignas(64) char acc[16u << 10];
  const size_t tile = sizeof(acc) / esize;
  for (size_t lo = 0; lo < n; lo += tile) {
    const size_t len = std::min(tile, n - lo), at = lo * esize;
    auto part = [&](int j) { return static_cast<const char*>(parts[j]) + at; };
    f(acc, part(0), part(1), len);
    for (int j = 2; j < k; ++j) f(acc, acc, part(j), len);
    std::memcpy(static_cast<char*>(dst) + at, acc, len * esize);
  }
}

}  // namespace triad::ucx
