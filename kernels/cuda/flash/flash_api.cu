// Host side of the FlashAttention kernels: argument checks, workspace layout, dispatch on dtype
// and head dim, and the kernel sequence of each pass.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "flash_common.cuh"
#include "triad/kernels/cuda_flash.hpp"

namespace triad::kernels::cuda::flash {
namespace {

using detail::BwdParams;
using detail::DqMode;
using detail::FwdParams;
using detail::Strides;

[[noreturn]] void fail(const char* kernel, const std::string& what) {
  throw std::runtime_error(std::string(kernel) + ": " + what);
}

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(kernel, std::string("CUDA error: ") + cudaGetErrorString(e));
}

size_t align256(size_t x) {
  return (x + 255) & ~static_cast<size_t>(255);
}

void check_problem(const char* kernel, const Problem& pb) {
  if (pb.batch < 0 || pb.heads < 0 || pb.seq_len < 0) fail(kernel, "negative shape");
  if (!supports_head_dim(pb.head_dim)) {
    fail(kernel, "head dim " + std::to_string(pb.head_dim) + " not supported (64 or 128)");
  }
  if (!(pb.scale > 0.f) || !std::isfinite(pb.scale)) fail(kernel, "scale must be positive");
  if (pb.batch * pb.heads > 65535) fail(kernel, "batch * heads must be at most 65535");
  if (pb.seq_len > (int64_t{1} << 28)) fail(kernel, "sequence too long");
}

template <typename V>
Strides check_view(const char* kernel, const char* name, const V& v) {
  if (v.data == nullptr) fail(kernel, std::string(name) + " is null");
  if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0) {
    fail(kernel, std::string(name) + " must be 16-byte aligned");
  }
  if (v.sb % 8 != 0 || v.sh % 8 != 0 || v.st % 8 != 0) {
    fail(kernel, std::string(name) + " strides must be multiples of 8 elements");
  }
  return Strides{v.sb, v.sh, v.st};
}

int num_sms() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    n = 132;
  }
  return n;
}

template <typename T>
struct Tag {
  using type = T;
};
template <int D>
using Dim = std::integral_constant<int, D>;

// fn(Tag<T>{}, Dim<D>{}) for the problem's dtype and head dim.
template <typename Fn>
void dispatch(const Problem& pb, Fn&& fn) {
  const bool bf16 = pb.dtype == DType::kBF16;
  if (pb.head_dim == 64) {
    if (bf16) {
      fn(Tag<__nv_bfloat16>{}, Dim<64>{});
    } else {
      fn(Tag<__half>{}, Dim<64>{});
    }
  } else {
    if (bf16) {
      fn(Tag<__nv_bfloat16>{}, Dim<128>{});
    } else {
      fn(Tag<__half>{}, Dim<128>{});
    }
  }
}

FwdParams fwd_params(const char* kernel, const ForwardArgs& a) {
  const Problem& pb = a.problem;
  check_problem(kernel, pb);
  FwdParams p{};
  p.qs = check_view(kernel, "q", a.q);
  p.ks = check_view(kernel, "k", a.k);
  p.vs = check_view(kernel, "v", a.v);
  p.os = check_view(kernel, "out", a.out);
  if (a.lse == nullptr) fail(kernel, "lse is null");
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.o = a.out.data;
  p.lse = a.lse;
  p.B = static_cast<int>(pb.batch);
  p.H = static_cast<int>(pb.heads);
  p.T = static_cast<int>(pb.seq_len);
  p.causal = pb.causal ? 1 : 0;
  p.scale_log2 = pb.scale * detail::kLog2e;
  return p;
}

BwdParams bwd_params(const char* kernel, const BackwardArgs& a) {
  const Problem& pb = a.problem;
  check_problem(kernel, pb);
  BwdParams p{};
  p.qs = check_view(kernel, "q", a.q);
  p.ks = check_view(kernel, "k", a.k);
  p.vs = check_view(kernel, "v", a.v);
  p.os = check_view(kernel, "out", a.out);
  p.dos = check_view(kernel, "dout", a.dout);
  p.dqs = check_view(kernel, "dq", a.dq);
  p.dks = check_view(kernel, "dk", a.dk);
  p.dvs = check_view(kernel, "dv", a.dv);
  if (a.lse == nullptr) fail(kernel, "lse is null");
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.o = a.out.data;
  p.dout = a.dout.data;
  p.dq = a.dq.data;
  p.dk = a.dk.data;
  p.dv = a.dv.data;
  p.lse = a.lse;
  p.B = static_cast<int>(pb.batch);
  p.H = static_cast<int>(pb.heads);
  p.T = static_cast<int>(pb.seq_len);
  p.causal = pb.causal ? 1 : 0;
  p.scale = pb.scale;
  p.scale_log2 = pb.scale * detail::kLog2e;
  return p;
}

void check_workspace(const char* kernel, const void* ws, size_t have, size_t need) {
  if (need == 0) return;
  if (ws == nullptr || have < need) {
    fail(kernel, "workspace of " + std::to_string(need) + " bytes needed, " +
                     std::to_string(ws == nullptr ? 0 : have) + " given");
  }
  if (reinterpret_cast<uintptr_t>(ws) % 256 != 0)
    fail(kernel, "workspace must be 256-byte aligned");
}

size_t bwd_bytes(int64_t B, int64_t H, int64_t T, int64_t D) {
  const size_t rows = static_cast<size_t>(B * H * T);
  return align256(rows * sizeof(float)) + align256(rows * static_cast<size_t>(D) * sizeof(float));
}

