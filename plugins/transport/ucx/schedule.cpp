#include "schedule.hpp"

#include <tuple>

namespace triad::ucx {

Schedule::Schedule(Wire wire, const UcxComm& comm, std::string what, Plan plan)
    : wire_(wire),
      world_ranks_(comm.world_ranks()),
      rank_(comm.rank()),
      comm_id_(comm.id()),
      what_(std::move(what)),
      plan_(std::move(plan)) {
  size_t slots = std::min(plan_.window, plan_.num_lanes);
  for (size_t i = 0; i < slots; ++i) free_slots_.push_back(int(i));
  if (slots * plan_.slot_bytes > 0) {
    if (wire_.pool) {
      std::tie(scratch_, scratch_bytes_) = wire_.pool->take(slots * plan_.slot_bytes);
    } else {
      scratch_bytes_ = slots * plan_.slot_bytes;
      scratch_.reset(new char[scratch_bytes_]);
    }
  }
}

Schedule::~Schedule() {
  cancel();
  // Only after cancel: a cancelled receive may still have been writing into its slot.
  if (scratch_ && wire_.pool) wire_.pool->give(std::move(scratch_), scratch_bytes_);
}

std::pair<ScratchPool::Buffer, size_t> ScratchPool::take(size_t bytes) {
  auto it = free_.lower_bound(bytes);
  if (it == free_.end()) return {Buffer(new char[bytes]), bytes};
  std::pair<Buffer, size_t> got{std::move(it->second), it->first};
  kept_ -= it->first;
  free_.erase(it);
  return got;
}

void ScratchPool::give(Buffer b, size_t bytes) {
  // Past the cap, drop the smallest kept buffers first: large ones are the costly ones.
  free_.emplace(bytes, std::move(b));
  kept_ += bytes;
  while (kept_ > kMaxKeptBytes && !free_.empty()) {
    kept_ -= free_.begin()->first;
    free_.erase(free_.begin());
  }
}

void Schedule::fail(const std::string& msg) {
  // The caller may be iterating active_: progress() cancels once it is out of the loop.
  if (error_.empty()) error_ = what_ + ": " + msg;
  finished_ = true;
}

std::atomic<bool> g_abandoned_transfers{false};

void Schedule::cancel() {
  for (auto& a : active_) {
    for (size_t i = 0; i < a.reqs.size(); ++i) {
      if (!a.reqs[i]) continue;
      if (ucp_request_check_status(a.reqs[i]) == UCS_INPROGRESS) {
        g_abandoned_transfers.store(true, std::memory_order_relaxed);
        if (!a.lane[a.step].xfers[i].is_send) ucp_request_cancel(wire_.worker, a.reqs[i]);
      }
      ucp_request_free(a.reqs[i]);  // released by UCX once it completes
      a.reqs[i] = nullptr;
    }
  }
  active_.clear();
}

void Schedule::post(Active& a) {
  Step& s = a.lane[a.step];
  a.reqs.assign(s.xfers.size(), nullptr);
  for (size_t i = 0; i < s.xfers.size(); ++i) {
    const Xfer& x = s.xfers[i];
    ucp_request_param_t p{};
    ucs_status_ptr_t r;
    if (x.is_send) {
      ucp_ep_h ep = (*wire_.eps)[size_t(world_ranks_[size_t(x.peer)])];
      r = ucp_tag_send_nbx(ep, x.buf, x.bytes, x.tag, &p);
    } else {
      // Always a request, so that complete() can read the received length from it (UCX
      // 1.13 does not fill recv_info on immediate completion).
      p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      r = ucp_tag_recv_nbx(wire_.worker, x.buf, x.bytes, x.tag, kFullMask, &p);
    }
    if (UCS_PTR_IS_ERR(r))
      return fail(std::string(x.is_send ? "send to" : "receive from") + " rank " +
                  std::to_string(x.peer) + " failed: " + ucs_status_string(UCS_PTR_STATUS(r)));
    a.reqs[i] = r;
  }
  a.posted = true;
}

bool Schedule::complete(Active& a) {
  bool all = true;
  const Step& s = a.lane[a.step];
  for (size_t i = 0; i < a.reqs.size(); ++i) {
    void* r = a.reqs[i];
    if (!r) continue;
    const Xfer& x = s.xfers[i];
    ucs_status_t st;
    size_t got = x.bytes;
    if (x.is_send) {
      st = ucp_request_check_status(r);
    } else {
      ucp_tag_recv_info_t info{};
      st = ucp_tag_recv_request_test(r, &info);
      got = info.length;
    }
    if (st == UCS_INPROGRESS) {
      all = false;
      continue;
    }
    ucp_request_free(r);
    a.reqs[i] = nullptr;
    if (st != UCS_OK) {
      fail(std::string(x.is_send ? "send to" : "receive from") + " rank " + std::to_string(x.peer) +
           " failed: " + ucs_status_string(st) +
           (st == UCS_ERR_MESSAGE_TRUNCATED ? " (the ranks called it with different counts)" : ""));
      return false;
    }
    if (got != x.bytes) {
      fail("received " + std::to_string(got) + " bytes from rank " + std::to_string(x.peer) +
           " where " + std::to_string(x.bytes) +
           " were expected (the ranks called it with different counts)");
      return false;
    }
  }
  return all;
}

bool Schedule::advance(Active& a) {
  bool moved = false;
  while (a.step < a.lane.size() && !finished_) {
    if (!a.posted) {
      post(a);
      moved = true;
      if (finished_) break;
    }
    if (!complete(a)) break;
    if (finished_) break;
    if (a.lane[a.step].after) a.lane[a.step].after();
    ++a.step;
    a.posted = false;
    moved = true;
  }
  return moved;
}

bool Schedule::progress() {
  if (finished_) return true;
  if (!started_) {
    started_ = true;
    if (plan_.before) plan_.before();
  }
  bool moved = true;
  while (moved && !finished_) {
    moved = false;
    while (!free_slots_.empty() && next_lane_ < plan_.num_lanes) {
      int slot = free_slots_.back();
      free_slots_.pop_back();
      Active& a = active_.emplace_back();
      a.index = next_lane_++;
      a.slot = slot;
      a.lane = plan_.make_lane(
          a.index, scratch_ ? scratch_.get() + size_t(slot) * plan_.slot_bytes : nullptr);
      moved = true;
    }
    for (auto it = active_.begin(); it != active_.end() && !finished_;) {
      if (advance(*it)) moved = true;
      if (finished_) break;
      if (it->step == it->lane.size()) {
        free_slots_.push_back(it->slot);
        it = active_.erase(it);
        moved = true;
      } else {
        ++it;
      }
    }
    if (!overlapped_ && !finished_) {
      // Local work that needs no peer (e.g. copying this rank's own block) runs while the
      // first messages are on their way.
      overlapped_ = true;
      if (plan_.overlap) plan_.overlap();
    }
  }
  if (!error_.empty()) cancel();
  if (!finished_ && active_.empty() && next_lane_ == plan_.num_lanes) finished_ = true;
  return finished_;
}

std::string Schedule::describe() const {
  std::string s = what_ + " on communicator " + std::to_string(comm_id_) + " (rank " +
                  std::to_string(rank_) + " of " + std::to_string(world_ranks_.size()) + ")";
  for (const auto& a : active_) {
    if (!a.posted) continue;
    const Step& st = a.lane[a.step];
    for (size_t i = 0; i < a.reqs.size(); ++i) {
      if (!a.reqs[i] || ucp_request_check_status(a.reqs[i]) != UCS_INPROGRESS) continue;
      const Xfer& x = st.xfers[i];
      return s + ": waiting to " + (x.is_send ? "send to" : "receive from") + " rank " +
             std::to_string(x.peer) + " (world rank " +
             std::to_string(world_ranks_[size_t(x.peer)]) + ")";
    }
  }
  return s;
}

}  // namespace triad::ucx
