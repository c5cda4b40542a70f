"""The devel flavour for JAX (CUDA 13): examples/frameworks.yaml's jax image (jax[cuda13] 0.12.0.1, CUDA
13.5, Debian trixie, Python 3.13) as flavour devel.

jax[cuda13]'s closure already locks the whole CUDA 13 compiler (the plugin uses its ptxas), so the devel
group the resolver locks (``devel.as_devel``: the compiler's closure constrained by the framework closure)
is empty and the devel image adds only the toolchain and CUDA_HOME. The runtime layers are the example's
own: with the example image built before (test_examples, test_jax), the classic builder's cache makes the
build add only the devel layers. Then, with no GPU and no network: nvcc reports the lock's release,
compiles a kernel and links an executable; an XLA FFI library (a CUDA handler launching a kernel on
XLA's stream, and a CPU handler) compiles with nvcc against jaxlib's FFI headers (``jax.ffi.include_dir()``)
and its CPU handler runs through ``jax.ffi.ffi_call``. Nothing runs a kernel.
"""

import pytest

from envkit import devel as held  # what a locked devel image holds
from tests.integration.test_devel import _options, assert_nvcc_compiles_and_links, built_devel_example

pytestmark = pytest.mark.integration

FFI = r"""
#include <cstdint>
#include <cuda_runtime.h>
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

__global__ void add_one_kernel(const float *x, float *y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

static ffi::Error AddOneCuda(cudaStream_t stream, ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  int64_t n = x.element_count();
  add_one_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.typed_data(), y->typed_data(), n);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return ffi::Error(ffi::ErrorCode::kInternal, cudaGetErrorString(err));
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(AddOneCuda_, AddOneCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

static ffi::Error AddOneCpu(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  for (int64_t i = 0; i < x.element_count(); ++i) y->typed_data()[i] = x.typed_data()[i] + 1.0f;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(AddOneCpu_, AddOneCpu,
                              ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());
"""

CALL = r"""
import ctypes
import jax, jax.numpy as jnp, numpy as np
lib = ctypes.cdll.LoadLibrary("/tmp/libaddone.so")
assert lib.AddOneCuda_ is not None  # the CUDA handler is in the library (running it needs a GPU)
jax.ffi.register_ffi_target("envkit_add_one", jax.ffi.pycapsule(lib.AddOneCpu_), platform="cpu")
x = jnp.arange(8, dtype=jnp.float32)
y = jax.jit(lambda v: jax.ffi.ffi_call("envkit_add_one", jax.ShapeDtypeStruct(v.shape, v.dtype))(v))(x)
assert np.allclose(np.asarray(y), np.asarray(x) + 1), y
print("FFI-CALLED", np.asarray(y).tolist())
"""


@pytest.fixture(scope="module")
def jax_devel(engine):
    yield from built_devel_example(engine, "jax", verify=True)


def test_the_compiler_is_the_framework_closures_own(jax_devel):
    outcome, image = jax_devel
    assert held.wheels_to_add(image) == ()  # the devel group is empty: nothing to disagree with
    pins = {p.name: p for p in held.packages(image)}
    assert set(pins) == {"nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl"}
    assert {p.group for p in pins.values()} == {"framework"}
    assert pins["nvidia-cuda-nvcc"].version.startswith(image.cuda_major_minor + ".")
    assert outcome.verification.status == "verified"  # the devel image passes the JAX payload like the runtime one


def test_nvcc_is_the_locked_release_and_compiles_and_links(jax_devel, engine, tmp_path):
    outcome, image = jax_devel
    assert_nvcc_compiles_and_links(engine, outcome.tag, image, tmp_path)


def test_an_xla_ffi_handler_compiles_against_jaxlibs_headers_and_runs_on_cpu(jax_devel, engine, tmp_path):
    outcome, _ = jax_devel
    (tmp_path / "ffi.cu").write_text(FFI)
    (tmp_path / "call.py").write_text(CALL)
    script = ('inc=$(python -c "import jax.ffi; print(jax.ffi.include_dir())") && echo "FFI-INCLUDE $inc" '
              '&& nvcc -std=c++17 -arch=sm_90 -shared -Xcompiler -fPIC -I"$inc" /src/ffi.cu -o /tmp/libaddone.so '
              '&& python /src/call.py')
    result = engine.run(outcome.tag, ["bash", "-c", script],
                        _options(tmp_path, timeout=600, env={"JAX_PLATFORMS": "cpu"}))
    assert result.exit_code == 0, (result.stdout + result.stderr)[-4000:]
    assert "site-packages/jaxlib/include" in result.stdout
    assert "FFI-CALLED [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]" in result.stdout
