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

// torch.optim.adam._fused_adam for one device and dtype: adds 1 to every state step, runs
// at::_fused_adam_ (or at::_fused_adamw_ when decoupled), then subtracts found_inf from the
// steps so that a skipped step leaves them unchanged. n_max is n (amsgrad) or 0.
// grad_scale and found_inf may be NULL. Runs under no-grad.
int tl_fused_adam(tl_tensor *params, tl_tensor *grads, tl_tensor *exp_avgs, tl_tensor *exp_avg_sqs,
                  tl_tensor *max_exp_avg_sqs, size_t n_max, tl_tensor *state_steps, size_t n,
                  double lr, double beta1, double beta2, double weight_decay, double eps,
                  bool amsgrad, bool maximize, bool decoupled, tl_tensor grad_scale,
                  tl_tensor found_inf);

// at::_fused_sgd_ for one device and dtype; n_buf is n (momentum != 0) or 0.
// grad_scale and found_inf may be NULL. Runs under no-grad.
int tl_fused_sgd(tl_tensor *params, tl_tensor *grads, tl_tensor *momentum_buffers, size_t n_buf,
                 size_t n, double weight_decay, double momentum, double lr, double dampening,
                 bool nesterov, bool maximize, bool is_first_step, tl_tensor grad_scale,
                 tl_tensor found_inf);

// self.add_(other, alpha): self += alpha * other in one kernel (tch has no alpha argument).
int tl_add_scaled_(tl_tensor self, tl_tensor other, double alpha);

// param.grad = None: drops the gradient tensor (zero_grad(set_to_none=True)).
int tl_set_grad_none(tl_tensor param);

// torch._foreach_lerp_(selfs, ends, weight) over n pairs, under no_grad (an EMA of weights).
int tl_foreach_lerp_(tl_tensor *selfs, tl_tensor *ends, size_t n, double weight);

// torch._foreach_copy_(selfs, srcs) over n pairs, under no_grad.
int tl_foreach_copy_(tl_tensor *selfs, tl_tensor *srcs, size_t n);

// torch.cuda.empty_cache(): the CUDA caching allocator's unused cached blocks back to the
// driver. Fails when libtorch's CUDA backend is not loaded.
int tl_cuda_empty_cache(void);

// torch.cuda.memory_allocated / memory_reserved / max_memory_allocated of one device, in bytes.
int tl_cuda_memory_stats(int device_index, int64_t *allocated, int64_t *reserved,
                         int64_t *peak_allocated);

// torch.cuda.reset_peak_memory_stats(device_index).
int tl_cuda_reset_peak_memory_stats(int device_index);

#ifdef __cplusplus
}
#endif
