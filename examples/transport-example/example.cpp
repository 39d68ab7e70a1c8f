// A transport plugin written against the Triad SDK only. It wraps another transport plugin (by
// default the installed Triad's ucx) and counts what passes through it: every call goes to the
// wrapped plugin's own C table, and when Triad destroys the transport it logs the operations this
// process started and the bytes they carried. The same shape serves any layer over a transport
// (tracing, fault injection, a different algorithm for one collective); a transport of your own
// implements the operations itself instead, as plugins/transport/ucx does.
#include <dlfcn.h>

#include <map>
#include <string>
#include <vector>

#include "triad/sdk/transport.hpp"

namespace {

using triad::sdk::Error;
using triad::sdk::TransportComm;
using triad::sdk::TransportRequest;

const triad_param_spec_v1 kParams[] = {
    {"wrap", TRIAD_PARAM_STRING, TRIAD_UCX_PLUGIN,
     "the transport plugin file to wrap (it runs with its default parameters)"},
    {"max_ranks", TRIAD_PARAM_INT, "0",
     "the largest world it promises to run (0: whatever the wrapped transport runs)"},
};

// The wrapped plugin's handles, behind the handles this plugin gives out.
struct Comm final : TransportComm {
  Comm(void* c, int r, int n) : inner(c), rank_(r), size_(n) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void* inner;
  int rank_, size_;
};
struct Request final : TransportRequest {
  explicit Request(void* r) : inner(r) {}
  void* inner;
};

void* inner_of(TransportComm& c) {
  return static_cast<Comm&>(c).inner;
}
void* inner_of(TransportRequest& r) {
  return static_cast<Request&>(r).inner;
}

class ExampleTransport final : public triad::sdk::TransportPlugin {
 public:
  ExampleTransport(triad::sdk::Services services, triad::sdk::Params params)
      : services_(services),
        path_(params.get_string("wrap")),
        max_ranks_(int32_t(params.get_int("max_ranks"))) {
    lib_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) throw triad::sdk::invalid("cannot load " + path_ + ": " + dlerror());
    desc_ = static_cast<const triad_plugin_v1*>(dlsym(lib_, "triad_plugin_descriptor_v1"));
    if (!desc_ || std::string(desc_->kind) != "transport" ||
        desc_->kind_abi_version != TRIAD_TRANSPORT_ABI_VERSION) {
      dlclose(lib_);
      throw triad::sdk::invalid(path_ + " is not a transport plugin of kind ABI " +
                                std::to_string(TRIAD_TRANSPORT_ABI_VERSION));
    }
    ops_ = static_cast<const triad_transport_ops_v2*>(desc_->ops);
    std::vector<triad_param_value_v1> defaults;  // the wrapped plugin's own defaults
    for (size_t i = 0; i < desc_->num_params; ++i)
      defaults.push_back({desc_->params[i].name, desc_->params[i].default_value});
    const triad_params_v1 inner_params{defaults.size(), defaults.data()};
    char err[512] = "";
    const int rc = desc_->create(services.raw(), &inner_params, &inner_, err, sizeof err);
    if (rc != TRIAD_OK) {
      dlclose(lib_);
      throw Error(rc, "the wrapped transport " + path_ + " failed to start: " + err);
    }
  }

  ~ExampleTransport() override {
    std::string counts;
    for (const auto& [op, c] : counted_)
      counts += (counts.empty() ? "" : ", ") + op + " " + std::to_string(c.calls) + " (" +
                std::to_string(c.bytes) + " B)";
    services_.info("through " + std::string(desc_->name) + ": " +
                   (counts.empty() ? "nothing" : counts));
    desc_->destroy(inner_);
    dlclose(lib_);
  }

  triad_transport_caps_v1 capabilities() const override {
    triad_transport_caps_v1 c{};
    check(ops_->capabilities(inner_, &c), "capabilities");
    // The core refuses a larger world before init_world; the suite skips it.
    if (max_ranks_ > 0 && (c.max_world_size <= 0 || max_ranks_ < c.max_world_size))
      c.max_world_size = max_ranks_;
    return c;
  }

  TransportComm* init_world(int rank, int world_size, const triad_rendezvous_v1& rdv) override {
    void* c = nullptr;
    check(ops_->init_world(inner_, rank, world_size, &rdv, &c), "init_world");
    return wrap(c);
  }
  TransportComm* split(TransportComm& comm, int color, int key) override {
    void* c = nullptr;
    check(ops_->split(inner_, inner_of(comm), color, key, &c), "split");
    return c ? wrap(c) : nullptr;
  }
  void comm_destroy(TransportComm* comm) override {
    const int rc = ops_->comm_destroy(inner_, inner_of(*comm));
    delete comm;
    check(rc, "comm_destroy");
  }

