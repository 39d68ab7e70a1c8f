// A test-only pipeline plugin: the 1F1B schedule with `bug: none`, and one planted defect per
// other value of `bug`, to prove the pipeline conformance suite (and PipelineBackend) catch each.
// Built with -fno-gnu-unique like the other test plugins.
#include <algorithm>
#include <string>

#include "triad/sdk/pipeline.hpp"

namespace {

const triad_param_spec_v1 kParams[] = {
    {"bug", TRIAD_PARAM_STRING, "none",
     "none | deadlock | missing_backward | buffer_overuse | buffer_reuse | send_without_receive | "
     "recv_without_send | forward_before_recv | swapped_order | no_optimizer_step | "
     "weight_before_input | missing_weight | weight_after_step"},
};

class HostilePipeline final : public triad::sdk::PipelinePlugin {
 public:
  HostilePipeline(triad::sdk::Services, triad::sdk::Params p) : bug_(p.get_string("bug")) {
    static const char* known[] = {"none",
                                  "deadlock",
                                  "missing_backward",
                                  "buffer_overuse",
                                  "buffer_reuse",
                                  "send_without_receive",
                                  "recv_without_send",
                                  "forward_before_recv",
                                  "swapped_order",
                                  "no_optimizer_step",
                                  "weight_before_input",
                                  "missing_weight",
                                  "weight_after_step"};
    for (const char* k : known)
      if (bug_ == k) return;
    throw triad::sdk::invalid("unknown bug '" + bug_ + "'");
  }

  triad_pipe_caps_v1 capabilities() const override { return {1}; }

  std::vector<triad_pipe_instr_v1> schedule(const triad_pipe_layout_v1& l) const override {
    const int32_t m = l.micro_batches, p = l.stages, s = l.stage;
    const bool last = s == p - 1;
    int32_t warmup = std::min(p - s - 1, m);
    // deadlock: the last stage runs every forward first while the others alternate from the
    // start: stage p-2 waits for micro-batch 0's gradient, the last stage for micro-batch 1.
    if (bug_ == "deadlock") warmup = last ? m : 0;
    triad::sdk::PipeStream st(l);
    auto forward = [&](int32_t mb) {
      // swapped_order: the last stage takes micro-batches 0 and 1 in the other order.
      if (bug_ == "swapped_order" && last && p > 1 && m > 1 && mb < 2) mb = 1 - mb;
      st.forward(mb);
    };
    // The weight_* defects split every backward into its two halves (pipeline ABI 2).
    const bool split = bug_.rfind("weight", 0) == 0 || bug_ == "missing_weight";
    auto backward = [&](int32_t mb) {
      if (bug_ == "swapped_order" && last && p > 1 && m > 1 && mb < 2) mb = 1 - mb;
      // missing_backward: the last stage never runs the last micro-batch's backward.
      if (bug_ == "missing_backward" && last && mb == m - 1) return;
      if (!split) return st.backward(mb);
      st.backward_input(mb);
      // missing_weight: the last stage never runs the last micro-batch's weight half.
      if (!(bug_ == "missing_weight" && last && mb == m - 1)) st.backward_weight(mb);
    };
    for (int32_t mb = 0; mb < warmup; ++mb) forward(mb);
    for (int32_t mb = 0; mb < m - warmup; ++mb) {
      forward(warmup + mb);
      backward(mb);
    }
    for (int32_t mb = m - warmup; mb < m; ++mb) backward(mb);
    std::vector<triad_pipe_instr_v1> out = st.finish();
    tamper(l, out);
    return out;
  }

  int32_t num_buffers(const triad_pipe_layout_v1& l) const override {
    const bool gpipe_like = bug_ == "deadlock" && l.stage == l.stages - 1;
    const int32_t n = gpipe_like ? l.micro_batches : std::min(l.stages - l.stage, l.micro_batches);
    // buffer_overuse: declares one buffer fewer than the stream uses.
    return bug_ == "buffer_overuse" ? n - 1 : n;
  }

 private:
  void tamper(const triad_pipe_layout_v1& l, std::vector<triad_pipe_instr_v1>& out) const {
    const bool last = l.stage == l.stages - 1;
    auto find = [&](int32_t op) {
      return std::find_if(out.begin(), out.end(),
                          [&](const triad_pipe_instr_v1& i) { return i.op == op; });
    };
    if (bug_ == "buffer_reuse") {
      // Every micro-batch in one buffer: the second forward overwrites the first's activations.
      for (auto& i : out)
        if (i.buffer > 0) i.buffer = 0;
    } else if (bug_ == "send_without_receive" && last && l.stages > 1) {
      // The last stage also sends its first forward's output.
      auto f = find(TRIAD_PIPE_FORWARD);
      out.insert(f + 1, {TRIAD_PIPE_SEND_ACTIVATION, f->micro_batch, f->buffer, 0});
    } else if (bug_ == "recv_without_send" && l.stage == 0) {
      // The first stage waits for an activation nobody sends.
      auto f = find(TRIAD_PIPE_FORWARD);
      out.insert(f, {TRIAD_PIPE_RECV_ACTIVATION, f->micro_batch, f->buffer, 0});
    } else if (bug_ == "forward_before_recv" && l.stage > 0) {
      // Computes on the input before it has arrived.
      auto r = find(TRIAD_PIPE_RECV_ACTIVATION);
      std::iter_swap(r, r + 1);
    } else if (bug_ == "no_optimizer_step") {
      out.pop_back();
    } else if (bug_ == "weight_before_input") {
      // The first micro-batch's weight half runs before its input half.
      auto b = find(TRIAD_PIPE_BACKWARD_INPUT), w = find(TRIAD_PIPE_BACKWARD_WEIGHT);
      std::iter_swap(b, w);
    } else if (bug_ == "weight_after_step") {
      // The last weight half runs after the optimizer step.
      auto w = std::find_if(out.rbegin(), out.rend(), [](const triad_pipe_instr_v1& i) {
        return i.op == TRIAD_PIPE_BACKWARD_WEIGHT;
      });
      const triad_pipe_instr_v1 moved = *w;
      out.erase(std::next(w).base());
      out.push_back(moved);
    }
  }

  std::string bug_;
};

}  // namespace

TRIAD_PIPELINE_PLUGIN(HostilePipeline, "hostile", "0", "test pipeline plugin with planted defects",
                      TRIAD_PARAMS(kParams))
