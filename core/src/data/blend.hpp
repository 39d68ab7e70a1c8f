// data.path given as a list (data.kind indexed): Megatron's --data-path syntax, read by the
// config checks (to point at the file and line) and by the data loader. Header-only, so the
// config code and the data code each compile it without linking the other.
//
//   [prefix]                               one dataset
//   [w1, prefix1, w2, prefix2, ...]        a blend: weights (numbers, positive; normalized to
//                                          sum to 1) before their prefixes
//   [prefix1, prefix2, ...]                a blend weighted by each dataset's size (its samples
//                                          per epoch), as Megatron blends prefixes given alone
#pragma once

#include <charconv>
#include <cmath>
#include <string>
#include <vector>

namespace triad::data {

struct BlendEntry {
  double weight = 0;  // 0: none given (weighted by size)
  std::string prefix;
};

inline bool parse_blend_weight(const std::string& text, double& out) {
  std::string_view t = text;
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  if (t.empty()) return false;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  return ec == std::errc() && end == t.data() + t.size();
}

// What is wrong with a list, and the fix; problem is empty when the list is good.
struct BlendProblem {
  std::string problem, fix;
  bool ok() const { return problem.empty(); }
  // "data.path <problem> (<where>); <fix>"
  std::string message(const std::string& where) const {
    return "data.path " + problem + (where.empty() ? "" : " (" + where + ")") + "; " + fix;
  }
};

// Fills `out` from the list's items as written.
inline BlendProblem parse_blend(const std::vector<std::string>& items,
                                std::vector<BlendEntry>& out) {
  out.clear();
  const std::string syntax =
      "write [weight, prefix, weight, prefix, ...] (Megatron's --data-path syntax, e.g. "
      "[0.3, data/a_text_document, 0.7, data/b_text_document]) or a list of prefixes alone";
  if (items.empty()) return {"is an empty list", syntax};
  for (size_t k = 0; k < items.size(); ++k)
    if (items[k].empty()) return {"item " + std::to_string(k + 1) + " is empty", syntax};
  std::vector<bool> number(items.size());
  size_t numbers = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    double v;
    number[k] = parse_blend_weight(items[k], v);
    numbers += number[k];
  }
  if (numbers == 0) {
    for (const std::string& p : items) out.push_back({0.0, p});
    return {};
  }
  if (numbers == items.size()) return {"holds weights only, no dataset prefix", syntax};
  bool pairs = items.size() % 2 == 0;
  for (size_t k = 0; pairs && k < items.size(); k += 2) pairs = number[k];
  if (!pairs) {
    size_t k = 0;
    if (items.size() % 2 != 0) {
      while (!number[k]) ++k;
      return {"has " + std::to_string(items.size()) + " items, mixing weights (item " +
                  std::to_string(k + 1) + ", '" + items[k] + "') and prefixes, but not in pairs",
              syntax};
    }
    while (number[k]) k += 2;
    return {"item " + std::to_string(k + 1) + " ('" + items[k] +
                "') should be a weight (a number) before the prefix that follows it",
            syntax};
  }
  for (size_t k = 0; k < items.size(); k += 2) {
    double w = 0;
    parse_blend_weight(items[k], w);
    if (!std::isfinite(w) || !(w > 0))
      return {"weight '" + items[k] + "' (item " + std::to_string(k + 1) + ", for '" +
                  items[k + 1] + "') is not a positive number",
              "give each dataset a weight above 0, or drop the entry"};
    out.push_back({w, items[k + 1]});
  }
  return {};
}

}  // namespace triad::data
