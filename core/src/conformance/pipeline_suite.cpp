// The pipeline conformance suite. A pipeline plugin is a pure schedule, so everything runs in
// this process: every stage's stream of a layout is asked for as it comes (try_schedule) and the
// streams are run together by simulate_pipeline(), which checks each stream's rules (a split
// backward's input half before its weight half, every weight half before the step's end) and the
// messages between stages; pipeline_timeline() then measures what the schedule holds in flight
// and its bubble.
#include <algorithm>
#include <string>
#include <vector>

#include "triad/core/conformance/conformance.hpp"
#include "triad/core/error.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/plugins/pipeline_backend.hpp"
#include "triad/core/plugins/services.hpp"

namespace triad::conformance {

namespace {

// Every stage's stream of one layout, or why not.
struct Streams {
  enum State { kOk, kRefused, kFailed } state = kOk;
  std::string why;  // the first refusal or the failure
  std::vector<PipeSchedule> stages;
};

Streams ask(const PipelineBackend& be, int p, int m, int v) {
  Streams out;
  std::vector<int> accepted, refused;
  for (int s = 0; s < p; ++s) {
    PipeSchedule sched;
    int status = TRIAD_OK;
    const std::string why = be.try_schedule({s, p, m, v}, &sched, &status);
    if (why.empty()) {
      accepted.push_back(s);
      out.stages.push_back(std::move(sched));
      continue;
    }
    const bool unsupported = status == TRIAD_ERR_UNSUPPORTED;
    if (!unsupported || be.last_error() == "no message")
      return {Streams::kFailed,
              "stage " + std::to_string(s) + ": " + why +
                  (unsupported ? " (a refusal says why in last_error)" : ""),
              {}};
    refused.push_back(s);
    if (out.why.empty()) out.why = why;
  }
  if (!refused.empty() && !accepted.empty())
    return {Streams::kFailed,
            "stage " + std::to_string(accepted[0]) + " is scheduled but stage " +
                std::to_string(refused[0]) + " is refused (" + out.why +
                "): every stage of a layout is scheduled or none",
            {}};
  if (!refused.empty()) out.state = Streams::kRefused;
  return out;
}

// The most a schedule of this name may hold in flight on a stage: 1F1B's p micro-batches (ZB-H1
// too: its first stage holds as many, the later ones no more), and for Megatron's interleaving
// (v > 1) its warm-up of 2(p-1) + (v-1)p chunk passes plus one, as chunk activations (buffers in
// use). 0: no bound.
int in_flight_bound(const std::string& name, int p, int v) {
  if (name != "1f1b" && name != "interleaved" && name != "zb-h1") return 0;
  return v == 1 ? p : (v + 1) * p - 1;
}

CaseResult layout_case(const PipelineBackend& be, int p, int v, int max_m,
                       const std::string& label) {
  std::vector<int> refused;
  std::string refusal, last, out_of_order;
  int most_flying = 0, most_buffers = 0;
  const int bound = in_flight_bound(be.name(), p, v);
  for (int m = 1; m <= max_m; ++m) {
    const std::string at = "m=" + std::to_string(m) + ": ";
    const Streams st = ask(be, p, m, v);
    if (st.state == Streams::kFailed) return {label, Outcome::kFail, at + st.why};
    if (st.state == Streams::kRefused) {
      refused.push_back(m);
      if (refusal.empty()) refusal = at + st.why;
      continue;
    }
    if (std::string e = simulate_pipeline(st.stages, m, v); !e.empty())
      return {label, Outcome::kFail, at + e};
    const PipeTimeline t = pipeline_timeline(st.stages, m, v);
    const int held =
        v == 1 ? t.max_in_flight : *std::max_element(t.peak_buffers.begin(), t.peak_buffers.end());
    if (bound > 0 && held > bound)
      return {label, Outcome::kFail,
              at + "a stage holds " + std::to_string(held) +
                  (v == 1 ? " micro-batches in flight; " + be.name() + " holds at most p = "
                          : " chunk activations at once; Megatron's interleaving holds at most "
                            "(v+1)p-1 = ") +
                  std::to_string(bound)};
    // Whether a transport without tags (nccl) can run it: published, not required.
    if (std::string o = pipeline_order_mismatch(st.stages); !o.empty() && out_of_order.empty())
      out_of_order = at + o;
    most_flying = std::max(most_flying, t.max_in_flight);
    most_buffers = std::max(most_buffers, held);
    last = "at m=" + std::to_string(m) + " buffers per stage " + pipe_counts_text(t.peak_buffers) +
           ", bubble " + pipe_bubble_text(t, m, v);
  }
  const int ran = max_m - int(refused.size());
  const std::string refused_text = refused.empty()
                                       ? ""
                                       : std::to_string(refused.size()) + " of " +
                                             std::to_string(max_m) + " refused, first " + refusal;
  if (ran == 0) return {label, Outcome::kSkip, "every m is refused (" + refusal + ")"};
  std::string d = std::to_string(ran) + " layouts of m 1.." + std::to_string(max_m) +
                  " run together; at most " + std::to_string(most_flying) +
                  " micro-batches in flight";
  if (v > 1) d += " (" + std::to_string(most_buffers) + " chunk activations)";
  if (bound > 0) d += " (bound " + std::to_string(bound) + ")";
  d += "; " + last;
  if (!refused_text.empty()) d += "; " + refused_text;
  if (p > 1)
    d += out_of_order.empty() ? "; every stage sends in the order its peer receives (runs on a "
                                "transport without tags, such as nccl)"
                              : "; needs a transport with tags (" + out_of_order + ")";
  return {label, Outcome::kPass, d};
}

// More virtual stages than the capabilities allow: both calls say UNSUPPORTED, with a message.
CaseResult refuses_virtual_case(const PipelineBackend& be, const std::string& label) {
  const int32_t v = be.capabilities().max_virtual_stages + 1;
  const triad_pipe_layout_v1 l{0, 2, 4, v};
  int32_t buffers = 0;
  size_t count = 0;
  const int statuses[] = {be.try_num_buffers(l, &buffers),
                          be.try_schedule_call(l, nullptr, 0, &count)};
  const char* const calls[] = {"num_buffers()", "schedule()"};
  for (int i = 0; i < 2; ++i) {
    if (statuses[i] != TRIAD_ERR_UNSUPPORTED)
      return {label, Outcome::kFail,
              std::string(calls[i]) + " of " + pipe_layout_text(l) + " returned " +
                  status_name(statuses[i]) + ", not UNSUPPORTED (" +
                  describe_capabilities(be.capabilities()) + ")"};
  }
  const std::string msg = be.last_error();
  if (msg == "no message")
    return {label, Outcome::kFail, "UNSUPPORTED without a message in last_error"};
  return {label, Outcome::kPass, "UNSUPPORTED: " + msg};
}

// Malformed layouts are answered with a status, never scheduled.
CaseResult malformed_case(const PipelineBackend& be, const std::string& label) {
  const triad_pipe_layout_v1 bad[] = {
      {-1, 2, 2, 1}, {2, 2, 2, 1}, {0, 0, 1, 1}, {0, 2, 0, 1}, {0, 2, 2, 0}};
  for (const triad_pipe_layout_v1& l : bad) {
    int32_t buffers = 0;
    size_t count = 0;
    const std::string text = pipe_layout_text(l);
    if (be.try_num_buffers(l, &buffers) == TRIAD_OK)
      return {label, Outcome::kFail, "num_buffers() accepts " + text};
    if (be.try_schedule_call(l, nullptr, 0, &count) == TRIAD_OK)
      return {label, Outcome::kFail, "schedule() accepts " + text};
  }
  return {label, Outcome::kPass, std::to_string(std::size(bad)) + " layouts refused"};
}

// schedule() reports the full length whatever the capacity, writes no more than the capacity,
// and answers the same twice.
CaseResult capacity_case(const PipelineBackend& be, const std::string& label) {
  const triad_pipe_layout_v1 l{0, 2, 4, 1};
  PipeSchedule full, again;
  int status = TRIAD_OK;
  if (std::string why = be.try_schedule(l, &full, &status); !why.empty())
    return {label, status == TRIAD_ERR_UNSUPPORTED ? Outcome::kSkip : Outcome::kFail,
            pipe_layout_text(l) + ": " + why};
  if (std::string why = be.try_schedule(l, &again, &status); !why.empty())
    return {label, Outcome::kFail, "the second call: " + why};
  auto same = [](const triad_pipe_instr_v1& a, const triad_pipe_instr_v1& b) {
    return a.op == b.op && a.micro_batch == b.micro_batch && a.buffer == b.buffer &&
           a.chunk == b.chunk;
  };
  if (full.buffers != again.buffers || full.instrs.size() != again.instrs.size() ||
      !std::equal(full.instrs.begin(), full.instrs.end(), again.instrs.begin(), same))
    return {label, Outcome::kFail, "two calls for " + pipe_layout_text(l) + " answer differently"};
  const size_t n = full.instrs.size();
  if (n == 0) return {label, Outcome::kFail, "an empty stream for " + pipe_layout_text(l)};
  const triad_pipe_instr_v1 sentinel{-7, -7, -7, -7};
  std::vector<triad_pipe_instr_v1> part(n, sentinel);
  size_t count = 0;
  const int s = be.try_schedule_call(l, part.data(), n - 1, &count);
  if (s != TRIAD_OK)
    return {label, Outcome::kFail,
            "schedule() with capacity " + std::to_string(n - 1) + " returned " + status_name(s)};
  if (count != n)
    return {label, Outcome::kFail,
            "schedule() with capacity " + std::to_string(n - 1) + " reports " +
                std::to_string(count) + " instructions, not " + std::to_string(n)};
  if (!same(part[n - 1], sentinel))
    return {label, Outcome::kFail,
            "schedule() wrote beyond its capacity of " + std::to_string(n - 1)};
  if (!std::equal(full.instrs.begin(), full.instrs.end() - 1, part.begin(), same))
    return {label, Outcome::kFail, "a partial copy differs from the full stream"};
  return {label, Outcome::kPass,
          std::to_string(n) + " instructions, capacity " + std::to_string(n - 1) + " honoured"};
}

}  // namespace

Summary run_pipeline_suite(const std::string& so_path, const PipelineSuiteOptions& o) {
  Summary sum;
  const auto emit = counting(sum, o.on_case);
  CoreServices services;
  auto plugin = PluginLoader().load_file(so_path, "pipeline");
  PipelineBackend be(plugin, resolve_params(plugin->descriptor(), o.params, "pipeline"),
                     services.c_services());
  const int32_t max_v = be.capabilities().max_virtual_stages;
  const std::string& name = be.name();
  const int vs = max_v <= 0 ? o.max_virtual_stages : std::min<int>(max_v, o.max_virtual_stages);
  for (int p = 1; p <= o.max_stages; ++p)
    for (int v = 1; v <= vs; ++v)
      emit(layout_case(
          be, p, v, o.max_micro_batches,
          name + " p=" + std::to_string(p) + (vs > 1 ? " v=" + std::to_string(v) : "")));
  if (max_v > 0) emit(refuses_virtual_case(be, name + " refuses v=" + std::to_string(max_v + 1)));
  emit(malformed_case(be, name + " malformed layouts"));
  emit(capacity_case(be, name + " schedule capacity"));
  return sum;
}

}  // namespace triad::conformance
