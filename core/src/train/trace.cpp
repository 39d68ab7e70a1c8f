#include "triad/core/train/trace.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "triad/core/dist/transport.hpp"
#include "triad/core/io/files.hpp"

namespace triad {

namespace detail {
StepTrace* active_trace = nullptr;
}

namespace {

// Each kind's category name and track (Chrome's tid; 0 is the step's own): compute,
// communication, and one track for the rest. Indexed by TraceKind.
constexpr int kStepTrack = 0;
constexpr struct {
  const char* name;
  int track;
} kKinds[] = {{"compute", 1}, {"communication", 2}, {"optimizer", 3}, {"data", 3}, {"other", 3}};
int track_of(TraceKind k) {
  return kKinds[int(k)].track;
}
const char* kind_name(TraceKind k) {
  return kKinds[int(k)].name;
}

double micros(StepTrace::Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

nlohmann::json metadata(int pid, int tid, const char* what, const std::string& name) {
  nlohmann::json m = {{"ph", "M"}, {"pid", pid}, {"name", what}, {"args", {{"name", name}}}};
  if (tid >= 0) m["tid"] = tid;
  return m;
}

std::filesystem::path rank_file(const std::filesystem::path& dir, int rank) {
  return dir / ("trace.rank-" + std::to_string(rank) + ".json");
}

}  // namespace

StepTrace::StepTrace(int rank, std::vector<int> steps) : rank_(rank), steps_(std::move(steps)) {}

StepTrace::~StepTrace() {
  if (detail::active_trace == this) detail::active_trace = nullptr;
}

void StepTrace::begin_step(int step) {
  if (std::find(steps_.begin(), steps_.end(), step) == steps_.end()) return;
  step_ = step;
  mb_ = -1;
  detail::active_trace = this;
  step_start_ = Clock::now();
}

void StepTrace::end_step() {
  if (detail::active_trace != this) return;
  const Clock::time_point t1 = Clock::now();
  detail::active_trace = nullptr;
  events_.push_back({{"name", "step " + std::to_string(step_)},
                     {"cat", "step"},
                     {"ph", "X"},
                     {"pid", rank_},
                     {"tid", kStepTrack},
                     {"ts", micros(step_start_)},
                     {"dur", micros(t1) - micros(step_start_)},
                     {"args", {{"step", step_}}}});
}

void StepTrace::add(TraceKind kind, std::string name, Clock::time_point t0, Clock::time_point t1,
                    nlohmann::json args) {
  if (!args.is_object()) args = nlohmann::json::object();
  args["step"] = step_;
  if (mb_ >= 0 && !args.contains("mb")) args["mb"] = mb_;
  events_.push_back({{"name", std::move(name)},
                     {"cat", kind_name(kind)},
                     {"ph", "X"},
                     {"pid", rank_},
                     {"tid", track_of(kind)},
                     {"ts", micros(t0)},
                     {"dur", micros(t1) - micros(t0)},
                     {"args", std::move(args)}});
}

nlohmann::json StepTrace::events() const {
  nlohmann::json out = nlohmann::json::array();
  out.push_back(metadata(rank_, -1, "process_name", "rank " + std::to_string(rank_)));
  out.push_back(metadata(rank_, -1, "process_sort_index", std::to_string(rank_)));
  out.back()["args"] = {{"sort_index", rank_}};
  const char* tracks[] = {"step", "compute", "communication", "other"};
  for (int t = 0; t < 4; ++t) out.push_back(metadata(rank_, t, "thread_name", tracks[t]));
  for (const auto& e : events_) out.push_back(e);
  return out;
}

std::string StepTrace::write(const std::filesystem::path& dir, Communicator* world, int world_size,
                             std::chrono::milliseconds timeout) const {
  if (!enabled()) return "";
  std::filesystem::create_directories(dir);
  write_file_atomic(rank_file(dir, rank_), nlohmann::json(events()).dump());
  // Every rank's file is in place (renamed and fsynced) before rank 0 reads them.
  if (world && *world) world->barrier().wait(timeout);
  if (rank_ != 0) return "";
  nlohmann::json all = nlohmann::json::array();
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    const std::filesystem::path f = rank_file(dir, r);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec)) {
      missing.push_back(r);
      continue;
    }
    const nlohmann::json events = nlohmann::json::parse(
        read_regular_file(f.string(), "rank " + std::to_string(r) + "'s step trace",
                          "let every rank finish writing it"));
    for (const auto& e : events) all.push_back(e);
    std::filesystem::remove(f, ec);
  }
  // Time from the earliest span: steady_clock is one clock for the processes of a node.
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& e : all)
    if (e.contains("ts")) origin = std::min(origin, e["ts"].get<double>());
  for (auto& e : all)
    if (e.contains("ts")) e["ts"] = e["ts"].get<double>() - origin;
  const nlohmann::json doc = {{"traceEvents", std::move(all)},
                              {"displayTimeUnit", "ms"},
                              {"otherData", {{"ranks", world_size}, {"steps", steps_}}}};
  const std::filesystem::path out = dir / "trace.json";
  write_file_atomic(out, doc.dump());
  if (!missing.empty())
    spdlog::warn(
        "step trace: no file from {} of {} ranks (first: rank {}) in {}; ranks that do "
        "not share this file system write theirs into their own profile_dir",
        missing.size(), world_size, missing.front(), dir.string());
  return out.string();
}

void TraceSpan::start(TraceKind kind, const char* name, int index) {
  kind_ = kind;
  name_ = index >= 0 ? std::string(name) + " " + std::to_string(index) : std::string(name);
  t0_ = StepTrace::Clock::now();
}

void TraceSpan::finish() {
  const auto t1 = StepTrace::Clock::now();
  try {
    trace_->add(kind_, std::move(name_), t0_, t1, std::move(args_));
  } catch (...) {  // a destructor: a span that cannot be recorded is dropped
  }
}

}  // namespace triad
