// triad-bench-collectives: all-reduce, reduce-scatter and all-gather bandwidth of a
// transport plugin, in nccl-tests' format and definitions:
//   size   bytes of the whole vector (all-reduce: each rank's buffer; reduce-scatter: the
//          send buffer; all-gather: the receive buffer)
//   count  elements per rank's share (all-reduce: the whole vector; else size / n)
//   time   microseconds per operation, averaged over the timed iterations, max over ranks
//   algbw  size / time;  busbw = algbw * 2(n-1)/n (all-reduce), (n-1)/n (the others)
// Every size is checked for exact results (#wrong). Run it through the launcher, one rank
// per process, on any transport:
//   triad-launch --nproc-per-node 4 --exec build/bin/triad-bench-collectives --transport ucx
// Each rank meets the others through the launcher's rendezvous store (MASTER_ADDR,
// MASTER_PORT, TRIAD_JOB_TOKEN); rank 0 prints the table and writes --json. Outside the
// launcher, -n N forks N ranks on this machine for a quick local run.
// tools/bench-collectives-vs-mpi runs Open MPI (tests/dist/mpi_allreduce_peer.c) on the
// same sizes and prints the ratio.
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "triad/core/cli.hpp"
#include "triad/core/dist/dist_env.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int ranks = 2;
  std::string transport = "ucx";
  std::string plugin_file;
  std::vector<std::string> ops = {"allreduce", "reducescatter", "allgather"};
  std::string dtype = "float";
  uint64_t min_bytes = 8, max_bytes = uint64_t(1) << 30;
  int factor = 2;
  int warmup = 5, iters = 20;
  std::string json;
  bool overwrite = false;  // --json may replace an existing file
  std::vector<std::string> params;
  long long timeout_ms = 120000;
};

struct Row {
  uint64_t size = 0, count = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  long long wrong = 0;
};

// Same rule as the MPI peer: large sizes get fewer iterations (at least 2) so that a sweep
// to 1 GiB stays within minutes.
int iterations_for(uint64_t bytes, int iters) {
  const uint64_t budget = uint64_t(iters) * (uint64_t(32) << 20);
  return int(std::max<uint64_t>(
      2, std::min<uint64_t>(uint64_t(iters), budget / std::max<uint64_t>(bytes, 1))));
}

float value(int rank, uint64_t i) {
  return float((i * 7 + uint64_t(rank) * 13 + 1) % 61);
}

DLDataType parse_dtype(const std::string& s, size_t* esize) {
  if (s == "float" || s == "fp32") return *esize = 4, triad::dl_float32();
  if (s == "bfloat16" || s == "bf16") return *esize = 2, triad::dl_bfloat16();
  if (s == "half" || s == "fp16") return *esize = 2, triad::dl_float16();
  throw triad::UserError("--dtype '" + s + "' is not one of float, bfloat16, half");
}

void put(DLDataType t, void* b, uint64_t i, float v) {
  if (t.bits == 32) return void(static_cast<float*>(b)[i] = v);
  if (t.code == kDLBfloat) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return void(static_cast<uint16_t*>(b)[i] = uint16_t(u >> 16));
  }
  static_cast<_Float16*>(b)[i] = _Float16(v);
}

