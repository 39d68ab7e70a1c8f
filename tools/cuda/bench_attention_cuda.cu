// bench-attention-cuda: forward and forward+backward TFLOP/s of the CUDA flash1 and flash2
// kernels on a fixed number of tokens (B * T, default 32768) with H * D = 2048, for T = 1k..16k,
// D = 64 and 128, causal and not. FLOPs as FlashAttention reports them: forward 4 B H T^2 D
// (halved when causal), forward+backward 3.5x that. Median of CUDA-event timings after warm-up.
// Its peer, tools/bench-attention-cuda-peer.py, times PyTorch's SDPA (flash backend) on the same
// shapes and prints the ratios when given this program's --json output.
//
//   bench-attention-cuda [--json PATH] [--tokens N] [--reps N] [--dtype bf16|fp16]
//                        [--d 64,128] [--t 1024,2048,...] [--causal 0,1]
//                        [--algos flash1,flash2,flash2-det]
// flash2-det is flash2 with the deterministic backward (forward+backward only).
//
// Uses only the flash kernels library and the CUDA runtime.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "triad/kernels/cuda_flash.hpp"

namespace fl = triad::kernels::cuda::flash;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench-attention-cuda: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Roughly N(0, 1) values (sum of uniforms) from a hash, as bf16 or fp16 bits.
__global__ void fill_kernel(uint16_t* p, size_t n, uint32_t seed, int is_bf16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    float s = 0.f;
    for (int r = 0; r < 4; ++r) {
      h ^= h >> 15;
      h *= 2246822519u;
      h ^= h >> 13;
      h *= 3266489917u;
      h ^= h >> 16;
      s += static_cast<float>(h & 0xffffff) / 16777216.f - 0.5f;
    }
    const float x = s * 1.7320508f;  // variance 4/12 -> 1
    uint16_t bits;
    if (is_bf16) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    } else {
      const __half hv = __float2half_rn(x);
      std::memcpy(&bits, &hv, 2);
    }
    p[i] = bits;
  }
}

std::vector<std::string> split(const char* s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(item);
  return v;
}
std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const std::string& x : split(s)) v.push_back(std::atoi(x.c_str()));
  return v;
}

struct Result {
  std::string algo;
  int D, T, B, H;
  bool causal;
  double fwd_ms = 0, fwd_tflops = 0, fb_ms = 0, fb_tflops = 0;
};

