// context-attention-check TRANSPORT.so CP ATTENTION.so...: forks CP ranks, one context-parallel
// group, and checks ContextAttention (ulysses and ring; causal and not; each attention plugin,
// the flash ones with 16-row tiles) against the plugin on the whole sequence: random q, k, v, dout
// (B 2, H 4, T 32 and 64, D 16, fp32) alike on every rank, each rank's slice at the positions
// the component names, held inside a fused qkv row as the model holds them. Every rank's out, dq,
// dk, dv (and lse) must be within 1e-5 of the largest element of the whole reference tensor; the
// byte counters must equal issue 32's formulas exactly.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "forked_ranks.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/error.hpp"
#include "triad/core/model/context_attention.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"

namespace {

using namespace triad;

constexpr int64_t kB = 2, kMaxB = 3, kH = 4, kD = 16;
constexpr double kTolerance = 1e-5;

// A (B, H, T, D) view into memory laid out (B, T, width) with the head dim at column col0.
struct Strided {
  int64_t shape[4], strides[4];
  DLTensor t{};
  Strided(float* base, int64_t B, int64_t T, int64_t H, int64_t D, int64_t width, int64_t col0)
      : Strided(base + col0, B, H, T, D, {T * width, D, width}) {}
  // (B, H, T, D) with these strides of B, H, T.
  Strided(float* data, int64_t B, int64_t H, int64_t T, int64_t D, std::array<int64_t, 3> s) {
    shape[0] = B, shape[1] = H, shape[2] = T, shape[3] = D;
    strides[0] = s[0], strides[1] = s[1], strides[2] = s[2], strides[3] = 1;
    t.data = data;
    t.device = dl_cpu();
    t.ndim = 4;
    t.dtype = dl_float32();
    t.shape = shape;
    t.strides = strides;
  }
  Strided(const Strided&) = delete;
  Strided& operator=(const Strided&) = delete;
  float* at(int64_t b, int64_t h, int64_t s) const {
    return static_cast<float*>(t.data) + b * strides[0] + h * strides[1] + s * strides[2];
  }
};

struct Lse {
  int64_t shape[3];
  DLTensor t{};
  Lse(float* base, int64_t B, int64_t H, int64_t T) {
    shape[0] = B, shape[1] = H, shape[2] = T;
    t.data = base;
    t.device = dl_cpu();
    t.ndim = 3;
    t.dtype = dl_float32();
    t.shape = shape;
  }
};

// The whole problem and the plugin's answer on one process: tensors (B, H, T, D) contiguous.
struct Reference {
  std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;
  Reference(AttentionBackend& attn, int64_t T, int causal, float scale) {
    const size_t n = size_t(kB * kH * T * kD);
    std::mt19937 rng(20240 + uint32_t(T));
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto* x : {&q, &k, &v, &dout}) {
      x->resize(n);
      for (float& e : *x) e = nd(rng);
    }
    out.assign(n, 0.f), dq.assign(n, 0.f), dk.assign(n, 0.f), dv.assign(n, 0.f);
    lse.assign(size_t(kB * kH * T), 0.f);
    auto whole = [&](std::vector<float>& x) {
      return Strided(x.data(), kB, kH, T, kD, {kH * T * kD, T * kD, kD});
    };
    Strided tq = whole(q), tk = whole(k), tv = whole(v), to = whole(out), tg = whole(dout),
            tdq = whole(dq), tdk = whole(dk), tdv = whole(dv);
    Lse tl(lse.data(), kB, kH, T);
    size_t fwd = 0, bwd = 0;
    attn.workspace_size({kB, kH, T, kD, causal, dl_float32(), dl_cpu()}, &fwd, &bwd);
    std::vector<uint8_t> ws(std::max(fwd, bwd) + 64);
    attn.forward({&tq.t, &tk.t, &tv.t, &to.t, &tl.t, causal, scale, ws.data(), ws.size()});
    attn.backward({&tq.t, &tk.t, &tv.t, &to.t, &tl.t, &tg.t, &tdq.t, &tdk.t, &tdv.t, causal, scale,
                   ws.data(), ws.size()});
  }
  float at(const std::vector<float>& x, int64_t T, int64_t b, int64_t h, int64_t t,
           int64_t d) const {
    return x[size_t(((b * kH + h) * T + t) * kD + d)];
  }
};

double largest(const std::vector<float>& x) {
  double m = 0;
  for (float e : x) m = std::max(m, double(std::fabs(e)));
  return m;
}

