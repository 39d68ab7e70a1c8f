#include "triad/core/perf/machine.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "triad/core/error.hpp"
#include "triad/core/model/memory_plan.hpp"

namespace triad {

double Curve::at(double x) const {
  if (points.empty()) return 1.0;
  if (x <= points.front().first) return points.front().second;
  if (x >= points.back().first) return points.back().second;
  for (size_t i = 1; i < points.size(); ++i)
    if (x <= points[i].first) {
      const auto [x0, y0] = points[i - 1];
      const auto [x1, y1] = points[i];
      const double f = std::log(x / x0) / std::log(x1 / x0);
      return y0 + f * (y1 - y0);
    }
  return points.back().second;
}

std::pair<double, double> Link::of(const std::string& op) const {
  const auto it = ops.find(op);
  return it != ops.end() ? it->second : std::make_pair(bandwidth, latency);
}

double Machine::peak_for(const std::string& precision, bool allow_tf32) const {
  if (precision == "fp32" && allow_tf32)
    if (auto it = peak.find("tf32"); it != peak.end()) return it->second;
  if (auto it = peak.find(precision); it != peak.end()) return it->second;
  if (auto it = peak.find("fp32"); it != peak.end()) return it->second;
  throw UserError("machine '" + path + "': device.peak_tflops has no entry for " + precision +
                  " nor fp32; add e.g. 'peak_tflops: {" + precision + ": 989}'");
}

namespace {

// Reads one description, every message naming the file and the key.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what,
                         const std::string& fix) const {
    throw UserError("machine '" + path_ + "': " + key + " " + what + "; " + fix);
  }

  double number(const YAML::Node& n, const std::string& key) const {
    try {
      const double v = n.as<double>();
      if (std::isfinite(v)) return v;
    } catch (const YAML::Exception&) {
    }
    fail(key, "is '" + (n.IsScalar() ? n.Scalar() : std::string("a mapping or list")) + "'",
         "give a number");
  }
  // A required (or, with fallback >= 0, optional) rate above zero.
  double positive(const YAML::Node& parent, const std::string& name, const std::string& key,
                  double fallback = -1) const {
    const YAML::Node n = parent ? parent[name] : YAML::Node();
    if (!n || n.IsNull()) {
      if (fallback >= 0) return fallback;
      fail(key, "is missing", "add it (see configs/machines/README.md for every field)");
    }
    const double v = number(n, key);
    if (v <= 0) fail(key, "is " + n.Scalar(), "give a rate above zero");
    return v;
  }
  // Efficiency points [[flops, share], ...]: flops ascending and above zero, shares in (0, 1].
  Curve curve(const YAML::Node& n, const std::string& key) const {
    if (!n || !n.IsSequence() || n.size() == 0)
      fail(key, "is not a list of [flops, share] points", "give e.g. [[1e9, 0.3], [1e12, 0.75]]");
    Curve c;
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string at = key + "[" + std::to_string(i) + "]";
      if (!n[i].IsSequence() || n[i].size() != 2)
        fail(at, "is not a [flops, share] pair", "give e.g. [1e9, 0.3]");
      const double x = number(n[i][0], at), y = number(n[i][1], at);
      if (x <= 0) fail(at, "has flops " + n[i][0].Scalar(), "give FLOPs above zero");
      if (y <= 0 || y > 1)
        fail(at, "has share " + n[i][1].Scalar(), "give a share of the peak in (0, 1]");
      if (!c.points.empty() && x <= c.points.back().first)
        fail(at, "is not after the point before it", "list the points by ascending FLOPs");
      c.points.emplace_back(x, y);
    }
    return c;
  }
  Link link(const YAML::Node& links, const std::string& name, bool latency_needed) const {
    const std::string key = "links." + name;
    const YAML::Node n = links[name];
    if (!n || !n.IsMap()) fail(key, "is missing", "add {bandwidth_gbs: ..., latency_us: ...}");
    Link l;
    l.bandwidth = positive(n, "bandwidth_gbs", key + ".bandwidth_gbs") * 1e9;
    l.latency = positive(n, "latency_us", key + ".latency_us", latency_needed ? -1 : 0) * 1e-6;
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "p2p"})
      if (const YAML::Node o = n[op]) {
        const std::string k = key + "." + op;
        l.ops[op] = {positive(o, "bandwidth_gbs", k + ".bandwidth_gbs") * 1e9,
                     positive(o, "latency_us", k + ".latency_us", 0) * 1e-6};
      }
    return l;
  }
  void known(const YAML::Node& n, const std::string& where, std::set<std::string> keys) const {
    if (!n.IsMap()) fail(where.empty() ? "the file" : where, "is not a mapping", "see the format");
    for (const auto& kv : n) {
      const std::string k = kv.first.as<std::string>();
      if (!keys.count(k)) {
        std::string list;
        for (const std::string& x : keys) list += (list.empty() ? "" : ", ") + x;
        fail((where.empty() ? "" : where + ".") + k, "is not a field", "use one of " + list);
      }
    }
  }

 private:
  std::string path_;
};

