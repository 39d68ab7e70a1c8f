// bench-kernels-cuda: times the CUDA kernels on GPT-2 124M shapes (B x T tokens, C = 768,
// V = 50304, 124M parameters for AdamW). Per fused kernel: median time over CUDA events (after
// a warm-up), the minimum bytes it must move (each input read once, each output written once;
// an accumulated gradient is read and written), the achieved GB/s and its fraction of
// --peak-gbs. Per GEMM shape of the model: TFLOP/s of matmul_forward / matmul_backward and of a
// direct cuBLASLt call of the same problem (descriptors and algorithm chosen once, outside the
// timing), in fp32, TF32 and bf16. The mixed precision (bf16) overloads get rows of their own
// ("... bf16"), their bytes counted at 2 per bf16 element and 4 per fp32 one (statistics,
// losses, parameter gradients, the fp32 master state). Prints tables; --json FILE writes every
// number.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "triad/kernels/cuda.hpp"

namespace {

namespace kc = triad::kernels::cuda;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(s));
}

struct Options {
  int batch = 8, seq = 1024, channels = 768, vocab = 50304, layers = 12;
  int warmup = 5, reps = 30;
  double peak_gbs = 3000;
  bool skip_gemm = false;
  std::string json_path;
};

void usage() {
  std::cout << "usage: bench-kernels-cuda [--batch B=8] [--seq T=1024] [--channels C=768]\n"
               "         [--vocab V=50304] [--layers L=12] [--warmup W=5] [--reps R=30]\n"
               "         [--peak-gbs GBS=3000] [--no-gemm] [--json FILE]\n";
}

// GPT-2's parameter tensors in the arena's order (wte, wpe, then per layer ln1, qkv, proj, ln2,
// fc, mlp proj, each weight then bias; then ln_f), matmul weights and embeddings decayed; cut
// or padded with one last tensor so that they cover `params` elements.
std::vector<kc::AdamwSegment> gpt_tensors(const Options& o, size_t params) {
  const size_t C = size_t(o.channels), V = size_t(o.vocab), T = size_t(o.seq);
  std::vector<std::pair<size_t, bool>> sizes{{V * C, true}, {T * C, true}};
  for (int l = 0; l < o.layers; ++l)
    for (auto [w, b] : {std::pair<size_t, size_t>{C, C},
                        {3 * C * C, 3 * C},
                        {C * C, C},
                        {C, C},
                        {4 * C * C, 4 * C},
                        {4 * C * C, C}}) {
      const bool ln = w == C;
      sizes.push_back({w, !ln});
      sizes.push_back({b, false});
    }
  sizes.push_back({C, false});
  sizes.push_back({C, false});
  std::vector<kc::AdamwSegment> out;
  size_t at = 0;
  for (auto [n, decay] : sizes) {
    if (at >= params) break;
    n = std::min(n, params - at);
    out.push_back({at, n, decay ? 0.1f : 0.0f});
    at += n;
  }
  if (at < params) out.push_back({at, params - at, 0.0f});
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--batch")
      o.batch = std::stoi(next());
    else if (a == "--seq")
      o.seq = std::stoi(next());
    else if (a == "--channels")
      o.channels = std::stoi(next());
    else if (a == "--vocab")
      o.vocab = std::stoi(next());
    else if (a == "--layers")
      o.layers = std::stoi(next());
    else if (a == "--warmup")
      o.warmup = std::stoi(next());
    else if (a == "--reps")
      o.reps = std::max(1, std::stoi(next()));
    else if (a == "--peak-gbs")
      o.peak_gbs = std::stod(next());
    else if (a == "--no-gemm")
      o.skip_gemm = true;
    else if (a == "--json")
      o.json_path = next();
    else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      usage();
      throw std::runtime_error("unknown argument " + a);
    }
  }
  return o;
}

