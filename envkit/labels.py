"""The image labels envkit reads back from images (engine or registry): one owner for their names.

A light module (no imports) so that readers of images, such as ``remote``, need not pull in the
renderer or the builder. The other pin labels are written in ``render.context_for`` and
``frameworks``; they are read back only through ``frameworks.of_labels``.
"""

PREFIX = "io.envkit."
LOCK_LABEL = PREFIX + "lock-hash"  # the image's lock hash: what it was built from
CONTEXT_LABEL = PREFIX + "context-hash"  # the hash of every rendered file of its build context
BASE_LABEL = PREFIX + "base-id"  # the id of the base image it was built on
SHOWN = (PREFIX, "org.opencontainers.")  # the label prefixes `envkit show` reports
