#include "memtrack.hpp"

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void on_alloc(void* p) {
  const int64_t n = int64_t(malloc_usable_size(p));
  const int64_t live = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}
void on_free(void* p) {
  if (p) g_live.fetch_sub(int64_t(malloc_usable_size(p)), std::memory_order_relaxed);
}
void* alloc(std::size_t n, std::size_t align) {
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n)
                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  on_alloc(p);
  return p;
}
void release(void* p) {
  on_free(p);
  std::free(p);
}
}  // namespace

namespace fa::memtrack {
int64_t live_bytes() { return g_live.load(); }
int64_t peak_bytes() { return g_peak.load(); }
void reset_peak() { g_peak.store(g_live.load()); }
}  // namespace fa::memtrack

// The replaceable global allocation functions ([new.delete] in the C++ standard).
void* operator new(std::size_t n) { return alloc(n, 0); }
void* operator new[](std::size_t n) { return alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return alloc(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return alloc(n, std::size_t(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try { return alloc(n, 0); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try { return alloc(n, 0); } catch (...) { return nullptr; }
}
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
