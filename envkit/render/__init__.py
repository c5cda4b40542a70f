"""lock -> build contexts and compose files (Dockerfiles from the templates, requirement files, the payload)."""
