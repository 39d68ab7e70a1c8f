// The Blas handles and the fully connected layer: out = inp @ weight^T + bias through cuBLASLt
// (bias fused as its BIAS epilogue); backward accumulates with beta = 1, and the bias gradient
// is a deterministic column sum (the BGRADB epilogue overwrites, and the contract is +=; on an
// H100 with CUDA 13 it also ran as a separate kernel, slower than the column sum: 1.59 against
// 1.49 ms per GPT-2 124M step at B 16, measured 2026-11-26).
// Mixed precision: 16-bit (bf16 or fp16) activations and weights on the tensor cores with fp32
// accumulation; the forward writes the 16-bit type (with its bias epilogue), dinp accumulates
// into it, and dweight/dbias into fp32 (cuBLASLt with 16-bit A/B and fp32 C/D, or cublasGemmEx
// with the same types).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <type_traits>

#include "blas.cuh"
#include "column_sums.cuh"
#include "common.cuh"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void release(void* lt, void* blas, void* workspace) {
  if (workspace) cudaFree(workspace);
  if (blas) cublasDestroy(static_cast<cublasHandle_t>(blas));
  if (lt) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt));
}

// The largest power of two (up to 256) dividing the address: what cuBLASLt may assume.
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  const uintptr_t low = a & (~a + 1);
  return low >= 256 ? 256u : static_cast<uint32_t>(low);
}

// The cuBLASLt descriptors of one problem, destroyed together.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtCall() = default;
  LtCall(const LtCall&) = delete;
  LtCall& operator=(const LtCall&) = delete;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v,
              const char* name) {
  detail::check_cublas(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), name);
}
template <class T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& v,
              const char* name) {
  detail::check_cublas(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)), name);
}

cublasLtEpilogue_t epilogue_of(const detail::Gemm& g) {
  if (g.aux)
    return g.dgelu ? CUBLASLT_EPILOGUE_DGELU
                   : (g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX);
  return g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// Everything the heuristic's answer depends on: the problem, its types, its epilogue and the
// alignment of every pointer it reads (not the pointers, nor alpha and beta).
using LtKey = std::array<int64_t, 17>;

LtKey key_of(const Blas& blas, const detail::Gemm& g) {
  return {g.ta,
          g.tb,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldc,
          g.ab_type,
          g.c_type,
          detail::compute_type(blas, g),
          epilogue_of(g),
          alignment(g.A),
          alignment(g.B),
          alignment(g.C),
          g.bias ? alignment(g.bias) : 0,
          g.aux ? alignment(g.aux) : 0};
}

// One problem's descriptors and the heuristic's algorithm; `found` false where it has none (the
// caller falls back, and the heuristic is not asked again).
struct LtPlan {
  LtCall call;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
};

// Builds the descriptors of g's problem and asks the heuristic once.
std::unique_ptr<LtPlan> make_plan(Blas& blas, const detail::Gemm& g, const char* name) {
  auto plan = std::make_unique<LtPlan>();
  LtCall& call = plan->call;
  detail::check_cublas(
      cublasLtMatmulDescCreate(&call.op, detail::compute_type(blas, g), CUDA_R_32F), name);
  const cublasOperation_t ta = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(call.op, CUBLASLT_MATMUL_DESC_TRANSA, ta, name);
  set_desc(call.op, CUBLASLT_MATMUL_DESC_TRANSB, tb, name);
  const cublasLtEpilogue_t epilogue = epilogue_of(g);
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    set_desc(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, name);
  if (g.bias) {
    // The bias pointer is set before the heuristic, which reads its alignment from it.
    set_desc(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bias), name);
    set_desc(call.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, g.c_type, name);
  }
  if (g.aux) {
    set_desc(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(g.aux), name);
    set_desc(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(g.ldc), name);
    set_desc(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, g.c_type, name);
  }
  // Stored shapes (before op): A is (m,k) or (k,m), B is (k,n) or (n,k).
  detail::check_cublas(
      cublasLtMatrixLayoutCreate(&call.a, g.ab_type, g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda),
      name);
  detail::check_cublas(
      cublasLtMatrixLayoutCreate(&call.b, g.ab_type, g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb),
      name);
  detail::check_cublas(cublasLtMatrixLayoutCreate(&call.c, g.c_type, g.m, g.n, g.ldc), name);
  detail::check_cublas(cublasLtMatmulPreferenceCreate(&call.pref), name);
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(blas.workspace_bytes()),
           name);
  // Arena offsets are arbitrary: tell the heuristic the alignment the pointers really have
  // (its default assumes 256 bytes).
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(g.A), name);
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(g.B), name);
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(g.C), name);
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(g.C), name);

  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
      static_cast<cublasLtHandle_t>(blas.lt_handle()), call.op, call.a, call.b, call.c, call.c,
      call.pref, 1, &heuristic, &found);
  // No algorithm (NOT_SUPPORTED, or none found): cublasGemmEx takes any alignment, and reports
  // a problem that is really invalid with its own status.
  plan->found = hs == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan->found) plan->algo = heuristic.algo;
  return plan;
}

}  // namespace

