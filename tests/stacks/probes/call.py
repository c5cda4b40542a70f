"""The XLA FFI library ffi.cu built: its CPU handler called through jax.ffi.ffi_call (the CUDA one needs a GPU)."""
import ctypes
import jax, jax.numpy as jnp, numpy as np
lib = ctypes.cdll.LoadLibrary("/tmp/libaddone.so")
assert lib.AddOneCuda_ is not None  # the CUDA handler is in the library (running it needs a GPU)
jax.ffi.register_ffi_target("envkit_add_one", jax.ffi.pycapsule(lib.AddOneCpu_), platform="cpu")
x = jnp.arange(8, dtype=jnp.float32)
y = jax.jit(lambda v: jax.ffi.ffi_call("envkit_add_one", jax.ShapeDtypeStruct(v.shape, v.dtype))(v))(x)
assert np.allclose(np.asarray(y), np.asarray(x) + 1), y
print("FFI-CALLED", np.asarray(y).tolist())
