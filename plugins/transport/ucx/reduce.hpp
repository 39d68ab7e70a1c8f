// Element-wise reductions for the collectives: dst[i] = a[i] op b[i] (dst may alias a or b).
// bf16 and fp16 are widened to float, combined, and rounded to nearest-even once.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>

namespace triad::ucx {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t n);

// nullptr when (dtype, op) is not supported.
ReduceFn reduce_fn(DLDataType dtype, int op);

}  // namespace triad::ucx