// Building the descriptors and asking the heuristic cost the host tens of microseconds per
// GEMM, ~150 times a GPT-2 step; a plan per problem does it once per run.
struct Blas::LtPlans {
  std::map<LtKey, std::unique_ptr<LtPlan>> plans;
};

size_t Blas::lt_plan_count() const {
  return plans_->plans.size();
}

namespace detail {

// False when cuBLASLt has no algorithm for this problem (the caller falls back).
bool lt_gemm(Blas& blas, const Gemm& g, const char* name) {
  std::unique_ptr<LtPlan>& slot = blas.lt_plans().plans[key_of(blas, g)];
  if (!slot) slot = make_plan(blas, g, name);
  LtPlan& plan = *slot;
  if (!plan.found) return false;
  // The plan's pointers are the first call's: this call's bias and aux (same alignment).
  if (g.bias)
    set_desc(plan.call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bias),
             name);
  if (g.aux)
    set_desc(plan.call.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(g.aux),
             name);
  // C and D are the same matrix (in place; with beta = 0 C is not read).
  check_cublas(
      cublasLtMatmul(static_cast<cublasLtHandle_t>(blas.lt_handle()), plan.call.op, &g.alpha, g.A,
                     plan.call.a, g.B, plan.call.b, &g.beta, g.C, plan.call.c, g.C, plan.call.c,
                     &plan.algo, blas.workspace(), blas.workspace_bytes(), blas.stream()),
      name);
  return true;
}

}  // namespace detail

namespace {

// C (m,n) column-major: every column is the bias (m); null bias -> zeros. C and the bias are T.
template <class T>
__global__ void seed_bias_kernel(T* c, const T* bias, int m, int n, int64_t ldc) {
  const size_t total = size_t(m) * n;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(i % m);
    const size_t col = i / m;
    c[col * ldc + row] = bias ? bias[row] : detail::from_float<T>(0.0f);
  }
}

template <class T>
void seed_bias(T* c, const T* bias, int m, int n, int64_t ldc, cudaStream_t stream,
               const char* name) {
  seed_bias_kernel<T>
      <<<detail::grid_for(size_t(m) * n), detail::kThreads, 0, stream>>>(c, bias, m, n, ldc);
  detail::check_launch(name);
}

}  // namespace

Blas::Blas(cudaStream_t stream, bool allow_tf32) : stream_(stream), allow_tf32_(allow_tf32) {
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t handle = nullptr;
  void* ws = nullptr;
  try {
    detail::check_cublas(cublasLtCreate(&lt), "Blas: cublasLtCreate");
    detail::check_cublas(cublasCreate(&handle), "Blas: cublasCreate");
    // cublasSetStream resets the workspace to the library's pool, so the workspace comes after.
    detail::check_cublas(cublasSetStream(handle, stream), "Blas: cublasSetStream");
    detail::check_cuda(cudaMalloc(&ws, kWorkspaceBytes), "Blas: workspace cudaMalloc");
    detail::check_cublas(cublasSetWorkspace(handle, ws, kWorkspaceBytes),
                         "Blas: cublasSetWorkspace");
  } catch (...) {
    release(lt, handle, ws);
    throw;
  }
  lt_ = lt;
  blas_ = handle;
  workspace_ = ws;
  workspace_bytes_ = kWorkspaceBytes;
  plans_ = std::make_unique<LtPlans>();
}

Blas::~Blas() {
  // The plans' descriptors go before the handle that made them. The workspace may still be in
  // use by queued GEMMs; cudaFree waits for the device.
  plans_.reset();
  release(lt_, blas_, workspace_);
}