  TransportRequest* all_reduce(TransportComm& c, const void* s, void* r, uint64_t n, DLDataType t,
                               DLDevice d, int op) override {
    count("all_reduce", n, t);
    void* q = nullptr;
    check(ops_->all_reduce(inner_, inner_of(c), s, r, n, t, d, op, &q), "all_reduce");
    return new Request(q);
  }
  TransportRequest* reduce_scatter(TransportComm& c, const void* s, void* r, uint64_t n,
                                   DLDataType t, DLDevice d, int op) override {
    count("reduce_scatter", n, t);
    void* q = nullptr;
    check(ops_->reduce_scatter(inner_, inner_of(c), s, r, n, t, d, op, &q), "reduce_scatter");
    return new Request(q);
  }
  TransportRequest* all_gather(TransportComm& c, const void* s, void* r, uint64_t n, DLDataType t,
                               DLDevice d) override {
    count("all_gather", n, t);
    void* q = nullptr;
    check(ops_->all_gather(inner_, inner_of(c), s, r, n, t, d, &q), "all_gather");
    return new Request(q);
  }
  TransportRequest* broadcast(TransportComm& c, void* b, uint64_t n, DLDataType t, DLDevice d,
                              int root) override {
    count("broadcast", n, t);
    void* q = nullptr;
    check(ops_->broadcast(inner_, inner_of(c), b, n, t, d, root, &q), "broadcast");
    return new Request(q);
  }
  TransportRequest* send(TransportComm& c, const void* b, uint64_t n, DLDataType t, DLDevice d,
                         int peer, uint32_t tag) override {
    count("send", n, t);
    void* q = nullptr;
    check(ops_->send(inner_, inner_of(c), b, n, t, d, peer, tag, &q), "send");
    return new Request(q);
  }
  TransportRequest* recv(TransportComm& c, void* b, uint64_t n, DLDataType t, DLDevice d, int peer,
                         uint32_t tag) override {
    count("recv", n, t);
    void* q = nullptr;
    check(ops_->recv(inner_, inner_of(c), b, n, t, d, peer, tag, &q), "recv");
    return new Request(q);
  }
  TransportRequest* barrier(TransportComm& c) override {
    count("barrier", 0, DLDataType{kDLUInt, 8, 1});
    void* q = nullptr;
    check(ops_->barrier(inner_, inner_of(c), &q), "barrier");
    return new Request(q);
  }
  TransportRequest* all_to_all(TransportComm& c, const void* s, void* r, uint64_t n, DLDataType t,
                               DLDevice d) override {
    count("all_to_all", n * uint64_t(c.size()), t);
    void* q = nullptr;
    check(ops_->all_to_all(inner_, inner_of(c), s, r, n, t, d, &q), "all_to_all");
    return new Request(q);
  }
  void progress() override { check(ops_->progress(inner_), "progress"); }

  bool test(TransportRequest& r) override {
    int32_t done = 0;
    check(ops_->test(inner_, inner_of(r), &done), "test");
    return done != 0;
  }
  void wait(TransportRequest& r, int64_t timeout_ms) override {
    check(ops_->wait(inner_, inner_of(r), timeout_ms), "wait");
  }
  void request_free(TransportRequest* r) override {
    const int rc = ops_->request_free(inner_, inner_of(*r));
    delete r;
    check(rc, "request_free");
  }

 private:
  // A failed call of the wrapped plugin: its status (a timeout stays a timeout) and message.
  void check(int rc, const char* what) const {
    if (rc != TRIAD_OK)
      throw Error(rc, std::string(desc_->name) + " " + what + ": " + desc_->last_error(inner_));
  }
  TransportComm* wrap(void* c) {
    int32_t rank = 0, size = 0;
    check(ops_->comm_info(inner_, c, &rank, &size), "comm_info");
    return new Comm(c, rank, size);
  }
  void count(const char* op, uint64_t n, DLDataType t) {
    Counted& c = counted_[op];
    ++c.calls;
    c.bytes += n * triad::sdk::dtype_bytes(t);
  }

  struct Counted {
    uint64_t calls = 0, bytes = 0;
  };
  triad::sdk::Services services_;
  std::string path_;
  int32_t max_ranks_ = 0;
  void* lib_ = nullptr;
  const triad_plugin_v1* desc_ = nullptr;
  const triad_transport_ops_v2* ops_ = nullptr;
  void* inner_ = nullptr;
  std::map<std::string, Counted> counted_;
};

}  // namespace

TRIAD_TRANSPORT_PLUGIN(ExampleTransport, "example", "0.1",
                       "example out-of-tree transport: wraps another transport plugin (the "
                       "installed ucx by default) and logs the operations and bytes it carried",
                       TRIAD_PARAMS(kParams))
