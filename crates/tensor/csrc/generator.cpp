// The state of libtorch's default random generators (torch.get_rng_state / set_rng_state and
// their CUDA counterparts), which tch does not expose; checkpoints save and restore it.
#include "guard.h"

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/Generator.h>

#include <mutex>

extern "C" {

// The state of the default generator of device (type, index) as a new uint8 tensor.
int tl_rng_get_state(int device_type, int index, void **out) {
  return tl::guarded([&] {
    auto device = at::Device(static_cast<at::DeviceType>(device_type), static_cast<c10::DeviceIndex>(index));
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    *out = new at::Tensor(gen.get_state());
  });
}

// Restores a state returned by tl_rng_get_state.
int tl_rng_set_state(int device_type, int index, void *state) {
  return tl::guarded([&] {
    auto device = at::Device(static_cast<at::DeviceType>(device_type), static_cast<c10::DeviceIndex>(index));
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(*static_cast<at::Tensor *>(state));
  });
}

} // extern "C"
