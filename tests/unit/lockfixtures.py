"""A hand-made lock for render and lock tests (no index, no resolver)."""

from envkit.catalog.files import load_catalog
from envkit.lock import BaseImage, DebPin, Decision, Lock, LockedImage, Package, sealed


def make_image(name="torch25", extra=("numpy", "2.1.3"), **changes) -> LockedImage:
    packages = [
        Package(name="torch", version="2.5.1", hashes=("sha256:" + "a" * 64,), group="framework"),
        Package(name="nvidia-cudnn-cu12", version="9.1.0.70", hashes=("sha256:" + "b" * 64,), group="framework"),
    ]
    if extra:
        packages.append(Package(name=extra[0], version=extra[1], hashes=("sha256:" + "c" * 64,), group="extra"))
    fields = dict(
        name=name, framework="torch", framework_version="2.5.1", variant="cu124",
        index_url="https://pypi.org/simple", python="3.11", platform="x86_64-manylinux_2_36",
        cuda="12.4.127", cuda_major_minor="12.4", cudnn="9.1.0.70", nccl="2.21.5",
        arch_list=("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
        driver_floor="525.60.13", require_cuda="cuda>=12.0", policy="minor",
        base=BaseImage(ref="envkit-base/debian:bookworm-minbase-0123456789ab", digest=None, distro="debian",
                       suite="bookworm", bootstrap={"suite": "bookworm", "mirror": "http://deb.debian.org/debian",
                                                    "variant": "minbase"}),
        apt=(), flavour="runtime", packages=tuple(packages),
        decisions=(Decision(topic="torch", choice="2.5.1", reason="newest"),),
    )
    fields.update(changes)
    return sealed(LockedImage(**fields))


def make_lock(*images) -> Lock:
    return Lock(team="vision", spec_digest="sha256:" + "1" * 64, catalog_digest="sha256:" + "2" * 64,
                envkit_version="0.1.0", images=images or (make_image(),))


def make_jax_image(name="jax", **changes) -> LockedImage:
    """A JAX image as the resolver locks one: jax[cuda13], the plugin, CUDA libraries as ranges pinned by the closure."""
    pins = [("jax", "0.12.0.1"), ("jax-cuda13-pjrt", "0.12.0.1"), ("jax-cuda13-plugin", "0.12.0.1"),
            ("jaxlib", "0.12.0.1"), ("numpy", "2.5.5"), ("nvidia-cuda-runtime", "13.5.37"),
            ("nvidia-cudnn-cu13", "9.28.1.4"), ("nvidia-nccl-cu13", "2.32.3")]
    packages = tuple(Package(name=n, version=v, hashes=("sha256:" + f"{i:x}" * 64,), group="framework")
                     for i, (n, v) in enumerate(pins))
    fields = dict(
        name=name, framework="jax", framework_version="0.12.0.1", variant="cuda13",
        index_url="https://pypi.org/simple", python="3.13", platform="x86_64-manylinux_2_41",
        cuda="13.5.37", cuda_major_minor="13.5", cudnn="9.28.1.4", nccl="2.32.3", arch_list=(), min_cc="7.5",
        driver_floor="580", require_cuda="cuda>=13.0", policy="minor",
        base=BaseImage(ref="envkit-base/debian:trixie-minbase-0123456789ab", digest=None, distro="debian",
                       suite="trixie", bootstrap={"suite": "trixie", "mirror": "http://deb.debian.org/debian",
                                                  "variant": "minbase"}),
        apt=(), flavour="runtime", packages=packages,
        decisions=(Decision(topic="jax", choice="jax 0.12.0.1 (cuda13)", reason="newest"),),
    )
    fields.update(changes)
    return sealed(LockedImage(**fields))


def make_tf_image(name="tf", **changes) -> LockedImage:
    """A TensorFlow image as the resolver locks one: tensorflow[and-cuda], CUDA libraries as ranges pinned by the closure."""
    pins = [("numpy", "2.5.5"), ("nvidia-cublas-cu12", "12.9.3.13"), ("nvidia-cuda-runtime-cu12", "12.9.79"),
            ("nvidia-cudnn-cu12", "9.28.0.42"), ("nvidia-nccl-cu12", "2.32.3"), ("tensorflow", "2.20.0")]
    packages = tuple(Package(name=n, version=v, hashes=("sha256:" + f"{i:x}" * 64,), group="framework")
                     for i, (n, v) in enumerate(pins))
    fields = dict(
        name=name, framework="tensorflow", framework_version="2.20.0", variant="and-cuda",
        index_url="https://pypi.org/simple", python="3.13", platform="x86_64-manylinux_2_41",
        cuda="12.9.79", cuda_major_minor="12.9", cudnn="9.28.0.42", nccl="2.32.3",
        arch_list=("sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "compute_80"),  # the catalog's (see frameworks.py)
        driver_floor="525.60.13", require_cuda="cuda>=12.0", policy="minor",
        base=BaseImage(ref="envkit-base/debian:trixie-minbase-0123456789ab", digest=None, distro="debian",
                       suite="trixie", bootstrap={"suite": "trixie", "mirror": "http://deb.debian.org/debian",
                                                  "variant": "minbase"}),
        apt=(), flavour="runtime", packages=packages,
        decisions=(Decision(topic="tensorflow", choice="tensorflow 2.20.0 (and-cuda)", reason="newest"),),
    )
    fields.update(changes)
    return sealed(LockedImage(**fields))


def _pin(name: str, version: str, group: str, fill: str) -> Package:
    return Package(name=name, version=version, hashes=("sha256:" + fill * 64,), group=group)


def make_devel_image(release: str = "12.4", **changes) -> LockedImage:
    """A torch image locked as flavour devel: CUDA 12.4 (bookworm, the .deb's programs) or CUDA 13.0
    (trixie, examples/frameworks.yaml's torch: the compiler wholly from wheels)."""
    if release == "12.4":
        packages = (*make_image().packages, _pin("nvidia-cuda-cccl-cu12", "12.4.127.post1", "devel", "d"),
                    _pin("nvidia-cuda-nvcc-cu12", "12.4.131", "devel", "e"))
        deb = load_catalog().debian_toolkits()["12.4"]  # as the resolver locks it (resolve.devel.toolkit_for)
        fields = dict(flavour="devel", packages=packages,
                      toolkit_deb=DebPin(url=f"http://deb.debian.org/debian/{deb.path}", sha256=deb.sha256))
    else:
        packages = (_pin("torch", "2.14.1", "framework", "a"), _pin("cuda-toolkit", "13.0.3.0", "framework", "b"),
                    _pin("nvidia-cuda-runtime", "13.0.96", "framework", "c"),
                    _pin("nvidia-cuda-cccl", "13.0.85", "devel", "d"), _pin("nvidia-cuda-crt", "13.0.88", "devel", "e"),
                    _pin("nvidia-cuda-nvcc", "13.0.88", "devel", "f"), _pin("nvidia-nvvm", "13.0.88", "devel", "1"))
        fields = dict(
            name="torch", framework_version="2.14.1", variant="cu130", python="3.13", platform="x86_64-manylinux_2_41",
            cuda="13.0.3", cuda_major_minor="13.0", cudnn="9.24.0.43", nccl="2.30.7",
            arch_list=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"), driver_floor="580",
            require_cuda="cuda>=13.0", flavour="devel", packages=packages,
            base=BaseImage(ref="envkit-base/debian:trixie-minbase-0123456789ab", digest=None, distro="debian",
                           suite="trixie", bootstrap={"suite": "trixie", "mirror": "http://deb.debian.org/debian",
                                                      "variant": "minbase"}))
    fields.update(changes)
    return make_image(**fields)
