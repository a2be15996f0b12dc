// MemoryGauge: the server-wide account of bytes held on requests' behalf
// (protocol/server/framed_server.h, "Request memory"). Two kinds of charge:
//  - a reservation (a frame about to be read) is granted only while it fits
//    under the limit, first come first served: a reservation that does not
//    fit waits, and so does every later one (a large frame is not starved
//    by a stream of small ones);
//  - a plain charge (a request being decoded, a reply being built or not
//    yet sent) always succeeds, and may take the gauge past the limit; it
//    then holds back reservations until enough is released.
// Every byte charged or granted is released exactly once by its holder.
//
// Thread safety: every method is thread-safe. A grant callback runs on the
// thread that released the memory (or on the caller's, never: TryReserve
// returns true instead), with no lock held; it must only post work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace deuteron::server {

class MemoryGauge {
 public:
  explicit MemoryGauge(size_t limit) : limit_(limit) {}
  MemoryGauge(const MemoryGauge&) = delete;
  MemoryGauge& operator=(const MemoryGauge&) = delete;

  void Charge(size_t bytes);
  void Release(size_t bytes);

  // Reserves `bytes`: true when granted now (charged). Otherwise false, and
  // `grant` runs once they are granted (charged by then), in request order;
  // *ticket names the waiting reservation for Cancel.
  bool TryReserve(size_t bytes, std::function<void()> grant, uint64_t* ticket);
  // Withdraws a waiting reservation: true when it was still waiting (nothing
  // charged, grant never runs); false when it was granted already (its grant
  // runs or ran, and its bytes are charged: the holder releases them).
  bool Cancel(uint64_t ticket);

  size_t used() const;
  size_t peak() const;
  size_t limit() const { return limit_; }
  size_t waiting() const;  // reservations waiting

 private:
  struct Waiter {
    uint64_t ticket;
    size_t bytes;
    std::function<void()> grant;
  };
  bool FitsLocked(size_t bytes) const { return used_ == 0 || used_ + bytes <= limit_; }
  // Grants the waiters at the head that fit; returns their callbacks.
  std::deque<std::function<void()>> GrantLocked();

  const size_t limit_;
  mutable std::mutex mu_;
  size_t used_ = 0;             // GUARDED_BY(mu_)
  size_t peak_ = 0;             // GUARDED_BY(mu_)
  uint64_t next_ticket_ = 1;    // GUARDED_BY(mu_)
  std::deque<Waiter> waiters_;  // GUARDED_BY(mu_)
};

}  // namespace deuteron::server
