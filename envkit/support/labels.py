"""The image labels envkit reads back from images (engine or registry): one owner for their names.

A light module (no imports) so that readers of images, such as ``remote``, need not pull in the
renderer or the builder. The other pin labels are written in ``render.files.context_for`` and
``frameworks``; they are read back only through ``frameworks.of_labels``.
"""

PREFIX = "io.envkit."
LOCK_LABEL = PREFIX + "lock-hash"  # the image's lock hash: what it was built from
CONTEXT_LABEL = PREFIX + "context-hash"  # the hash of every rendered file of its build context
BASE_LABEL = PREFIX + "base-id"  # the id of the base image it was built on
TEAM_LABEL = PREFIX + "team"  # the team and image names of the spec (render.context_for)
IMAGE_LABEL = PREFIX + "image"
# On the last image of each build stage nothing else is built FROM (extras; devel: nvcc, nvcc-tools): the
# stage's name. With the team, image and lock-hash labels it tells `envkit gc` whose the classic builder's
# leftover stage images are (the final image's build labels are not on them).
STAGE_LABEL = PREFIX + "stage"
# On every container envkit starts (engine.run): what for (RunOptions.role: certify, fetch-debs, run). envkit
# removes its containers when they end; one it left (the process was killed) is `envkit gc`'s to remove.
CONTAINER_LABEL = PREFIX + "container"
# On an image whose environment layers envkit wrote (`envkit build --reproducible`): "reproducible". Only such an
# image is compared with the lock's layer record (a builder's layers hold their files' write times).
LAYERS_LABEL = PREFIX + "layers"
REPRODUCIBLE_LAYERS = "reproducible"


def made_reproducibly(labels: dict[str, str]) -> bool:
    """Whether an image with ``labels`` has environment layers envkit wrote (``--reproducible``)."""
    return labels.get(LAYERS_LABEL) == REPRODUCIBLE_LAYERS


# On the OS stage a reproducible build makes (`<tag>-os`): what it is made of (images.os_stage.os_key: the stage's
# instructions, which name the base by its recipe's tag), so a build finds it on the engine, or the nightly in the
# team registry, instead of building other bytes for the same stage.
OS_KEY_LABEL = PREFIX + "os-key"
# On such an image too: each environment layer group's key ("cuda=<hex> framework=<hex> ..."; images.layer_reuse),
# so a later reproducible build on the same OS layers can reuse the groups whose packages did not change.
LAYER_KEYS_LABEL = PREFIX + "layer-keys"
# And the diff_id of its payload layer, the top layer envkit wrote: the environment layers lie just under it. A devel
# image's builder steps add layers above it (images.layer_record finds the environment there).
PAYLOAD_LAYER_LABEL = PREFIX + "payload-layer"
SHOWN = (PREFIX, "org.opencontainers.")  # the label prefixes `envkit show` reports
