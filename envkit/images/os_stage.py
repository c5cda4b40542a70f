"""The OS stage of a reproducible or a BuildKit build, the same bytes on every runner that has it (docs/images.md,
"The OS stage by its key").

The builder builds the rendered Dockerfile's ``os`` stage (the base, the system packages, the user), and its layer
holds the time of its build: built again where the builder's cache is gone (an ephemeral CI runner, a pruned
engine), it is other bytes, so every environment layer above it is another chain, which an engine holding yesterday's
image pulls again in full though each has the same digest. So such a build keys its OS stage by what makes it
(``os_key``: the stage's instructions, which name the base by its recipe's tag) and labels it so
(``labels.OS_KEY_LABEL``); before asking the builder it takes the engine's ``<tag>-os`` when that is of its key
(``take_or_build``; a BuildKit build then stands on it: the Dockerfile's ``ARG ENVKIT_OS``), and `envkit nightly
--registry` keeps each one in the team registry by digest and, on a runner that lacks it, pulls it back as
``<tag>-os`` (``app.nightly_publish``), as it does the base. What the stage installs is then what it installed the
first time (as on a runner that kept its cache): `--no-cache` builds it again.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Callable, Iterator

from ..engine.protocol import BuildEvent
from ..support.labels import OS_KEY_LABEL, STAGE_LABEL

if TYPE_CHECKING:
    from ..engine.protocol import Engine, ImageInfo

_FROM = re.compile(r"^FROM\s", re.IGNORECASE)
_OS_FROM = re.compile(r"^FROM\s+\S+\s+AS\s+os\s*$", re.IGNORECASE)


def os_key(dockerfile: bytes) -> str:
    """The OS stage's key: the sha256 of its instructions in ``dockerfile`` (from ``FROM … AS os`` to the next
    ``FROM``; comments and blank lines left out: the file's header names the lock, which the stage does not use)."""
    lines = dockerfile.decode().splitlines()
    start = next((i for i, line in enumerate(lines) if _OS_FROM.match(line)), None)
    if start is None:
        raise ValueError("the Dockerfile has no `FROM … AS os` stage")
    stage = [lines[start]]
    for line in lines[start + 1:]:
        if _FROM.match(line):
            break
        if line.strip() and not line.lstrip().startswith("#"):
            stage.append(line)
    return "sha256:" + hashlib.sha256("\n".join(stage).encode()).hexdigest()


def os_tag(tag: str) -> str:
    """What a reproducible build of ``tag`` tags its OS stage."""
    return f"{tag}-os"


def find(engine: Engine, key: str, os_tag: str, base_ref: str) -> ImageInfo | None:
    """The engine's ``os_tag`` when it is an OS stage of ``key`` on the engine's ``base_ref`` (the last build's of
    this tag, or one the nightly pulled from the team registry and tagged so); None otherwise. Only that tag: an OS
    stage another image's build made is that build's to keep or remove. On another base (this runner bootstrapped its
    own, the mirror's was not restored) it is not taken: the image would say one base and hold another."""
    info = engine.inspect(os_tag)
    if info is None or info.labels.get(OS_KEY_LABEL) != key:
        return None
    base = engine.inspect(base_ref)
    return info if base is not None and info.layers[:len(base.layers)] == base.layers else None


def labels(dockerfile: bytes, stage_labels: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """What an OS stage image is labelled: a stage (``os``) of whose build (``stage_labels``), and its key."""
    return {STAGE_LABEL: "os", OS_KEY_LABEL: os_key(dockerfile), **dict(stage_labels)}


def take_or_build(engine: Engine, os_tag: str, os_labels: dict[str, str], build: Callable[[], Iterator[BuildEvent]],
                  *, base_ref: str, reuse: bool = True, have: ImageInfo | None = None,
                  say: Callable[[BuildEvent | str], None]) -> bool:
    """``os_tag``: the engine's when it is an OS stage of its key on ``base_ref`` (``have``, when the caller looked
    already; else ``find``; not with ``reuse=False``, `--no-cache`), else the builder's (``build``: the ``os`` target
    as ``os_tag`` with ``os_labels``). True: built."""
    key = os_labels[OS_KEY_LABEL]
    if have is None and reuse:
        have = find(engine, key, os_tag, base_ref)
    if have is not None:
        say(f"the OS stage of key {key[7:19]} is on the engine ({have.id[7:19]}): not built again "
            "(`--no-cache` builds it again)")
        return False
    say(f"building the OS stage as {os_tag}")
    for event in build():
        say(event)
    return True


def mirror_tag(key: str) -> str:
    """The tag an OS stage of ``key`` has in the team registry, in its base's mirror repository."""
    return "os-" + key.split(":", 1)[1]


def mirror_key(key: str) -> str:
    """What the history store records an OS stage's mirrors under (``Store.record_mirror``), beside the bases'."""
    return f"os stage {key}"
