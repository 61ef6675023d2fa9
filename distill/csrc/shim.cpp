// What tch 0.24 does not bind, in a few C functions (see docs/libtorch-notes.md sections 3 and 8):
// autocast on any device with a chosen dtype (tch's `autocast` is CUDA-only and fp16-only), the
// CUDA caching allocator's statistics, and ATen's fused AdamW kernel. Every function returns NULL on success or a malloc'd
// error message that the caller frees with distill_free.
#include <ATen/autocast_mode.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/Functions.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <cstdlib>
#include <cstring>
#include <exception>

#define GUARD(body)                                   \
  try {                                               \
    body;                                             \
    return nullptr;                                   \
  } catch (const std::exception& e) {                 \
    return strdup(e.what());                          \
  } catch (...) {                                     \
    return strdup("unknown C++ exception");           \
  }

static c10::DeviceType device_type(int cuda) { return cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU; }

// The body of distill_fused_adamw (below).
static void fused_adamw(at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs, at::Tensor** exp_avg_sqs,
                        int n, double step, double lr, double beta1, double beta2, double weight_decay, double eps) {
  if (n == 0) return;
  std::vector<at::Tensor> p, g, m, v, steps;
  auto t = at::full({}, step, params[0]->options().dtype(at::kFloat));
  // The kernel walks each tensor's storage in order: a gradient or moment laid out unlike its
  // parameter (a transposed gradient, a channels-last moment) would silently update the wrong
  // elements, as torch.optim.AdamW(fused=True) does with one. Every tensor is made row-major.
  for (int i = 0; i < n; ++i) {
    TORCH_CHECK(params[i]->is_contiguous(), "fused AdamW: parameter ", i, " is not contiguous");
    TORCH_CHECK(exp_avgs[i]->is_contiguous() && exp_avg_sqs[i]->is_contiguous(), "fused AdamW: the moments of ",
                "parameter ", i, " are not contiguous");
    p.push_back(*params[i]);
    g.push_back(grads[i]->contiguous());
    m.push_back(*exp_avgs[i]);
    v.push_back(*exp_avg_sqs[i]);
    steps.push_back(t);
  }
  at::_fused_adamw_(p, g, m, v, {}, steps, lr, beta1, beta2, weight_decay, eps, /*amsgrad=*/false,
                    /*maximize=*/false);
}

extern "C" {

void distill_free(char* message) { std::free(message); }

// Enables autocast on the CPU (cuda = 0) or CUDA (cuda = 1) with `scalar_type` (c10 codes:
// 5 Half, 15 BFloat16); writes the previous state for distill_autocast_exit.
char* distill_autocast_enter(int cuda, int scalar_type, int* prev_enabled, int* prev_type) {
  GUARD({
    auto dt = device_type(cuda);
    *prev_enabled = at::autocast::is_autocast_enabled(dt) ? 1 : 0;
    *prev_type = static_cast<int>(at::autocast::get_autocast_dtype(dt));
    at::autocast::set_autocast_dtype(dt, static_cast<at::ScalarType>(scalar_type));
    at::autocast::set_autocast_enabled(dt, true);
    at::autocast::increment_nesting();
  })
}

// Restores the state distill_autocast_enter saved; clears the cast cache when the outermost
// autocast region ends (as torch.autocast.__exit__ does).
char* distill_autocast_exit(int cuda, int prev_enabled, int prev_type) {
  GUARD({
    auto dt = device_type(cuda);
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    at::autocast::set_autocast_enabled(dt, prev_enabled != 0);
    at::autocast::set_autocast_dtype(dt, static_cast<at::ScalarType>(prev_type));
  })
}

// The CUDA caching allocator's counters for `device` (aggregate pool), in bytes:
// out[0] allocated now, out[1] allocated peak, out[2] reserved now, out[3] reserved peak,
// out[4] number of OOMs, out[5] number of allocation retries.
char* distill_cuda_memory(int device, int64_t* out) {
  GUARD({
    auto stats = at::accelerator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    const size_t all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out[0] = stats.allocated_bytes[all].current;
    out[1] = stats.allocated_bytes[all].peak;
    out[2] = stats.reserved_bytes[all].current;
    out[3] = stats.reserved_bytes[all].peak;
    out[4] = stats.num_ooms;
    out[5] = stats.num_alloc_retries;
  })
}

// torch.cuda.mem_get_info(device): free and total bytes of the device.
char* distill_cuda_mem_info(int device, int64_t* free_bytes, int64_t* total_bytes) {
  GUARD({
    auto info = at::accelerator::getMemoryInfo(static_cast<c10::DeviceIndex>(device));
    *free_bytes = static_cast<int64_t>(info.first);
    *total_bytes = static_cast<int64_t>(info.second);
  })
}

// torch.cuda.reset_peak_memory_stats(device).
char* distill_cuda_reset_peak(int device) {
  GUARD(at::accelerator::resetPeakStats(static_cast<c10::DeviceIndex>(device)))
}

// One AdamW step of ATen's fused kernel (`at::_fused_adamw_`, what torch.optim.AdamW(fused=True)
// calls; CPU and CUDA kernels) over n parameters with their gradients and moments, all of one
// dtype and device, at optimiser step `step` (1 for the first; the kernel reads it for the bias
// corrections and does not advance it).
char* distill_fused_adamw(at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs, at::Tensor** exp_avg_sqs,
                          int n, double step, double lr, double beta1, double beta2, double weight_decay,
                          double eps) {
  GUARD(fused_adamw(params, grads, exp_avgs, exp_avg_sqs, n, step, lr, beta1, beta2, weight_decay, eps))
}

// torch.cuda.empty_cache().
char* distill_cuda_empty_cache() { GUARD(at::accelerator::emptyCache()) }
}