float get(DLDataType t, const void* b, uint64_t i) {
  if (t.bits == 32) return static_cast<const float*>(b)[i];
  if (t.code == kDLBfloat) {
    uint32_t u = uint32_t(static_cast<const uint16_t*>(b)[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  return float(static_cast<const _Float16*>(b)[i]);
}

// Where this rank finds the others.
struct Job {
  int rank = 0, world = 1;
  std::string store_host = "127.0.0.1";
  uint16_t store_port = 0;
  std::string token;
};

// One rank: runs every op over every size; rank 0 prints the tables and writes --json.
// Returns 1 when any result was wrong.
int run_rank(const Job& job, const Options& o) {
  using namespace triad;
  PluginLoader loader;
  auto plugin = o.plugin_file.empty() ? loader.load("transport", o.transport)
                                      : loader.load_file(o.plugin_file, "transport");
  std::map<std::string, std::string> given;
  for (const auto& p : o.params) {
    auto eq = p.find('=');
    if (eq == std::string::npos) throw UserError("--param '" + p + "': expected key=value");
    given[p.substr(0, eq)] = p.substr(eq + 1);
  }
  ResolvedParams params = resolve_params(plugin->descriptor(), given, "transport");
  CoreServices services;
  Transport t(plugin, params, services.c_services());
  RendezvousClient store(job.store_host, job.store_port, job.token, std::chrono::seconds(60));
  Communicator world = t.init_world(job.rank, job.world, store, "bench/");
  const int rank = job.rank;
  const int n = world.size();
  const auto timeout = std::chrono::milliseconds(o.timeout_ms);
  size_t es = 0;
  const DLDataType dt = parse_dtype(o.dtype, &es);
  nlohmann::json out = nlohmann::json::array();

  for (const std::string& op : o.ops) {
    const bool ar = op == "allreduce", rs = op == "reducescatter", ag = op == "allgather";
    if (!ar && !rs && !ag)
      throw UserError("--op '" + op + "' is not allreduce, reducescatter or allgather");
    if (rank == 0) {
      std::printf("# %s, %d ranks, transport %s, %s\n", op.c_str(), n, t.name().c_str(),
                  o.dtype.c_str());
      std::printf("#%11s %13s %9s %7s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
                  "root", "time", "algbw", "busbw", "#wrong");
      std::printf("#%11s %13s %9s %7s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "",
                  "(us)", "(GB/s)", "(GB/s)", "");
      std::fflush(stdout);
    }
    std::vector<Row> rows;
    for (uint64_t size = o.min_bytes; size <= o.max_bytes; size *= uint64_t(o.factor)) {
      const uint64_t total = size / es;  // elements of the whole vector
      if (total == 0) continue;
      uint64_t off = 0, mine = 0;
      triad_transport_block(total, n, world.rank(), &off, &mine);
      const uint64_t send_n = ar || rs ? total : mine, recv_n = ar || ag ? total : mine;
      std::vector<char> send(std::max<uint64_t>(1, send_n * es)),
          recv(std::max<uint64_t>(1, recv_n * es));
      for (uint64_t i = 0; i < send_n; ++i)
        put(dt, send.data(), i, value(world.rank(), ag ? off + i : i));
      auto once = [&] {
        if (ar) return world.all_reduce(send.data(), recv.data(), total, dt);
        if (rs) return world.reduce_scatter(send.data(), recv.data(), total, dt);
        return world.all_gather(send.data(), recv.data(), total, dt);
      };
      for (int i = 0; i < o.warmup; ++i) once().wait(timeout);
      const int iters = iterations_for(size, o.iters);
      world.barrier().wait(timeout);
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) once().wait(timeout);
      float us =
          float(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters);

      // Exact check of the last result.
      float wrong = 0;
      for (uint64_t i = 0; i < recv_n; ++i) {
        const uint64_t gi = rs ? off + i : i;
        float want = 0;
        if (ag) {
          int owner = 0;
          for (int k = 0; k < n; ++k) {
            uint64_t o2 = 0, l2 = 0;
            triad_transport_block(total, n, k, &o2, &l2);
            if (gi >= o2 && gi < o2 + l2) owner = k;
          }
          want = value(owner, gi);
        } else {
          for (int k = 0; k < n; ++k) want += value(k, gi);
        }
        if (get(dt, recv.data(), i) != want) wrong += 1;
      }
      float stats[2] = {us, wrong};
      world.all_reduce(&stats[0], &stats[0], 1, dl_float32(), TRIAD_REDUCE_MAX).wait(timeout);
      world.all_reduce(&stats[1], &stats[1], 1, dl_float32(), TRIAD_REDUCE_SUM).wait(timeout);
      if (rank != 0) continue;
      Row r;
      r.size = size;
      r.count = ar ? total : total / uint64_t(n);
      r.time_us = stats[0];
      r.algbw = double(size) / (r.time_us * 1e3);
      r.busbw = r.algbw * (ar ? 2.0 * (n - 1) / n : double(n - 1) / n);
      r.wrong = (long long)stats[1];
      std::printf(" %11llu %13llu %9s %7s %6d %10.2f %8.2f %8.2f %7lld\n",
                  (unsigned long long)r.size, (unsigned long long)r.count, o.dtype.c_str(),
                  ag ? "none" : "sum", -1, r.time_us, r.algbw, r.busbw, r.wrong);
      std::fflush(stdout);
      rows.push_back(r);
      out.push_back({{"op", op},
                     {"ranks", n},
                     {"transport", t.name()},
                     {"dtype", o.dtype},
                     {"size", r.size},
                     {"count", r.count},
                     {"time_us", r.time_us},
                     {"algbw", r.algbw},
                     {"busbw", r.busbw},
                     {"wrong", r.wrong},
                     {"iters", iters}});
    }
    if (rank == 0) {
      long long bad = 0;
      double sum_bw = 0;
      for (auto& r : rows) bad += r.wrong, sum_bw += r.busbw;
      std::printf("# Out of bounds values : %lld %s\n", bad, bad ? "FAILED" : "OK");
      std::printf("# Avg bus bandwidth    : %g\n#\n",
                  rows.empty() ? 0.0 : sum_bw / double(rows.size()));
    }
  }
  world.barrier().wait(timeout);
  if (rank == 0 && !o.json.empty()) {  // its folder was checked before any rank started
    const std::filesystem::path dir = std::filesystem::path(o.json).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    write_file_atomic(o.json, out.dump(1) + "\n");
  }
  long long bad = 0;
  for (auto& r : out) bad += r["wrong"].get<long long>();
  return bad ? 1 : 0;
}

uint64_t parse_bytes(const std::string& flag, const std::string& s) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = s.substr(used);
  double mul = unit.empty() || unit == "B"    ? 1
               : unit == "K" || unit == "KiB" ? 1024.0
               : unit == "M" || unit == "MiB" ? 1048576.0
               : unit == "G" || unit == "GiB" ? 1073741824.0
                                              : -1;
  if (mul < 0 || !(v >= 0) || v * mul > 1e15)
    throw triad::UserError(flag + " '" + s +
                           "' is not a size; write bytes with an optional K, M or G, e.g. 64K");
  return uint64_t(v * mul);
}

// What every rank would refuse, refused once before any rank starts: the operations, the dtype,
// the parameters' form, the sizes' order and the --json file's place.
void check_options(const Options& o) {
  for (const std::string& op : o.ops)
    if (op != "allreduce" && op != "reducescatter" && op != "allgather")
      throw triad::UserError("--op '" + op + "' is not allreduce, reducescatter or allgather");
  size_t es = 0;
  parse_dtype(o.dtype, &es);
  for (const auto& p : o.params)
    if (p.find('=') == std::string::npos)
      throw triad::UserError("--param '" + p + "': expected key=value");
  if (o.min_bytes > o.max_bytes)
    throw triad::UserError("--min-bytes " + std::to_string(o.min_bytes) + " is above --max-bytes " +
                           std::to_string(o.max_bytes) + "; swap them");
  if (!o.json.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(o.json, ec))
      throw triad::UserError("--json '" + o.json + "' is a folder; give a file name in it");
    const std::filesystem::path dir = std::filesystem::path(o.json).parent_path();
    triad::check_output_folder("--json", dir.empty() ? "." : dir.string(),
                               "give a --json file in a folder you can write");
    if (triad::is_dangling_link(o.json))
      throw triad::UserError("--json '" + o.json +
                             "' is a symbolic link to nothing; remove the link, or choose another "
                             "file");
    if (std::filesystem::exists(std::filesystem::symlink_status(o.json, ec)) && !o.overwrite)
      throw triad::UserError("--json '" + o.json +
                             "' already exists; add --overwrite to replace it, or choose another "
                             "file");
  }
}

