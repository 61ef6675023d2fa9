// What the memory plan needs to know of a CUDA device beyond its memory: its compute capability,
// which sets PyTorch's default cuBLAS workspace (32 MiB from sm90 on, 8320 KiB before:
// aten/src/ATen/cuda/CublasHandlePool.cpp). A unit of its own because it needs the CUDA
// runtime's headers (compiled beside dist_nccl.cpp, with the same include folders).
#include <ATen/cuda/CUDAContext.h>

#include <cstring>
#include <exception>

extern "C" {

// Writes device `device`'s compute capability to `major` and `minor`; an error message (to be
// freed with distill_free) when there is no such device.
char* distill_cuda_capability(int device, int* major, int* minor) {
  try {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device));
    *major = p->major;
    *minor = p->minor;
    return nullptr;
  } catch (const std::exception& e) {
    return strdup(e.what());
  } catch (...) {
    return strdup("unknown C++ exception");
  }
}
}
