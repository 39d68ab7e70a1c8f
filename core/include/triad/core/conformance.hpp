// Conformance suites: one per plugin kind, run against any plugin of that kind (in-tree or a
// third-party .so given to triad-plugin-test). Cases a plugin declares it cannot run are
// skipped with the reason; everything else is checked against a double-precision reference.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "triad/core/attention.hpp"

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
