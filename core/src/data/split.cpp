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

std::pair<int64_t, int64_t> split_range(const std::string& split, int64_t n, DataPart part,
                                        const std::string& builder) {
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
  int64_t index[4] = {0, 0, 0, 0};
  if (builder == "megatron-lm") {
    // megatron/core/datasets/utils.py normalize + blended_megatron_dataset_config.py
    // convert_split_vector_to_split_matrix, then blended_megatron_dataset_builder.py
    // _build_megatron_dataset_splits: the cumulative boundaries, each round(c·n) (Python's round:
    // half to even); a part of weight 0 is empty.
    double cum = 0;
    for (int k = 0; k < 3; ++k) {
      const double next = cum + w[k] / sum;
      index[k + 1] = int64_t(std::nearbyint(next * double(n)));
      cum = next;
    }
  } else {
    // Megatron-DeepSpeed's megatron/data/dataset_utils.py get_train_valid_test_split_: each part
    // round(w·n) items (Python's round: half to even), all shifted so that they end at n.
    for (int k = 0; k < 3; ++k)
      index[k + 1] = index[k] + int64_t(std::nearbyint(w[k] / sum * double(n)));
    const int64_t diff = index[3] - n;
    for (int k = 1; k < 4; ++k) index[k] -= diff;
  }
  const int p = int(part);
  return {std::clamp<int64_t>(index[p], 0, n), std::clamp<int64_t>(index[p + 1], 0, n)};
}

}  // namespace triad