// A device buffer of T, filled from the host or with a constant.
template <class T>
struct Buf {
  T* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t count) : n(count) {
    check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void upload(const std::vector<T>& h) {
    check(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
};

// n values ~ N(0, scale), generated on the host in chunks (cheap enough for 124M).
void fill_random(Buf<float>& b, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  const size_t chunk = size_t(1) << 22;
  std::vector<float> h(std::min(chunk, b.n));
  for (size_t at = 0; at < b.n; at += chunk) {
    const size_t len = std::min(chunk, b.n - at);
    for (size_t i = 0; i < len; ++i) h[i] = dist(rng);
    check(cudaMemcpy(b.p + at, h.data(), len * sizeof(float), cudaMemcpyHostToDevice), "fill");
  }
}

// The same values, rounded to bf16 on the device (kc::convert), a chunk at a time.
void fill_random(Buf<kc::bf16>& b, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  const size_t chunk = size_t(1) << 22;
  std::vector<float> h(std::min(chunk, b.n));
  Buf<float> staging(h.size());
  for (size_t at = 0; at < b.n; at += chunk) {
    const size_t len = std::min(chunk, b.n - at);
    for (size_t i = 0; i < len; ++i) h[i] = dist(rng);
    check(cudaMemcpy(staging.p, h.data(), len * sizeof(float), cudaMemcpyHostToDevice), "fill");
    kc::convert(b.p + at, staging.p, len, nullptr);
    check(cudaDeviceSynchronize(), "fill convert");
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Median milliseconds of f() on `stream`, each repetition between two events. All repetitions
// are queued before the first wait, so the host runs ahead and launch gaps stay out of the times.
double time_ms(cudaStream_t stream, const Options& o, const std::function<void()>& f) {
  for (int i = 0; i < o.warmup; ++i) f();
  check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<cudaEvent_t> ev(2 * size_t(o.reps));
  for (auto& e : ev) check(cudaEventCreate(&e), "event");
  for (int r = 0; r < o.reps; ++r) {
    check(cudaEventRecord(ev[2 * r], stream), "record");
    f();
    check(cudaEventRecord(ev[2 * r + 1], stream), "record");
  }
  check(cudaStreamSynchronize(stream), "sync");
  std::vector<double> ms;
  for (int r = 0; r < o.reps; ++r) {
    float t = 0;
    check(cudaEventElapsedTime(&t, ev[2 * r], ev[2 * r + 1]), "elapsed");
    ms.push_back(t);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  return median(ms);
}

struct KernelRow {
  std::string name, shape;
  double bytes, ms;
};

struct GemmRow {
  std::string name;
  int N, C, OC;
  bool bias;
  std::string math;  // fp32, tf32 or bf16
  double fwd_ms, fwd_direct_ms, bwd_ms, bwd_direct_ms;
  // bf16 only: each part of matmul_backward alone, and each direct call alone (0 elsewhere)
  double dinp_ms = 0, dweight_ms = 0, dbias_ms = 0, dinp_direct_ms = 0, dweight_direct_ms = 0;
};

// A cuBLASLt problem set up once: D (m,n) = op(A) op(B) [+ bias], column-major; A and B of
// ab_type, C, D and the bias of c_type (fp32 or bf16), fp32 scale and accumulation.
class DirectLt {
 public:
  DirectLt(const kc::Blas& blas, bool ta, bool tb, int m, int n, int k, int64_t lda, int64_t ldb,
           int64_t ldc, const void* bias, cudaDataType_t ab_type = CUDA_R_32F,
           cudaDataType_t c_type = CUDA_R_32F)
      : blas_(blas) {
    const cublasComputeType_t ct = blas.allow_tf32() && ab_type == CUDA_R_32F
                                       ? CUBLAS_COMPUTE_32F_FAST_TF32
                                       : CUBLAS_COMPUTE_32F;
    check(cublasLtMatmulDescCreate(&op_, ct, CUDA_R_32F), "desc");
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                            opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)),
          "ta");
    check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)),
          "tb");
    if (bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
            "epilogue");
      check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof(bias)),
            "bias");
    }
    check(cublasLtMatrixLayoutCreate(&a_, ab_type, ta ? k : m, ta ? m : k, lda), "layout a");
    check(cublasLtMatrixLayoutCreate(&b_, ab_type, tb ? n : k, tb ? k : n, ldb), "layout b");
    check(cublasLtMatrixLayoutCreate(&c_, c_type, m, n, ldc), "layout c");
    cublasLtMatmulPreference_t pref;
    check(cublasLtMatmulPreferenceCreate(&pref), "pref");
    const uint64_t ws = blas.workspace_bytes();
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof(ws)),
          "pref ws");
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(blas.lt_handle()), op_, a_,
                                         b_, c_, c_, pref, 1, &heuristic_, &found),
          "heuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    if (!found) throw std::runtime_error("cuBLASLt has no algorithm for a benchmark shape");
  }
  ~DirectLt() {
    cublasLtMatrixLayoutDestroy(c_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatmulDescDestroy(op_);
  }
  DirectLt(const DirectLt&) = delete;
  DirectLt& operator=(const DirectLt&) = delete;
  void run(const void* A, const void* B, void* C, float beta) const {
    const float alpha = 1.0f;
    check(cublasLtMatmul(static_cast<cublasLtHandle_t>(blas_.lt_handle()), op_, &alpha, A, a_, B,
                         b_, &beta, C, c_, C, c_, &heuristic_.algo, blas_.workspace(),
                         blas_.workspace_bytes(), blas_.stream()),
          "cublasLtMatmul");
  }

 private:
  const kc::Blas& blas_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

// Token ids: uniform over the vocabulary, or Zipf-like (rank r with weight 1/(r+1)), where a
// few tokens take a large share of the batch, as in real text.
std::vector<int32_t> make_tokens(size_t n, int V, bool zipf, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  if (!zipf) {
    std::uniform_int_distribution<int32_t> u(0, V - 1);
    for (auto& x : t) x = u(rng);
    return t;
  }
  std::vector<double> cdf(V);
  double acc = 0;
  for (int r = 0; r < V; ++r) cdf[r] = (acc += 1.0 / (r + 1));
  std::uniform_real_distribution<double> u(0.0, acc);
  for (auto& x : t)
    x = static_cast<int32_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
  return t;
}

size_t unique_count(std::vector<int32_t> t) {
  std::sort(t.begin(), t.end());
  return static_cast<size_t>(std::unique(t.begin(), t.end()) - t.begin());
}

std::vector<KernelRow> bench_kernels(const Options& o, cudaStream_t s) {
  const size_t B = o.batch, T = o.seq, C = o.channels, V = o.vocab, N = B * T;
  const size_t NC = N * C, N4C = 4 * NC, NV = N * V;
  const size_t L = o.layers;
  const size_t params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  const double f = sizeof(float);
  std::vector<KernelRow> rows;
  auto add = [&](const std::string& name, const std::string& shape, double bytes,
                 const std::function<void()>& fn) {
    rows.push_back({name, shape, bytes, time_ms(s, o, fn)});
    std::fprintf(stderr, "  %-34s %9.3f ms\n", name.c_str(), rows.back().ms);
  };
  const std::string nc = "(" + std::to_string(N) + "," + std::to_string(C) + ")";

  {  // layernorm
    Buf<float> x(NC), out(NC), w(C), b(C), mean(N), rstd(N), dout(NC), dinp(NC), dw(C), db(C);
    fill_random(x, 1, 1.0f);
    fill_random(w, 2, 1.0f);
    fill_random(b, 3, 1.0f);
    fill_random(dout, 4, 1.0f);
    fill_random(dinp, 5, 1.0f);
    fill_random(dw, 6, 1.0f);
    fill_random(db, 7, 1.0f);
    add("layernorm_forward", nc, f * (2 * NC + 2 * C + 2 * N), [&] {
      kc::layernorm_forward(out.p, mean.p, rstd.p, x.p, w.p, b.p, int(N), int(C), 1e-5f, s);
    });
    add("layernorm_backward", nc, f * (4 * NC + 5 * C + 2 * N), [&] {
      kc::layernorm_backward(dinp.p, dw.p, db.p, dout.p, x.p, w.p, mean.p, rstd.p, int(N), int(C),
                             s);
    });
  }
  {  // gelu on the MLP's (N, 4C)
    Buf<float> x(N4C), out(N4C), dout(N4C), dinp(N4C);
    fill_random(x, 8, 1.0f);
    fill_random(dout, 9, 1.0f);
    fill_random(dinp, 10, 1.0f);
    const std::string shape = "(" + std::to_string(N) + "," + std::to_string(4 * C) + ")";
    add("gelu_forward", shape, f * 2 * N4C, [&] { kc::gelu_forward(out.p, x.p, N4C, s); });
    add("gelu_backward", shape, f * 4 * N4C,
        [&] { kc::gelu_backward(dinp.p, x.p, dout.p, N4C, s); });
  }
  {  // residual
    Buf<float> a(NC), b(NC), out(NC), dout(NC);
    fill_random(a, 11, 1.0f);
    fill_random(b, 12, 1.0f);
    fill_random(dout, 13, 1.0f);
    add("residual_forward", nc, f * 3 * NC, [&] { kc::residual_forward(out.p, a.p, b.p, NC, s); });
    add("residual_backward", nc, f * 5 * NC,
        [&] { kc::residual_backward(a.p, b.p, dout.p, NC, s); });
  }
  {  // cross-entropy over the vocabulary; backward in place, as the model runs it
    Buf<float> logits(NV), losses(N), lse(N);
    Buf<int32_t> targets(N);
    fill_random(logits, 14, 2.0f);
    targets.upload(make_tokens(N, int(V), false, 15));
    const std::string shape = "(" + std::to_string(N) + "," + std::to_string(V) + ")";
    add("crossentropy_forward", shape, f * (NV + 3 * N),
        [&] { kc::crossentropy_forward(losses.p, lse.p, logits.p, targets.p, int(N), int(V), s); });
    add("crossentropy_backward (in place)", shape, f * (2 * NV + 2 * N), [&] {
      kc::crossentropy_backward(logits.p, logits.p, lse.p, targets.p, 1.0f / float(N), int(N),
                                int(V), s);
    });
  }
  {  // AdamW and the grad-norm reduction over every parameter
    Buf<float> p(params), g(params), m(params), v(params);
    Buf<double> out(1);
    fill_random(p, 16, 0.02f);
    fill_random(g, 17, 1e-3f);
    check(cudaMemset(m.p, 0, params * sizeof(float)), "memset");
    check(cudaMemset(v.p, 0, params * sizeof(float)), "memset");
    const std::string shape = "(" + std::to_string(params) + ")";
    int t = 0;
    add("adamw_update", shape, f * 7 * params, [&] {
      kc::adamw_update(p.p, g.p, m.p, v.p, params, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t, s);
    });
    add("sum_squares", shape, f * params, [&] { kc::sum_squares(out.p, g.p, params, s); });
  }
  {  // embedding
    Buf<float> wte(V * C), wpe(T * C), out(NC), dout(NC), dwte(V * C), dwpe(T * C);
    Buf<int32_t> tokens(N);
    fill_random(wte, 18, 0.02f);
    fill_random(wpe, 19, 0.02f);
    fill_random(dout, 20, 1.0f);
    check(cudaMemset(dwte.p, 0, V * C * sizeof(float)), "memset");
    check(cudaMemset(dwpe.p, 0, T * C * sizeof(float)), "memset");
    for (bool zipf : {false, true}) {
      const auto tok = make_tokens(N, int(V), zipf, 21);
      tokens.upload(tok);
      const double U = double(unique_count(tok));
      const std::string tag = zipf ? " (zipf tokens)" : " (uniform tokens)";
      // Forward: token ids, the distinct wte rows, the wpe rows used, out.
      add("embedding_forward" + tag, nc, f * (N + U * C + T * C + NC),
          [&] { kc::embedding_forward(out.p, tokens.p, wte.p, wpe.p, int(B), int(T), int(C), s); });
      // Backward: dout, token ids, the touched dwte rows and dwpe read and written.
      add("embedding_backward" + tag, nc, f * (NC + N + 2 * U * C + 2 * T * C), [&] {
        kc::embedding_backward(dwte.p, dwpe.p, dout.p, tokens.p, int(B), int(T), int(C), int(V), s);
      });
    }
  }
  return rows;
}

// The mixed precision overloads on the same shapes: activations, their gradients and the compute
// copies of the weights bf16 (h = 2 bytes); statistics, losses, parameter gradients and the
// optimizer state fp32 (f = 4 bytes).
std::vector<KernelRow> bench_kernels_bf16(const Options& o, cudaStream_t s) {
  using kc::bf16;
  const size_t B = o.batch, T = o.seq, C = o.channels, V = o.vocab, N = B * T;
  const size_t NC = N * C, N4C = 4 * NC, NV = N * V;
  const size_t L = o.layers;
  const size_t params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  const double f = sizeof(float), h = sizeof(bf16);
  std::vector<KernelRow> rows;
  auto add = [&](const std::string& name, const std::string& shape, double bytes,
                 const std::function<void()>& fn) {
    rows.push_back({name + " bf16", shape, bytes, time_ms(s, o, fn)});
    std::fprintf(stderr, "  %-34s %9.3f ms\n", rows.back().name.c_str(), rows.back().ms);
  };
  const std::string nc = "(" + std::to_string(N) + "," + std::to_string(C) + ")";

  {  // layernorm
    Buf<bf16> x(NC), out(NC), w(C), b(C), dout(NC), dinp(NC);
    Buf<float> mean(N), rstd(N), dw(C), db(C);
    fill_random(x, 1, 1.0f);
    fill_random(w, 2, 1.0f);
    fill_random(b, 3, 1.0f);
    fill_random(dout, 4, 1.0f);
    fill_random(dinp, 5, 1.0f);
    fill_random(dw, 6, 1.0f);
    fill_random(db, 7, 1.0f);
    add("layernorm_forward", nc, h * (2 * NC + 2 * C) + f * 2 * N, [&] {
      kc::layernorm_forward(out.p, mean.p, rstd.p, x.p, w.p, b.p, int(N), int(C), 1e-5f, s);
    });
    add("layernorm_backward", nc, h * (4 * NC + C) + f * (4 * C + 2 * N), [&] {
      kc::layernorm_backward(dinp.p, dw.p, db.p, dout.p, x.p, w.p, mean.p, rstd.p, int(N), int(C),
                             s);
    });
  }
  {  // gelu on the MLP's (N, 4C)
    Buf<bf16> x(N4C), out(N4C), dout(N4C), dinp(N4C);
    fill_random(x, 8, 1.0f);
    fill_random(dout, 9, 1.0f);
    fill_random(dinp, 10, 1.0f);
    const std::string shape = "(" + std::to_string(N) + "," + std::to_string(4 * C) + ")";
    add("gelu_forward", shape, h * 2 * N4C, [&] { kc::gelu_forward(out.p, x.p, N4C, s); });
    add("gelu_backward", shape, h * 4 * N4C,
        [&] { kc::gelu_backward(dinp.p, x.p, dout.p, N4C, s); });
  }
  {  // residual
    Buf<bf16> a(NC), b(NC), out(NC);
    fill_random(a, 11, 1.0f);
    fill_random(b, 12, 1.0f);
    add("residual_forward", nc, h * 3 * NC, [&] { kc::residual_forward(out.p, a.p, b.p, NC, s); });
  }
  {  // cross-entropy over the vocabulary; backward in place, as the model runs it
    Buf<bf16> logits(NV);
    Buf<float> losses(N), lse(N);
    Buf<int32_t> targets(N);
    fill_random(logits, 14, 2.0f);
    targets.upload(make_tokens(N, int(V), false, 15));
    const std::string shape = "(" + std::to_string(N) + "," + std::to_string(V) + ")";
    add("crossentropy_forward", shape, h * NV + f * 3 * N,
        [&] { kc::crossentropy_forward(losses.p, lse.p, logits.p, targets.p, int(N), int(V), s); });
    add("crossentropy_backward (in place)", shape, h * 2 * NV + f * 2 * N, [&] {
      kc::crossentropy_backward(logits.p, logits.p, lse.p, targets.p, 1.0f / float(N), int(N),
                                int(V), s);
    });
  }
  {  // AdamW writing the compute copy, and convert, over every parameter
    Buf<float> p(params), g(params), m(params), v(params);
    Buf<bf16> compute(params);
    fill_random(p, 16, 0.02f);
    fill_random(g, 17, 1e-3f);
    check(cudaMemset(m.p, 0, params * sizeof(float)), "memset");
    check(cudaMemset(v.p, 0, params * sizeof(float)), "memset");
    const std::string shape = "(" + std::to_string(params) + ")";
    int t = 0;
    add("adamw_update (+ compute copy)", shape, f * 7 * params + h * params, [&] {
      kc::adamw_update(p.p, g.p, m.p, v.p, params, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t, compute.p,
                       s);
    });
    add("convert", shape, (f + h) * params, [&] { kc::convert(compute.p, p.p, params, s); });
    // The same update as the optimizer runs it: GPT-2's tensors, each with its own decay, one
    // launch per tensor against adamw_update_segments.
    const std::vector<kc::AdamwSegment> segs = gpt_tensors(o, params);
    add("adamw per tensor (+ compute copy)", "(" + std::to_string(segs.size()) + " tensors)",
        f * 7 * params + h * params, [&] {
          ++t;
          for (const kc::AdamwSegment& sg : segs)
            kc::adamw_update(p.p + sg.offset, g.p + sg.offset, m.p + sg.offset, v.p + sg.offset,
                             sg.n, 3e-4f, 0.9f, 0.95f, 1e-8f, sg.weight_decay, t,
                             compute.p + sg.offset, s);
        });
    add("adamw_update_segments (+ compute copy)", "(" + std::to_string(segs.size()) + " tensors)",
        f * 7 * params + h * params, [&] {
          kc::adamw_update_segments(p.p, g.p, m.p, v.p, segs.data(), segs.size(), 3e-4f, 0.9f,
                                    0.95f, 1e-8f, ++t, compute.p, s);
        });
  }
  {  // embedding
    Buf<bf16> wte(V * C), wpe(T * C), out(NC), dout(NC);
    Buf<float> dwte(V * C), dwpe(T * C);
    Buf<int32_t> tokens(N);
    fill_random(wte, 18, 0.02f);
    fill_random(wpe, 19, 0.02f);
    fill_random(dout, 20, 1.0f);
    check(cudaMemset(dwte.p, 0, V * C * sizeof(float)), "memset");
    check(cudaMemset(dwpe.p, 0, T * C * sizeof(float)), "memset");
    for (bool zipf : {false, true}) {
      const auto tok = make_tokens(N, int(V), zipf, 21);
      tokens.upload(tok);
      const double U = double(unique_count(tok));
      const std::string tag = zipf ? " (zipf tokens)" : " (uniform tokens)";
      add("embedding_forward" + tag, nc, f * N + h * (U * C + T * C + NC),
          [&] { kc::embedding_forward(out.p, tokens.p, wte.p, wpe.p, int(B), int(T), int(C), s); });
      add("embedding_backward" + tag, nc, h * NC + f * (N + 2 * U * C + 2 * T * C), [&] {
        kc::embedding_backward(dwte.p, dwpe.p, dout.p, tokens.p, int(B), int(T), int(C), int(V), s);
      });
    }
  }
  return rows;
}

std::vector<GemmRow> bench_gemms(const Options& o, cudaStream_t s) {
  const int N = o.batch * o.seq, C = o.channels, V = o.vocab;
  struct Shape {
    const char* name;
    int C, OC;
    bool bias;
  };
  const Shape shapes[] = {{"attn qkv", C, 3 * C, true},
                          {"attn proj", C, C, true},
                          {"mlp fc", C, 4 * C, true},
                          {"mlp proj", 4 * C, C, true},
                          {"lm head", C, V, false}};
  size_t max_in = 0, max_out = 0, max_w = 0;
  for (const Shape& sh : shapes) {
    max_in = std::max(max_in, size_t(N) * sh.C);
    max_out = std::max(max_out, size_t(N) * sh.OC);
    max_w = std::max(max_w, size_t(sh.OC) * sh.C);
  }
  Buf<float> inp(max_in), w(max_w), bias(4 * C), out(max_out), dinp(max_in), dw(max_w), db(4 * C),
      dout(max_out);
  fill_random(inp, 30, 1.0f);
  fill_random(w, 31, 0.02f);
  fill_random(bias, 32, 0.02f);
  fill_random(dout, 33, 1.0f);
  check(cudaMemset(dinp.p, 0, max_in * sizeof(float)), "memset");
  check(cudaMemset(dw.p, 0, max_w * sizeof(float)), "memset");
  check(cudaMemset(db.p, 0, 4 * C * sizeof(float)), "memset");
  std::vector<GemmRow> rows;
  for (bool tf32 : {false, true}) {
    kc::Blas blas(s, tf32);
    for (const Shape& sh : shapes) {
      GemmRow r{sh.name, N, sh.C, sh.OC, sh.bias, tf32 ? "tf32" : "fp32", 0, 0, 0, 0};
      const float* b = sh.bias ? bias.p : nullptr;
      r.fwd_ms =
          time_ms(s, o, [&] { kc::matmul_forward(blas, out.p, inp.p, w.p, b, N, sh.C, sh.OC); });
      // The same problems as blas.cu poses them (column-major; see its comments).
      const DirectLt fwd(blas, true, false, sh.OC, N, sh.C, sh.C, sh.C, sh.OC, b);
      r.fwd_direct_ms = time_ms(s, o, [&] { fwd.run(w.p, inp.p, out.p, 0.0f); });
      r.bwd_ms = time_ms(s, o, [&] {
        kc::matmul_backward(blas, dinp.p, dw.p, sh.bias ? db.p : nullptr, dout.p, inp.p, w.p, N,
                            sh.C, sh.OC);
      });
      const DirectLt bwd_inp(blas, false, false, sh.C, N, sh.OC, sh.C, sh.OC, sh.C, nullptr);
      const DirectLt bwd_w(blas, false, true, sh.C, sh.OC, N, sh.C, sh.OC, sh.C, nullptr);
      r.bwd_direct_ms = time_ms(s, o, [&] {
        bwd_inp.run(w.p, dout.p, dinp.p, 1.0f);
        bwd_w.run(inp.p, dout.p, dw.p, 1.0f);
      });
      std::fprintf(stderr, "  %-10s %s fwd %8.3f ms (direct %8.3f)  bwd %8.3f ms (direct %8.3f)\n",
                   sh.name, r.math.c_str(), r.fwd_ms, r.fwd_direct_ms, r.bwd_ms, r.bwd_direct_ms);
      rows.push_back(r);
    }
  }
  {  // bf16 operands, fp32 accumulation: out and dinp bf16, dweight and dbias fp32
    using kc::bf16;
    Buf<bf16> inp16(max_in), w16(max_w), bias16(4 * C), out16(max_out), dinp16(max_in),
        dout16(max_out);
    fill_random(inp16, 30, 1.0f);
    fill_random(w16, 31, 0.02f);
    fill_random(bias16, 32, 0.02f);
    fill_random(dout16, 33, 1.0f);
    check(cudaMemset(dinp16.p, 0, max_in * sizeof(bf16)), "memset");
    kc::Blas blas(s);
    for (const Shape& sh : shapes) {
      GemmRow r{sh.name, N, sh.C, sh.OC, sh.bias, "bf16", 0, 0, 0, 0};
      const bf16* b = sh.bias ? bias16.p : nullptr;
      r.fwd_ms = time_ms(
          s, o, [&] { kc::matmul_forward(blas, out16.p, inp16.p, w16.p, b, N, sh.C, sh.OC); });
      const DirectLt fwd(blas, true, false, sh.OC, N, sh.C, sh.C, sh.C, sh.OC, b, CUDA_R_16BF,
                         CUDA_R_16BF);
      r.fwd_direct_ms = time_ms(s, o, [&] { fwd.run(w16.p, inp16.p, out16.p, 0.0f); });
      r.bwd_ms = time_ms(s, o, [&] {
        kc::matmul_backward(blas, dinp16.p, dw.p, sh.bias ? db.p : nullptr, dout16.p, inp16.p,
                            w16.p, N, sh.C, sh.OC);
      });
      const DirectLt bwd_inp(blas, false, false, sh.C, N, sh.OC, sh.C, sh.OC, sh.C, nullptr,
                             CUDA_R_16BF, CUDA_R_16BF);
      const DirectLt bwd_w(blas, false, true, sh.C, sh.OC, N, sh.C, sh.OC, sh.C, nullptr,
                           CUDA_R_16BF, CUDA_R_32F);
      r.bwd_direct_ms = time_ms(s, o, [&] {
        bwd_inp.run(w16.p, dout16.p, dinp16.p, 1.0f);
        bwd_w.run(inp16.p, dout16.p, dw.p, 1.0f);
      });
      r.dinp_ms = time_ms(s, o, [&] {
        kc::matmul_backward(blas, dinp16.p, nullptr, nullptr, dout16.p, inp16.p, w16.p, N, sh.C,
                            sh.OC);
      });
      r.dweight_ms = time_ms(s, o, [&] {
        kc::matmul_backward(blas, nullptr, dw.p, nullptr, dout16.p, inp16.p, w16.p, N, sh.C, sh.OC);
      });
      if (sh.bias)
        r.dbias_ms = time_ms(s, o, [&] {
          kc::matmul_backward(blas, nullptr, nullptr, db.p, dout16.p, inp16.p, w16.p, N, sh.C,
                              sh.OC);
        });
      r.dinp_direct_ms = time_ms(s, o, [&] { bwd_inp.run(w16.p, dout16.p, dinp16.p, 1.0f); });
      r.dweight_direct_ms = time_ms(s, o, [&] { bwd_w.run(inp16.p, dout16.p, dw.p, 1.0f); });
      std::fprintf(stderr, "  %-10s %s fwd %8.3f ms (direct %8.3f)  bwd %8.3f ms (direct %8.3f)\n",
                   sh.name, r.math.c_str(), r.fwd_ms, r.fwd_direct_ms, r.bwd_ms, r.bwd_direct_ms);
      std::fprintf(stderr,
                   "  %-10s bwd parts: dinp %8.3f (direct %8.3f)  dweight %8.3f (direct %8.3f)  "
                   "dbias %8.3f ms\n",
                   sh.name, r.dinp_ms, r.dinp_direct_ms, r.dweight_ms, r.dweight_direct_ms,
                   r.dbias_ms);
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::cerr << "bench-kernels-cuda: no CUDA device\n";
      return 1;
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cudaStream_t s;
    check(cudaStreamCreate(&s), "cudaStreamCreate");
    std::fprintf(stderr, "%s: B=%d T=%d C=%d V=%d, %d warm-up + %d timed repetitions\n", prop.name,
                 o.batch, o.seq, o.channels, o.vocab, o.warmup, o.reps);

    auto kernels = bench_kernels(o, s);
    for (auto& r : bench_kernels_bf16(o, s)) kernels.push_back(std::move(r));
    std::vector<GemmRow> gemms;
    if (!o.skip_gemm) gemms = bench_gemms(o, s);

    std::printf("\n| kernel | shape | median ms | min bytes (MB) | GB/s | of %.0f GB/s |\n",
                o.peak_gbs);
    std::printf("|---|---|---:|---:|---:|---:|\n");
    nlohmann::json jk = nlohmann::json::array();
    for (const auto& r : kernels) {
      const double gbs = r.bytes / (r.ms * 1e-3) / 1e9;
      std::printf("| %s | %s | %.4f | %.1f | %.0f | %.0f%% |\n", r.name.c_str(), r.shape.c_str(),
                  r.ms, r.bytes / 1e6, gbs, 100.0 * gbs / o.peak_gbs);
      jk.push_back({{"kernel", r.name},
                    {"shape", r.shape},
                    {"median_ms", r.ms},
                    {"bytes", r.bytes},
                    {"gbs", gbs},
                    {"fraction_of_peak", gbs / o.peak_gbs}});
    }
    nlohmann::json jg = nlohmann::json::array();
    if (!gemms.empty()) {
      std::printf(
          "\n| GEMM | N x C -> OC | math | fwd TFLOP/s | direct cuBLASLt | bwd TFLOP/s | direct "
          "cuBLASLt (dinp+dweight) |\n");
      std::printf("|---|---|---|---:|---:|---:|---:|\n");
      for (const auto& r : gemms) {
        const double flop = 2.0 * r.N * double(r.C) * r.OC;
        auto tf = [](double fl, double ms) { return fl / (ms * 1e-3) / 1e12; };
        std::printf("| %s | %d x %d -> %d | %s | %.1f | %.1f | %.1f | %.1f |\n", r.name.c_str(),
                    r.N, r.C, r.OC, r.math.c_str(), tf(flop, r.fwd_ms), tf(flop, r.fwd_direct_ms),
                    tf(2 * flop, r.bwd_ms), tf(2 * flop, r.bwd_direct_ms));
        jg.push_back({{"gemm", r.name},
                      {"N", r.N},
                      {"C", r.C},
                      {"OC", r.OC},
                      {"bias", r.bias},
                      {"tf32", r.math == "tf32"},
                      {"math", r.math},
                      {"fwd_ms", r.fwd_ms},
                      {"fwd_direct_ms", r.fwd_direct_ms},
                      {"bwd_ms", r.bwd_ms},
                      {"bwd_direct_ms", r.bwd_direct_ms},
                      {"dinp_ms", r.dinp_ms},
                      {"dweight_ms", r.dweight_ms},
                      {"dbias_ms", r.dbias_ms},
                      {"dinp_direct_ms", r.dinp_direct_ms},
                      {"dweight_direct_ms", r.dweight_direct_ms},
                      {"fwd_tflops", tf(flop, r.fwd_ms)},
                      {"fwd_direct_tflops", tf(flop, r.fwd_direct_ms)},
                      {"bwd_tflops", tf(2 * flop, r.bwd_ms)},
                      {"bwd_direct_tflops", tf(2 * flop, r.bwd_direct_ms)}});
      }
    }
    if (!o.json_path.empty()) {
      nlohmann::json j = {{"device", prop.name},    {"batch", o.batch}, {"seq", o.seq},
                          {"channels", o.channels}, {"vocab", o.vocab}, {"layers", o.layers},
                          {"warmup", o.warmup},     {"reps", o.reps},   {"peak_gbs", o.peak_gbs},
                          {"kernels", jk},          {"gemms", jg}};
      std::ofstream(o.json_path) << j.dump(2) << "\n";
    }
    cudaStreamDestroy(s);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench-kernels-cuda: " << e.what() << "\n";
    return 1;
  }
}
