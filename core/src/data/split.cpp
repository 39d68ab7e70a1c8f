// Megatron's --split: the train, validation and test parts of a dataset (data.hpp).
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "triad/core/data/data.hpp"
#include "triad/core/error.hpp"

namespace triad {

const char* part_name(DataPart p) {
  return p == DataPart::train ? "training" : p == DataPart::valid ? "validation" : "test";
}

std::pair<int64_t, int64_t> split_range(const std::string& split, int64_t n, DataPart part) {
  std::vector<double> w;
  if (split.empty()) {
    w = {1, 0, 0};
  } else {
    const auto bad = [&](const std::string& why) {
      return UserError("data.split '" + split + "' " + why +
                       "; write Megatron's train,validation,test weights, e.g. \"969,30,1\"");
    };
    std::string item;
    std::istringstream in(split);
    const char sep = split.find('/') != std::string::npos ? '/' : ',';
    while (std::getline(in, item, sep)) {
      size_t used = 0;
      double x = -1;
      try {
        x = std::stod(item, &used);
      } catch (const std::exception&) {
        throw bad("has '" + item + "', not a number");
      }
      if (item.find_first_not_of(" \t", used) != std::string::npos || !(x >= 0) ||
          !std::isfinite(x))
        throw bad("has '" + item + "', not a non-negative number");
      w.push_back(x);
    }
    if (w.empty() || w.size() > 3) throw bad("has " + std::to_string(w.size()) + " weights");
    w.resize(3, 0.0);
  }
  const double sum = w[0] + w[1] + w[2];
  if (!(sum > 0)) throw UserError("data.split '" + split + "' gives every part weight 0");
  // megatron/core/datasets/utils.py get_split_indices (Python's round: half to even).
  int64_t index[4] = {0, 0, 0, 0};
  for (int k = 0; k < 3; ++k) index[k + 1] = index[k] + int64_t(std::nearbyint(w[k] / sum * n));
  const int64_t diff = index[3] - n;
  for (int k = 1; k < 4; ++k) index[k] -= diff;
  const int p = int(part);
  return {std::clamp<int64_t>(index[p], 0, n), std::clamp<int64_t>(index[p + 1], 0, n)};
}

}  // namespace triad