namespace detail {

void gemm(Blas& blas, const Gemm& g, const char* name) {
  if (g.aux) fail("cublas", name, "a GELU epilogue needs lt_gemm");
  if (lt_gemm(blas, g, name)) return;
  Gemm h = g;
  if (g.bias) {
    if (g.c_type == CUDA_R_16BF)
      seed_bias(static_cast<bf16*>(g.C), static_cast<const bf16*>(g.bias), g.m, g.n, g.ldc,
                blas.stream(), name);
    else if (g.c_type == CUDA_R_16F)
      seed_bias(static_cast<f16*>(g.C), static_cast<const f16*>(g.bias), g.m, g.n, g.ldc,
                blas.stream(), name);
    else
      seed_bias(static_cast<float*>(g.C), static_cast<const float*>(g.bias), g.m, g.n, g.ldc,
                blas.stream(), name);
    h.beta = 1.0f;  // the bias path is only used for out = op + bias (beta 0)
  }
  check_cublas(cublasGemmEx(static_cast<cublasHandle_t>(blas.blas_handle()),
                            g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, g.m,
                            g.n, g.k, &h.alpha, g.A, g.ab_type, static_cast<int>(g.lda), g.B,
                            g.ab_type, static_cast<int>(g.ldb), &h.beta, g.C, g.c_type,
                            static_cast<int>(g.ldc), compute_type(blas, g), CUBLAS_GEMM_DEFAULT),
               name);
}

void gemm_strided_batched(Blas& blas, const Gemm& g, int64_t stride_a, int64_t stride_b,
                          int64_t stride_c, int batch, const char* name) {
  check_cublas(
      cublasGemmStridedBatchedEx(static_cast<cublasHandle_t>(blas.blas_handle()),
                                 g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, g.tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 g.m, g.n, g.k, &g.alpha, g.A, g.ab_type, static_cast<int>(g.lda),
                                 stride_a, g.B, g.ab_type, static_cast<int>(g.ldb), stride_b,
                                 &g.beta, g.C, g.c_type, static_cast<int>(g.ldc), stride_c, batch,
                                 compute_type(blas, g), CUBLAS_GEMM_DEFAULT),
      name);
}

}  // namespace detail

namespace {

// T: the type of out/inp/weight/bias and of dinp/dout; dweight and dbias are fp32.
// out (N,OC) = inp (N,C) @ weight^T + bias. Column-major: inp is (C,N), weight is (C,OC), out is
// (OC,N), all with leading dim = rows: out (OC,N) = weight^T (OC,C) @ inp (C,N), A = weight
// transposed, B = inp as stored; the bias (length m = OC) goes to every column.
template <class T>
detail::Gemm forward_gemm(T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                          int OC) {
  detail::Gemm g;
  g.ta = true;
  g.m = OC, g.n = N, g.k = C;
  g.A = weight, g.lda = C;
  g.B = inp, g.ldb = C;
  g.beta = 0.0f;
  g.C = out, g.ldc = OC;
  g.bias = bias;
  g.ab_type = g.c_type = detail::data_type<T>();
  return g;
}

// dinp (N,C) (+)= dout (N,OC) @ weight (OC,C). Column-major: dinp is (C,N), weight is (C,OC),
// dout is (OC,N): dinp (C,N) (+)= weight (C,OC) @ dout (OC,N), no transposes; beta 1
// accumulates, 0 overwrites.
template <class T>
detail::Gemm dinp_gemm(T* dinp, const T* dout, const T* weight, int N, int C, int OC,
                       bool accumulate) {
  detail::Gemm g;
  g.m = C, g.n = N, g.k = OC;
  g.A = weight, g.lda = C;
  g.B = dout, g.ldb = OC;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.C = dinp, g.ldc = C;
  g.ab_type = g.c_type = detail::data_type<T>();
  return g;
}

template <class T>
void forward(Blas& blas, T* out, const T* inp, const T* weight, const T* bias, int N, int C,
             int OC) {
  if (N <= 0 || OC <= 0) return;
  if (C <= 0) {  // an empty sum: out is the bias (or zero)
    seed_bias(out, bias, OC, N, OC, blas.stream(), "matmul_forward");
    return;
  }
  detail::gemm(blas, forward_gemm(out, inp, weight, bias, N, C, OC), "matmul_forward");
}

template <class T>
void backward(Blas& blas, T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
              const T* weight, int N, int C, int OC, bool accumulate) {
  if (N <= 0) return;
  if (OC <= 0) {  // nothing flows back; an overwritten dinp is zero
    if (dinp && !accumulate && C > 0)
      detail::check_cuda(cudaMemsetAsync(dinp, 0, size_t(N) * C * sizeof(T), blas.stream()),
                         "matmul_backward dinp");
    return;
  }
  if (C > 0 && dinp)
    detail::gemm(blas, dinp_gemm(dinp, dout, weight, N, C, OC, accumulate), "matmul_backward dinp");
  if (C > 0 && dweight) {
    // dweight (OC,C) += dout^T (OC,N) @ inp (N,C). Column-major: dweight is (C,OC), inp is
    // (C,N), dout is (OC,N): dweight (C,OC) += inp (C,N) @ dout^T (N,OC).
    detail::Gemm g;
    g.tb = true;
    g.m = C, g.n = OC, g.k = N;
    g.A = inp, g.lda = C;
    g.B = dout, g.ldb = OC;
    g.beta = 1.0f;
    g.C = dweight, g.ldc = C;
    g.ab_type = detail::data_type<T>();
    g.c_type = CUDA_R_32F;
    detail::gemm(blas, g, "matmul_backward dweight");
  }
  if (dbias) detail::add_bias_grad(dbias, dout, N, OC, blas.stream(), "matmul_backward dbias");
}

// out = gelu(pre), pre = inp @ weight^T + bias: in 16 bits the GEMM's GELU_AUX epilogue writes both
// (the GELU of the fp32 accumulator, so not bit for bit the unfused pair); in fp32 (the runs
// checked against the CPU's) and where cuBLASLt has no algorithm, the unfused pair.
template <class T>
void gelu_forward_fused(Blas& blas, T* out, T* pre, const T* inp, const T* weight, const T* bias,
                        int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  if (C > 0 && !std::is_same_v<T, float>) {
    detail::Gemm g = forward_gemm(out, inp, weight, bias, N, C, OC);
    g.aux = pre;
    if (detail::lt_gemm(blas, g, "matmul_gelu_forward")) return;
  }
  forward(blas, pre, inp, weight, bias, N, C, OC);
  gelu_forward(out, pre, size_t(N) * OC, blas.stream());
}

// dinp = (dout @ weight) * gelu'(pre), overwritten: in 16 bits the dinp GEMM's DGELU epilogue, else
// the GEMM into dact and gelu_backward; dweight and dbias as backward().
template <class T>
void backward_dgelu(Blas& blas, T* dinp, T* dact, const T* pre, float* dweight, float* dbias,
                    const T* dout, const T* inp, const T* weight, int N, int C, int OC) {
  if (N <= 0 || C <= 0) return;
  bool fused = false;
  if (OC > 0 && !std::is_same_v<T, float>) {
    detail::Gemm g = dinp_gemm(dinp, dout, weight, N, C, OC, false);
    g.aux = const_cast<T*>(pre);
    g.dgelu = true;
    fused = detail::lt_gemm(blas, g, "matmul_backward_dgelu");
  }
  backward(blas, fused ? nullptr : dact, dweight, dbias, dout, inp, weight, N, C, OC, false);
  if (!fused) gelu_backward(dinp, pre, dact, size_t(N) * C, blas.stream(), false);
}

}  // namespace

