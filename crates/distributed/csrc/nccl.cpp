// The NCCL process group (c10d::ProcessGroupNCCL, in libtorch_cuda.so), compiled only with the
// crate's `nccl` feature. Same contract and same rule as dist.cpp: c10d's API only.
#include "guard.h"
#include "handles.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <chrono>
#include <string>

extern "C" int tl_dist_nccl_new(tl_dist_store *store, const char *prefix, int rank, int size,
                                int64_t timeout_ms, tl_dist_group **out) {
  return tl::guarded([&] {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = std::chrono::milliseconds(timeout_ms);
    c10::intrusive_ptr<c10d::Store> scoped =
        c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), store->tcp);
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(scoped, rank, size, options);
    *out = new tl_dist_group{c10::static_intrusive_pointer_cast<c10d::Backend>(group)};
  });
}