// One configuration on this rank: returns the number of failed checks (and says why).
int check(ContextMethod method, AttentionBackend& attn, const std::string& attn_name,
          Communicator& group, Device& dev, int64_t T, int causal) {
  const int cp = group.size(), r = group.rank();
  const int64_t Tl = T / cp;
  const float scale = 1.0f / std::sqrt(float(kD));
  const Reference ref(attn, T, causal, scale);
  const ContextShape shape{kMaxB, kH, T, kD};
  ContextAttention ca(method, attn, group, dev, DType::f32, shape, causal,
                      std::chrono::seconds(60));
  const std::vector<int64_t> pos = ca.token_positions();

  // This rank's tokens as the model holds them: q|k|v in one (B, T/cp, 3 H D) row, out and dout
  // in (B, T/cp, H D), dq|dk|dv like qkv.
  const int64_t C = kH * kD;
  std::vector<float> qkv(size_t(kB * Tl * 3 * C)), outb(size_t(kB * Tl * C)),
      doutb(size_t(kB * Tl * C)), dqkv(size_t(kB * Tl * 3 * C), 7.f), lse(size_t(kB * kH * Tl));
  Strided q(qkv.data(), kB, Tl, kH, kD, 3 * C, 0), k(qkv.data(), kB, Tl, kH, kD, 3 * C, C),
      v(qkv.data(), kB, Tl, kH, kD, 3 * C, 2 * C), out(outb.data(), kB, Tl, kH, kD, C, 0),
      dout(doutb.data(), kB, Tl, kH, kD, C, 0), dq(dqkv.data(), kB, Tl, kH, kD, 3 * C, 0),
      dk(dqkv.data(), kB, Tl, kH, kD, 3 * C, C), dv(dqkv.data(), kB, Tl, kH, kD, 3 * C, 2 * C);
  Lse tl(lse.data(), kB, kH, Tl);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t s = 0; s < Tl; ++s)
        for (int64_t d = 0; d < kD; ++d) {
          q.at(b, h, s)[d] = ref.at(ref.q, T, b, h, pos[s], d);
          k.at(b, h, s)[d] = ref.at(ref.k, T, b, h, pos[s], d);
          v.at(b, h, s)[d] = ref.at(ref.v, T, b, h, pos[s], d);
          dout.at(b, h, s)[d] = ref.at(ref.dout, T, b, h, pos[s], d);
        }
  ca.forward({&q.t, &k.t, &v.t, &out.t, &tl.t, causal, scale, nullptr, 0});
  ca.backward(
      {&q.t, &k.t, &v.t, &out.t, &tl.t, &dout.t, &dq.t, &dk.t, &dv.t, causal, scale, nullptr, 0});

  char what[128];
  std::snprintf(what, sizeof what, "cp %d rank %d %s %s T %lld %s", cp, r,
                context_method_name(method), attn_name.c_str(), static_cast<long long>(T),
                causal ? "causal" : "full");
  int bad = 0;
  struct Pair {
    const char* name;
    const Strided* got;
    const std::vector<float>* want;
  } pairs[] = {
      {"out", &out, &ref.out}, {"dq", &dq, &ref.dq}, {"dk", &dk, &ref.dk}, {"dv", &dv, &ref.dv}};
  for (const Pair& p : pairs) {
    double err = 0;
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t s = 0; s < Tl; ++s)
          for (int64_t d = 0; d < kD; ++d)
            err = std::max(err, std::fabs(double(p.got->at(b, h, s)[d]) -
                                          ref.at(*p.want, T, b, h, pos[s], d)));
    const double rel = err / largest(*p.want);
    if (!(rel <= kTolerance)) {
      std::fprintf(stderr, "%s: %s differs by %.3g of its largest element (limit %g)\n", what,
                   p.name, rel, kTolerance);
      ++bad;
    }
  }
  // lse: ring holds this rank's tokens (B, H, T/cp); ulysses its heads over the whole sequence.
  double lerr = 0;
  const int64_t Hc = kH / cp;
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t i = 0; i < kH * Tl; ++i) {
      const float got = lse[size_t(b * kH * Tl + i)];
      const float want = method == ContextMethod::ring
                             ? ref.lse[size_t((b * kH + i / Tl) * T + pos[i % Tl])]
                             : ref.lse[size_t((b * kH + r * Hc + i / T) * T + i % T)];
      lerr = std::max(lerr, std::fabs(double(got) - want));
    }
  if (!(lerr / largest(ref.lse) <= kTolerance)) {
    std::fprintf(stderr, "%s: lse differs by %.3g of its largest element\n", what,
                 lerr / largest(ref.lse));
    ++bad;
  }
  for (bool backward : {false, true}) {
    const ContextTraffic want = expected_context_traffic(method, backward, shape, cp, kB, 4);
    const ContextTraffic got = backward ? ca.backward_traffic() : ca.forward_traffic();
    if (got.bytes != want.bytes || got.operations != want.operations) {
      std::fprintf(
          stderr, "%s: %s moved %llu bytes in %llu operations, the formula says %llu in %llu\n",
          what, backward ? "backward" : "forward", static_cast<unsigned long long>(got.bytes),
          static_cast<unsigned long long>(got.operations),
          static_cast<unsigned long long>(want.bytes),
          static_cast<unsigned long long>(want.operations));
      ++bad;
    }
  }
  if (r == 0 && !bad)
    std::printf("%s: ok (forward %llu bytes, backward %llu bytes)\n", what,
                static_cast<unsigned long long>(ca.forward_traffic().bytes),
                static_cast<unsigned long long>(ca.backward_traffic().bytes));
  return bad;
}

