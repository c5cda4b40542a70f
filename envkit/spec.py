"""team.yaml, version 1: what a platform engineer writes.

Strict models: an unknown key, a malformed version or a value outside its grammar is a
``SpecError`` naming file:line:col, the value, and what is allowed. Every value that can
reach a rendered file is validated here against the grammar it belongs to.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_serializer,
    model_validator,
)

from .errors import Location, SpecError
from .spec_dispatch import Dispatch
from .support.ca_bundle import check_pem, env_ca_skipped, env_ca_source
from .support.grammar import MAX_VALUE, NAME_RE
from .support.grammar import Grammar as _grammar
from .support.grammar import short as _short
from .support.grammar import specifier as _specifier
from .support.models import Strict, fields_at
from .support.yamlsource import Document, load_yaml

if TYPE_CHECKING:
    from pydantic import SerializerFunctionWrapHandler

SPEC_VERSION = 1

# --- grammars -----------------------------------------------------------------------
PYTHON_RE = re.compile(r"^3\.\d{1,2}$")
DRIVER_RE = re.compile(r"^\d{3}(\.\d{1,3}){0,2}$")
CC_RE = re.compile(r"^\d{1,2}\.\d$")
SUITE_RE = re.compile(r"^[a-z][a-z0-9-]{1,30}$")
MIRROR_RE = re.compile(r"^https?://[A-Za-z0-9.-]+(:\d{1,5})?(/[A-Za-z0-9._~/-]*)?$")
# a mirror URL whose path holds `{variant}` once (the PyTorch variant tag, e.g. cu126, goes there); no other braces
VARIANT_FIELD = "{variant}"
VARIANT_INDEX_RE = re.compile(r"^https?://[A-Za-z0-9.-]+(:\d{1,5})?/[A-Za-z0-9._~/-]*\{variant\}[A-Za-z0-9._~/-]*$")
# docker reference: [registry[:port]/]path[:tag][@sha256:digest]
IMAGE_REF_RE = re.compile(
    r"^(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::\d{1,5})?/)?"
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@sha256:[a-f0-9]{64})?$"
)
APT_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]{0,99}(=[A-Za-z0-9.+~:-]{1,100})?$")
def _requirement(value: str) -> str:
    if len(value) > MAX_VALUE or any(c in value for c in "\n\r\t\\`$"):
        raise ValueError(f"{_short(value)!r} is not a valid requirement")
    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        raise ValueError(f"{_short(value)!r} is not a valid requirement: {exc}") from None
    if req.url:
        raise ValueError(f"{value!r}: direct URL requirements are not allowed; name a version")
    return value


Name = Annotated[str, _grammar(NAME_RE, "name (1 to 63 lowercase letters, digits and '-', starting with a letter "
                                        "or digit: it becomes part of an image tag)")]
PythonVersion = Annotated[str, _grammar(PYTHON_RE, "Python version like '3.11'")]
DriverVersion = Annotated[str, _grammar(DRIVER_RE, "driver version like '550.54.15' (a three-digit branch, then up to "
                                                   "two dotted parts, as nvidia-smi prints it)")]
Suite = Annotated[str, _grammar(SUITE_RE, "Debian suite name")]
def _no_login(value: str) -> str:
    """A URL with a login in it: say where the login goes instead (the spec is committed, and the lock and
    the images' Dockerfiles repeat its URLs)."""
    netloc = value.partition("://")[2].partition("/")[0]
    if "@" in netloc:
        host = netloc.rpartition("@")[2].partition(":")[0]
        raise ValueError(f"{_short(value.replace(netloc, '***@' + netloc.rpartition('@')[2]))!r}: a login does not "
                         f"belong in team.yaml; put `machine {host} login USER password TOKEN` in ~/.netrc "
                         "(or the file $NETRC names) and give the plain URL")
    return value


def _one_variant_field(value: str) -> str:
    """A variant index template must say where the variant goes, once, in its path (its host stays one host, for
    logins and trusted hosts); each other mistake is the grammar's."""
    count = value.count(VARIANT_FIELD)
    path = value.partition("://")[2].partition("/")[2]
    if count != 1 or VARIANT_FIELD not in path:
        where = ("has no {variant} field" if count == 0 else
                 f"has {count} {{variant}} fields" if count > 1 else "has {variant} outside its path")
        raise ValueError(f"{_short(value)!r} {where}: give the URL of a mirror of PyTorch's variant indexes with "
                         "{variant} once in its path, where the variant's tag goes (https://download.pytorch.org/whl/"
                         "cu126 -> \"https://mirror.corp.example/pytorch/whl/{variant}\")")
    return value


Mirror = Annotated[str, AfterValidator(_no_login), _grammar(MIRROR_RE, "mirror URL")]
VariantIndex = Annotated[str, AfterValidator(_no_login), AfterValidator(_one_variant_field),
                         _grammar(VARIANT_INDEX_RE, "variant index URL (a mirror URL with {variant} once in its "
                                                    "path, e.g. 'https://mirror.corp.example/pytorch/whl/{variant}')")]
ImageRef = Annotated[str, _grammar(IMAGE_REF_RE, "image reference")]
AptPackage = Annotated[str, _grammar(APT_RE, "Debian package (name or name=version)")]
PipRequirement = Annotated[str, AfterValidator(_requirement)]
Specifier = Annotated[str, AfterValidator(_specifier)]


class Bootstrap(Strict):
    """Make the base with debootstrap + docker import (no registry needed)."""

    suite: Suite = "bookworm"
    mirror: Mirror = "http://deb.debian.org/debian"
    variant: Literal["minbase"] = "minbase"


class Base(Strict):
    """Either an image reference or a bootstrap recipe; exactly one."""

    image: ImageRef | None = None
    bootstrap: Bootstrap | None = None

    @model_validator(mode="after")
    def _one(self) -> "Base":
        if (self.image is None) == (self.bootstrap is None):
            raise ValueError("give exactly one of 'image' or 'bootstrap'")
        return self


class Fleet(Strict):
    """The hosts the images must run on."""

    min_driver: DriverVersion = Field(description="Oldest NVIDIA driver in the fleet")
    gpus: list[Annotated[str, Field(max_length=40)]] = Field(
        default_factory=list, description="GPU models (e.g. H100) or compute capabilities (e.g. '9.0')"
    )
    policy: Literal["minor", "strict"] = Field(
        "minor",
        description="minor: CUDA minor-version compatibility is enough; strict: the toolkit's own driver floor",
    )


class Defaults(Strict):
    python: PythonVersion | None = None
    base: Base | None = None
    pip: list[PipRequirement] = Field(default_factory=list)
    apt: list[AptPackage] = Field(default_factory=list)


class ImageSpec(Strict):
    name: Name
    framework: PipRequirement = Field(description="e.g. 'torch==2.5.*'")
    python: PythonVersion | None = None
    cuda: Specifier | None = Field(None, description="optional constraint on the CUDA runtime, e.g. '>=12.4'")
    pip: list[PipRequirement] = Field(default_factory=list)
    apt: list[AptPackage] = Field(default_factory=list)
    base: Base | None = None
    flavour: Literal["runtime", "devel"] = "runtime"


class BuildOptions(Strict):
    ca_bundle: Annotated[str, Field(max_length=4096)] | None = Field(
        None, description="PEM bundle for a TLS-intercepting proxy, relative to this file"
    )
    index_url: Mirror | None = Field(None, description="Python package index (simple API)")
    variant_index_url: VariantIndex | None = Field(
        None, description="Mirror of PyTorch's variant indexes (download.pytorch.org/whl/{variant}), for builds other "
                          "than the index's default, e.g. 'https://mirror.corp.example/pytorch/whl/{variant}'")
    held_back: Literal["show", "refuse"] | None = Field(
        None, description="A pip: package the joint solve holds far behind the newest release it admits (a major "
                          "release, or 3 minor ones): 'show' (the default) says so with uv's reason; 'refuse' fails "
                          "the resolve")
    cpu_fallback: Literal["warn", "refuse"] | None = Field(
        None, description="An accelerator library that runs on the CPU only as locked in a GPU image (jax without its "
                          "CUDA plugin, onnxruntime instead of onnxruntime-gpu; catalog binaries.yaml: cpu_only): "
                          "'warn' (the default) says so naming what gives it the GPU; 'refuse' fails the resolve")

    @model_serializer(mode="wrap")
    def _without_unset_variant_index(self, handler: SerializerFunctionWrapHandler) -> dict:
        """No ``variant_index_url``, ``held_back`` or ``cpu_fallback`` key when unset: the spec digest locks keep
        (``model_dump``) stays
        as it was before the fields existed, so their locks stay current."""
        data = handler(self)
        for key in ("variant_index_url", "held_back", "cpu_fallback"):
            if isinstance(data, dict) and data.get(key) is None:
                data.pop(key, None)
        return data

    def variant_index(self, tag: str) -> str | None:
        """The mirror's index of one PyTorch variant (None: the catalog's own index serves it)."""
        return self.variant_index_url.replace(VARIANT_FIELD, tag) if self.variant_index_url else None


class Spec(Strict):
    version: Literal[1]
    team: Name
    registry: ImageRef | None = None
    fleet: Fleet
    defaults: Defaults = Field(default_factory=Defaults)
    build: BuildOptions = Field(default_factory=BuildOptions)
    images: list[ImageSpec] = Field(min_length=1)
    dispatch: Dispatch | None = Field(None, description="where each fleet GPU model is certified: `envkit certify "
                                                        "--fleet` (Slurm or Kubernetes)")

    _doc: Document | None = PrivateAttr(None)

    @model_serializer(mode="wrap")
    def _without_unset_dispatch(self, handler: SerializerFunctionWrapHandler) -> dict:
        """No ``dispatch`` key when unset: a spec without one dumps as it did before the section existed."""
        data = handler(self)
        if isinstance(data, dict) and data.get("dispatch") is None:
            data.pop("dispatch", None)
        return data

    # --- questions ------------------------------------------------------------------
    def locate(self, *path: str | int) -> Location | None:
        return self._doc.locate(path) if self._doc else None

    @property
    def path(self) -> Path | None:
        return Path(self._doc.path) if self._doc else None

    def image(self, name: str) -> "ImageSpec":
        for image in self.images:
            if image.name == name:
                return image
        names = ", ".join(i.name for i in self.images)
        raise SpecError(f"no image named {name!r} in the spec", hint=f"images: {names}")

    def index_of(self, name: str) -> int:
        return [i.name for i in self.images].index(name)

    def effective(self, image: ImageSpec) -> "Target":
        """The image with the spec's defaults applied."""
        d = self.defaults
        base = image.base or d.base or Base(bootstrap=Bootstrap())
        return Target(
            name=image.name,
            framework=image.framework,
            python=image.python or d.python,
            cuda=image.cuda,
            pip=tuple(d.pip) + tuple(image.pip),
            apt=tuple(d.apt) + tuple(image.apt),
            base=base,
            flavour=image.flavour,
        )

    def ca_bundle_path(self) -> Path | None:
        """The CA bundle to give builds: the spec's, else ENVKIT_CA_BUNDLE, else PIP_CERT."""
        if self.build.ca_bundle:
            p = Path(self.build.ca_bundle)
            if not p.is_absolute() and self.path:
                p = self.path.parent / p
            if not p.is_file():
                raise SpecError(
                    f"build.ca_bundle {self.build.ca_bundle!r} is not a file",
                    location=self.locate("build", "ca_bundle"),
                    hint="give the path of a PEM bundle, relative to the spec",
                )
            return check_pem(p, f"build.ca_bundle {self.build.ca_bundle!r}", self.locate("build", "ca_bundle"))
        found = env_ca_source()
        if found is None:
            return None
        var, path = found
        return check_pem(path, f"${var} ({path})", None)


def env_ca_skip_note(spec: "Spec | None" = None) -> str | None:
    """A warning for a CA variable that names no file, unless the spec names its own bundle (then none is read)."""
    if spec is not None and spec.build.ca_bundle:
        return None
    skipped = env_ca_skipped()
    if not skipped:
        return None
    var, value = skipped[0]
    found = env_ca_source()
    instead = f"${found[0]} ({found[1]})" if found else "the default trust store"
    return f"warning: ${var}={value} names no file, so it is skipped: TLS is verified with {instead}"


class Target(BaseModel):
    """One image to resolve: the image spec merged with the spec's defaults."""

    model_config = ConfigDict(frozen=True)

    name: str
    framework: str
    python: str | None
    cuda: str | None
    pip: tuple[str, ...]
    apt: tuple[str, ...]
    base: Base
    flavour: str


# --- loading --------------------------------------------------------------------------
def load_spec(path: str | Path) -> Spec:
    doc = load_yaml(path)
    return spec_from_document(doc)


def spec_from_document(doc: Document) -> Spec:
    if not isinstance(doc.data, dict):
        raise SpecError("a spec must be a mapping with 'version', 'team', 'fleet' and 'images'",
                        location=Location(doc.path, 1, 1))
    version = doc.data.get("version")
    if type(version) is not int or version != SPEC_VERSION:  # (True == 1 in Python)
        raise SpecError(
            f"unsupported spec version {version!r}",
            location=doc.locate(("version",)),
            hint=f"this envkit reads 'version: {SPEC_VERSION}'",
        )
    try:
        spec = Spec.model_validate(doc.data)
    except ValidationError as exc:
        raise _spec_error(exc, doc) from None
    first: dict[str, int] = {}
    for i, image in enumerate(spec.images):  # the second use is the error, at its own line
        if image.name in first:
            raise SpecError(f"image name {image.name!r} is used twice (images {first[image.name]} and {i})",
                            location=doc.locate(("images", i, "name")), hint="each image needs a name of its own")
        first[image.name] = i
    _check_dispatch(spec, doc)
    spec._doc = doc
    return spec


def _check_dispatch(spec: Spec, doc: Document) -> None:
    """Every model ``dispatch.gpus`` names is one of ``fleet.gpus``, as it is written there."""
    for model in (spec.dispatch.gpus if spec.dispatch else {}):
        if model not in spec.fleet.gpus:
            close = difflib.get_close_matches(model, spec.fleet.gpus, n=1)
            raise SpecError(f"dispatch.gpus names {model!r}, which is not in fleet.gpus",
                            location=doc.locate(("dispatch", "gpus", model)),
                            hint=(f"did you mean {close[0]!r}? " if close else "")
                                 + f"fleet.gpus: {', '.join(spec.fleet.gpus) or '(none)'}; dispatch names the models "
                                   "of the fleet, as fleet.gpus writes them")


def _spec_error(exc: ValidationError, doc: Document) -> SpecError:
    errors = exc.errors(include_url=False)
    # A misspelt key shows up twice (unknown key + missing key): name the misspelling.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    where = doc.locate(loc)
    dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        key = loc[-1]
        allowed = sorted(fields_at(Spec, loc[:-1]))
        close = difflib.get_close_matches(str(key), allowed, n=1)
        near = f"did you mean {close[0]!r}? " if close else ""
        return SpecError(
            f"unknown key {key!r} in {'.'.join(map(str, loc[:-1])) or 'the top level'}",
            location=where,
            hint=f"{near}allowed keys: {', '.join(allowed)}",
        )
    if kind == "missing":
        return SpecError(f"missing required key {dotted!r}", location=where)
    value = err.get("input")
    msg = err["msg"].removeprefix("Value error, ")
    if kind in ("string_type", "int_type", "list_type", "model_type", "dict_type"):
        msg = f"{dotted}: {msg}, got {_short(repr(value))}"
        if kind == "string_type" and isinstance(value, (int, float)) and not isinstance(value, bool):
            hint: str | None = "quote versions in YAML, e.g. python: \"3.11\" (unquoted, 3.10 is the number 3.1)"
        else:
            hint = {"list_type": f"give a list, e.g. {loc[-1]}: [{json.dumps(value, default=str)}]",
                    "model_type": "give a mapping of keys (see `envkit schema`)",
                    "dict_type": "give a mapping of keys (see `envkit schema`)"}.get(kind)
        return SpecError(msg, location=where, hint=hint)
    if kind == "literal_error":
        return SpecError(f"{dotted}: {_short(repr(value))} is not allowed; {msg.lower()}", location=where)
    return SpecError(f"{dotted}: {msg}", location=where)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of team.yaml, generated from the model."""
    schema = Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "envkit team spec (version 1)"
    return schema
