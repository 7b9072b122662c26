// Synchronised BatchNorm (torch.nn.SyncBatchNorm's autograd function) on c10d's collectives:
// the batch statistics of every rank in the forward pass, the gradient sums in the backward
// pass. See dist.h for the contract; same rule as dist.cpp (c10d's API only).
//
// CUDA tensors take ATen's sync-BN kernels in the order torch/nn/modules/_functions.py calls
// them (batch_norm_stats, an all-gather of mean/invstd/count, batch_norm_gather_stats_with_counts,
// batch_norm_elemt; batch_norm_backward_reduce, an all-reduce of sum_dy/sum_dy_xmu,
// batch_norm_backward_elemt). Those kernels are CUDA-only, so other devices take a path of
// plain ATen ops with the same collectives: each rank's (mean, M2, count) all-gathered and
// combined in float64 with Chan's parallel-variance formula (exact for uneven counts, no
// cancellation from a sum of squares), and the gradient sums all-reduced.
#include "guard.h"
#include "handles.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/csrc/autograd/custom_function.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor &deref(tl_tensor t) { return *static_cast<at::Tensor *>(t); }

// An optional tensor argument: null is "none".
at::Tensor optional(tl_tensor t) { return t == nullptr ? at::Tensor() : deref(t); }

std::optional<at::Tensor> maybe(const at::Tensor &t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// What the forward pass needs besides the tensors autograd tracks.
struct SyncArgs {
  c10::intrusive_ptr<c10d::Backend> backend;
  int64_t timeout_ms;
  at::Tensor running_mean;
  at::Tensor running_var;
  double momentum;
  double eps;
};

void wait(const c10::intrusive_ptr<c10d::Work> &work, int64_t timeout_ms) {
  work->wait(std::chrono::milliseconds(timeout_ms));
}

std::vector<at::Tensor> all_gather(const c10::intrusive_ptr<c10d::Backend> &backend, int64_t timeout_ms,
                                   const at::Tensor &local) {
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < backend->getSize(); ++r) {
    outputs[0].push_back(at::empty_like(local));
  }
  std::vector<at::Tensor> inputs{local};
  wait(backend->allgather(outputs, inputs), timeout_ms);
  return outputs[0];
}

void all_reduce_sum(const c10::intrusive_ptr<c10d::Backend> &backend, int64_t timeout_ms, at::Tensor &t) {
  std::vector<at::Tensor> tensors{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  wait(backend->allreduce(tensors, opts), timeout_ms);
}

// The dimensions a BatchNorm reduces over: all but the channels (dim 1).
std::vector<int64_t> reduced_dims(const at::Tensor &x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) {
    dims.push_back(d);
  }
  return dims;
}

// A [C] tensor shaped to broadcast over x's channels: [1, C, 1, ...].
at::Tensor per_channel(const at::Tensor &t, const at::Tensor &x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = t.size(0);
  return t.view(shape);
}

// Channels-last inputs keep their layout, as in PyTorch; anything else is made contiguous.
at::Tensor dense(const at::Tensor &t) {
  if (t.is_contiguous(at::MemoryFormat::ChannelsLast) || t.is_contiguous(at::MemoryFormat::ChannelsLast3d)) {
    return t;
  }
  return t.contiguous();
}

void check_total(int64_t total, const at::Tensor &x) {
  TORCH_CHECK(total > 1, "Expected more than 1 value per channel when training, got ", total,
              " over all ranks (this rank's input size ", x.sizes(), ")");
}

