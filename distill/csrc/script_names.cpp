// Names the inputs of a traced TorchScript module's forward, which tch cannot: a module traced by
// tch's tracer (torch-sys's atm_create_for_tracing / atm_end_tracing) gets argument_1,
// argument_2, ..., so callers cannot pass them by keyword (student(input_ids=...,
// attention_mask=...)). The module is named in memory, before its one save. Its own file because
// the TorchScript headers are slow to compile. Returns NULL on success or a malloc'd error
// message that the caller frees with distill_free (csrc/shim.cpp).
//
// Also counts the tensor elements a module holds where tch cannot see them: a frozen
// (torch.jit.freeze) or traced module keeps its weights as constants of its methods' graphs,
// not as parameters.
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/script.h>

#include <cstring>
#include <exception>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

// Adds the elements of `t` to `total` unless a tensor of the same storage was counted.
void count(const at::Tensor& t, std::unordered_set<const void*>& seen, int64_t& total) {
  const void* key = t.has_storage() ? t.storage().unsafeGetStorageImpl() : static_cast<const void*>(t.unsafeGetTensorImpl());
  if (seen.insert(key).second) total += t.numel();
}

// The tensor constants of `block` and of the blocks nested in its nodes (if, loop).
void count_constants(torch::jit::Block* block, std::unordered_set<const void*>& seen, int64_t& total) {
  for (auto* node : block->nodes()) {
    for (auto* inner : node->blocks()) count_constants(inner, seen, total);
    if (node->kind() != c10::prim::Constant) continue;
    auto value = torch::jit::toIValue(node->output());
    if (value && value->isTensor()) count(value->toTensor(), seen, total);
  }
}

}  // namespace

extern "C" {

// Renames the `n` inputs after `self` of the forward of `module` (a torch::jit::Module, as
// torch-sys's atm_create_for_tracing returns it) to `names`: its graph values and its schema
// (what the saved code's `def forward(self, ...)` prints).
char* distill_name_module_inputs(void* module, const char** names, int n) {
  try {
    auto& m = *static_cast<torch::jit::Module*>(module);
    auto& fn = torch::jit::toGraphFunction(m.get_method("forward").function());
    auto graph = fn.graph();
    const auto& schema = fn.getSchema();
    if (schema.arguments().size() != static_cast<size_t>(n) + 1 || graph->inputs().size() != static_cast<size_t>(n) + 1) {
      return strdup(("forward takes " + std::to_string(schema.arguments().size() - 1) + " inputs, not " +
                     std::to_string(n))
                        .c_str());
    }
    std::vector<c10::Argument> args{schema.arguments()[0]};
    for (int i = 0; i < n; ++i) {
      graph->inputs()[i + 1]->setDebugName(names[i]);
      args.emplace_back(names[i], schema.arguments()[i + 1].type());
    }
    fn.setSchema(schema.cloneWithArguments(std::move(args)));
    return nullptr;
  } catch (const std::exception& e) {
    return strdup(e.what());
  } catch (...) {
    return strdup("unknown C++ exception");
  }
}

// Loads the TorchScript file at `path` on the CPU and writes to `out` the elements of every
// distinct tensor it holds: the attributes of it and its submodules (parameters, buffers, other
// tensors) and the tensor constants of their methods' graphs.
char* distill_count_tensors(const char* path, int64_t* out) {
  try {
    auto module = torch::jit::load(path, c10::kCPU);
    std::unordered_set<const void*> seen;
    int64_t total = 0;
    for (const auto& sub : module.modules()) {
      for (const auto& attribute : sub.named_attributes(/*recurse=*/false)) {
        if (attribute.value.isTensor()) count(attribute.value.toTensor(), seen, total);
      }
      for (const auto& method : sub.get_methods()) {
        count_constants(torch::jit::toGraphFunction(method.function()).graph()->block(), seen, total);
      }
    }
    *out = total;
    return nullptr;
  } catch (const std::exception& e) {
    return strdup(e.what());
  } catch (...) {
    return strdup("unknown C++ exception");
  }
}
}
