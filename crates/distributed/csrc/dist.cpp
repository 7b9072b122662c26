// Torchlight's C shim over c10d: TCPStore, ProcessGroupGloo and one-tensor collectives.
// See dist.h for the contract.
//
// THE RULE OF THIS FILE: it uses c10d's API only and never names a type of gloo's own (no
// gloo:: namespace, no GlooStore, no rendezvous store). libtorch compiles gloo in, but the
// headers we build with come from another gloo release (Debian's libgloo-dev), whose
// rendezvous Store has a different vtable from libtorch's. Touching such a type here would
// compile fine and corrupt memory at run time; libtorch's own code creates and calls them
// internally with its own layout. tests/it/shim_rule.rs checks this file's text and the
// compiled shim's symbols.
#include "guard.h"
#include "handles.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

using tl::guarded;

at::Tensor &deref(tl_tensor t) { return *static_cast<at::Tensor *>(t); }

std::chrono::milliseconds millis(int64_t ms) { return std::chrono::milliseconds(ms); }

std::vector<std::string> split_commas(const std::string &text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    if (!part.empty()) {
      parts.push_back(part);
    }
  }
  return parts;
}

int start(c10::intrusive_ptr<c10d::Work> work, tl_dist_work **out) {
  *out = new tl_dist_work{std::move(work)};
  return 0;
}

} // namespace

extern "C" {

int tl_dist_store_open(const char *host, int port, int world_size, bool is_server,
                       bool wait_workers, bool multi_tenant, int64_t timeout_ms,
                       tl_dist_store **out) {
  return guarded([&] {
    TORCH_CHECK(port >= 0 && port <= 65535, "port ", port, " is not in 0..=65535");
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(port);
    opts.isServer = is_server;
    opts.numWorkers = static_cast<std::size_t>(world_size);
    opts.waitWorkers = wait_workers;
    opts.multiTenant = multi_tenant;
    opts.timeout = millis(timeout_ms);
    *out = new tl_dist_store{c10::make_intrusive<c10d::TCPStore>(std::string(host), opts)};
  });
}

int tl_dist_store_port(const tl_dist_store *store, int *port) {
  return guarded([&] { *port = static_cast<int>(store->tcp->getPort()); });
}

void tl_dist_store_free(tl_dist_store *store) { delete store; }

int tl_dist_gloo_new(tl_dist_store *store, const char *prefix, int rank, int size,
                     int64_t timeout_ms, const char *interfaces, int threads,
                     tl_dist_group **out) {
  return guarded([&] {
    auto options = c10d::ProcessGroupGloo::Options::create(millis(timeout_ms));
    const bool lazy = c10d::getDefaultGlooLazyInit();
    if (interfaces != nullptr && *interfaces != '\0') {
      for (const auto &name : split_commas(interfaces)) {
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name, lazy));
      }
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice(lazy));
    }
    // As torch.distributed does: two worker threads per device unless told otherwise.
    options->threads = threads > 0 ? threads : static_cast<int>(options->devices.size()) * 2;
    c10::intrusive_ptr<c10d::Store> scoped =
        c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), store->tcp);
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(scoped, rank, size, options);
    *out = new tl_dist_group{c10::static_intrusive_pointer_cast<c10d::Backend>(group)};
  });
}

int tl_dist_group_set_timeout(tl_dist_group *group, int64_t timeout_ms) {
  return guarded([&] { group->backend->setTimeout(millis(timeout_ms)); });
}

void tl_dist_group_free(tl_dist_group *group) { delete group; }

int tl_dist_all_reduce(tl_dist_group *group, tl_tensor tensor, int op, tl_dist_work **out) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{deref(tensor)};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp(static_cast<c10d::ReduceOp::RedOpType>(op));
    start(group->backend->allreduce(tensors, opts), out);
  });
}

int tl_dist_broadcast(tl_dist_group *group, tl_tensor tensor, int root, tl_dist_work **out) {
  return guarded([&] {
    std::vector<at::Tensor> tensors{deref(tensor)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.rootTensor = 0;
    start(group->backend->broadcast(tensors, opts), out);
  });
}

int tl_dist_all_gather(tl_dist_group *group, tl_tensor *outputs, size_t n_outputs,
                       tl_tensor input, tl_dist_work **out) {
  return guarded([&] {
    std::vector<std::vector<at::Tensor>> outs(1);
    outs[0].reserve(n_outputs);
    for (size_t i = 0; i < n_outputs; ++i) {
      outs[0].push_back(deref(outputs[i]));
    }
    std::vector<at::Tensor> inputs{deref(input)};
    start(group->backend->allgather(outs, inputs), out);
  });
}

int tl_dist_barrier(tl_dist_group *group, tl_dist_work **out) {
  return guarded([&] { start(group->backend->barrier(), out); });
}

int tl_dist_set_grad(tl_tensor param, tl_tensor grad) {
  return guarded([&] { deref(param).mutable_grad() = deref(grad); });
}

int tl_dist_work_wait(tl_dist_work *work, int64_t timeout_ms) {
  return guarded([&] { work->work->wait(millis(timeout_ms)); });
}

void tl_dist_work_free(tl_dist_work *work) { delete work; }

} // extern "C"
