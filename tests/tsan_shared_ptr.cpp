// Linked first into every test binary of the ThreadSanitizer build
// (tests/CMakeLists.txt).
//
// std::shared_ptr's reference count lives in inline members of
// std::_Sp_counted_base (_M_release, _M_release_last_use_cold, ...) that
// GCC emits out of line as weak (COMDAT) symbols, and the linker keeps the
// first copy it meets. Catch2's prebuilt libCatch2WithMain.a (Debian's, not
// instrumented) carries such copies, and it came before our own archives on
// the link line, so every out-of-line shared_ptr release in a test binary
// ran an uninstrumented `lock xadd`: TSan never saw the acq_rel that orders
// a last release after the other owners' uses, and reported the destruction
// of any object shared across threads (a FramedServer Connection, its asio
// strand) as racing with those uses. Instantiating the class here, in an
// instrumented object placed before every archive, makes the binary keep
// instrumented copies of its members; _M_release, an explicit
// specialization that the instantiation does not emit, is kept by taking
// its address.
#include <memory>

template class std::_Sp_counted_base<__gnu_cxx::_S_atomic>;

namespace {
[[gnu::used]] void (std::_Sp_counted_base<__gnu_cxx::_S_atomic>::*const keep_release)() noexcept =
    &std::_Sp_counted_base<__gnu_cxx::_S_atomic>::_M_release;
}  // namespace
