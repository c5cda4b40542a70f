"""The environment envkit's Jinja templates (``templates/``: the Dockerfiles, compose, the HTML report; found by
``support.resources.templates_dir``) are rendered with (``StrictUndefined``; the ``dq`` filter refuses any value
that could leave a double-quoted Dockerfile or YAML string)."""

from __future__ import annotations

import re

import jinja2

from ..errors import EnvkitError
from ..support.resources import templates_dir

# `~` (Debian versions) is literal inside double quotes, in a Dockerfile's shell and in YAML alike.
SAFE = re.compile(r'^[A-Za-z0-9 ._:/=<>+,@()~-]*$')


def dq(value: object) -> str:
    text = str(value)
    if not SAFE.fullmatch(text):
        raise EnvkitError(f"refusing to render unsafe value {text[:60]!r}",
                          hint="values reaching a Dockerfile must be plain versions, names or references")
    return text


PLAIN_ENV = re.compile(r"^[A-Za-z0-9_./:,$-]*$")  # an ENV value written as it is; any other is double-quoted


def env_value(value: object) -> str:
    """An ``ENV`` value: as it is when plain (``$PATH`` still expands), else double-quoted (``dq``'s rules)."""
    text = str(value)
    return text if PLAIN_ENV.fullmatch(text) else f'"{dq(text)}"'


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["dq"] = dq
    env.filters["env_value"] = env_value
    return env
