"""What every stage stands on: atomic writes, scratch directories, child processes, strict YAML, image label
names, the progress callback type and the strict pydantic bases. Imports nothing of envkit but ``errors``."""
