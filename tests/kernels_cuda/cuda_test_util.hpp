// Helpers for the CUDA kernel tests: a fixture that skips without a GPU, device arrays at
// arbitrary element offsets with guard regions, seeded random data, norm-wise comparison,
// bf16 and fp16 on the host (bit patterns, rounded to nearest even as the device's
// __float2bfloat16_rn and __float2half_rn) and the three storage types for typed tests.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace triad::kernels::cuda::test {

using Vec = std::vector<double>;
using FVec = std::vector<float>;

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

inline bool have_gpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();  // clear "no device" / "no driver"
  return e == cudaSuccess && n > 0;
}

// Every test: skip without a device, else a fresh non-default stream.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
  }
  void sync() { check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }
  cudaStream_t stream = nullptr;
};

// A float bit pattern that no kernel computes, written around (and, by poison(), over) arrays.
constexpr uint32_t kGuardBits = 0x7fc0dead;  // a quiet NaN with a payload
constexpr size_t kGuard = 16;                // guard elements after the array

// The guard pattern's byte at byte offset i of an allocation (the pattern repeats every 4).
inline uint8_t guard_byte(size_t i) {
  return static_cast<uint8_t>(kGuardBits >> (8 * (i % 4)));
}

// n elements of T starting `offset` elements into a 256-byte-aligned allocation, so 16-byte
// alignment can be broken on purpose; `offset` + kGuard guard elements surround the array.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n, size_t offset = 0) : n_(n), offset_(offset) {
    check(cudaMalloc(&base_, total() * sizeof(T)), "cudaMalloc");
    std::vector<uint8_t> pattern(total() * sizeof(T));
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = guard_byte(i);
    check(cudaMemcpy(base_, pattern.data(), pattern.size(), cudaMemcpyHostToDevice), "guard fill");
  }
  DeviceArray(const std::vector<T>& host, size_t offset) : DeviceArray(host.size(), offset) {
    upload(host);
  }
  ~DeviceArray() { cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return base_ + offset_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    if (host.size() != n_) throw std::runtime_error("upload: size mismatch");
    check(cudaMemcpy(get(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    check(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  // Every byte 0xff: a NaN for float, double and bf16, so an element a kernel fails to write
  // shows.
  void poison() { check(cudaMemset(get(), 0xff, n_ * sizeof(T)), "poison"); }
  // The guard regions before and after the array still hold the pattern (byte for byte).
  bool guards_intact() const {
    std::vector<uint8_t> all(total() * sizeof(T));
    check(cudaMemcpy(all.data(), base_, all.size(), cudaMemcpyDeviceToHost), "guards");
    const size_t lo = offset_ * sizeof(T), hi = (offset_ + n_) * sizeof(T);
    for (size_t i = 0; i < all.size(); ++i)
      if ((i < lo || i >= hi) && all[i] != guard_byte(i)) return false;
    return true;
  }

 private:
  size_t total() const { return offset_ + n_ + kGuard; }
  T* base_ = nullptr;
  size_t n_, offset_;
};

using DFloat = DeviceArray<float>;

inline FVec randn(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  FVec v(n);
  for (auto& x : v) x = static_cast<float>(dist(rng));
  return v;
}

inline FVec uniform(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  FVec v(n);
  for (auto& x : v) x = static_cast<float>(dist(rng));
  return v;
}

inline std::vector<int32_t> rand_tokens(size_t n, int lo, int hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline Vec to_double(const FVec& v) {
  return Vec(v.begin(), v.end());
}

// ||got - want|| / ||want|| (want == 0 everywhere: ||got||), with every element of got finite.
// rms_floor > 0 floors ||want|| at rms_floor * sqrt(n): for gradients that cancel to (nearly)
// zero yet are differences of O(1) fp32 terms, which carry their rounding.
inline ::testing::AssertionResult close_rel(const FVec& got, const Vec& want, double tol,
                                            double rms_floor = 0.0) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  double num = 0, den = 0;
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      if (bad++ == 0) first_bad = i;
      continue;
    }
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  if (bad)
    return ::testing::AssertionFailure()
           << bad << " non-finite elements, the first at " << first_bad;
  den = std::max(den, rms_floor * rms_floor * double(got.size()));
  const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << err << " > " << tol;
}

template <class T>
::testing::AssertionResult bit_equal(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) != 0) {
    size_t i = 0;
    while (std::memcmp(&a[i], &b[i], sizeof(T)) == 0) ++i;
    return ::testing::AssertionFailure()
           << "first difference at " << i << ": " << +a[i] << " vs " << +b[i];
  }
  return ::testing::AssertionSuccess();
}

// fp32 with TF32 off against a double reference; TF32 GEMMs.
constexpr double kTol = 1e-5;
constexpr double kTolTf32 = 2e-3;

// --- bf16 ---------------------------------------------------------------------------------

using bf16 = __nv_bfloat16;
using BVec = std::vector<uint16_t>;  // bf16 bit patterns

// Round to nearest even, as __float2bfloat16_rn (NaN -> a quiet NaN of the same sign).
inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_value(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// f applied to every element: floats to 16-bit patterns or back.
template <class To, class From, class Fn>
std::vector<To> map_elems(const std::vector<From>& v, Fn f) {
  std::vector<To> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f(v[i]);
  return out;
}

inline BVec to_bf16(const FVec& v) {
  return map_elems<uint16_t>(v, bf16_bits);
}

inline FVec from_bf16(const BVec& b) {
  return map_elems<float>(b, bf16_value);
}

// The values a bf16 array holds after uploading v: every element rounded to bf16.
inline FVec round_bf16(const FVec& v) {
  return from_bf16(to_bf16(v));
}

// A device array of a 16-bit type H, uploaded from floats (rounded by kBits) and downloaded as
// their float values (kValue).
template <class H, uint16_t (*kBits)(float), float (*kValue)(uint16_t)>
class DHalf : public DeviceArray<uint16_t> {
 public:
  explicit DHalf(size_t n, size_t offset = 0) : DeviceArray<uint16_t>(n, offset) {}
  DHalf(const FVec& values, size_t offset)
      : DeviceArray<uint16_t>(map_elems<uint16_t>(values, kBits), offset) {}
  H* ptr() const { return reinterpret_cast<H*>(get()); }
  FVec values() const { return map_elems<float>(download(), kValue); }
};
using DBf16 = DHalf<bf16, bf16_bits, bf16_value>;

// bf16 outputs against a double reference on the same (bf16-rounded) inputs: each output is
// rounded once to 8 significant bits (relative error <= 2^-9, about 1.1e-3 rms), a few roundings
// of intermediates (P, dS in attention) add to that; 1e-2 leaves room and still catches any
// misplaced or missing element.
constexpr double kTolBf16 = 1e-2;
// fp32 outputs that accumulate in fp32 over exactly representable terms (bf16 x bf16 products
// are exact in fp32): only the fp32 accumulation rounds, ~1e-6 relative; 1e-3 is far above it.
constexpr double kTolBf16Acc = 1e-3;

// --- fp16 (IEEE half) ----------------------------------------------------------------------

using f16 = __half;

// Round to nearest even, as __float2half_rn: written out here, so the device's conversion is
// checked against an independent one. Overflow gives infinity (from 65520 up), values below
// 2^-14 become subnormals (multiples of 2^-24), NaN a quiet NaN of the same sign.
inline uint16_t f16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7e00u;
  if (u >= 0x477ff000u) return sign | 0x7c00u;
  if (u < 0x38800000u) {
    float a;
    std::memcpy(&a, &u, sizeof(a));
    // a * 2^24 is exact and below 2^10; nearbyint rounds half to even.
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  u -= 112u << 23;  // exponent bias 127 -> 15
  u += 0xfffu + ((u >> 13) & 1u);
  return sign | static_cast<uint16_t>(u >> 13);
}

inline float f16_value(uint16_t h) {
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = std::ldexp(float(m), -24);
  } else {
    const uint32_t u = e == 31 ? (m ? 0x7fc00000u : 0x7f800000u) : ((e + 112u) << 23) | (m << 13);
    std::memcpy(&f, &u, sizeof(f));
  }
  return (h & 0x8000u) ? -f : f;
}

inline BVec to_f16(const FVec& v) {
  return map_elems<uint16_t>(v, f16_bits);
}

inline FVec from_f16(const BVec& b) {
  return map_elems<float>(b, f16_value);
}

using DF16 = DHalf<f16, f16_bits, f16_value>;

// fp16 keeps 11 significant bits (bf16 8), so bf16's tolerances hold with room; fp16 x fp16
// products are exact in fp32 too.
constexpr double kTolF16 = kTolBf16;
constexpr double kTolF16Acc = kTolBf16Acc;

// --- tests over the storage types ---------------------------------------------------------
//
// One storage type of the activations, for TYPED_TEST_SUITE(Suite, Storages, StorageName): its
// device array, what uploading does to values, and the tolerances of its outputs (kOut: stored
// in this type; kAcc: fp32 results computed from values of this type).
struct Fp32 {
  using Array = DFloat;
  static FVec round(const FVec& v) { return v; }
  static float* ptr(const DFloat& a) { return a.get(); }
  static FVec values(const DFloat& a) { return a.download(); }
  static constexpr double kOut = kTol;
  static constexpr double kAcc = kTol;
};
struct Bf16 {
  using Array = DBf16;
  using Elem = bf16;
  static FVec round(const FVec& v) { return round_bf16(v); }
  static BVec bits(const FVec& v) { return to_bf16(v); }
  static bf16* ptr(const DBf16& a) { return a.ptr(); }
  static FVec values(const DBf16& a) { return a.values(); }
  static constexpr double kOut = kTolBf16;
  static constexpr double kAcc = kTolBf16Acc;
};
struct F16 {
  using Array = DF16;
  using Elem = f16;
  static FVec round(const FVec& v) { return from_f16(to_f16(v)); }
  static BVec bits(const FVec& v) { return to_f16(v); }
  static f16* ptr(const DF16& a) { return a.ptr(); }
  static FVec values(const DF16& a) { return a.values(); }
  static constexpr double kOut = kTolF16;
  static constexpr double kAcc = kTolF16Acc;
};
using Storages = ::testing::Types<Fp32, Bf16, F16>;
// The 16-bit ones (the mixed-precision kernels' own tests).
using HalfStorages = ::testing::Types<Bf16, F16>;
struct StorageName {
  template <class S>
  static std::string GetName(int) {
    return std::is_same_v<S, Fp32> ? "fp32" : std::is_same_v<S, Bf16> ? "bf16" : "fp16";
  }
};

}  // namespace triad::kernels::cuda::test