template <class E>
void matmul_gelu_forward(Blas& blas, E* out, E* pre, const E* inp, const E* weight,
                         const NoDeduce<E>* bias, int N, int C, int OC) {
  gelu_forward_fused(blas, out, pre, inp, weight, bias, N, C, OC);
}

template <class E>
void matmul_backward_dgelu(Blas& blas, E* dinp, E* dact, const E* pre, float* dweight, float* dbias,
                           const E* dout, const E* inp, const E* weight, int N, int C, int OC) {
  backward_dgelu(blas, dinp, dact, pre, dweight, dbias, dout, inp, weight, N, C, OC);
}

template <class E>
void matmul_forward(Blas& blas, E* out, const E* inp, const E* weight, const NoDeduce<E>* bias,
                    int N, int C, int OC) {
  forward(blas, out, inp, weight, bias, N, C, OC);
}

template <class E>
void matmul_backward(Blas& blas, NoDeduce<E>* dinp, float* dweight, float* dbias, const E* dout,
                     const E* inp, const E* weight, int N, int C, int OC, bool accumulate) {
  backward(blas, dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate);
}

#define TRIAD_INSTANTIATE(E)                                                                       \
  template void matmul_gelu_forward(Blas&, E*, E*, const E*, const E*, const E*, int, int, int);   \
  template void matmul_backward_dgelu(Blas&, E*, E*, const E*, float*, float*, const E*, const E*, \
                                      const E*, int, int, int);                                    \
  template void matmul_forward(Blas&, E*, const E*, const E*, const E*, int, int, int);            \
  template void matmul_backward(Blas&, E*, float*, float*, const E*, const E*, const E*, int, int, \
                                int, bool);
TRIAD_INSTANTIATE(float)
TRIAD_INSTANTIATE(bf16)
TRIAD_INSTANTIATE(f16)
#undef TRIAD_INSTANTIATE

}  // namespace triad::kernels::cuda
