"""Every test stack (tests/stacks/<name>/stack.yaml) built with `envkit build SPEC --image IMAGE` on the real engine
and verified without a GPU, its verification, labels and closure as the stack says (``stacks.check_verified``).

The stacks are examples/frameworks.yaml's JAX and TensorFlow images: each build is shared with the framework's own
tests (test_jax.py, test_tensorflow.py: certification on the host, the GPU code paths on CPU devices) through the
session's ``stack_build``; cold, each is one of the suite's large builds (about 280 s, 4.9 and 6.8 GB; docs/images.md).
"""

import pytest

from tests.integration.stacks import check_verified, load_stack, stack_names

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", stack_names())
def test_stack_builds_and_verifies_with_gpu_checks_skipped(name, stack_build, engine):
    image, locked = stack_build(name)
    check_verified(load_stack(name), image, locked, engine)
