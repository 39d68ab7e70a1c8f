#include "triad/core/model_state.hpp"

#include <string>

namespace triad {

namespace {
// BlockTensors' fields in order, as the names inside a block ("h.L." + name).
const char* const kBlockNames[12] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                                     "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                     "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                                     "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
}  // namespace

ModelState::ModelState(const ParamSpec& spec, Device& dev, DType act, bool optimizer)
    : spec_(spec), dev_(dev), act_(act) {
  params_ = Buffer<float>(dev_, spec_.total, "parameters");
  grads_ = Buffer<float>(dev_, spec_.total, "gradients");
  // Mixed precision: the forward and backward read a copy of the weights in the activation
  // dtype, refreshed by every optimizer step (fp32: they read the master weights themselves).
  if (act_ != DType::f32) compute_ = ActBuffer(dev_, spec_.total, act_, "compute weights");
  if (optimizer) shard_optimizer(0, spec_.total);
  // Looked up by name once here, never per call.
  for (const LayerRange& l : spec_.layers) {
    const std::string h = "h." + std::to_string(l.layer) + ".";
    for (const char* n : kBlockNames) block_offsets_.push_back(spec_.find(h + n).offset);
  }
}

template <class P, class F>
BlockTensors<P> ModelState::block(size_t index, F at) const {
  const size_t* o = block_offsets_.data() + 12 * index;
  return {at(o[0]), at(o[1]), at(o[2]), at(o[3]), at(o[4]),  at(o[5]),
          at(o[6]), at(o[7]), at(o[8]), at(o[9]), at(o[10]), at(o[11])};
}

BlockParams ModelState::block_params(size_t index) const {
  return block<const void*>(index, [this](size_t o) { return weight(o); });
}

BlockGrads ModelState::block_grads(size_t index) const {
  return block<float*>(index, [this](size_t o) { return grad(o); });
}

void ModelState::shard_optimizer(size_t offset, size_t count) {
  m_.reset();
  v_.reset();
  m_ = Buffer<float>(dev_, count, "Adam first moment");
  v_ = Buffer<float>(dev_, count, "Adam second moment");
  opt_offset_ = offset;
  opt_count_ = count;
}

void ModelState::sync_compute() {
  if (act_ != DType::f32) dev_.convert(compute_.data(), act_, params_.data(), spec_.total);
}

void ModelState::zero_grad() {
  dev_.fill_zero(grads_.data(), spec_.total * sizeof(float));
}

std::vector<float> ModelState::params_to_host() const {
  std::vector<float> host(spec_.total);
  dev_.to_host(host.data(), params_.data(), host.size() * sizeof(float));
  return host;
}

std::vector<float> ModelState::grads_to_host() const {
  std::vector<float> host(spec_.total);
  dev_.to_host(host.data(), grads_.data(), host.size() * sizeof(float));
  return host;
}

void ModelState::params_from_host(const std::vector<float>& host) {
  dev_.to_device(params_.data(), host.data(), spec_.total * sizeof(float));
  sync_compute();
}

}  // namespace triad
