// The activation sets of one pipeline stage, shared by its model chunks.
//
// The pipeline ABI's buffer index is stage-wide: the stream validator (pipe_stream_error) lets a
// buffer hold at most one pass (micro-batch, chunk) at a time, from the pass's first instruction
// to its last, across every chunk of the stage. So buffer k's memory serves whichever chunk's
// pass holds k: a stage keeps the schedule's `buffers` regions, each as large as the largest of
// its chunks' sets (the embedding's and the head's chunks hold more), not `buffers` sets per
// chunk. A chunk's sets are views into the regions (Buffer::view), cut by an ActCarver.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "triad/core/device/device.hpp"
#include "triad/core/model/model_state.hpp"

namespace triad {

class ActivationPool {
 public:
  // Each piece of a set starts on this boundary (what cudaMalloc gives every allocation), so a
  // piece carved from a region is as aligned as one allocated alone.
  static constexpr size_t kAlign = 256;
  static constexpr size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

  ActivationPool(Device& dev, int sets) : dev_(dev), sets_(sets) {
    if (sets < 1) throw std::logic_error("ActivationPool: at least one activation set");
  }
  int sets() const { return sets_; }
  // A chunk's set needs `bytes` (ActCarver::used()); every chunk says so before allocate().
  void reserve(size_t bytes) {
    if (!regions_.empty())
      throw std::logic_error("ActivationPool::reserve after the regions were allocated");
    set_bytes_ = std::max(set_bytes_, bytes);
  }
  size_t set_bytes() const { return set_bytes_; }
  // `slots` boundary slots of `bytes` each (BoundarySlots::slots, GPT::stage_bytes).
  void reserve_boundaries(int slots, size_t bytes) {
    if (!regions_.empty())
      throw std::logic_error("ActivationPool::reserve_boundaries after the regions were allocated");
    boundary_slots_ = slots;
    boundary_bytes_ = bytes;
  }
  int boundary_slots() const { return boundary_slots_; }
  // The regions, once: sets() of set_bytes() each, then the boundary slots.
  void allocate() {
    if (!regions_.empty()) return;
    for (int k = 0; k < sets_; ++k) regions_.emplace_back(dev_, set_bytes_, "activations");
    for (int k = 0; k < boundary_slots_; ++k)
      boundaries_.emplace_back(dev_, boundary_bytes_, "activations");
  }
  unsigned char* region(int k) const {
    if (regions_.empty()) throw std::logic_error("ActivationPool::region before allocate()");
    return regions_.at(size_t(k)).data();
  }
  unsigned char* boundary(int slot) const {
    if (slot < 0 || slot >= int(boundaries_.size()))
      throw std::logic_error("ActivationPool: boundary slot " + std::to_string(slot) + " of " +
                             std::to_string(boundaries_.size()));
    return boundaries_[size_t(slot)].data();
  }

 private:
  Device& dev_;
  int sets_;
  size_t set_bytes_ = 0;
  int boundary_slots_ = 0;
  size_t boundary_bytes_ = 0;
  std::vector<Buffer<unsigned char>> regions_, boundaries_;
};

// Hands out the pieces of activations: each its own allocation on a device, or cut one after
// another (each on ActivationPool::kAlign) from a region; a null region only counts the bytes.
class ActCarver {
 public:
  explicit ActCarver(Device& dev) : dev_(&dev) {}
  explicit ActCarver(unsigned char* region) : base_(region) {}

  template <class T>
  Buffer<T> take(size_t n, const char* what) {
    if (dev_) return Buffer<T>(*dev_, n, what);
    return Buffer<T>::view(reinterpret_cast<T*>(next(n * sizeof(T))), n);
  }
  ActBuffer take_act(size_t n, DType t, const char* what) {
    if (dev_) return ActBuffer(*dev_, n, t, what);
    return ActBuffer::view(next(n * dtype_bytes(t)), n, t);
  }
  size_t used() const { return used_; }

 private:
  unsigned char* next(size_t bytes) {
    unsigned char* p = base_ ? base_ + used_ : nullptr;
    used_ += ActivationPool::aligned(bytes);
    return p;
  }
  Device* dev_ = nullptr;
  unsigned char* base_ = nullptr;
  size_t used_ = 0;
};

}  // namespace triad
