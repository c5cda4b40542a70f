# ffi.sh: ffi.cu compiled with nvcc against jaxlib's FFI headers (jax.ffi.include_dir()), then call.py runs its CPU handler
set -euo pipefail
inc=$(python -c "import jax.ffi; print(jax.ffi.include_dir())")
echo "FFI-INCLUDE $inc"
nvcc -std=c++17 -arch=sm_90 -shared -Xcompiler -fPIC -I"$inc" /src/ffi.cu -o /tmp/libaddone.so
python /src/call.py
