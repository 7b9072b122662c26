// TorchScript tracing with parameters and buffers as module attributes, as torch.jit.trace does
// for an nn.Module. tch's own tracing inlines every tensor it meets as a graph constant, which
// Python's torch.jit.load then refuses ("Unsupported value kind: Tensor"); registering the
// tensors on a module first and mapping them to attribute reads gives a normal TorchScript
// module whose state_dict keys are the model's.
#include "guard.h"

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/passes/fixup_trace_scope_blocks.h>
#include <torch/csrc/jit/passes/normalize_ops.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using torch::jit::Module;
using torch::jit::Value;

// Sets up `value` for every attribute of `module`, recursively, like the tracer does for
// torch.jit.trace(module): prim::TracedAttr nodes that FixupTraceScopeBlocks turns into
// GetAttr chains.
void gather(torch::jit::tracer::TracingState &state, Value *self_value, const Module &module,
            const std::string &prefix) {
  auto &graph = *self_value->owningGraph();
  state.setValue(module._ivalue(), self_value);
  for (const auto &attr : module.named_attributes(/*recurse=*/false)) {
    auto qualified = prefix + "." + attr.name;
    Value *traced = graph.insertNode(graph.create(c10::prim::TracedAttr))
                        ->s_(c10::attr::scope, qualified)
                        ->output()
                        ->setType(attr.value.type());
    if (attr.value.isTensor()) {
      state.setValue(attr.value, traced);
    } else if (attr.value.isModule()) {
      gather(state, traced, attr.value.toModule(), qualified);
    }
  }
}

std::vector<std::string> split(const std::string &name) {
  std::vector<std::string> parts;
  std::stringstream stream(name);
  std::string part;
  while (std::getline(stream, part, '.')) {
    parts.push_back(part);
  }
  return parts;
}

} // namespace

extern "C" {

typedef void *(*tl_forward_fn)(void *ctx, void **inputs, size_t n_inputs);


// Builds a module holding `n` named tensors (dotted state_dict keys become submodules), traces
// `forward(ctx, examples, n_inputs)` against it, the examples being the traced forward's
// arguments named `input_names` in order, and saves the result to `path`. `forward` returns a
// new at::Tensor* or null when it failed.
int tl_jit_trace_save(const char **names, void **tensors, const bool *is_buffer, size_t n,
                      void **examples, const char **input_names, size_t n_inputs,
                      tl_forward_fn forward, void *ctx, const char *path) {
  bool tracing = false;
  int rc = tl::guarded([&] {
    auto cu = std::make_shared<torch::jit::CompilationUnit>();
    Module root(c10::QualifiedName("__torch__.torchlight.Model"), cu, true);
    for (size_t i = 0; i < n; ++i) {
      auto parts = split(names[i]);
      Module current = root;
      for (size_t j = 0; j + 1 < parts.size(); ++j) {
        if (current.hasattr(parts[j])) {
          current = current.attr(parts[j]).toModule();
        } else {
          Module child(c10::QualifiedName("__torch__.torchlight.Module"), cu, true);
          current.register_module(parts[j], child);
          current = child;
        }
      }
      auto &tensor = *static_cast<at::Tensor *>(tensors[i]);
      if (is_buffer[i]) {
        current.register_buffer(parts.back(), tensor);
      } else {
        current.register_parameter(parts.back(), tensor, false);
      }
    }
    auto state = std::make_shared<torch::jit::tracer::TracingState>();
    torch::jit::tracer::setTracingState(state);
    tracing = true;
    auto graph = state->graph;
    Value *self_value = graph->insertInput(0, "self")->setType(root._ivalue()->type());
    gather(*state, self_value, root, "__module");
    for (size_t i = 0; i < n_inputs; ++i) {
      auto &input = *static_cast<at::Tensor *>(examples[i]);
      Value *input_value = graph->addInput(input_names[i]);
      input_value->setType(c10::TensorType::get());
      state->setValue(input, input_value);
    }
    void *raw = forward(ctx, examples, n_inputs);
    if (raw == nullptr) {
      throw std::runtime_error("the model's forward failed while tracing");
    }
    std::unique_ptr<at::Tensor> output(static_cast<at::Tensor *>(raw));
    graph->registerOutput(state->getOutput(*output, 0));
    torch::jit::FixupTraceScopeBlocks(graph, &root);
    torch::jit::NormalizeOps(graph);
    torch::jit::tracer::setTracingState(nullptr);
    tracing = false;
    auto fn = cu->create_function(c10::QualifiedName(*root.type()->name(), "forward"), graph);
    root.type()->addMethod(fn);
    root.eval();
    root.save(path);
  });
  if (rc != 0 && tracing) {
    torch::jit::tracer::abandon();
  }
  return rc;
}

} // extern "C"
