"""`envkit catalog refresh`, `catalog check-arches` and `catalog exclude`: the package's modules are described in
``run`` (the refresh of every framework and of companions.yaml)."""