void read_device(const Reader& r, const YAML::Node& d, Machine& m) {
  r.known(
      d, "device",
      {"memory", "peak_tflops", "efficiency", "attention", "memory_bandwidth_gbs", "backward_ratio",
       "attention_backward_ratio", "blocks", "cores", "waiting_share", "share_efficiency"});
  if (!d["memory"]) r.fail("device.memory", "is missing", "add e.g. 'memory: 80GiB'");
  m.memory = double(parse_bytes(d["memory"].Scalar(), "machine '" + m.path + "': device.memory"));
  const YAML::Node peak = d["peak_tflops"];
  if (!peak || !peak.IsMap() || peak.size() == 0)
    r.fail("device.peak_tflops", "is missing", "add e.g. '{bf16: 989, fp32: 67}'");
  for (const auto& kv : peak) {
    const std::string dt = kv.first.as<std::string>();
    if (dt != "fp32" && dt != "tf32" && dt != "bf16" && dt != "fp16")
      r.fail("device.peak_tflops." + dt, "is not a precision", "use fp32, tf32, bf16 or fp16");
    m.peak[dt] = r.positive(peak, dt, "device.peak_tflops." + dt) * 1e12;
  }
  m.efficiency = r.curve(d["efficiency"], "device.efficiency");
  if (const YAML::Node a = d["attention"]) {
    if (!a.IsMap())
      r.fail("device.attention", "is not a mapping", "give {plugin: [[flops, share]]}");
    for (const auto& kv : a) {
      const std::string name = kv.first.as<std::string>();
      m.attention[name] = r.curve(kv.second, "device.attention." + name);
    }
  }
  m.memory_bandwidth = r.positive(d, "memory_bandwidth_gbs", "device.memory_bandwidth_gbs") * 1e9;
  m.backward_ratio = r.positive(d, "backward_ratio", "device.backward_ratio", 2.0);
  m.share_efficiency = r.positive(d, "share_efficiency", "device.share_efficiency", 1.0);
  m.cores = r.positive(d, "cores", "device.cores", 1.0);
  if (const YAML::Node w = d["waiting_share"]) {
    m.waiting_share = r.number(w, "device.waiting_share");
    if (m.waiting_share < 0 || m.waiting_share > 1)
      r.fail("device.waiting_share", "is " + w.Scalar(), "give a share from 0 to 1");
  }
  if (const YAML::Node b = d["blocks"]) {
    if (!b.IsMap())
      r.fail("device.blocks", "is not a mapping",
             "give {plugin: {efficiency: [[flops, share]], backward_ratio: r}}");
    for (const auto& kv : b) {
      const std::string name = kv.first.as<std::string>(), key = "device.blocks." + name;
      r.known(kv.second, key, {"efficiency", "backward_ratio"});
      m.blocks[name] = {r.curve(kv.second["efficiency"], key + ".efficiency"),
                        r.positive(kv.second, "backward_ratio", key + ".backward_ratio", 2.0)};
    }
  }
  if (const YAML::Node a = d["attention_backward_ratio"]) {
    if (!a.IsMap())
      r.fail("device.attention_backward_ratio", "is not a mapping", "give {plugin: ratio}");
    for (const auto& kv : a) {
      const std::string name = kv.first.as<std::string>();
      m.attention_backward_ratio[name] =
          r.positive(a, name, "device.attention_backward_ratio." + name);
    }
  }
}

}  // namespace

