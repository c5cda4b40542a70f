"""`envkit catalog refresh`: propose catalog rows for new PyTorch, JAX and TensorFlow releases.

The package index tells what was published and, in each wheel's METADATA, what it pins:
torch's Linux wheel pins the CUDA runtime, cuDNN and NCCL it bundles; jax's ``cudaNN``
extras name the ``jax-cudaNN-plugin`` whose ``with-cuda`` extra gives the nvidia-* ranges;
tensorflow's ``and-cuda`` extra pins (or bounds) the nvidia-* wheels. Wheel tags give the
Python range. What the metadata does not tell (a compiled arch list, a minimum compute
capability, the CUDA toolkit a plugin was built with) is carried forward from the catalog
and said so in the proposal, to be reviewed.

One module per framework (``torch``, ``jax``, ``tensorflow``) reads the index and edits its
own file's text in place; ``companions`` then proposes the companions.yaml rows of what they
added (and of companion releases no row pairs yet); ``common`` holds the result, its diff and
the checked, atomic write. ``run`` runs the frameworks asked for (``refresh_catalog``); ``arches`` is
``catalog check-arches``, ``exclude`` is ``catalog exclude``.
"""