// Points p.delta (and p.dq_acc when wanted) into the backward workspace.
void bwd_workspace(BwdParams& p, const BackwardArgs& a, bool dq_acc) {
  const size_t rows = static_cast<size_t>(p.B) * p.H * p.T;
  char* ws = static_cast<char*>(a.workspace);
  p.delta = reinterpret_cast<float*>(ws);
  p.dq_acc = dq_acc ? reinterpret_cast<float*>(ws + align256(rows * sizeof(float))) : nullptr;
}

}  // namespace

bool supports_head_dim(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

size_t flash1_forward_workspace_bytes(int64_t B, int64_t H, int64_t T, int64_t D) {
  const size_t rows = static_cast<size_t>(B * H * T);
  return align256(rows * static_cast<size_t>(D) * sizeof(float)) +
         align256(rows * 2 * sizeof(float));
}
size_t flash2_forward_workspace_bytes(int64_t, int64_t, int64_t, int64_t) {
  return 0;
}
size_t flash1_backward_workspace_bytes(int64_t B, int64_t H, int64_t T, int64_t D) {
  return bwd_bytes(B, H, T, D);
}
size_t flash2_backward_workspace_bytes(int64_t B, int64_t H, int64_t T, int64_t D) {
  return bwd_bytes(B, H, T, D);
}

void flash2_forward(const ForwardArgs& a, cudaStream_t stream) {
  constexpr const char* kName = "flash2_forward";
  FwdParams p = fwd_params(kName, a);
  if (static_cast<int64_t>(p.B) * p.H * p.T == 0) return;
  dispatch(a.problem, [&](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;
    detail::launch_flash2_fwd<T, D>(p, stream);
  });
  check_launch(kName);
}

void flash1_forward(const ForwardArgs& a, cudaStream_t stream) {
  constexpr const char* kName = "flash1_forward";
  FwdParams p = fwd_params(kName, a);
  const Problem& pb = a.problem;
  if (static_cast<int64_t>(p.B) * p.H * p.T == 0) return;
  check_workspace(kName, a.workspace, a.workspace_bytes,
                  flash1_forward_workspace_bytes(pb.batch, pb.heads, pb.seq_len, pb.head_dim));
  const size_t rows = static_cast<size_t>(p.B) * p.H * p.T;
  char* ws = static_cast<char*>(a.workspace);
  p.ws_o = reinterpret_cast<float*>(ws);
  p.ws_ml = reinterpret_cast<float*>(
      ws + align256(rows * static_cast<size_t>(pb.head_dim) * sizeof(float)));
  const int sms = num_sms();
  dispatch(pb, [&](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;
    detail::launch_flash1_fwd<T, D>(p, sms, stream);
  });
  check_launch(kName);
}

void flash2_backward(const BackwardArgs& a, cudaStream_t stream) {
  constexpr const char* kName = "flash2_backward";
  BwdParams p = bwd_params(kName, a);
  const Problem& pb = a.problem;
  if (static_cast<int64_t>(p.B) * p.H * p.T == 0) return;
  check_workspace(kName, a.workspace, a.workspace_bytes,
                  flash2_backward_workspace_bytes(pb.batch, pb.heads, pb.seq_len, pb.head_dim));
  bwd_workspace(p, a, !a.deterministic);
  dispatch(pb, [&](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;

    detail::launch_bwd_prep<T, D>(p, stream);
    if (a.deterministic) {
      detail::launch_bwd_dkdv<T, D>(p, DqMode::kNone, 0, stream);
      detail::launch_bwd_dq<T, D>(p, stream);
    } else {
      detail::launch_bwd_dkdv<T, D>(p, DqMode::kAtomic, 0, stream);
      detail::launch_bwd_dq_convert<T, D>(p, stream);
    }
  });
  check_launch(kName);
}

void flash1_backward(const BackwardArgs& a, cudaStream_t stream) {
  constexpr const char* kName = "flash1_backward";
  BwdParams p = bwd_params(kName, a);
  const Problem& pb = a.problem;
  if (static_cast<int64_t>(p.B) * p.H * p.T == 0) return;
  check_workspace(kName, a.workspace, a.workspace_bytes,
                  flash1_backward_workspace_bytes(pb.batch, pb.heads, pb.seq_len, pb.head_dim));
  bwd_workspace(p, a, true);
  // One thread block per (b, h) walks all K/V blocks (plain read-modify-write of dQ) when
  // deterministic; otherwise enough thread blocks per (b, h) for about two per SM, dQ atomic.
  const int sms = a.deterministic ? 0 : num_sms();
  dispatch(pb, [&](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(dim)::value;

    int splits = 1;
    if (!a.deterministic) {
      const int bh = p.B * p.H;
      constexpr int kBc = detail::bwd_kv_block<D, DqMode::kAtomic>();
      static_assert(kBc == detail::bwd_kv_block<D, DqMode::kRmw>(), "one K/V block for both");
      const int nk = (p.T + kBc - 1) / kBc;
      splits = (2 * sms + bh - 1) / bh;
      splits = splits < 1 ? 1 : (splits > nk ? nk : splits);
    }
    detail::launch_bwd_prep<T, D>(p, stream);
    detail::launch_bwd_dkdv<T, D>(p, splits == 1 ? DqMode::kRmw : DqMode::kAtomic, splits, stream);
    detail::launch_bwd_dq_convert<T, D>(p, stream);
  });
  check_launch(kName);
}

}  // namespace triad::kernels::cuda::flash