// The largest message's send and receive buffers in each of the ranks on this machine, refused
// before any rank starts when they do not fit its available memory (it was std::bad_alloc).
void check_buffers_fit(const Options& o, int ranks_here) {
  const size_t available = triad::host_memory_available();
  const double need = 2.0 * double(o.max_bytes) * ranks_here;
  if (available == 0 || need <= double(available)) return;
  throw triad::UserError(
      "--max-bytes " + std::to_string(o.max_bytes) + " needs " + triad::memory_text(need) +
      " of buffers (a send and a receive copy of the largest message in each of " +
      std::to_string(ranks_here) + " ranks here), but " + triad::memory_text(double(available)) +
      " is available; give a smaller -e, e.g. -e 1G");
}

// -n: this process serves the rendezvous and forks the ranks.
int run_forked(const Options& o) {
  const std::string token = triad::make_job_token();
  triad::RendezvousServer server("127.0.0.1", 0, token);
  std::vector<pid_t> kids;
  // Each failing rank leaves its reason here.
  std::string tmpl = (std::filesystem::temp_directory_path() / "triad-bench-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw triad::UserError("cannot create a temporary folder");
  const std::filesystem::path errors = tmpl;
  for (int r = 0; r < o.ranks; ++r) {
    pid_t pid = fork();
    if (pid < 0) throw triad::UserError("fork failed");
    if (pid == 0) {
      int code = 0;
      std::string why;
      try {
        code = run_rank(Job{r, o.ranks, "127.0.0.1", server.port(), token}, o);
      } catch (const std::exception& e) {
        why = e.what();
        code = triad::kExitUserError;
      }
      // The reason goes to the parent, which prints one line for the job.
      if (!why.empty()) {
        const std::filesystem::path f = errors / std::to_string(r);
        if (FILE* out = std::fopen(f.c_str(), "w")) {
          std::fputs(why.c_str(), out);
          std::fclose(out);
        }
      }
      std::fflush(stdout);
      _exit(code);
    }
    kids.push_back(pid);
  }
  server.start();
  int rc = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    rc = std::max(rc, code);
  }
  // The lowest rank's reason (every rank meets the same bad input).
  for (int r = 0; r < o.ranks; ++r) {
    std::ifstream in(errors / std::to_string(r));
    std::string why((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (why.empty()) continue;
    std::filesystem::remove_all(errors);
    for (char& c : why)
      if (c == '\n') c = ' ';
    return triad::cli::fail(
        "triad-bench-collectives",
        (o.ranks > 1 ? "rank " + std::to_string(r) + ": " : std::string()) + why);
  }
  std::filesystem::remove_all(errors);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Collective bandwidth of a transport plugin (nccl-tests format). Run one rank per "
      "process under the launcher:\n"
      "  triad-launch --nproc-per-node 4 --exec triad-bench-collectives --transport ucx\n"
      "or fork the ranks locally with -n N."};
  Options o;
  std::string min_b = "8", max_b = "1G", ops = "allreduce,reducescatter,allgather";
  auto* ranks_opt =
      app.add_option("-n,--ranks", o.ranks,
                     "outside the launcher: fork this many ranks on this machine (default 2)")
          ->check(triad::cli::in_range(1, 64));
  app.add_option("--transport", o.transport, "transport plugin name (libtriad-transport-NAME.so)");
  app.add_option("--plugin", o.plugin_file, "a transport plugin file instead of --transport");
  app.add_option("--op", ops, "comma-separated: allreduce, reducescatter, allgather");
  app.add_option("-d,--dtype", o.dtype, "float, bfloat16 or half");
  app.add_option("-b,--min-bytes", min_b, "smallest size (e.g. 8, 64K, 1M)");
  app.add_option("-e,--max-bytes", max_b, "largest size (e.g. 1G)");
  app.add_option("-f,--step-factor", o.factor, "size multiplier between steps")
      ->check(triad::cli::in_range(2, 1024));
  app.add_option("-w,--warmup", o.warmup, "untimed iterations per size")
      ->check(triad::cli::in_range(0, 100000));
  app.add_option("-i,--iters", o.iters, "timed iterations per size (fewer above 32 MiB)")
      ->check(triad::cli::in_range(1, 100000));
  app.add_option("--json", o.json, "write the results as JSON here");
  app.add_flag("--overwrite", o.overwrite, "replace an existing --json file");
  app.add_option("--param", o.params, "transport parameter key=value (repeatable)");
  app.add_option("--timeout-ms", o.timeout_ms, "limit for every wait")
      ->check(triad::cli::at_least(1));
  return triad::cli::run_main("triad-bench-collectives", app, [&] {
    triad::cli::parse(app, argc, argv);
    o.min_bytes = parse_bytes("--min-bytes", min_b);
    if (o.min_bytes == 0)
      throw triad::UserError("--min-bytes 0: the smallest message is 1 byte; give e.g. -b 8");
    o.max_bytes = parse_bytes("--max-bytes", max_b);
    o.ops.clear();
    std::stringstream ss(ops);
    for (std::string op; std::getline(ss, op, ',');)
      if (!op.empty()) o.ops.push_back(op);
    check_options(o);

    const triad::DistEnv env = triad::DistEnv::from_environment();
    const bool launched = env.distributed() || std::getenv("WORLD_SIZE") != nullptr;
    check_buffers_fit(o, launched ? std::max(1, env.local_world_size) : o.ranks);
    if (!launched) return run_forked(o);
    if (ranks_opt->count() > 0)
      throw triad::UserError("-n " + std::to_string(o.ranks) +
                             " forks ranks, but this process is already rank " +
                             std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                             " started by the launcher (WORLD_SIZE is set); drop -n and set the "
                             "ranks with triad-launch --nproc-per-node");
    if (!env.distributed()) {
      o.ranks = 1;
      return run_forked(o);  // a launched world of one needs no store of the launcher's
    }
    return run_rank(
        Job{env.rank, env.world_size, env.master_addr, uint16_t(env.master_port), env.token}, o);
  });
}
