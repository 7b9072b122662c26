// Shared by the shim's C++ files: the thread's last error message and the wrapper that turns
// any C++ exception into a non-zero return code, so none crosses into Rust.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace tl {

// The message of the last failure on this thread.
inline std::string &last_error() {
  thread_local std::string message;
  return message;
}

// Runs f, returning 0, or 1 with the exception's message (without libtorch's C++ backtrace)
// stored in last_error().
template <typename F> int guarded(F &&f) {
  try {
    f();
    return 0;
  } catch (const c10::Error &e) {
    last_error() = e.what_without_backtrace();
  } catch (const std::exception &e) {
    last_error() = e.what();
  } catch (...) {
    last_error() = "unknown C++ exception from libtorch";
  }
  return 1;
}

} // namespace tl
