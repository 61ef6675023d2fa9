// The CUDA caching allocator's history (`--cuda-memory-history FILE`): every segment opened,
// every block allocated and freed, in order, as PyTorch's own recorder keeps it
// (`torch.cuda.memory._record_memory_history`), written as its pickled snapshot
// (`torch.cuda.memory._snapshot()`: `segments` and `device_traces`), which
// bench/gpu/allocator_history.py reads and https://pytorch.org/memory_viz draws. The C++ API
// of torch/csrc/cuda/memory_snapshot.h, in libtorch_cuda.
#include <ATen/Context.h>
#include <torch/csrc/cuda/memory_snapshot.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

extern "C" {

// Starts recording on every CUDA device, with the C++ stack of each event when `cpp_stacks` is
// non-zero (slower: each event unwinds its stack, the snapshot symbolises them). The allocator
// is initialised first: the recorder only reaches the devices it has set up.
char* distill_cuda_memory_history_start(int cpp_stacks) {
  try {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    torch::cuda::_record_memory_history(std::string("all"), std::string("all"), cpp_stacks ? "all" : "python",
                                        SIZE_MAX);
    return nullptr;
  } catch (const std::exception& e) {
    return strdup(e.what());
  } catch (...) {
    return strdup("unknown C++ exception");
  }
}

// The pickled snapshot of the history so far: `*bytes` (malloc'd, `*len` bytes, freed with
// distill_free by the caller), or an error message.
char* distill_cuda_memory_snapshot(char** bytes, int64_t* len) {
  try {
    std::string pickled = torch::cuda::_memory_snapshot_pickled();
    *bytes = static_cast<char*>(std::malloc(pickled.size() ? pickled.size() : 1));
    if (*bytes == nullptr) return strdup("out of host memory for the snapshot");
    std::memcpy(*bytes, pickled.data(), pickled.size());
    *len = static_cast<int64_t>(pickled.size());
    return nullptr;
  } catch (const std::exception& e) {
    return strdup(e.what());
  } catch (...) {
    return strdup("unknown C++ exception");
  }
}
}
