"""The expect file a lock would give, read from the Python environment that runs it.

Used where there is no lock to render one from: on a GPU machine outside any image
(scripts/gpu-validate.sh, tests/gpu/). torch, CUDA, the compiled archs and Python come from
the installed torch; cuDNN and NCCL from their `nvidia-*-cu1x` pip packages, so that the
payload's decoding of the libraries' own version numbers is really compared with something.
No perf floor is set, so the catalog's floors for the GPU's model (catalog/data/perf.yaml) are
the ones the host judges. `--framework jax` writes a JAX
image's expect file instead (docs/payload.md, JAX images): jax, jaxlib and the CUDA plugin, and the
CUDA runtime, cuDNN and NCCL distributions' full versions, as a lock of `jax[cuda13]` pins them.

Run: python3 scripts/gpu_expect.py [--framework torch|jax] > expect.json
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from typing import Any, Dict


def _version(*names: str) -> Any:
    """The version of the first of these distributions that is installed, else None."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return None


def installed_expect() -> Dict[str, Any]:
    import torch

    expect: Dict[str, Any] = {"python": "%d.%d" % sys.version_info[:2], "torch": torch.__version__.split("+")[0],
                              "cuda": torch.version.cuda, "arch_list": torch.cuda.get_arch_list(),
                              "driver_floor": "450",
                              "cudnn": _version("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11"),
                              "nccl": _version("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")}
    return {k: v for k, v in expect.items() if v is not None or k in ("cuda", "arch_list")}


def installed_jax_expect() -> Dict[str, Any]:
    expect: Dict[str, Any] = {"framework": "jax", "python": "%d.%d" % sys.version_info[:2],
                              "jax": _version("jax"), "jaxlib": _version("jaxlib"),
                              "cuda_plugin": _version("jax-cuda13-plugin", "jax-cuda12-plugin"),
                              "cuda": _version("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13",
                                               "nvidia-cuda-runtime-cu12"),
                              "cudnn": _version("nvidia-cudnn-cu13", "nvidia-cudnn-cu12"),
                              "nccl": _version("nvidia-nccl-cu13", "nvidia-nccl-cu12"),
                              "min_cc": "7.5", "driver_floor": "450"}
    return {k: v for k, v in expect.items() if v is not None}  # a key left out is not compared


if __name__ == "__main__":
    jax = sys.argv[1:] == ["--framework", "jax"]
    if sys.argv[1:] and not jax and sys.argv[1:] != ["--framework", "torch"]:
        sys.exit("usage: python3 scripts/gpu_expect.py [--framework torch|jax]")
    print(json.dumps(installed_jax_expect() if jax else installed_expect()))
