"""The host-side build of a CUDA extension in a devel image: nvcc + g++ + ninja, linked against the wheels' libcudart.
The kernel's file includes nothing of torch, so only the binding compiles torch's headers (the slow part: load_inline
would have put them in front of the .cu file too, a second heavy translation unit)."""
import os
from torch.utils.cpp_extension import load

kernel = r"""
#include <cstdint>
__global__ void add_one_kernel(float* x, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
void add_one_launch(float* x, int64_t n) { add_one_kernel<<<(n + 255) / 256, 256>>>(x, n); }
"""
binding = r"""
#include <torch/extension.h>
void add_one_launch(float* x, int64_t n);
void add_one(torch::Tensor x) { add_one_launch(x.data_ptr<float>(), x.numel()); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one); }
"""
os.makedirs("/tmp/ext/src", exist_ok=True)
for name, text in (("kernel.cu", kernel), ("binding.cpp", binding)):
    with open(f"/tmp/ext/src/{name}", "w") as f:
        f.write(text)
module = load("envkit_devel_probe", ["/tmp/ext/src/binding.cpp", "/tmp/ext/src/kernel.cu"], build_directory="/tmp/ext",
              verbose=True)
print("EXTENSION-LOADED", module.__name__, callable(module.add_one))
