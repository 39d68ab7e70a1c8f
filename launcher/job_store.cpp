#include "job_store.hpp"

#include "triad/core/error.hpp"

namespace triad::launch {

using namespace std::chrono_literals;

namespace {
const std::string kPrefix = "triad-launch/";
}

std::string JobStore::key(const std::string& what, int agent) const {
  return kPrefix + what + "/" + std::to_string(agent);
}

std::string JobStore::view() const {
  return std::to_string(plan_.world_size) + " ranks in " + std::to_string(plan_.agents) +
         " launchers";
}

void JobStore::announce(const std::string& host, int pid) {
  c_.set(key("view", plan_.agent), view());
  c_.set(key("where", plan_.agent), "host " + host + " pid " + std::to_string(pid));
}

std::vector<int> JobStore::wait_for_agents(std::chrono::milliseconds limit) {
  std::vector<std::string> keys;
  for (int a = 0; a < plan_.agents; ++a) keys.push_back(key("where", a));
  try {
    c_.wait(keys, limit);
    return {};
  } catch (const RendezvousTimeout& t) {
    std::vector<int> missing;
    for (const auto& k : t.missing()) missing.push_back(std::stoi(k.substr(k.rfind('/') + 1)));
    return missing;
  }
}

void JobStore::check_agreement() {
  if (plan_.agent == 0) return;
  std::string theirs = c_.get(key("view", 0), 30s);
  if (theirs != view())
    throw UserError(plan_.agent_name(plan_.agent) + " was started for " + view() + ", but " +
                    plan_.agent_name(0) + " for " + theirs +
                    "; start every node with the same --nnodes and --nproc-per-node");
}

std::string JobStore::where(int agent) {
  return c_.try_get(key("where", agent)).value_or("an unknown host");
}

namespace {
std::string encode(const Failure& f) {
  return std::to_string(f.code) + "\n" + f.desc;
}
Failure decode(const std::string& s) {
  Failure f;
  auto nl = s.find('\n');
  try {
    f.code = std::stoi(s.substr(0, nl));
  } catch (...) {
    f.code = 1;
  }
  f.desc = nl == std::string::npos ? "" : s.substr(nl + 1);
  return f;
}
}  // namespace

Failure JobStore::publish_failure(const Failure& f) {
  if (c_.add(kPrefix + "failures", 1) == 1) {
    c_.set(kPrefix + "failure", encode(f));
    return f;
  }
  try {
    return decode(c_.get(kPrefix + "failure", 5s));
  } catch (const UserError&) {
    return f;  // the first one's launcher died between its two steps
  }
}

namespace {
// "S NS\nCODE\nDESC": S 0 for a death by a signal, 1 for an exit with a code; ordered by (S, NS).
using Rank = std::pair<int, int64_t>;
std::optional<std::pair<Rank, std::string>> read_candidate(const std::string& v) {
  const size_t space = v.find(' '), nl = v.find('\n');
  if (space == std::string::npos || nl == std::string::npos || space > nl) return std::nullopt;
  try {
    return std::make_pair(Rank{std::stoi(v.substr(0, space)), std::stoll(v.substr(space + 1, nl))},
                          v.substr(nl + 1));
  } catch (...) {
    return std::nullopt;
  }
}
}  // namespace

void JobStore::offer_candidate(const Failure& f, int64_t died_ns, bool by_signal) {
  // One key per launcher, holding its first death in that order.
  const Rank mine{by_signal ? 0 : 1, died_ns};
  const std::string k = key("candidate", plan_.agent);
  if (auto old = c_.try_get(k))
    if (auto c = read_candidate(*old); c && c->first <= mine) return;
  c_.set(k, std::to_string(mine.first) + " " + std::to_string(died_ns) + "\n" + encode(f));
}

std::optional<Failure> JobStore::earliest_candidate() {
  std::optional<std::pair<Rank, std::string>> best;
  for (int a = 0; a < plan_.agents; ++a) {
    auto v = c_.try_get(key("candidate", a));
    if (!v) continue;
    auto c = read_candidate(*v);
    if (c && (!best || c->first < best->first)) best = std::move(c);
  }
  if (!best) return std::nullopt;
  return decode(best->second);
}

std::optional<Failure> JobStore::failure() {
  auto v = c_.try_get(kPrefix + "failure");
  if (!v) return std::nullopt;
  return decode(*v);
}

void JobStore::heartbeat() {
  c_.add(key("heartbeat", plan_.agent), 1);
}

int64_t JobStore::heartbeat_of(int agent) {
  return c_.add(key("heartbeat", agent), 0);
}

void JobStore::set_rank_reports(const std::string& text) {
  c_.set(key("ranks", plan_.agent), text);
}

std::string JobStore::rank_reports_of(int agent) {
  return c_.try_get(key("ranks", agent)).value_or("");
}

void JobStore::mark_finished(bool ok) {
  c_.set(key("finished", plan_.agent), ok ? "ok" : "stopped");
}

bool JobStore::finished(int agent) {
  return c_.try_get(key("finished", agent)).has_value();
}

std::string describe_agents(const JobPlan& plan, const std::vector<int>& agents) {
  std::string s = plan.agent_kind + (agents.size() == 1 ? " " : "s ");
  for (size_t i = 0; i < agents.size(); ++i) s += (i ? ", " : "") + std::to_string(agents[i]);
  return s;
}

}  // namespace triad::launch
