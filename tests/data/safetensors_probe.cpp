// Test helper for the Python interop check.
//   safetensors_probe write PATH   writes a known file with write_f32
//   safetensors_probe dump PATH    prints what read() sees, as JSON (to_f32 where it converts)
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "triad/core/error.hpp"
#include "triad/core/io/safetensors.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: safetensors_probe write|dump PATH\n";
    return 1;
  }
  const std::string mode = argv[1], path = argv[2];
  try {
    if (mode == "write") {
      // Values the reader recomputes: a[i] = sin(i) * 10^(i % 7 - 3), b[i] = i - 2.5.
      std::vector<float> a(3 * 5 * 7), b(6);
      for (size_t i = 0; i < a.size(); ++i)
        a[i] = static_cast<float>(std::sin(double(i)) * std::pow(10.0, double(i % 7) - 3));
      for (size_t i = 0; i < b.size(); ++i) b[i] = float(i) - 2.5f;
      triad::safetensors::write_f32(path, {{"a", {3, 5, 7}, a.data()}, {"b.bias", {6}, b.data()}},
                                    {{"format", "pt"}, {"note", "ünïcode ✓"}});
      return 0;
    }
    const auto f = triad::safetensors::read(path);
    nlohmann::json out = {{"metadata", f.metadata}, {"tensors", nlohmann::json::object()}};
    for (const auto& [name, t] : f.tensors) {
      nlohmann::json values = nullptr;
      if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16") {
        values = nlohmann::json::array();
        for (float v : t.to_f32())
          values.push_back(std::isfinite(v) ? nlohmann::json(v)
                                            : nlohmann::json(std::to_string(v)));
      }
      out["tensors"][name] = {
          {"dtype", t.dtype}, {"shape", t.shape}, {"nbytes", t.bytes.size()}, {"values", values}};
    }
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const triad::UserError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
