// Data-parallel training on libtorch's own distributed engine, c10d (the C++ under
// torch.nn.parallel.DistributedDataParallel), in a few C functions for distill/src/data_parallel/: a
// TCPStore rendezvous, a ProcessGroup with the Gloo backend, broadcast and all-reduce, and the
// c10d::Reducer that all-reduces gradients in buckets while autograd runs the backward. A group on
// CUDA adds the NCCL backend (dist_nccl.cpp) for CUDA tensors beside Gloo, which keeps the CPU
// ones (the step's figures, the stop flag, checksums) and the barrier. Tensors
// come in as tch's handles (at::Tensor*). Every function returns NULL on success or a malloc'd
// error message that the caller frees with distill_free (shim.cpp); Rust keeps its first line.
//
// The Reducer is built as torch/nn/parallel/distributed.py (torch 2.11) builds it for
// find_unused_parameters=False: one bucket of every parameter at first, re-bucketed by the
// backward's real order after the first step (rebuild_buckets, called before each forward),
// within the bucket cap (DDP's 25 MiB) and a 1 MiB first bucket.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/csrc/autograd/custom_function.h>
#include <c10/util/Logging.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#define GUARD(...)                                    \
  try {                                               \
    __VA_ARGS__;                                      \
    return nullptr;                                   \
  } catch (const std::exception& e) {                 \
    return strdup(e.what());                          \
  } catch (...) {                                     \
    return strdup("unknown C++ exception");           \
  }

c10::intrusive_ptr<c10d::Backend> distill_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int world, int device, std::chrono::milliseconds timeout);

namespace {

struct Group {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  // the job's store (this attempt's prefix), for the roll call after a failure
  c10::intrusive_ptr<c10d::Store> store;
  int rank;
  int world;
};

std::string roll_call_key(int rank) { return "roll-call/" + std::to_string(rank); }

// c10's log level raised to errors while it lives: a store whose server is gone makes TCPStore
// log each failed send as a warning with a C++ backtrace, and the roll call says it in one line.
struct ErrorsOnly {
  int saved = FLAGS_caffe2_log_level;
  ErrorsOnly() { FLAGS_caffe2_log_level = 2; }
  ~ErrorsOnly() { FLAGS_caffe2_log_level = saved; }
};

std::vector<at::Tensor> tensors(at::Tensor** ts, int n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) out.push_back(*ts[i]);
  return out;
}

void allreduce_sum(Group* g, at::Tensor& t) {
  std::vector<at::Tensor> v{t};
  g->pg->allreduce(v)->wait();
}

// A sum over the ranks that autograd can differentiate: the gradient of every rank's copy of the
// sum is the sum of the ranks' output gradients (the adjoint of an all-reduce is an all-reduce),
// as torch.distributed.nn.functional.all_reduce does. SyncBatchNorm's statistics go through it.
struct SumOverRanks : public torch::autograd::Function<SumOverRanks> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    auto y = x.clone();
    allreduce_sum(reinterpret_cast<Group*>(group), y);
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto g = grads[0].contiguous().clone();
    allreduce_sum(reinterpret_cast<Group*>(ctx->saved_data["group"].toInt()), g);
    return {g, at::Tensor()};
  }
};

// DDP's broadcast bucket for parameters and buffers at start-up (distributed.py: 250 MiB).
constexpr size_t kBroadcastBytes = 250u * 1024 * 1024;

// While it lives, libtorch logs only fatal messages: joining a group that cannot be reached
// logs each retry with C++ stack frames (dozens of lines before the one that says why), and the
// caller turns the exception that follows into one line naming the launch variables.
struct QuietLog {
  int saved = FLAGS_caffe2_log_level;
  QuietLog() { FLAGS_caffe2_log_level = 3; }
  ~QuietLog() { FLAGS_caffe2_log_level = saved; }
};

}  // namespace

extern "C" {

// Joins the group of `world` processes whose store listens at addr:port (rank 0 serves it unless
// `agent_store`: torchrun's agent already does), keys under `prefix`, with a Gloo backend bound to
// the interfaces `ifnames` names (comma-separated, GLOO_SOCKET_IFNAME's form) or, when NULL, this
// host's address; with `nccl_device` >= 0, CUDA tensors go through an NCCL backend on that
// device, else through Gloo too.
char* dist_group_new(const char* addr, int port, int rank, int world, int64_t timeout_ms, int agent_store,
                     const char* prefix, int nccl_device, const char* ifnames, void** out) {
  GUARD({
    QuietLog quiet;
    auto timeout = std::chrono::milliseconds(timeout_ms);
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(port);
    opts.isServer = rank == 0 && !agent_store;
    opts.numWorkers = world;
    opts.waitWorkers = !agent_store;
    opts.timeout = timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(std::string(addr), opts);
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), tcp);
    auto gloo_opts = c10d::ProcessGroupGloo::Options::create(timeout);
    if (ifnames && *ifnames) {
      std::stringstream list(ifnames);
      std::string name;
      while (std::getline(list, name, ',')) {
        gloo_opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      }
    } else {
      gloo_opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo_opts);
    auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world);
    pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    if (nccl_device >= 0) {
      auto nccl = distill_nccl_backend(store, rank, world, nccl_device, timeout);
      pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
    } else {
      // Without NCCL, Gloo takes CUDA tensors too: ProcessGroupGloo stages them through host
      // memory itself (its CUDA broadcast and all-reduce work), as torch.distributed does for
      // backend "gloo"; unregistered, the first collective on a CUDA tensor fails with "No
      // backend type associated with device type cuda".
      pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, backend);
    }
    *out = new Group{pg, store, rank, world};
  })
}

