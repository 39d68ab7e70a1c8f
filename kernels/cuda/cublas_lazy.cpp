// cuBLAS and cuBLASLt loaded on first use, not when a program starts.
//
// Linked directly, libcublasLt runs its static constructors in every process that links the core
// (about 0.3-0.6 s of CPU and page faults per process start, on the CPU device too, where no GEMM
// of it is ever called). The kernels call only the entry points below; each is defined here and
// forwards to the library, which is opened with dlopen the first time any of them is called:
// first by its soname (LD_LIBRARY_PATH, the executable's run path, the loader's cache), then in the
// toolkit's library folder found at configure time. A library that cannot be opened makes every
// call return CUBLAS_STATUS_NOT_INITIALIZED, and cublasGetStatusString says which file and why.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

namespace {

struct Library {
  void* handle = nullptr;
  std::string error;  // why it could not be opened; empty when open
};

Library open_library(const char* soname) {
  Library lib;
  lib.handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (lib.handle) return lib;
  lib.error = dlerror();
  const std::string in_toolkit = std::string(TRIAD_CUBLAS_DIR) + "/" + soname;
  lib.handle = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle) lib.error += "; " + std::string(dlerror());
  return lib;
}

// libcublasLt first: libcublas needs it, and opening it alone serves a program that uses Lt only.
const Library& lt() {
  static const Library lib = open_library(TRIAD_CUBLASLT_SONAME);
  return lib;
}
const Library& blas() {
  static const Library lib = [] {
    if (!lt().handle) return Library{nullptr, lt().error};
    return open_library(TRIAD_CUBLAS_SONAME);
  }();
  return lib;
}

template <class Fn>
Fn* symbol(const Library& lib, const char* name) {
  return lib.handle ? reinterpret_cast<Fn*>(dlsym(lib.handle, name)) : nullptr;
}

// Calls NAME (of function type TYPE) in LIB with ARGS, or returns CUBLAS_STATUS_NOT_INITIALIZED
// when it is not there.
#define TRIAD_CUBLAS_FORWARD_AS(TYPE, LIB, NAME, ...) \
  static TYPE* const fn = symbol<TYPE>(LIB(), #NAME); \
  return fn ? fn(__VA_ARGS__) : CUBLAS_STATUS_NOT_INITIALIZED
#define TRIAD_CUBLAS_FORWARD(LIB, NAME, ...) \
  TRIAD_CUBLAS_FORWARD_AS(decltype(NAME), LIB, NAME, __VA_ARGS__)

// The two GEMMs have C++ overloads (64-bit sizes) in the header; these are the 32-bit C ones.
using GemmEx = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void*, const void*, cudaDataType, int, const void*,
                              cudaDataType, int, const void*, void*, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedEx = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                            int, int, int, const void*, const void*, cudaDataType,
                                            int, long long int, const void*, cudaDataType, int,
                                            long long int, const void*, void*, cudaDataType, int,
                                            long long int, int, cublasComputeType_t,
                                            cublasGemmAlgo_t);

}  // namespace

extern "C" {

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static decltype(cublasGetStatusString)* const fn =
      symbol<decltype(cublasGetStatusString)>(blas(), "cublasGetStatusString");
  if (fn) return fn(status);
  static const std::string why = "cuBLAS could not be loaded: " + blas().error;
  return why.c_str();
}

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  TRIAD_CUBLAS_FORWARD(blas, cublasCreate_v2, handle);
}
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  TRIAD_CUBLAS_FORWARD(blas, cublasDestroy_v2, handle);
}
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  TRIAD_CUBLAS_FORWARD(blas, cublasSetStream_v2, handle, stream);
}
cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace,
                                                  size_t bytes) {
  TRIAD_CUBLAS_FORWARD(blas, cublasSetWorkspace_v2, handle, workspace, bytes);
}
cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc,
                                         cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  TRIAD_CUBLAS_FORWARD_AS(GemmEx, blas, cublasGemmEx, handle, transa, transb, m, n, k, alpha, A,
                          Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType, algo);
}
cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  TRIAD_CUBLAS_FORWARD_AS(GemmStridedBatchedEx, blas, cublasGemmStridedBatchedEx, handle, transa,
                          transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
                          beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtCreate, handle);
}
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtDestroy, handle);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatmulDescCreate, desc, computeType, scaleType);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatmulDescDestroy, desc);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t size) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatmulDescSetAttribute, desc, attr, buf, size);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatrixLayoutDestroy, layout);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatmulPreferenceCreate, pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatmulPreferenceDestroy, pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t size) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, size);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t A,
    cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatmulAlgoGetHeuristic, handle, op, A, B, C, D, pref, requested,
                       results, returned);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
    cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
    const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
    const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSize, cudaStream_t stream) {
  TRIAD_CUBLAS_FORWARD(lt, cublasLtMatmul, handle, op, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D,
                       Ddesc, algo, workspace, workspaceSize, stream);
}

}  // extern "C"
