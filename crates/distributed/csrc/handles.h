// The shim's opaque handles (dist.h), shared by dist.cpp and nccl.cpp.
#pragma once
#include "dist.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

struct tl_dist_store {
  c10::intrusive_ptr<c10d::TCPStore> tcp;
};

struct tl_dist_group {
  c10::intrusive_ptr<c10d::Backend> backend;
};

struct tl_dist_work {
  c10::intrusive_ptr<c10d::Work> work;
};