Machine load_machine(const std::string& path) {
  const Reader r(path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw UserError("machine '" + path +
                    "' is not a file; give a machine description (configs/machines/*.yaml, or "
                    "one written by triad-simulate calibrate --out FILE)");
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw UserError("machine '" + path + "' is not YAML (line " + std::to_string(e.mark.line + 1) +
                    ": " + e.msg + "); fix the file");
  }
  if (!doc || !doc.IsMap())
    throw UserError("machine '" + path + "' is not a mapping; see configs/machines/README.md");
  r.known(doc, "",
          {"name", "source", "devices_per_node", "device", "links", "host_memory_bandwidth_gbs",
           "overlap", "overheads", "calibration"});
  Machine m;
  m.path = path;
  m.name = doc["name"] ? doc["name"].Scalar() : std::filesystem::path(path).stem().string();
  if (!doc["source"]) r.fail("source", "is missing", "say where the numbers come from");
  m.source = doc["source"].Scalar();
  const double dpn = r.positive(doc, "devices_per_node", "devices_per_node");
  if (dpn != std::floor(dpn)) r.fail("devices_per_node", "is not whole", "give a whole number");
  m.devices_per_node = int(dpn);
  if (!doc["device"]) r.fail("device", "is missing", "add the device's section");
  read_device(r, doc["device"], m);
  const YAML::Node links = doc["links"];
  if (!links || !links.IsMap()) r.fail("links", "is missing", "add intra_node, inter_node, host");
  r.known(links, "links", {"intra_node", "inter_node", "host"});
  m.intra_node = r.link(links, "intra_node", true);
  m.inter_node = r.link(links, "inter_node", true);
  m.host = r.link(links, "host", false);
  m.host_memory_bandwidth =
      r.positive(doc, "host_memory_bandwidth_gbs", "host_memory_bandwidth_gbs", 0) * 1e9;
  if (m.host_memory_bandwidth == 0) m.host_memory_bandwidth = m.memory_bandwidth;
  if (const YAML::Node o = doc["overlap"]) {
    r.known(o, "overlap", {"data_parallel", "tensor_parallel"});
    auto share = [&](const char* k, double& out) {
      if (!o[k]) return;
      out = r.number(o[k], std::string("overlap.") + k);
      if (out < 0 || out > 1)
        r.fail(std::string("overlap.") + k, "is " + o[k].Scalar(), "give a share from 0 to 1");
    };
    share("data_parallel", m.overlap_data_parallel);
    m.overlap_tensor_parallel = m.overlap_data_parallel;  // unless given
    share("tensor_parallel", m.overlap_tensor_parallel);
  }
  if (const YAML::Node o = doc["overheads"]) {
    r.known(o, "overheads", {"per_step_ms", "per_micro_batch_ms", "per_pass_us"});
    auto opt = [&](const char* k, double scale) {
      if (!o[k]) return 0.0;
      const double v = r.number(o[k], std::string("overheads.") + k);
      if (v < 0) r.fail(std::string("overheads.") + k, "is " + o[k].Scalar(), "give 0 or more");
      return v * scale;
    };
    m.per_step = opt("per_step_ms", 1e-3);
    m.per_micro_batch = opt("per_micro_batch_ms", 1e-3);
    m.per_pass = opt("per_pass_us", 1e-6);
  }
  return m;
}

}  // namespace triad
