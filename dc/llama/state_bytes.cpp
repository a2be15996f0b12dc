#include "dc/llama/state_bytes.h"

#include <sys/mman.h>

namespace deuteron::llama {

StateBytes::StateBytes(uint64_t capacity) {
  if (capacity == 0) return;
  void* p = mmap(nullptr, capacity * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  words_ = static_cast<std::atomic<uint64_t>*>(p);
  capacity_ = capacity;
}

StateBytes::~StateBytes() {
  if (words_ != nullptr) munmap(words_, capacity_ * sizeof(uint64_t));
}

uint64_t StateBytes::Pack(LssAddress head, uint64_t bytes) {
  return ((head >> 3) << 32) | (bytes & 0xffffffffu);
}

void StateBytes::Note(PageId pid, LssAddress head, uint64_t bytes) {
  if (pid >= capacity_ || head == kNullAddress || bytes == 0 || bytes > 0xffffffffu) return;
  words_[pid].store(Pack(head, bytes), std::memory_order_relaxed);
}

std::optional<uint64_t> StateBytes::Lookup(PageId pid, LssAddress head) const {
  if (head == kNullAddress) return 0;
  if (pid >= capacity_) return std::nullopt;
  const uint64_t w = words_[pid].load(std::memory_order_relaxed);
  if (w == 0 || (w >> 32) != ((head >> 3) & 0xffffffffu)) return std::nullopt;
  return w & 0xffffffffu;
}

}  // namespace deuteron::llama
