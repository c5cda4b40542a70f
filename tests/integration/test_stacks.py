"""Every test stack (tests/stacks/<name>/stack.yaml; tests/integration/stacks.py reads them) on the real engine.

Runtime stacks: built with `envkit build SPEC --image IMAGE` and verified without a GPU, their verification, labels
and closure as the stack says (``stacks.check_verified``): examples/frameworks.yaml's JAX and TensorFlow images, each
build shared with the framework's own tests (test_jax.py, test_tensorflow.py: certification on the host, the GPU code
paths on CPU devices) through the session's ``stack_build``; cold, each is one of the suite's large builds (about
280 s, 4.9 and 6.8 GB; docs/images.md).

Devel stacks: the image built as its devel flavour (``devel_build``, once per session), the compiler wheels its lock
holds (``stacks.check_compiler``), and each probe (nvcc compiling and linking a kernel, a torch C++/CUDA extension
built and loaded, an XLA FFI handler compiled against jaxlib's headers and called) run in it with no GPU and no
network (``stacks.run_probe``). Nothing runs a kernel. The devel flavour's own questions (its layers above the
runtime image's, offline builds from a bundle) are test_devel.py's.
"""

import pytest

from tests.integration.stacks import check_compiler, check_verified, devel_probes, load_stack, run_probe, stack_names

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", stack_names())
def test_stack_builds_and_verifies_with_gpu_checks_skipped(name, stack_build, engine):
    image, locked = stack_build(name)
    check_verified(load_stack(name), image, locked, engine)


@pytest.mark.parametrize("name", stack_names("devel"))
def test_devel_stack_locks_the_compiler_of_its_cuda(name, devel_build):
    outcome, image = devel_build(name)
    stack = load_stack(name)
    check_compiler(stack, image)
    if stack["verify"]:  # the devel image passes the framework's payload like the runtime one
        assert outcome.verification.status == "verified", outcome.verification


@pytest.mark.parametrize(("name", "probe"), devel_probes(), ids=[f"{n}-{p}" for n, p in devel_probes()])
def test_devel_stack_probe_compiles_and_runs(name, probe, devel_build, engine, tmp_path):
    outcome, image = devel_build(name)
    run_probe(load_stack(name), probe, image, outcome.tag, engine, tmp_path / "src")