// The name of the backend that takes tensors of device type `cuda` (1) or CPU (0) in `out` (for
// the caller to free with distill_free), or the error of a device type with none.
char* dist_group_backend(void* group, int cuda, char** out) {
  GUARD({
    auto type = cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    *out = strdup(static_cast<Group*>(group)->pg->getBackend(type)->getBackendName().c_str());
  })
}

// Shuts the backends down (NCCL's communicators and watchdog: ProcessGroupNCCL warns when it is
// destroyed without), then frees the group.
void dist_group_free(void* group) {
  auto* g = static_cast<Group*>(group);
  try {
    g->pg->shutdown();
  } catch (...) {
    // a peer already gone: nothing left to shut down cleanly
  }
  delete g;
}

// Copies rank `root`'s values of the `n` tensors into every rank's (in place, coalesced).
char* dist_broadcast(void* group, at::Tensor** ts, int n, int root) {
  GUARD({ c10d::broadcast_coalesced(static_cast<Group*>(group)->pg, tensors(ts, n), kBroadcastBytes, root); })
}

// In-place all-reduce of `t`: op 0 sum, 1 min, 2 max.
char* dist_allreduce(void* group, at::Tensor* t, int op) {
  GUARD({
    c10d::AllreduceOptions o;
    o.reduceOp = op == 1 ? c10d::ReduceOp::MIN : op == 2 ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    std::vector<at::Tensor> v{*t};
    static_cast<Group*>(group)->pg->allreduce(v, o)->wait();
  })
}

// After a failed collective: answers a roll call in the store (key roll-call/<rank>) and waits up
// to `wait_ms` for every other rank's answer; `present[i]` (world entries, zeroed by the caller)
// becomes 1 for each rank that answered, this one included. Fails when the store itself is gone.
char* dist_roll_call(void* group, int64_t wait_ms, int* present) {
  GUARD({
    auto* g = static_cast<Group*>(group);
    ErrorsOnly quiet;
    g->store->set(roll_call_key(g->rank), std::vector<uint8_t>{1});
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    while (true) {
      bool all = true;
      for (int i = 0; i < g->world; ++i) {
        if (!present[i]) present[i] = g->store->check({roll_call_key(i)}) ? 1 : 0;
        all = all && present[i];
      }
      if (all || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  })
}

// `*out` = the sum of every rank's `t` (a new tensor), differentiable (SumOverRanks). Every rank
// calls it with the same shape at the same point of its forward.
char* dist_sum_over_ranks(void* group, at::Tensor* t, at::Tensor** out) {
  GUARD({ *out = new at::Tensor(SumOverRanks::apply(*t, reinterpret_cast<int64_t>(group))); })
}

char* dist_barrier(void* group) {
  GUARD({ static_cast<Group*>(group)->pg->barrier()->wait(); })
}

// A Reducer over the `n` parameters (in the same order on every rank), buckets of at most
// `bucket_cap_bytes`; `grad_as_bucket_view` makes the gradients views into the buckets (no
// second copy of them).
char* dist_reducer_new(void* group, at::Tensor** params, int n, int64_t bucket_cap_bytes, int grad_as_bucket_view,
                       void** out) {
  GUARD({
    auto ps = tensors(params, n);
    std::vector<bool> sparse(ps.size(), false);
    auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(
        ps, {std::numeric_limits<size_t>::max()}, sparse);
    std::reverse(buckets.begin(), buckets.end());
    std::unordered_map<size_t, std::string> names;
    auto* reducer = new c10d::Reducer(ps, buckets, static_cast<Group*>(group)->pg, sparse, bucket_cap_bytes,
                                      /*find_unused_parameters=*/false, grad_as_bucket_view != 0, names,
                                      /*first_bucket_bytes_cap=*/1024 * 1024,
                                      /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
                                      /*bucket_bytes_cap_list=*/{});
    *out = reducer;
  })
}

// Before a forward whose backward is to be reduced: re-buckets once, after the first backward.
char* dist_reducer_prepare_forward(void* reducer) {
  GUARD({
    auto* r = static_cast<c10d::Reducer*>(reducer);
    r->prepare_for_forward();
    r->rebuild_buckets();
  })
}

// Before that backward: arms the autograd hooks that all-reduce each full bucket.
char* dist_reducer_prepare_backward(void* reducer) {
  GUARD({ static_cast<c10d::Reducer*>(reducer)->prepare_for_backward({}); })
}

char* dist_reducer_free(void* reducer) {
  GUARD({ delete static_cast<c10d::Reducer*>(reducer); })
}

// Python's zero_grad(set_to_none=True): drops each gradient without detaching it in place (tch's
// zero_grad detaches, which bucket views refuse).
char* dist_zero_grad(at::Tensor** ts, int n) {
  GUARD({
    for (int i = 0; i < n; ++i) ts[i]->mutable_grad().reset();
  })
}

}  // extern "C"
