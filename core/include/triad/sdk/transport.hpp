// C++ layer for transport plugins: derive from TransportPlugin (and TransportComm /
// TransportRequest for your handles), then
//   TRIAD_TRANSPORT_PLUGIN(MyTransport, "myname", "1.0", "what it is", TRIAD_PARAMS(kParams))
// Operations you do not override return TRIAD_ERR_UNSUPPORTED with a message naming them;
// progress() does nothing unless overridden (transport_v2.h).
#pragma once

#include <cstdint>
#include <string>

#include "triad/sdk/plugin.hpp"
#include "triad/sdk/transport_v2.h"

namespace triad::sdk {

// The handles a plugin gives out; the adapter deletes them through these bases.
class TransportComm {
 public:
  virtual ~TransportComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
};

class TransportRequest {
 public:
  virtual ~TransportRequest() = default;
};

inline Error timeout_error(const std::string& msg) {
  return Error(TRIAD_TRANSPORT_ERR_TIMEOUT, msg);
}

// Bytes per element; 0 for a dtype that is not a whole number of bytes.
inline size_t dtype_bytes(DLDataType t) {
  size_t bits = size_t(t.bits) * (t.lanes ? t.lanes : 1);
  return bits % 8 ? 0 : bits / 8;
}

// The TRIAD_DTYPE_BIT_* of a reducible dtype, or 0.
inline uint32_t dtype_bit(DLDataType t) {
  if (t.lanes != 1) return 0;
  if (t.code == kDLFloat && t.bits == 32) return TRIAD_DTYPE_BIT_FP32;
  if (t.code == kDLBfloat && t.bits == 16) return TRIAD_DTYPE_BIT_BF16;
  if (t.code == kDLFloat && t.bits == 16) return TRIAD_DTYPE_BIT_FP16;
  return 0;
}

inline std::string dtype_name(DLDataType t) {
  switch (dtype_bit(t)) {
    case TRIAD_DTYPE_BIT_FP32:
      return "fp32";
    case TRIAD_DTYPE_BIT_BF16:
      return "bf16";
    case TRIAD_DTYPE_BIT_FP16:
      return "fp16";
    default:
      break;
  }
  const char* base = t.code == kDLFloat    ? "float"
                     : t.code == kDLBfloat ? "bfloat"
                     : t.code == kDLInt    ? "int"
                     : t.code == kDLUInt   ? "uint"
                                           : "type";
  std::string s = std::string(base) + std::to_string(t.bits);
  if (t.lanes != 1) {
    s += 'x';
    s += std::to_string(t.lanes);
  }
  return s;
}

inline const char* reduce_op_name(int op) {
  return op == TRIAD_REDUCE_SUM ? "sum" : op == TRIAD_REDUCE_MAX ? "max" : "unknown";
}

// The capabilities of a transport that moves fp32, bf16 and fp16, reduces with sum and max,
// and has every collective plus send/recv, barrier and split, over `memory`
// (TRIAD_MEM_BIT_*); `extra_ops` adds more (e.g. TRIAD_TRANSPORT_OP_TAGS).
inline triad_transport_caps_v1 full_float_caps(uint32_t memory, uint32_t extra_ops = 0) {
  triad_transport_caps_v1 c{};
  c.memory = memory;
  c.dtypes = TRIAD_DTYPE_BIT_FP32 | TRIAD_DTYPE_BIT_BF16 | TRIAD_DTYPE_BIT_FP16;
  c.reduce_ops = (1u << TRIAD_REDUCE_SUM) | (1u << TRIAD_REDUCE_MAX);
  c.ops = TRIAD_TRANSPORT_OP_ALL_REDUCE | TRIAD_TRANSPORT_OP_REDUCE_SCATTER |
          TRIAD_TRANSPORT_OP_ALL_GATHER | TRIAD_TRANSPORT_OP_BROADCAST |
          TRIAD_TRANSPORT_OP_SEND_RECV | TRIAD_TRANSPORT_OP_BARRIER | TRIAD_TRANSPORT_OP_SPLIT |
          extra_ops;
  return c;
}

inline uint32_t memory_bit(DLDevice d) {
  if (d.device_type == kDLCPU) return TRIAD_MEM_BIT_HOST;
  if (d.device_type == kDLCUDA || d.device_type == kDLCUDAHost) return TRIAD_MEM_BIT_CUDA;
  return 0;
}

// The block split of transport_v1.h as a pair.
struct Block {
  uint64_t offset = 0, size = 0;
};
inline Block block_of(uint64_t count, int n, int r) {
  Block b;
  triad_transport_block(count, n, r, &b.offset, &b.size);
  return b;
}

class TransportPlugin {
 public:
  virtual ~TransportPlugin() = default;
  virtual triad_transport_caps_v1 capabilities() const = 0;
  virtual TransportComm* init_world(int rank, int world_size,
                                    const triad_rendezvous_v1& rendezvous) = 0;
  // Returns nullptr for color TRIAD_COMM_SPLIT_NONE.
  virtual TransportComm* split(TransportComm&, int /*color*/, int /*key*/) {
    throw unsupported("split is not supported");
  }
  virtual void comm_destroy(TransportComm* comm) { delete comm; }

