"""envkit certification payload: verify (CPU) or certify (GPU) a PyTorch, JAX or TensorFlow image from the inside.

Standard library + the image's framework only (Python 3.9+; torch 2.0+, jax 0.4.26+, tensorflow
2.20 tried); never imports envkit, and never imports one framework in another's image. Run the
directory (Python puts it first on sys.path; every module in it is named envkit_check_*):
    python3 /opt/envkit/envkit_check --expect expect.json --json
Exit status: 0 verified/certified, 1 failed, 2 bad usage. Reference: docs/payload.md.
"""
import sys

from envkit_check_main import main

sys.exit(main())