// 16-row tiles for every tile parameter the plugin declares (flash1, flash2; naive has none), so
// a chunk of 4 to 32 tokens spans one or two tiles.
std::map<std::string, std::string> small_tiles(const triad_plugin_v1& desc) {
  std::map<std::string, std::string> p;
  for (size_t i = 0; i < desc.num_params; ++i) {
    const std::string key = desc.params[i].name;
    if (key.find("block_") != std::string::npos) p[key] = "16";
  }
  return p;
}

int run_rank(const std::string& transport, const std::vector<std::string>& attention, int rank,
             int world, uint16_t port, const std::string& token) {
  auto tp = PluginLoader().load_file(transport, "transport");
  CoreServices services(1);
  Transport t(tp, resolve_params(tp->descriptor(), {}, "transport"), services.c_services());
  RendezvousClient store("127.0.0.1", port, token, std::chrono::seconds(30));
  Communicator group = t.init_world(rank, world, store, "cp/", std::chrono::seconds(60));
  auto dev = make_device("cpu");
  int bad = 0;
  for (const std::string& path : attention) {
    auto ap = PluginLoader().load_file(path, "attention");
    AttentionBackend attn(
        ap, resolve_params(ap->descriptor(), small_tiles(ap->descriptor()), "attention"),
        services.c_services());
    for (ContextMethod m : {ContextMethod::ulysses, ContextMethod::ring})
      for (int64_t T : {32, 64})
        for (int causal : {1, 0}) bad += check(m, attn, attn.name(), group, *dev, T, causal);
  }
  group.barrier().wait(std::chrono::seconds(60));
  return bad ? 1 : 0;
}

// What cp cannot split is refused, naming the numbers.
int check_refusals() {
  int bad = 0;
  auto refused = [&](ContextMethod m, ContextShape s, int cp, const char* want) {
    try {
      check_context_shape(m, s, cp);
    } catch (const UserError& e) {
      if (std::string(e.what()).find(want) != std::string::npos) return;
      std::fprintf(stderr, "refusal '%s' does not name '%s'\n", e.what(), want);
      ++bad;
      return;
    }
    std::fprintf(stderr, "%s accepted cp %d of heads %lld, seq %lld\n", context_method_name(m), cp,
                 static_cast<long long>(s.heads), static_cast<long long>(s.seq_len));
    ++bad;
  };
  refused(ContextMethod::ulysses, {1, 6, 64, 16}, 4, "6 attention heads");
  refused(ContextMethod::ring, {1, 4, 36, 16}, 4, "divisible by 8");
  try {
    parse_context_method("striped");
    ++bad;
  } catch (const UserError& e) {
    if (std::string(e.what()).find("ulysses, ring") == std::string::npos) ++bad;
  }
  const std::vector<int64_t> ring = context_token_positions(ContextMethod::ring, 16, 2, 1);
  const std::vector<int64_t> want = {4, 5, 6, 7, 8, 9, 10, 11};
  const std::vector<int64_t> ring0 = context_token_positions(ContextMethod::ring, 16, 2, 0);
  const std::vector<int64_t> want0 = {0, 1, 2, 3, 12, 13, 14, 15};
  if (ring != want || ring0 != want0) {
    std::fprintf(stderr, "ring positions at T 16, cp 2 are not chunks (r, 3 - r)\n");
    ++bad;
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: context-attention-check TRANSPORT.so CP ATTENTION.so...\n");
    return 2;
  }
  const std::string transport = argv[1];
  const int world = std::stoi(argv[2]);
  const std::vector<std::string> attention(argv + 3, argv + argc);
  if (check_refusals()) return 1;
  const int failed =
      triad::test::run_forked_ranks(world, [&](int rank, uint16_t port, const std::string& token) {
        return run_rank(transport, attention, rank, world, port, token);
      });
  std::printf("context attention over cp %d: %d ranks passed, %d failed\n", world, world - failed,
              failed);
  return failed ? 1 : 0;
}
