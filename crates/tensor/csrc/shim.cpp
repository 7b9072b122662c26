// Torchlight's C shim over libtorch: autocast, the fused AMP unscale kernel, pinned
// allocation and determinism switches. See shim.h for the contract.
#include "shim.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/Context.h>

#include <string>
#include <vector>

namespace {

thread_local std::string last_error;

// Runs f, turning any C++ exception into a non-zero return and a stored message.
template <typename F> int guarded(F &&f) {
  try {
    f();
    return 0;
  } catch (const c10::Error &e) {
    last_error = e.what_without_backtrace();
  } catch (const std::exception &e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception from libtorch";
  }
  return 1;
}

at::Tensor &deref(tl_tensor t) { return *static_cast<at::Tensor *>(t); }

} // namespace

extern "C" {

const char *tl_last_error(void) { return last_error.c_str(); }

int tl_autocast_enter(int device_type, int dtype, bool enabled, bool cache_enabled,
                      tl_autocast_prev *prev) {
  return guarded([&] {
    auto device = static_cast<at::DeviceType>(device_type);
    prev->enabled = at::autocast::is_autocast_enabled(device);
    prev->dtype = static_cast<int>(at::autocast::get_autocast_dtype(device));
    prev->cache_enabled = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_enabled(device, enabled);
    at::autocast::set_autocast_dtype(device, static_cast<at::ScalarType>(dtype));
    at::autocast::increment_nesting();
    at::autocast::set_autocast_cache_enabled(cache_enabled);
  });
}

int tl_autocast_exit(int device_type, const tl_autocast_prev *prev) {
  return guarded([&] {
    auto device = static_cast<at::DeviceType>(device_type);
    // The cast cache lives as long as the outermost autocast region, as in torch.autocast.
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    at::autocast::set_autocast_enabled(device, prev->enabled);
    at::autocast::set_autocast_dtype(device, static_cast<at::ScalarType>(prev->dtype));
    at::autocast::set_autocast_cache_enabled(prev->cache_enabled);
  });
}

int tl_autocast_state(int device_type, bool *enabled, int *dtype) {
  return guarded([&] {
    auto device = static_cast<at::DeviceType>(device_type);
    *enabled = at::autocast::is_autocast_enabled(device);
    *dtype = static_cast<int>(at::autocast::get_autocast_dtype(device));
  });
}

int tl_amp_non_finite_check_and_unscale(tl_tensor *grads, size_t n, tl_tensor found_inf,
                                        tl_tensor inv_scale) {
  return guarded([&] {
    std::vector<at::Tensor> list;
    list.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      list.push_back(deref(grads[i]));
    }
    at::_amp_foreach_non_finite_check_and_unscale_(list, deref(found_inf), deref(inv_scale));
  });
}

int tl_empty_pinned(const int64_t *sizes, size_t ndim, int dtype, tl_tensor *out) {
  return guarded([&] {
    auto options = at::TensorOptions()
                       .dtype(static_cast<at::ScalarType>(dtype))
                       .device(at::kCPU)
                       .pinned_memory(true);
    auto t = at::empty(at::IntArrayRef(sizes, ndim), options);
    *out = new at::Tensor(std::move(t));
  });
}

int tl_set_deterministic(bool on, bool warn_only) {
  return guarded([&] {
    auto &ctx = at::globalContext();
    ctx.setDeterministicAlgorithms(on, warn_only);
    ctx.setDeterministicCuDNN(on);
    ctx.setBenchmarkCuDNN(!on);
  });
}

} // extern "C"
