// Torchlight's C shim over c10d, PyTorch's distributed engine: TCPStore rendezvous, the Gloo
// (and, with TL_WITH_NCCL, NCCL) process group, and the collectives DDP needs.
//
// Every function returns 0 on success and non-zero on failure, with the C++ exception's
// message available from tl_last_error() (torchlight-tensor's error store, csrc/guard.h) on the
// same thread. No C++ exception crosses this boundary. Handles are opaque and freed by their
// *_free function; freeing a group waits for its queued work, as ~ProcessGroupGloo does.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// tch's C_tensor: a heap-allocated at::Tensor.
typedef void *tl_tensor;

typedef struct tl_dist_store tl_dist_store;
typedef struct tl_dist_group tl_dist_group;
typedef struct tl_dist_work tl_dist_work;

// c10d::TCPStore at host:port. The server (is_server) binds port (0: a free one, see
// tl_dist_store_port) and, with wait_workers, waits until world_size participants (itself
// included) have connected; a client connects, retrying until timeout_ms. multi_tenant lets
// several server stores of one process share host:port, as torch.distributed's rank 0 does.
int tl_dist_store_open(const char *host, int port, int world_size, bool is_server,
                       bool wait_workers, bool multi_tenant, int64_t timeout_ms,
                       tl_dist_store **out);
// The port a store listens on or connects to.
int tl_dist_store_port(const tl_dist_store *store, int *port);
void tl_dist_store_free(tl_dist_store *store);

// c10d::ProcessGroupGloo over c10d::PrefixStore(prefix, store) with collective timeout
// timeout_ms. Devices (network interfaces) as in PyTorch: one per name in interfaces
// (comma-separated, GLOO_SOCKET_IFNAME's format) when given, else
// ProcessGroupGloo::createDefaultDevice() (this host's name, or loopback if it does not
// resolve). threads: 0 for PyTorch's 2 per device.
int tl_dist_gloo_new(tl_dist_store *store, const char *prefix, int rank, int size,
                     int64_t timeout_ms, const char *interfaces, int threads,
                     tl_dist_group **out);
// c10d::ProcessGroupNCCL (csrc/nccl.cpp, compiled only with the `nccl` feature).
int tl_dist_nccl_new(tl_dist_store *store, const char *prefix, int rank, int size,
                     int64_t timeout_ms, tl_dist_group **out);
// Backend::setTimeout: the timeout of later collectives.
int tl_dist_group_set_timeout(tl_dist_group *group, int64_t timeout_ms);
void tl_dist_group_free(tl_dist_group *group);

// Collectives on one tensor each, returning the c10d::Work to wait on. op: c10d::ReduceOp's
// RedOpType code (SUM 0, AVG 1, PRODUCT 2, MIN 3, MAX 4).
int tl_dist_all_reduce(tl_dist_group *group, tl_tensor tensor, int op, tl_dist_work **out);
int tl_dist_broadcast(tl_dist_group *group, tl_tensor tensor, int root, tl_dist_work **out);
// outputs: size tensors shaped like input, in rank order.
int tl_dist_all_gather(tl_dist_group *group, tl_tensor *outputs, size_t n_outputs,
                       tl_tensor input, tl_dist_work **out);
int tl_dist_barrier(tl_dist_group *group, tl_dist_work **out);
// param.mutable_grad() = grad: gives a parameter a gradient (DDP's zeros for a parameter this
// rank did not use but another did).
int tl_dist_set_grad(tl_tensor param, tl_tensor grad);

// Synchronised BatchNorm (csrc/sync_bn.cpp): torch.nn.SyncBatchNorm's training forward of
// input [N, C, ...] over the group, recorded for autograd so that its backward all-reduces the
// gradient sums; *out receives the new output tensor. weight, bias, running_mean and
// running_var may be null; the running statistics, when given, are updated in place with the
// world's mean and unbiased variance. Every collective waits at most timeout_ms.
int tl_dist_sync_batch_norm(tl_dist_group *group, int64_t timeout_ms, tl_tensor input,
                            tl_tensor weight, tl_tensor bias, tl_tensor running_mean,
                            tl_tensor running_var, double momentum, double eps, tl_tensor *out);

// Work::wait(timeout_ms): rethrows the collective's failure, or fails after timeout_ms.
int tl_dist_work_wait(tl_dist_work *work, int64_t timeout_ms);
void tl_dist_work_free(tl_dist_work *work);

#ifdef __cplusplus
}
#endif
