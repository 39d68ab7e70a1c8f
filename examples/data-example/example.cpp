// A data-parallel plugin written against the Triad SDK only: ZeRO stage 0, i.e. plain data
// parallelism. Every rank holds all parameters, gradients and optimizer state; before the
// optimizer step the whole gradient arena is summed over the data-parallel group with one
// in-place all-reduce. The core has already scaled each rank's gradients by 1/dp_size, so the
// sum is the mean, and it owns all memory: the plugin only calls the communicator the core
// lends it (the transport plugin's own table, comm_ref_v1.h), never touching the floats itself.
#include <string>

#include "triad/sdk/data.hpp"

namespace {

class ExampleData final : public triad::sdk::DataPlugin {
 public:
  ExampleData(triad::sdk::Services services, triad::sdk::Params) : services_(services) {}

  triad_data_caps_v1 capabilities() const override {
    triad_data_caps_v1 c{};
    c.stages = 1u << 0;  // ZeRO stage 0 only
    c.transport_ops = TRIAD_TRANSPORT_OP_ALL_REDUCE;
    return c;
  }

  void setup(const triad_data_setup_v2& s) override {
    setup_ = s.v1;
    services_.debug("all-reduce of " + std::to_string(setup_.num_elements) + " gradients over dp " +
                    std::to_string(setup_.dp_size));
  }

  // Called as backward finishes each range of the arena; a plugin that overlaps communication
  // with the backward pass starts reductions here. This one waits for finish_grads.
  void grads_ready(void*, uint64_t, uint64_t) override {}

  void finish_grads(void* grads) override {
    const triad_comm_ref_v1& c = setup_.dp_comm;
    void* request = nullptr;
    int rc = c.ops->all_reduce(c.transport, c.comm, grads, grads, setup_.num_elements,
                               setup_.grad_dtype, setup_.device, TRIAD_REDUCE_SUM, &request);
    if (rc == TRIAD_OK) rc = c.ops->wait(c.transport, request, setup_.timeout_ms);
    if (request) c.ops->request_free(c.transport, request);
    if (rc != TRIAD_OK)
      throw triad::sdk::Error(rc, "the all-reduce of " + std::to_string(setup_.num_elements) +
                                      " gradients over dp " + std::to_string(setup_.dp_size) +
                                      " did not complete");
  }

  // Stage 0: every rank steps the optimizer on the whole arena...
  void owned_range(uint64_t* offset, uint64_t* count) const override {
    *offset = 0;
    *count = setup_.num_elements;
  }
  // ...so the parameters are whole on every rank after the step, with nothing to gather.
  void after_step(void*) override {}

 private:
  triad::sdk::Services services_;
  triad_data_setup_v1 setup_{};
};

}  // namespace

TRIAD_DATA_PLUGIN(ExampleData, "example", "0.1",
                  "example out-of-tree data parallelism: ZeRO-0, one all-reduce of all gradients "
                  "before the optimizer step",
                  TRIAD_NO_PARAMS)
