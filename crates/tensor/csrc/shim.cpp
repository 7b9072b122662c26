// Torchlight's C shim over libtorch: autocast, the fused AMP unscale kernel, pinned
// allocation, determinism switches, the fused optimizer kernels, clearing a gradient, the
// multi-tensor lerp/copy of a weight EMA and the CUDA caching allocator's cache and counters.
// See shim.h for the contract.
#include "shim.h"
#include "guard.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/Context.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <string>
#include <vector>

namespace {

using tl::guarded;

at::Tensor &deref(tl_tensor t) { return *static_cast<at::Tensor *>(t); }

std::vector<at::Tensor> list_of(tl_tensor *ts, size_t n) {
  std::vector<at::Tensor> list;
  list.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    list.push_back(deref(ts[i]));
  }
  return list;
}

std::optional<at::Tensor> optional_of(tl_tensor t) {
  if (t == nullptr) {
    return std::nullopt;
  }
  return deref(t);
}

} // namespace

extern "C" {

// The last error of any shim entry point (shim.cpp, trace.cpp, generator.cpp) on this thread.
const char *tl_last_error(void) { return tl::last_error().c_str(); }

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

int tl_fused_adam(tl_tensor *params, tl_tensor *grads, tl_tensor *exp_avgs, tl_tensor *exp_avg_sqs,
                  tl_tensor *max_exp_avg_sqs, size_t n_max, tl_tensor *state_steps, size_t n,
                  double lr, double beta1, double beta2, double weight_decay, double eps,
                  bool amsgrad, bool maximize, bool decoupled, tl_tensor grad_scale,
                  tl_tensor found_inf) {
  return guarded([&] {
    at::NoGradGuard no_grad;
    auto steps = list_of(state_steps, n);
    // As torch.optim.adam._fused_adam: the kernels read the already incremented step.
    at::_foreach_add_(steps, 1);
    if (decoupled) {
      at::_fused_adamw_(list_of(params, n), list_of(grads, n), list_of(exp_avgs, n),
                        list_of(exp_avg_sqs, n), list_of(max_exp_avg_sqs, n_max), steps, lr, beta1,
                        beta2, weight_decay, eps, amsgrad, maximize, optional_of(grad_scale),
                        optional_of(found_inf));
    } else {
      at::_fused_adam_(list_of(params, n), list_of(grads, n), list_of(exp_avgs, n),
                       list_of(exp_avg_sqs, n), list_of(max_exp_avg_sqs, n_max), steps, lr, beta1,
                       beta2, weight_decay, eps, amsgrad, maximize, optional_of(grad_scale),
                       optional_of(found_inf));
    }
    if (found_inf != nullptr) {
      // A skipped step (found_inf == 1) must not count: undo the increment on the device.
      std::vector<at::Tensor> infs(n, deref(found_inf).reshape({}));
      at::_foreach_sub_(steps, infs);
    }
  });
}

int tl_fused_sgd(tl_tensor *params, tl_tensor *grads, tl_tensor *momentum_buffers, size_t n_buf,
                 size_t n, double weight_decay, double momentum, double lr, double dampening,
                 bool nesterov, bool maximize, bool is_first_step, tl_tensor grad_scale,
                 tl_tensor found_inf) {
  return guarded([&] {
    at::NoGradGuard no_grad;
    at::_fused_sgd_(list_of(params, n), list_of(grads, n), list_of(momentum_buffers, n_buf),
                    weight_decay, momentum, lr, dampening, nesterov, maximize, is_first_step,
                    optional_of(grad_scale), optional_of(found_inf));
  });
}

int tl_add_scaled_(tl_tensor self, tl_tensor other, double alpha) {
  return guarded([&] { deref(self).add_(deref(other), alpha); });
}

int tl_set_grad_none(tl_tensor param) {
  return guarded([&] { deref(param).mutable_grad().reset(); });
}

int tl_foreach_lerp_(tl_tensor *selfs, tl_tensor *ends, size_t n, double weight) {
  return guarded([&] {
    at::NoGradGuard no_grad;
    at::_foreach_lerp_(list_of(selfs, n), list_of(ends, n), weight);
  });
}

int tl_foreach_copy_(tl_tensor *selfs, tl_tensor *srcs, size_t n) {
  return guarded([&] {
    at::NoGradGuard no_grad;
    at::_foreach_copy_(list_of(selfs, n), list_of(srcs, n), false);
  });
}

int tl_cuda_empty_cache(void) {
  return guarded([&] { c10::getDeviceAllocator(c10::DeviceType::CUDA)->emptyCache(); });
}

int tl_cuda_memory_stats(int device_index, int64_t *allocated, int64_t *reserved,
                         int64_t *peak_allocated) {
  return guarded([&] {
    auto stats = c10::getDeviceAllocator(c10::DeviceType::CUDA)
                     ->getDeviceStats(static_cast<c10::DeviceIndex>(device_index));
    // Index 0 is StatType::AGGREGATE, what torch.cuda.memory_allocated reads.
    *allocated = stats.allocated_bytes[0].current;
    *reserved = stats.reserved_bytes[0].current;
    *peak_allocated = stats.allocated_bytes[0].peak;
  });
}

int tl_cuda_reset_peak_memory_stats(int device_index) {
  return guarded([&] {
    c10::getDeviceAllocator(c10::DeviceType::CUDA)
        ->resetPeakStats(static_cast<c10::DeviceIndex>(device_index));
  });
}

} // extern "C"
