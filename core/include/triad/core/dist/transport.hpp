// Core-side handle to one transport plugin instance (a PluginInstance) and the communicators
// and requests it makes. Each object keeps the instance (and so its library) alive; non-zero
// status codes become TransportError carrying the plugin's last_error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "triad/core/error.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/sdk/comm_ref_v1.h"
#include "triad/sdk/transport_v2.h"

namespace triad {

class RendezvousClient;

// A failed transport call: the plugin's status (TRIAD_ERR_*, TRIAD_TRANSPORT_ERR_TIMEOUT)
// and a message naming the transport, the operation and the plugin's reason.
class TransportError : public UserError {
 public:
  TransportError(int status, const std::string& msg) : UserError(msg), status_(status) {}
  int status() const { return status_; }
  bool timed_out() const { return status_ == TRIAD_TRANSPORT_ERR_TIMEOUT; }
  bool unsupported() const { return status_ == TRIAD_ERR_UNSUPPORTED; }

 private:
  int status_;
};

namespace detail {
struct TransportInstance;
struct RendezvousBridge;
}  // namespace detail

// DLDataType / DLDevice shorthands.
DLDataType dl_float32();
DLDataType dl_bfloat16();
DLDataType dl_float16();
DLDevice dl_cpu();

class TransportRequest {
 public:
  TransportRequest() = default;
  TransportRequest(std::shared_ptr<detail::TransportInstance> inst, void* req, std::string what);
  ~TransportRequest();
  TransportRequest(TransportRequest&& o) noexcept;
  TransportRequest& operator=(TransportRequest&& o) noexcept;
  TransportRequest(const TransportRequest&) = delete;
  TransportRequest& operator=(const TransportRequest&) = delete;

  explicit operator bool() const { return req_ != nullptr; }
  bool test();
  // Throws TransportError (timed_out()) when the operation is not done within timeout.
  void wait(std::chrono::milliseconds timeout);
  const std::string& what() const { return what_; }
  // What the step trace records of a wait (trace.hpp): the operation, the group and the bytes.
  void describe(const char* op, const char* group, uint64_t bytes) {
    op_ = op;
    group_ = group;
    bytes_ = bytes;
  }
  // While a step is traced: when the operation was posted, so that its wait records how long it
  // ran before anybody waited ("ahead_us": the time it had behind other work).
  void mark_posted() { posted_ = std::chrono::steady_clock::now(); }

 private:
  void release();
  std::shared_ptr<detail::TransportInstance> inst_;
  void* req_ = nullptr;
  std::string what_;
  const char* op_ = "wait";
  const char* group_ = "";
  uint64_t bytes_ = 0;
  std::chrono::steady_clock::time_point posted_{};
};

class Communicator {
 public:
  Communicator() = default;
  Communicator(std::shared_ptr<detail::TransportInstance> inst,
               std::shared_ptr<detail::RendezvousBridge> bridge, void* comm);
  ~Communicator();
  Communicator(Communicator&& o) noexcept;
  Communicator& operator=(Communicator&& o) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  explicit operator bool() const { return comm_ != nullptr; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // The transport's ops table, instance and this communicator as C handles, to lend to a
  // plugin that calls the transport itself (the data plugin). Valid while this lives.
  triad_comm_ref_v1 c_ref() const;

  // Collective; returns an empty Communicator for color TRIAD_COMM_SPLIT_NONE.
  Communicator split(int color, int key);
  // Names this communicator in what a watched rank reports waiting for ("the data-parallel
  // group", its members' world ranks in communicator order); nothing when no launcher watches.
  void label(std::string name, std::vector<int> world_ranks);
  // The group's short name in the step trace ("tp", "dp", "pp"; default "world"); a literal.
  void trace_group(const char* name) { group_ = name; }

  // Buffers and the block split as documented in transport_v1.h.
  TransportRequest all_reduce(const void* send, void* recv, uint64_t count, DLDataType dtype,
                              int op = TRIAD_REDUCE_SUM, DLDevice device = dl_cpu());
  TransportRequest reduce_scatter(const void* send, void* recv, uint64_t count, DLDataType dtype,
                                  int op = TRIAD_REDUCE_SUM, DLDevice device = dl_cpu());
  TransportRequest all_gather(const void* send, void* recv, uint64_t count, DLDataType dtype,
                              DLDevice device = dl_cpu());
  TransportRequest broadcast(void* buf, uint64_t count, DLDataType dtype, int root,
                             DLDevice device = dl_cpu());
  TransportRequest send(const void* buf, uint64_t count, DLDataType dtype, int peer, uint32_t tag,
                        DLDevice device = dl_cpu());
  TransportRequest recv(void* buf, uint64_t count, DLDataType dtype, int peer, uint32_t tag,
                        DLDevice device = dl_cpu());
  TransportRequest barrier();
  // MPI_Alltoall (transport_v2.h): count elements per peer block; send and recv hold size()
  // blocks each, block r of send goes to rank r, block r of recv came from rank r; not in place.
  // Throws UserError naming the transport when it does not offer all-to-all.
  TransportRequest all_to_all(const void* send, void* recv, uint64_t count, DLDataType dtype,
                              DLDevice device = dl_cpu());

 private:
  void destroy();
  std::shared_ptr<detail::TransportInstance> inst_;
  std::shared_ptr<detail::RendezvousBridge> bridge_;
  void* comm_ = nullptr;
  int rank_ = 0, size_ = 0;
  const char* group_ = "world";
};

class Transport {
 public:
  // Creates the instance; `params` resolved against the plugin's schema. Throws UserError
  // if the plugin is not of kind "transport" or refuses to be created.
  Transport(std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params,
            const triad_services_v1* services);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  const std::string& name() const;
  const triad_transport_caps_v1& capabilities() const;
  // The plugin's message about its last failure (e.g. which peer a timed-out wait waited for).
  std::string last_error() const;
  // Device memory through host buffers, for a transport that reaches host memory only: every
  // operation on device memory runs on a host copy (copied down with `to_host` before it is
  // posted, its result up with `to_device` once done); capabilities() then lists CUDA memory.
  // stage_host stages host memory too (the CPU device as a test double). Before init_world.
  using HostCopy = std::function<void(void* dst, const void* src, size_t bytes)>;
  void stage_through_host(HostCopy to_host, HostCopy to_device, bool stage_host = false);
  bool staged() const;
  // Throws UserError naming the transport and what it lacks (memory, dtype, operation).
  void check_supported(uint32_t memory_bits, uint32_t dtype_bits, uint32_t op_bits) const;
  // Moves every pending operation of the instance on without blocking (transport_v2.h), e.g.
  // between layers while requests are outstanding; a transport that progresses on its own
  // does nothing. Throws TransportError when the transport reports itself broken.
  void progress();

  // Collective over the job. Keys go to `store` under `scope` (e.g. "transport/ucx/");
  // rendezvous gets wait up to rendezvous_timeout. `store` must outlive the returned
  // communicator and every communicator split from it (the plugin may use it in split).
  Communicator init_world(int rank, int world_size, RendezvousClient& store,
                          const std::string& scope,
                          std::chrono::milliseconds rendezvous_timeout = std::chrono::seconds(120));

 private:
  std::shared_ptr<detail::TransportInstance> inst_;
};

}  // namespace triad
