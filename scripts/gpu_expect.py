"""The expect file a lock would give, read from the Python environment that runs it.

Used where there is no lock to render one from: on a GPU machine outside any image
(scripts/gpu-validate.sh, tests/gpu/). torch, CUDA, the compiled archs and Python come from
the installed torch; cuDNN and NCCL from their `nvidia-*-cu1x` pip packages, so that the
payload's decoding of the libraries' own version numbers is really compared with something.
No perf floor is set (0): the figures are reported, not judged.

Run: python3 scripts/gpu_expect.py > expect.json
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from typing import Any, Dict


def installed_expect() -> Dict[str, Any]:
    import torch

    expect: Dict[str, Any] = {"python": "%d.%d" % sys.version_info[:2], "torch": torch.__version__.split("+")[0],
                              "cuda": torch.version.cuda, "arch_list": torch.cuda.get_arch_list(),
                              "driver_floor": "450", "perf_floors": {"bf16_matmul_tflops": 0}}
    for key, dist in (("cudnn", "nvidia-cudnn-cu"), ("nccl", "nvidia-nccl-cu")):
        for major in ("13", "12", "11"):
            try:
                expect[key] = metadata.version(dist + major)
                break
            except metadata.PackageNotFoundError:
                pass
    return expect


if __name__ == "__main__":
    print(json.dumps(installed_expect()))