  virtual TransportRequest* all_reduce(TransportComm&, const void*, void*, uint64_t, DLDataType,
                                       DLDevice, int) {
    throw unsupported("all_reduce is not supported");
  }
  virtual TransportRequest* reduce_scatter(TransportComm&, const void*, void*, uint64_t, DLDataType,
                                           DLDevice, int) {
    throw unsupported("reduce_scatter is not supported");
  }
  virtual TransportRequest* all_gather(TransportComm&, const void*, void*, uint64_t, DLDataType,
                                       DLDevice) {
    throw unsupported("all_gather is not supported");
  }
  virtual TransportRequest* broadcast(TransportComm&, void*, uint64_t, DLDataType, DLDevice,
                                      int /*root*/) {
    throw unsupported("broadcast is not supported");
  }
  virtual TransportRequest* send(TransportComm&, const void*, uint64_t, DLDataType, DLDevice,
                                 int /*peer*/, uint32_t /*tag*/) {
    throw unsupported("send is not supported");
  }
  virtual TransportRequest* recv(TransportComm&, void*, uint64_t, DLDataType, DLDevice,
                                 int /*peer*/, uint32_t /*tag*/) {
    throw unsupported("recv is not supported");
  }
  virtual TransportRequest* barrier(TransportComm&) {
    throw unsupported("barrier is not supported");
  }
  // count elements per peer block; send and recv hold size() blocks each and never overlap
  // (the adapter refuses send == recv). Offer it with TRIAD_TRANSPORT_OP_ALL_TO_ALL in caps.
  virtual TransportRequest* all_to_all(TransportComm&, const void*, void*, uint64_t, DLDataType,
                                       DLDevice) {
    throw unsupported("all_to_all is not supported");
  }
  // Advances every pending operation without blocking. The default suits a transport that
  // progresses on its own (or only inside test and wait).
  virtual void progress() {}

  // True once done; throws the operation's error if it failed.
  virtual bool test(TransportRequest& request) = 0;
  // Throws timeout_error(...) naming the operation when timeout_ms (>= 0) passes.
  virtual void wait(TransportRequest& request, int64_t timeout_ms) = 0;
  virtual void request_free(TransportRequest* request) { delete request; }
};

template <class Impl>
struct TransportAdapter {
  static TransportComm& C(void* comm) {
    if (!comm) throw invalid("communicator is null");
    return *static_cast<TransportComm*>(comm);
  }
  static TransportRequest& R(void* req) {
    if (!req) throw invalid("request is null");
    return *static_cast<TransportRequest*>(req);
  }
  // Handles cross the boundary as base-class pointers, so casts back are exact.
  static void* out(TransportComm* c) { return c; }
  static void* out(TransportRequest* r) { return r; }

