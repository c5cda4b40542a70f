"""Certification of built images: the in-image payload and its host-side contract."""
