// cuBLAS is opened on the first call into it (kernels/cuda/cublas_lazy.cpp), not when a program
// starts, and the calls then reach the library. Needs the CUDA toolkit's libraries, no GPU.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

namespace {

bool loaded(const char* soname) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);  // drops only the reference NOLOAD took
  return h != nullptr;
}

TEST(CublasLazy, OpenedOnFirstUseThenForwarded) {
  EXPECT_FALSE(loaded(TRIAD_CUBLASLT_SONAME)) << "loaded before any call";
  EXPECT_FALSE(loaded(TRIAD_CUBLAS_SONAME)) << "loaded before any call";
  // cuBLAS's own text for a status: the call went through to the library.
  const std::string text = cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.find("could not be loaded"), std::string::npos) << text;
  EXPECT_TRUE(loaded(TRIAD_CUBLASLT_SONAME));
  EXPECT_TRUE(loaded(TRIAD_CUBLAS_SONAME));
  // A handle: created where a GPU is, else cuBLAS's own refusal, never the loader's.
  cublasLtHandle_t lt = nullptr;
  const cublasStatus_t st = cublasLtCreate(&lt);
  if (st == CUBLAS_STATUS_SUCCESS) {
    EXPECT_EQ(cublasLtDestroy(lt), CUBLAS_STATUS_SUCCESS);
  }
  EXPECT_EQ(std::string(cublasGetStatusString(st)).find("could not be loaded"), std::string::npos);
}

}  // namespace
