// Torchlight's C shim over libtorch: the few entry points tch does not generate.
// Every function returns 0 on success and non-zero on failure, with libtorch's message
// available from tl_last_error() on the same thread. No C++ exception crosses this boundary.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// tch's C_tensor: a heap-allocated at::Tensor.
typedef void *tl_tensor;

// The thread's last error message, valid until the next failing call on this thread.
const char *tl_last_error(void);

// Autocast state saved on entry and restored on exit, as torch.autocast does.
typedef struct {
  bool enabled;
  int dtype;
  bool cache_enabled;
} tl_autocast_prev;

int tl_autocast_enter(int device_type, int dtype, bool enabled, bool cache_enabled,
                      tl_autocast_prev *prev);
int tl_autocast_exit(int device_type, const tl_autocast_prev *prev);
int tl_autocast_state(int device_type, bool *enabled, int *dtype);

// at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale).
int tl_amp_non_finite_check_and_unscale(tl_tensor *grads, size_t n, tl_tensor found_inf,
                                        tl_tensor inv_scale);

// at::empty(sizes, dtype, pin_memory=true) on the CPU; fails where no accelerator is present.
int tl_empty_pinned(const int64_t *sizes, size_t ndim, int dtype, tl_tensor *out);

// torch.use_deterministic_algorithms(on, warn_only) and cudnn.deterministic/benchmark.
int tl_set_deterministic(bool on, bool warn_only);

#ifdef __cplusplus
}
#endif
