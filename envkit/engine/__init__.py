"""The container engine: the ``Engine`` protocol and its value types (``protocol``), its docker-py adapter
(``docker_engine``, ``docker_registry``, ``docker_gc``: the only modules that import docker-py), BuildKit through
the docker CLI (``buildkit``), what gc lists (``inventory``) and full disks (``space``)."""