double median_ms(const std::function<void()>& fn, cudaStream_t stream, int reps) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  // Warm-up, and a first estimate to size the repetitions.
  fn();
  check(cudaEventRecord(a, stream), "record");
  fn();
  check(cudaEventRecord(b, stream), "record");
  check(cudaEventSynchronize(b), "sync");
  float est = 0;
  check(cudaEventElapsedTime(&est, a, b), "elapsed");
  int n = reps > 0 ? reps : static_cast<int>(std::clamp(300.0 / std::max(est, 1e-3f), 5.0, 50.0));
  std::vector<float> t(n);
  for (int i = 0; i < n; ++i) {
    check(cudaEventRecord(a, stream), "record");
    fn();
    check(cudaEventRecord(b, stream), "record");
    check(cudaEventSynchronize(b), "sync");
    check(cudaEventElapsedTime(&t[i], a, b), "elapsed");
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const char* json_path = nullptr;
  int tokens = 32768, reps = 0;
  fl::DType dtype = fl::DType::kBF16;
  std::vector<int> dims = {64, 128}, seqs = {1024, 2048, 4096, 8192, 16384}, causals = {0, 1};
  std::vector<std::string> algos = {"flash1", "flash2", "flash2-det"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench-attention-cuda: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--json") {
      json_path = next();
    } else if (a == "--tokens") {
      tokens = std::atoi(next());
    } else if (a == "--reps") {
      reps = std::atoi(next());
    } else if (a == "--dtype") {
      dtype = std::string(next()) == "fp16" ? fl::DType::kFP16 : fl::DType::kBF16;
    } else if (a == "--d") {
      dims = parse_list(next());
    } else if (a == "--t") {
      seqs = parse_list(next());
    } else if (a == "--causal") {
      causals = parse_list(next());
    } else if (a == "--algos") {
      algos = split(next());
    } else {
      const bool help = a == "-h" || a == "--help";
      std::fprintf(help ? stdout : stderr,
                   "usage: bench-attention-cuda [--json PATH] [--tokens N] [--reps N] "
                   "[--dtype bf16|fp16] [--d 64,128] [--t 1024,...] [--causal 0,1] "
                   "[--algos flash1,flash2,flash2-det]\n");
      return help ? 0 : 2;
    }
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "bench-attention-cuda: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");

  const int64_t hd = 2048;  // H * D
  const size_t n = static_cast<size_t>(tokens) * hd;
  uint16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float* lse;
  for (uint16_t** p : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) check(cudaMalloc(p, n * 2), "malloc");
  check(cudaMalloc(&lse, static_cast<size_t>(tokens) * (hd / 64) * 4), "malloc");
  size_t ws_bytes = 0;
  for (int D : dims) {
    for (int T : seqs) {
      const int64_t B = tokens / T, H = hd / D;
      ws_bytes = std::max({ws_bytes, fl::flash1_forward_workspace_bytes(B, H, T, D),
                           fl::flash1_backward_workspace_bytes(B, H, T, D),
                           fl::flash2_backward_workspace_bytes(B, H, T, D)});
    }
  }
  void* ws = nullptr;
  check(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 256)), "malloc");
  uint32_t seed = 1;
  for (uint16_t* p : {q, k, v, dout}) {
    fill_kernel<<<1024, 256, 0, stream>>>(p, n, seed++ * 0x9e3779b9u,
                                          dtype == fl::DType::kBF16 ? 1 : 0);
  }
  check(cudaStreamSynchronize(stream), "fill");

  std::vector<Result> results;
  std::printf("device: %s (%d SMs); %s; tokens B*T = %d; H*D = %lld\n", prop.name,
              prop.multiProcessorCount, dtype == fl::DType::kBF16 ? "bf16" : "fp16", tokens,
              static_cast<long long>(hd));
  std::printf("%-11s %4s %6s %3s %3s %6s | %9s %8s | %9s %8s\n", "algo", "D", "T", "B", "H",
              "causal", "fwd ms", "TFLOP/s", "f+b ms", "TFLOP/s");
  for (int D : dims) {
    for (int causal : causals) {
      for (int T : seqs) {
        const int B = tokens / T, H = static_cast<int>(hd / D);
        if (B < 1) continue;
        fl::Problem pb;
        pb.batch = B;
        pb.heads = H;
        pb.seq_len = T;
        pb.head_dim = D;
        pb.causal = causal != 0;
        pb.scale = 1.f / std::sqrt(static_cast<float>(D));
        pb.dtype = dtype;
        const int64_t sb = static_cast<int64_t>(H) * T * D, sh = static_cast<int64_t>(T) * D;
        fl::ForwardArgs fa;
        fa.problem = pb;
        fa.q = {q, sb, sh, D};
        fa.k = {k, sb, sh, D};
        fa.v = {v, sb, sh, D};
        fa.out = {o, sb, sh, D};
        fa.lse = lse;
        fa.workspace = ws;
        fa.workspace_bytes = ws_bytes;
        fl::BackwardArgs ba;
        ba.problem = pb;
        ba.q = fa.q;
        ba.k = fa.k;
        ba.v = fa.v;
        ba.out = {o, sb, sh, D};
        ba.dout = {dout, sb, sh, D};
        ba.lse = lse;
        ba.dq = {dq, sb, sh, D};
        ba.dk = {dk, sb, sh, D};
        ba.dv = {dv, sb, sh, D};
        ba.workspace = ws;
        ba.workspace_bytes = ws_bytes;
        const double fwd_flops = 4.0 * B * H * static_cast<double>(T) * T * D / (causal ? 2 : 1);
        for (const std::string& algo : algos) {
          const bool f1 = algo == "flash1";
          ba.deterministic = algo == "flash2-det";
          auto fwd = [&]() {
            if (f1) {
              fl::flash1_forward(fa, stream);
            } else {
              fl::flash2_forward(fa, stream);
            }
          };
          auto fb = [&]() {
            fwd();
            if (f1) {
              fl::flash1_backward(ba, stream);
            } else {
              fl::flash2_backward(ba, stream);
            }
          };
          Result r{algo, D, T, B, H, causal != 0};
          if (!ba.deterministic) {
            r.fwd_ms = median_ms(fwd, stream, reps);
            r.fwd_tflops = fwd_flops / (r.fwd_ms * 1e-3) / 1e12;
          }
          r.fb_ms = median_ms(fb, stream, reps);
          r.fb_tflops = 3.5 * fwd_flops / (r.fb_ms * 1e-3) / 1e12;
          check(cudaGetLastError(), algo.c_str());
          std::printf("%-11s %4d %6d %3d %3d %6d | %9.3f %8.1f | %9.3f %8.1f\n", algo.c_str(), D, T,
                      B, H, causal, r.fwd_ms, r.fwd_tflops, r.fb_ms, r.fb_tflops);
          std::fflush(stdout);
          results.push_back(r);
        }
      }
    }
  }
  if (json_path != nullptr) {
    FILE* f = std::fopen(json_path, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "bench-attention-cuda: cannot write %s\n", json_path);
      return 1;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"dtype\": \"%s\", \"tokens\": %d, \"results\": [\n",
                 prop.name, dtype == fl::DType::kBF16 ? "bf16" : "fp16", tokens);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(
          f,
          "  {\"algo\": \"%s\", \"D\": %d, \"T\": %d, \"B\": %d, \"H\": %d, \"causal\": %s, "
          "\"fwd_ms\": %.5f, \"fwd_tflops\": %.2f, \"fwdbwd_ms\": %.5f, "
          "\"fwdbwd_tflops\": %.2f}%s\n",
          r.algo.c_str(), r.D, r.T, r.B, r.H, r.causal ? "true" : "false", r.fwd_ms, r.fwd_tflops,
          r.fb_ms, r.fb_tflops, i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  for (void* p : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v),
                  static_cast<void*>(o), static_cast<void*>(dout), static_cast<void*>(dq),
                  static_cast<void*>(dk), static_cast<void*>(dv), static_cast<void*>(lse), ws}) {
    cudaFree(p);
  }
  cudaStreamDestroy(stream);
  return 0;
}
