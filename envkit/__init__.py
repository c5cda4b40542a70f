"""envkit: resolve, render, build and certify GPU software stacks as container images."""

__version__ = "0.1.0"
