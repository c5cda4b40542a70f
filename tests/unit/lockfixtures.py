"""A hand-made lock for render and lock tests (no index, no resolver)."""

from envkit.lock import BaseImage, Decision, Lock, LockedImage, Package, sealed


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
