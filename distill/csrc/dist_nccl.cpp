// The NCCL backend of distill's process groups (collectives of CUDA tensors), in a translation
// unit of its own: ProcessGroupNCCL.hpp pulls in the CUDA runtime's headers, which the Gloo side
// does not need. Built against the torch wheel's own nccl.h (ProcessGroupNCCL::Options holds an
// ncclConfig_t by value) and the CUDA headers of cuda-toolkit[crt,cccl] at the wheel's version.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <c10/cuda/CUDAFunctions.h>

#include <chrono>

// A ProcessGroupNCCL of `world` ranks over `store` on CUDA device `device` (made current here,
// as torch.cuda.set_device(local_rank) before init_process_group). Its communicators are created
// at the first collective, on the device of its tensors; with no GPU the constructor throws
// "ProcessGroupNCCL is only supported with GPUs, no GPUs found!".
c10::intrusive_ptr<c10d::Backend> distill_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int world, int device, std::chrono::milliseconds timeout) {
  if (c10::cuda::device_count() > 0) c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, options);
}