  static int capabilities(void* h, triad_transport_caps_v1* caps) {
    return guarded<Impl>(h, [&](Impl& p) { *caps = p.capabilities(); });
  }
  static int init_world(void* h, int32_t rank, int32_t world, const triad_rendezvous_v1* rdv,
                        void** comm) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (!rdv || !rdv->set || !rdv->get) throw invalid("init_world: rendezvous is null");
      if (world < 1 || rank < 0 || rank >= world)
        throw invalid("init_world: rank " + std::to_string(rank) + " is not in [0, " +
                      std::to_string(world) + ")");
      *comm = out(p.init_world(rank, world, *rdv));
    });
  }
  static int split(void* h, void* comm, int32_t color, int32_t key, void** newcomm) {
    return guarded<Impl>(h, [&](Impl& p) { *newcomm = out(p.split(C(comm), color, key)); });
  }
  static int comm_destroy(void* h, void* comm) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (comm) p.comm_destroy(&C(comm));
    });
  }
  static int comm_info(void* h, void* comm, int32_t* rank, int32_t* size) {
    return guarded<Impl>(h, [&](Impl&) {
      *rank = C(comm).rank();
      *size = C(comm).size();
    });
  }
  static int all_reduce(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t,
                        DLDevice d, int32_t op, void** req) {
    return guarded<Impl>(h, [&](Impl& p) { *req = out(p.all_reduce(C(comm), s, r, n, t, d, op)); });
  }
  static int reduce_scatter(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t,
                            DLDevice d, int32_t op, void** req) {
    return guarded<Impl>(
        h, [&](Impl& p) { *req = out(p.reduce_scatter(C(comm), s, r, n, t, d, op)); });
  }
  static int all_gather(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t,
                        DLDevice d, void** req) {
    return guarded<Impl>(h, [&](Impl& p) { *req = out(p.all_gather(C(comm), s, r, n, t, d)); });
  }
  static int broadcast(void* h, void* comm, void* b, uint64_t n, DLDataType t, DLDevice d,
                       int32_t root, void** req) {
    return guarded<Impl>(h, [&](Impl& p) { *req = out(p.broadcast(C(comm), b, n, t, d, root)); });
  }
  static int send(void* h, void* comm, const void* b, uint64_t n, DLDataType t, DLDevice d,
                  int32_t peer, uint32_t tag, void** req) {
    return guarded<Impl>(h, [&](Impl& p) { *req = out(p.send(C(comm), b, n, t, d, peer, tag)); });
  }
  static int recv(void* h, void* comm, void* b, uint64_t n, DLDataType t, DLDevice d, int32_t peer,
                  uint32_t tag, void** req) {
    return guarded<Impl>(h, [&](Impl& p) { *req = out(p.recv(C(comm), b, n, t, d, peer, tag)); });
  }
  static int barrier(void* h, void* comm, void** req) {
    return guarded<Impl>(h, [&](Impl& p) { *req = out(p.barrier(C(comm))); });
  }
  static int all_to_all(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t,
                        DLDevice d, void** req) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (n && s == r)
        throw invalid("all_to_all: send and recv are the same buffer (not in place)");
      *req = out(p.all_to_all(C(comm), s, r, n, t, d));
    });
  }
  static int progress(void* h) {
    return guarded<Impl>(h, [&](Impl& p) { p.progress(); });
  }
  static int test(void* h, void* req, int32_t* done) {
    return guarded<Impl>(h, [&](Impl& p) {
      *done = 0;
      *done = p.test(R(req)) ? 1 : 0;
    });
  }
  static int wait(void* h, void* req, int64_t timeout_ms) {
    return guarded<Impl>(h, [&](Impl& p) { p.wait(R(req), timeout_ms); });
  }
  static int request_free(void* h, void* req) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (req) p.request_free(&R(req));
    });
  }
  static constexpr triad_transport_ops_v2 ops = {
      &capabilities,   &init_world, &split,        &comm_destroy, &comm_info, &all_reduce,
      &reduce_scatter, &all_gather, &broadcast,    &send,         &recv,      &barrier,
      &test,           &wait,       &request_free, &progress,     &all_to_all};
};

template <>
struct KindTraits<triad_transport_ops_v2> {
  static constexpr std::string_view kind = "transport";
  static constexpr uint32_t abi_version = TRIAD_TRANSPORT_ABI_VERSION;
};

}  // namespace triad::sdk

// Impl must derive from TransportPlugin and be constructible from
// (triad::sdk::Services, triad::sdk::Params).
#define TRIAD_TRANSPORT_PLUGIN(Impl, NAME, VERSION, DESC, PARAMS)        \
  TRIAD_DEFINE_PLUGIN_DESCRIPTOR(Impl, "transport", NAME, VERSION, DESC, \
                                 &::triad::sdk::TransportAdapter<Impl>::ops, PARAMS)