struct SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
  // weight and bias are optionals: a custom function's tensor arguments must be defined, and
  // an absent optional is no input at all (as None in Python).
  static at::Tensor forward(AutogradContext *ctx, const at::Tensor &input_,
                            const std::optional<at::Tensor> &weight_opt,
                            const std::optional<at::Tensor> &bias_opt, const SyncArgs *args) {
    const at::Tensor weight = weight_opt.value_or(at::Tensor());
    const at::Tensor bias = bias_opt.value_or(at::Tensor());
    ctx->saved_data["has_bias"] = bias.defined();
    TORCH_CHECK(input_.dim() >= 2, "a BatchNorm input needs at least 2 dimensions [N, C, ...], got ",
                input_.sizes());
    const at::Tensor input = dense(input_);
    const int64_t channels = input.size(1);
    const int64_t local = channels > 0 ? input.numel() / channels : 0;
    ctx->saved_data["backend"] = c10::IValue::make_capsule(args->backend);
    ctx->saved_data["timeout_ms"] = args->timeout_ms;
    if (input.is_cuda()) {
      return forward_cuda(ctx, input, weight, bias, *args, channels, local);
    }
    return forward_host(ctx, input, weight, bias, *args, channels, local);
  }

  static at::Tensor forward_cuda(AutogradContext *ctx, const at::Tensor &input, const at::Tensor &weight,
                                 const at::Tensor &bias, const SyncArgs &args, int64_t channels,
                                 int64_t local) {
    at::Tensor combined;
    if (input.numel() > 0) {
      auto [mean, invstd] = at::batch_norm_stats(input, args.eps);
      at::Tensor count = at::full({1}, static_cast<double>(local), mean.options());
      combined = at::cat({mean, invstd, count}, 0);
    } else {
      // An empty batch still takes part in the gather; its zero count drops it below.
      combined = at::zeros({2 * channels + 1},
                           input.options().dtype(at::toOpMathType(input.scalar_type())));
    }
    at::Tensor all = at::stack(all_gather(args.backend, args.timeout_ms, combined), 0);
    auto parts = at::split(all, channels, 1);
    at::Tensor mean_all = parts[0], invstd_all = parts[1], count_all = parts[2];
    at::Tensor keep = count_all.squeeze(-1) >= 1;
    mean_all = mean_all.index({keep});
    invstd_all = invstd_all.index({keep});
    count_all = count_all.index({keep});
    at::Tensor counts = count_all.view({-1});
    if (args.running_mean.defined() && counts.scalar_type() != args.running_mean.scalar_type()) {
      counts = counts.to(args.running_mean.scalar_type());
    }
    check_total(static_cast<int64_t>(counts.sum().item<double>()), input);
    auto [mean, invstd] =
        at::batch_norm_gather_stats_with_counts(input, mean_all, invstd_all, maybe(args.running_mean),
                                                maybe(args.running_var), args.momentum, args.eps, counts);
    ctx->save_for_backward({input, weight, mean, invstd, count_all.to(at::kInt)});
    if (input.numel() > 0) {
      return at::batch_norm_elemt(input, maybe(weight), maybe(bias), mean, invstd, args.eps);
    }
    return at::empty_like(input);
  }

  static at::Tensor forward_host(AutogradContext *ctx, const at::Tensor &input, const at::Tensor &weight,
                                 const at::Tensor &bias, const SyncArgs &args, int64_t channels,
                                 int64_t local) {
    const auto acc = at::toOpMathType(input.scalar_type());
    const at::Tensor x = input.to(acc);
    // This rank's [mean, M2 (sum of squared deviations), count], in float64.
    at::Tensor mine = at::zeros({2 * channels + 1}, x.options().dtype(at::kDouble));
    if (local > 0) {
      auto [var, mean] = at::var_mean(x, reduced_dims(x), /*correction=*/0, /*keepdim=*/false);
      mine.narrow(0, 0, channels).copy_(mean);
      mine.narrow(0, channels, channels).copy_(var.to(at::kDouble) * static_cast<double>(local));
      mine.narrow(0, 2 * channels, 1).fill_(static_cast<double>(local));
    }
    at::Tensor all = at::stack(all_gather(args.backend, args.timeout_ms, mine), 0);
    at::Tensor means = all.narrow(1, 0, channels);
    at::Tensor m2s = all.narrow(1, channels, channels);
    at::Tensor counts = all.narrow(1, 2 * channels, 1);
    const double total = counts.sum().item<double>();
    check_total(static_cast<int64_t>(total), input);
    // Chan et al.: the world's mean, and its M2 as the ranks' plus their means' spread.
    at::Tensor mean = (means * counts).sum(0) / total;
    at::Tensor m2 = m2s.sum(0) + (counts * (means - mean).square()).sum(0);
    at::Tensor var = m2 / total;
    at::Tensor invstd = (var + args.eps).rsqrt();
    if (args.running_mean.defined()) {
      // PyTorch's update, with the unbiased variance over the world's count.
      const double m = args.momentum;
      at::Tensor unbiased = var * (total / (total - 1.0));
      args.running_mean.mul_(1.0 - m).add_((mean * m).to(args.running_mean.scalar_type()));
      args.running_var.mul_(1.0 - m).add_((unbiased * m).to(args.running_var.scalar_type()));
    }
    at::Tensor mean_acc = mean.to(acc), invstd_acc = invstd.to(acc);
    ctx->save_for_backward({input, weight, mean_acc, invstd_acc});
    ctx->saved_data["total"] = total;
    at::Tensor scale = weight.defined() ? invstd_acc * weight.to(acc) : invstd_acc;
    at::Tensor out = (x - per_channel(mean_acc, x)) * per_channel(scale, x);
    if (bias.defined()) {
      out = out + per_channel(bias.to(acc), x);
    }
    return out.to(input.scalar_type());
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto backend =
        c10::static_intrusive_pointer_cast<c10d::Backend>(ctx->saved_data["backend"].toCapsule());
    const int64_t timeout_ms = ctx->saved_data["timeout_ms"].toInt();
    const at::Tensor grad_out = dense(grads[0]);
    const at::Tensor &input = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    // needs_input_grad counts the inputs that are tensors: input, then weight and bias when given.
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const size_t bias_edge = weight.defined() ? 2 : 1;
    const bool need_input = ctx->needs_input_grad(0);
    const bool need_weight = weight.defined() && ctx->needs_input_grad(1);
    const bool need_bias = has_bias && ctx->needs_input_grad(bias_edge);
    const int64_t channels = input.size(1);
    at::Tensor grad_input, grad_weight, grad_bias;
    if (input.is_cuda()) {
      if (input.numel() > 0) {
        auto [sum_dy, sum_dy_xmu, gw, gb] = at::batch_norm_backward_reduce(
            grad_out, input, mean, invstd, maybe(weight), need_input, need_weight, need_bias);
        if (need_input) {
          at::Tensor combined = at::cat({sum_dy, sum_dy_xmu}, 0);
          all_reduce_sum(backend, timeout_ms, combined);
          auto halves = at::split(combined, channels);
          at::Tensor w = weight.defined() && weight.scalar_type() != mean.scalar_type()
                             ? weight.to(mean.scalar_type())
                             : weight;
          grad_input = at::batch_norm_backward_elemt(grad_out, input, mean, invstd, maybe(w), halves[0],
                                                     halves[1], saved[4]);
        }
        grad_weight = need_weight ? gw : at::Tensor();
        grad_bias = need_bias ? gb : at::Tensor();
      } else if (need_input) {
        // An empty batch still takes part in the all-reduce its peers wait for.
        at::Tensor zeros = at::zeros({2 * channels}, grad_out.options().dtype(mean.scalar_type()));
        all_reduce_sum(backend, timeout_ms, zeros);
      }
    } else {
      const double total = ctx->saved_data["total"].toDouble();
      const auto acc = mean.scalar_type();
      const at::Tensor dy = grad_out.to(acc);
      const at::Tensor x = input.to(acc);
      const at::Tensor xmu = x - per_channel(mean, x);
      const auto dims = reduced_dims(x);
      at::Tensor sum_dy = dy.sum(dims);
      at::Tensor sum_dy_xmu = (dy * xmu).sum(dims);
      if (need_weight) {
        grad_weight = (sum_dy_xmu * invstd).to(weight.scalar_type());
      }
      if (need_bias) {
        grad_bias = sum_dy.to(grads[0].scalar_type());
      }
      if (need_input) {
        at::Tensor combined = at::cat({sum_dy, sum_dy_xmu}, 0);
        all_reduce_sum(backend, timeout_ms, combined);
        at::Tensor mean_dy = combined.narrow(0, 0, channels) / total;
        at::Tensor mean_dy_xmu = combined.narrow(0, channels, channels) / total;
        at::Tensor scale = weight.defined() ? invstd * weight.to(acc) : invstd;
        grad_input = ((dy - per_channel(mean_dy, x) - xmu * per_channel(invstd * invstd * mean_dy_xmu, x)) *
                      per_channel(scale, x))
                         .to(input.scalar_type());
      }
    }
    // One gradient per forward argument: input, weight, bias, and none for the arguments.
    return {grad_input, grad_weight, grad_bias, at::Tensor()};
  }
};

} // namespace

extern "C" int tl_dist_sync_batch_norm(tl_dist_group *group, int64_t timeout_ms, tl_tensor input,
                                       tl_tensor weight, tl_tensor bias, tl_tensor running_mean,
                                       tl_tensor running_var, double momentum, double eps,
                                       tl_tensor *out) {
  return tl::guarded([&] {
    SyncArgs args{group->backend, timeout_ms, optional(running_mean), optional(running_var), momentum, eps};
    TORCH_CHECK(args.running_mean.defined() == args.running_var.defined(),
                "running_mean and running_var must both be given or both be absent");
    at::Tensor result = SyncBatchNormFunction::apply(deref(input), maybe(optional(weight)),
                                                     maybe(optional(bias)), &args);
    *out = new at::Tensor(std::move(result));
  });
}
