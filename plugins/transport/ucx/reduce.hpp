// Element-wise reductions for the collectives: dst[i] = a[i] op b[i] (dst may alias a or b).
// bf16 and fp16 are widened to float, combined, and rounded to nearest-even once.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>

namespace triad::ucx {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t n);

// nullptr when (dtype, op) is not supported.
ReduceFn reduce_fn(DLDataType dtype, int op);

// dst = parts[0] op parts[1] op ... op parts[k-1], folded left to right (so every rank that
// folds the same parts gets the same bits), n elements of esize bytes. Works through
// cache-sized tiles so that each part is read from memory once, whatever k is; dst may
// alias any part.
void fold(ReduceFn f, void* dst, const void* const* parts, int k, size_t n, size_t esize);

}  // namespace triad::ucx
