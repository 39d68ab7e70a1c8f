// Conformance suites: one per plugin kind, run against any plugin of that kind (in-tree or a
// third-party .so given to triad-plugin-test). Cases a plugin declares it cannot run are
// skipped with the reason; everything else is checked against a double-precision reference.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "triad/core/plugins/attention.hpp"

namespace triad::conformance {

enum class Outcome { kPass, kFail, kSkip };

struct CaseResult {
  std::string name;
  Outcome outcome = Outcome::kPass;
  std::string detail;  // errors measured (pass), what went wrong (fail), why (skip)
};

struct Summary {
  int passed = 0, failed = 0, skipped = 0;
  void add(Outcome o) { (o == Outcome::kPass ? passed : o == Outcome::kFail ? failed : skipped)++; }
};

// What a suite calls for each finished case: counts it into `sum` (which must outlive it),
// then passes it on to on_case when that is set.
inline std::function<void(const CaseResult&)> counting(
    Summary& sum, std::function<void(const CaseResult&)> on_case) {
  return [&sum, on_case = std::move(on_case)](const CaseResult& r) {
    sum.add(r.outcome);
    if (on_case) on_case(r);
  };
}

// "N passed, M failed, K skipped"
std::string format_summary(const Summary& s);
// "PASS name (detail)" / "FAIL name: detail" / "SKIP name: detail"
std::string format_case(const CaseResult& r);

struct AttentionSuiteOptions {
  bool quick = false;       // a smaller sweep of shapes (same checks)
  double tolerance = 1e-5;  // max|x - ref| / max(max|ref|, 1e-3) per tensor (lse: 1), fp32
  std::function<void(const CaseResult&)> on_case;  // called as each case finishes
};

// Runs the attention suite: forward (out, lse) and backward (dq, dk, dv) over a sweep of
// shapes, contiguous and strided, causal and not; workspace honoured; backward overwrites;
// inputs left untouched; malformed arguments rejected with a status instead of a crash.
Summary run_attention_suite(AttentionBackend& backend, const AttentionSuiteOptions& options);

struct TensorSuiteOptions {
  std::map<std::string, std::string> params;  // the tensor plugin's parameters (key -> value)
  std::vector<int> tp_sizes = {1, 2, 4};      // each with sequence parallelism off and on
  double tolerance = 1e-5;  // max|x - ref| / max(max|ref|, 1e-3) per tensor, fp32 vs double
  // tp > 1 runs tp real processes over this transport plugin (found on the plugin search path),
  // with a rendezvous server in this process; tp 1 runs here on a one-rank group.
  std::string transport = "ucx";
  std::map<std::string, std::string> transport_params;
  long long op_timeout_ms = 60000;      // every collective
  long long world_timeout_ms = 120000;  // one layout's processes
  std::function<void(const CaseResult&)> on_case;
};

// Runs the tensor suite on the plugin file: for every layout (tp × sequence parallelism) the
// plugin's capabilities include,
//   plan        every role and boundary answered with an in-range value, and the rules of
//               tensor_plan_error() hold (nothing split and only identity at tp 1, a bias split
//               like its column-parallel weight, adjoint collective pairs, ...);
//   splits      every tensor of a small GPT, sliced per the plan and placed back from every
//               rank, is the global tensor exactly, the slices disjoint and covering;
//   mlp block / vocab-parallel cross-entropy
//               each rank computes with its own slices and the plan's collectives on a real
//               communicator: an MLP block (LN, column-parallel fc, GELU, row-parallel proj,
//               residual) forward and backward, and a vocab-parallel embedding lookup, tied LM
//               head and cross-entropy forward and backward, each against the unsplit
//               computation in double precision (itself checked against finite differences);
// and for every layout the capabilities exclude, that each call returns UNSUPPORTED with a
// message (its other cases are reported skipped). Throws UserError when the file is not a usable
// tensor plugin.
Summary run_tensor_suite(const std::string& so_path, const TensorSuiteOptions& options);

struct PipelineSuiteOptions {
  std::map<std::string, std::string> params;  // the pipeline plugin's parameters (key -> value)
  int max_stages = 8;                         // p = 1 .. max_stages
  int max_micro_batches = 32;                 // m = 1 .. max_micro_batches for each p
  int max_virtual_stages = 4;                 // v = 1 .. this, as far as the capabilities allow
  std::function<void(const CaseResult&)> on_case;
};

// Runs the pipeline suite on the plugin file, all in this process (a schedule is data). One case
// per (p, v): for every m, every stage's stream is asked for and run together with
// simulate_pipeline(): each micro-batch runs forward then backward exactly once per chunk on
// every stage, in dependency order (a forward after the previous stage sent its input, a
// backward after the next stage sent its gradient), every send is received in order, no stage
// waits forever, buffers stay within the declared count and are not reused before their
// backward, and the step ends with reduce-tied-grads, reduce-grads, optimizer-step once each.
// Layouts every stage refuses with UNSUPPORTED (and a message) are skipped, a case whose every m
// is refused is reported skipped; for a plugin named 1f1b or interleaved at most p micro-batches
// are in flight per stage (interleaved with v > 1: at most (v + 1)p - 1 chunk activations,
// Megatron's warm-up); the detail reports in flight, buffers and the bubble for the others.
// Besides: more virtual stages than the capabilities allow refused with UNSUPPORTED, malformed
// layouts refused with a status, and schedule() honouring its capacity and answering the same
// twice. Throws UserError when the file is not a usable pipeline plugin.
Summary run_pipeline_suite(const std::string& so_path, const PipelineSuiteOptions& options);

struct DataSuiteOptions {
  std::map<std::string, std::string> params;  // the data plugin's parameters (key -> value)
  std::vector<int> dp_sizes = {1, 2, 4};
  double tolerance = 1e-6;  // max|grad - sum| / max(max|sum|, 1e-3) per arena, fp32 vs double
  // dp > 1 runs dp real processes over this transport plugin (found on the plugin search path),
  // with a rendezvous server in this process; dp 1 runs here on the suite's one-rank
  // communicator.
  std::string transport = "ucx";
  std::map<std::string, std::string> transport_params;
  long long op_timeout_ms = 30000;      // the setup's timeout_ms: the bound on every wait
  long long world_timeout_ms = 180000;  // one (stage, dp) world's processes
  std::function<void(const CaseResult&)> on_case;
};

// Runs the data suite on the plugin file: for every ZeRO stage 0-3 the plugin's capabilities
// list (the others skipped; `stage` set per stage when the plugin declares it), every dp size,
// four arenas (one tensor, many small tensors, odd sizes, three elements: fewer than the ranks)
// and the bucket sweep (the defaults; reduce_bucket_size 7 with overlap_comm on and off, where
// the plugin declares them and --param does not fix them), a fresh instance on host float32
// arenas over three steps:
//   owned ranges  after setup, every rank's owned_range(): the whole arena at stage 0, else
//                 ranges that tile the arena (disjoint, covering, in rank order);
//   gradients     each rank's known gradients reported through grads_ready in backward order
//                 (ranges covering the arena once), then finish_grads: the owned range (stage 0:
//                 the whole arena) holds the sum over the ranks, against double precision;
//   parameters    the owned range set to known values and the rest to rank-dependent garbage,
//                 then after_step: every rank holds the owners' values everywhere;
//   steps 2-3     the same with other values and coarser grads_ready ranges (the plugin resets
//                 its state between steps), the owned range unchanged;
// and per (stage, dp), how the plugin used the borrowed communicator (comm_ref_v1.h): only the
// lent handles, no communicator created or destroyed, only the operations its capabilities
// declare, buffers inside the arenas they start in, and every wait within the setup's
// timeout_ms (a longer one is cut to it). Throws UserError when the file is not a usable data
// plugin.
Summary run_data_suite(const std::string& so_path, const DataSuiteOptions& options);

// One attention problem, every tensor logical (B, H, T, D) contiguous.
struct AttentionProblem {
  int64_t B = 1, H = 1, T = 1, D = 1;
  bool causal = false;
  double scale = 1.0;
  std::vector<float> q, k, v, dout;
};

struct AttentionReference {
  std::vector<double> out, dq, dk, dv;  // (B, H, T, D)
  std::vector<double> lse;              // (B, H, T)
};

// Softmax attention and its gradients for the loss sum(out * dout), in double precision.
AttentionReference reference_attention(const AttentionProblem& p);

}  // namespace triad::conformance
