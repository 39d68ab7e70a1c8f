// The lifecycle slots of a test plugin written against the C headers by hand, as a plugin built
// before the SDK's C++ layer (or before a kind's newer ABI) would be: the handle is a
// default-constructed P whose `char err[256]` holds the last error.
#pragma once

#include <cstring>
#include <new>

#include "triad/sdk/plugin_v1.h"

namespace triad::test {

template <class P>
int raw_create(const triad_services_v1*, const triad_params_v1*, void** handle, char* err,
               size_t len) {
  P* p = new (std::nothrow) P;
  if (!p) {
    std::strncpy(err, "out of memory", len);
    return TRIAD_ERR_INTERNAL;
  }
  *handle = p;
  return TRIAD_OK;
}
template <class P>
void raw_destroy(void* h) {
  delete static_cast<P*>(h);
}
template <class P>
const char* raw_last_error(void* h) {
  return static_cast<P*>(h)->err;
}

}  // namespace triad::test
