#include "watchdog.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace triad::launch {

namespace {

std::string secs(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

std::string step_of(const RankReport& r) {
  return r.step > 0 ? "at step " + std::to_string(r.step) : "before its first step";
}

// "rank 0 has waited 4.1 s for all_reduce(...) over ...; rank 2 ... (and 5 more ranks waiting)"
std::string waiting_list(const std::vector<const RankReport*>& waiting) {
  std::string s;
  const size_t shown = std::min<size_t>(waiting.size(), 3);
  for (size_t i = 0; i < shown; ++i) {
    const RankReport& r = *waiting[i];
    s += (i ? "; " : "") + std::string("rank ") + std::to_string(r.rank) + " has waited " +
         secs(r.wait_age) + " for " + (r.what.empty() ? "a transport operation" : r.what);
  }
  if (waiting.size() > shown)
    s += " (and " + std::to_string(waiting.size() - shown) + " more ranks waiting)";
  return s;
}

}  // namespace

std::optional<std::string> diagnose_stuck(std::vector<RankReport> ranks, double timeout_s) {
  std::sort(ranks.begin(), ranks.end(),
            [](const RankReport& a, const RankReport& b) { return a.rank < b.rank; });
  std::vector<const RankReport*> waiting, silent, idle;
  bool over = false;
  for (const RankReport& r : ranks) {
    if (r.heartbeat_age > kSilentSeconds) silent.push_back(&r);
    if (r.wait_age >= 0) {
      waiting.push_back(&r);
      over = over || r.wait_age > timeout_s;
    } else {
      idle.push_back(&r);
    }
  }
  if (!over) return std::nullopt;
  std::stable_sort(waiting.begin(), waiting.end(), [](const RankReport* a, const RankReport* b) {
    return a->wait_age > b->wait_age;
  });
  const std::string limit = " (collective timeout " + secs(timeout_s) + ")";
  auto others = [&](const RankReport* culprit) {
    std::vector<const RankReport*> w;
    for (const RankReport* r : waiting)
      if (r != culprit) w.push_back(r);
    return w;
  };
  if (!silent.empty()) {
    std::stable_sort(silent.begin(), silent.end(), [](const RankReport* a, const RankReport* b) {
      return a->heartbeat_age > b->heartbeat_age;
    });
    const RankReport& c = *silent.front();
    std::string s = c.who + " stopped making progress: no sign of life for " +
                    secs(c.heartbeat_age) + " " + step_of(c) +
                    " (the process is stopped, or frozen in the kernel)";
    if (silent.size() > 1) s += ", and " + std::to_string(silent.size() - 1) + " more like it";
    const auto w = others(&c);
    if (!w.empty()) s += "; " + waiting_list(w);
    return s + limit;
  }
  if (!idle.empty()) {
    const RankReport& c = *idle.front();
    std::string s = c.who + " is in no transport operation " + step_of(c) +
                    " while the others wait for it (busy or hung in its own work)";
    if (idle.size() > 1) s += ", and " + std::to_string(idle.size() - 1) + " more like it";
    return s + "; " + waiting_list(waiting) + limit;
  }
  return "every rank is waiting for the others: " + waiting_list(waiting) +
         " (operations issued in a different order on different ranks, or a transport fault)" +
         limit;
}

std::string encode_reports(const std::vector<RankReport>& ranks) {
  std::ostringstream o;
  for (const RankReport& r : ranks) {
    auto clean = [](std::string s) {
      std::replace(s.begin(), s.end(), '\n', ' ');
      std::replace(s.begin(), s.end(), '\t', ' ');
      return s;
    };
    o << r.rank << '\t' << r.heartbeat_age << '\t' << r.step << '\t' << r.wait_age << '\t'
      << clean(r.who) << '\t' << clean(r.what) << '\n';
  }
  return o.str();
}

std::vector<RankReport> decode_reports(const std::string& text) {
  std::vector<RankReport> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    size_t at = 0;
    for (int i = 0; i < 5; ++i) {
      const size_t tab = line.find('\t', at);
      if (tab == std::string::npos) break;
      f.push_back(line.substr(at, tab - at));
      at = tab + 1;
    }
    if (f.size() != 5) continue;
    f.push_back(line.substr(at));
    try {
      RankReport r;
      r.rank = std::stoi(f[0]);
      r.heartbeat_age = std::stod(f[1]);
      r.step = std::stoll(f[2]);
      r.wait_age = std::stod(f[3]);
      r.who = f[4];
      r.what = f[5];
      out.push_back(std::move(r));
    } catch (const std::exception&) {
      // a line another launcher's version wrote differently: left out
    }
  }
  return out;
}

}  // namespace triad::launch
