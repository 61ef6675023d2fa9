// Names the inputs of a saved TorchScript module's forward, which tch cannot: a module traced by
// tch (CModule::create_by_tracing) gets the tracer's argument_1, argument_2, ..., so callers
// cannot pass them by keyword (student(input_ids=..., attention_mask=...)). Its own file because
// the TorchScript headers are slow to compile. Returns NULL on success or a malloc'd error
// message that the caller frees with distill_free (csrc/shim.cpp).
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/script.h>

#include <cstring>
#include <exception>
#include <string>
#include <vector>

extern "C" {

// Loads the TorchScript file at `path`, renames its forward's `n` inputs after `self` to
// `names` (graph values and schema: what the saved code's `def forward(self, ...)` prints), and
// writes it back to `path`.
char* distill_name_inputs(const char* path, const char** names, int n) {
  try {
    auto module = torch::jit::load(path);
    auto& fn = torch::jit::toGraphFunction(module.get_method("forward").function());
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
    module.save(path);
    return nullptr;
  } catch (const std::exception& e) {
    return strdup(e.what());
  } catch (...) {
    return strdup("unknown C++ exception");
  }
}
}
