"""The pure half of reading a registry (``remote`` does the reading): registry references, and what the registry's
answers mean (manifests, image configs, tags, certificate artifacts). No network here: every function takes bytes or
names and returns values, or raises an ``EngineError`` naming what it was given.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..certify.certificate import parse_certificate, perf_metrics
from ..errors import EngineError, EnvkitError
from ..support.labels import SHOWN

_HOST = re.compile(r"^(?:localhost|\[[0-9a-fA-F:]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?::[0-9]{1,5})?$")
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_MIRROR_TAG = re.compile(r"^sha256-[0-9a-f]{64}$")
_SIGNED_TAG = re.compile(r"^sha256-[0-9a-f]{64}\.(?:sig|att|sbom)$")  # cosign's layout (registry/signatures.py)
# What envkit names a stack (render.image_tag): <framework version>-<variant>-py<python>-<lock hash, 8 hex>,
# e.g. 2.5.1-cu124-py3.11-1a2b3c4d. Any other tag on an image is someone else's (a user's :prod, :latest).
STACK_TAG = re.compile(r"^[0-9][0-9A-Za-z._]*-[0-9A-Za-z._-]+-py[0-9]+(?:\.[0-9]+)*-[0-9a-f]{8}$")
NAME_MAX = 255  # distribution spec: registry host[:port] + "/" + repository name, at most 255 characters
LABEL_MAX, HOST_MAX = 63, 253  # a DNS label, and a whole DNS name (RFC 1035)
REF_HINT = ("give host[:port]/repository:tag or host[:port]/repository@sha256:<64 hex>, "
            "e.g. 127.0.0.1:5000/vision/torch25:certified")


# --- references -------------------------------------------------------------------------------

def names_registry(first: str) -> bool:
    """Docker's rule: the first path component is a registry host when it has a dot, a port, or is localhost."""
    return "." in first or ":" in first or first == "localhost"


@dataclass(frozen=True)
class RegistryRef:
    registry: str  # host[:port]
    repository: str  # path inside the registry, e.g. vision/torch25
    tag: str | None
    digest: str | None

    @property
    def repo(self) -> str:
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What the registry is asked for: the digest when given, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        return self.repo + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def parse_ref(ref: str) -> RegistryRef | None:
    """``host[:port]/repo[:tag][@sha256:...]`` -> RegistryRef; None when ``ref`` names no registry host
    (a local name such as ``vision/torch25:tag``). A malformed registry reference is an ``EngineError``."""
    first, sep, _ = (ref or "").partition("/")
    if not sep or not names_registry(first):
        return None
    rest = ref[len(first) + 1:]
    digest = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise EngineError(f"bad registry reference {ref!r}: {digest!r} is not a sha256 digest", hint=REF_HINT)
    head, _, last = rest.rpartition("/")
    tag = None
    if ":" in last:
        last, tag = last.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise EngineError(f"bad registry reference {ref!r}: tag {tag!r} is not 1-128 of [A-Za-z0-9_.-]",
                              hint=REF_HINT)
    repository = f"{head}/{last}" if head else last
    problem = host_problem(first) or path_problem(repository, first)
    if problem:
        raise EngineError(f"bad registry reference {_shown(ref)}: {problem}",
                          hint=REF_HINT + " (repository names are lower case)")
    return RegistryRef(first, repository, tag if tag or digest else "latest", digest)


_ANY_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
IMAGE_HINT = ("an image is name[:tag][@sha256:<64 hex>] or an image id; names are lower-case letters and digits "
              "joined by . _ __ or -, in /-separated parts, e.g. vision/torch25:2.5.1-cu124-py3.11-515bfe72 or "
              "127.0.0.1:5000/vision/torch25:certified")


def check_image_ref(ref: str) -> None:
    """Docker's reference grammar (distribution's ``reference`` package), checked before the engine sees the value,
    so a malformed one is named with what is wrong instead of the engine's "invalid reference format". An
    ``EnvkitError`` naming the value and its fault; None when it is well formed (an image id is too)."""
    problem = _characters_problem(ref) or _reference_problem(ref)
    if problem is not None:
        shown = repr(ref) if len(ref) <= 80 else f"{ref[:40]!r}... ({len(ref)} characters)"
        raise EnvkitError(f"bad image reference {shown}: {problem}", hint=IMAGE_HINT)


def _characters_problem(ref: str) -> str | None:
    for ch in ref:
        if ch.isspace():
            return "it contains whitespace"
        if not (ch.isascii() and ch.isprintable()):
            return f"{ch!r} is not allowed (references are ASCII)"
    return None


def _reference_problem(ref: str) -> str | None:
    """What is wrong with the digest, the tag or the name of ``ref`` (None: nothing)."""
    name_tag, at, digest = ref.partition("@")
    if at and not _ANY_DIGEST.fullmatch(digest):
        return f"the digest {digest!r} is not ALGORITHM:HEX (e.g. sha256:<64 hex>)"
    name = name_tag
    if ":" in name_tag.rpartition("/")[2]:
        name, _, tag = name_tag.rpartition(":")
        if not tag:
            return "the tag after ':' is empty"
        if not _TAG.fullmatch(tag):
            return f"the tag {tag!r} is not 1-128 of A-Z a-z 0-9 _ . - (not starting with . or -)"
    if not name:
        return "the name is empty"
    if len(name) > NAME_MAX:
        return f"the name is {len(name)} characters long; Docker allows at most {NAME_MAX}"
    return _name_problem(name)


def _name_problem(name: str) -> str | None:
    """What is wrong with an image name's registry host or its /-separated parts (None: nothing)."""
    first, sep, rest = name.partition("/")
    path = name
    if sep and names_registry(first):
        problem = host_problem(first)
        if problem:
            return problem
        path = rest
    for part in path.split("/"):
        if not part:
            return "a part of the name is empty (two slashes together, or one at an end)"
        if not _COMPONENT.fullmatch(part):
            if part.lower() != part and _COMPONENT.fullmatch(part.lower()):
                return f"repository names are lower case ({part!r})"
            return (f"{part!r} is not a name part (lower-case letters and digits joined by . _ __ or -, "
                    "beginning and ending with a letter or digit)")
    return None


def _shown(value: str, most: int = 80) -> str:
    """``value`` quoted, cut short (with its length) when long."""
    return repr(value) if len(value) <= most else f"{value[:most - 20]!r}... ({len(value)} characters)"


def host_problem(host: str) -> str | None:
    """What is wrong with a registry ``host[:port]`` (None: nothing): its syntax, a port outside 1-65535, a DNS
    label over 63 characters or an empty one, a name over 253 characters."""
    if not host:
        return "the registry host is empty"
    if not _HOST.fullmatch(host):
        return (f"the registry host {_shown(host)} is not host[:port] (letters, digits, '.' and '-', an IPv4 "
                f"address or [IPv6], then an optional :port)")
    name, port = host, None
    if host.startswith("["):
        name, _, rest = host.partition("]")
        port = rest[1:] or None
    elif ":" in host:
        name, port = host.rsplit(":", 1)
    if port is not None and not 1 <= int(port) <= 65535:
        return f"the registry port {port} is outside 1-65535"
    return None if name.startswith("[") else _dns_name_problem(name)


def _dns_name_problem(name: str) -> str | None:
    """What DNS forbids in a registry host's name (None: nothing)."""
    if len(name) > HOST_MAX:
        return f"the registry host is {len(name)} characters long; a DNS name has at most {HOST_MAX}"
    labels = name.split(".")
    if any(not label for label in labels):
        return f"the registry host {_shown(name)} has an empty label (two dots in a row, or a dot at an end)"
    hyphen = next((label for label in labels if label.startswith("-") or label.endswith("-")), None)
    if hyphen:
        return f"a label of the registry host ({_shown(hyphen)}) begins or ends with '-', which DNS forbids"
    long = next((label for label in labels if len(label) > LABEL_MAX), None)
    if long:
        return (f"a label of the registry host ({_shown(long)}) is {len(long)} characters long; a DNS label "
                f"(the part between dots) has at most {LABEL_MAX}")
    return None


def path_problem(path: str, host: str) -> str | None:
    """What is wrong with a repository path (or path prefix) in registry ``host`` (None: nothing): a component
    outside the distribution spec's grammar (upper case named as such), or ``host/path`` over 255 characters."""
    for component in path.split("/"):
        if _COMPONENT.fullmatch(component):
            continue
        if _COMPONENT.fullmatch(component.lower()):
            return (f"{component!r} in the repository path has upper case letters; the path must be lowercase "
                    f"(the distribution spec's rule)")
        return (f"{_shown(component)} in the repository path is not a path component (lowercase letters and digits, "
                f"separated by '.', '_', '__' or dashes; components separated by '/')")
    total = len(host) + 1 + len(path)
    if total > NAME_MAX:
        return (f"the repository name (registry host, '/' and path) is {total} characters long; the distribution "
                f"spec allows {NAME_MAX}")
    return None


def parse_registry(where: str) -> tuple[str, str]:
    """``HOST[:PORT][/path]`` -> (host[:port], path prefix without slashes)."""
    first, _, prefix = (where or "").strip().rstrip("/").partition("/")
    problem = host_problem(first) or (path_problem(prefix, first) if prefix else None)
    if problem:
        raise EngineError(f"bad registry {_shown(where)}: {problem}; give HOST[:PORT][/path]",
                          hint="e.g. --registry 127.0.0.1:5000 or --registry registry.example.com/vision")
    return first, prefix


# --- what the answers mean (pure) ------------------------------------------------------------------

@dataclass(frozen=True)
class ImageFacts:
    """From an image manifest and its config blob."""

    config_digest: str
    compressed_size: int  # config + layers, as stored in the registry
    layers: int
    labels: dict[str, str]
    env: dict[str, str]
    user: str
    created: str | None
    platform: str | None


def manifest_parts(raw: bytes, where: str) -> tuple[str, int, int]:
    """(config digest, compressed size of config + layers, layer count) of an image manifest."""
    try:
        doc = json.loads(raw)
        config = doc["config"]
        layers = doc.get("layers") or []
        size = int(config.get("size") or 0) + sum(int(layer.get("size") or 0) for layer in layers)
        return str(config["digest"]), size, len(layers)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise EngineError(f"{where} is not an image manifest (no config)",
                          hint="is it an image pushed by envkit, and not an artifact or a foreign format?") from None


def pick_platform(raw: bytes, where: str, want: tuple[str, str] = ("linux", "amd64")) -> tuple[str, str]:
    """From an image index, the digest of the ``want`` platform's manifest (else the first) and its name."""
    try:
        entries = [m for m in json.loads(raw).get("manifests") or [] if isinstance(m, dict) and m.get("digest")]
    except (ValueError, AttributeError):
        entries = []
    if not entries:
        raise EngineError(f"{where} is an image index without manifests", hint="push a single-platform image")

    def name(m: dict) -> str:
        p = m.get("platform") or {}
        return f"{p.get('os', '?')}/{p.get('architecture', '?')}"

    chosen = next((m for m in entries if name(m) == "/".join(want)), entries[0])
    return chosen["digest"], name(chosen)


def config_facts(blob: bytes, where: str) -> tuple[dict[str, str], dict[str, str], str, str | None]:
    """(labels, env, user, created) from an image config blob."""
    try:
        doc = json.loads(blob)
        config = doc.get("config") or {}
        labels = {str(k): str(v) for k, v in (config.get("Labels") or {}).items()}
        env = dict(str(e).split("=", 1) for e in config.get("Env") or [] if "=" in str(e))
        return labels, env, str(config.get("User") or ""), doc.get("created")
    except (ValueError, AttributeError, TypeError):
        raise EngineError(f"the config of {where} is not an image config",
                          hint="is it an image, and not an artifact?") from None


def shown_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(labels.items()) if k.startswith(SHOWN)}


@dataclass(frozen=True)
class Tags:
    """A repository's tags, sorted into what they are."""
    stacks: list[str]  # candidate image tags
    certificates: dict[str, list[str]]  # stack tag -> its certificate artifact tags
    certified: bool  # the moving :certified tag exists
    mirrors: list[str]  # sha256-<hex> tags of base mirrors
    signed: list[str] = field(default_factory=list)  # sha256-<hex>.sig/.att (cosign's layout)


def envkit_made(tag: str) -> bool:
    """Is ``tag`` one envkit makes: a stack tag, ``:certified``, a certificate artifact's or a mirror's?"""
    return bool(STACK_TAG.fullmatch(tag) or tag == CERTIFIED_TAG or CERT_TAG_INFIX in tag
                or _MIRROR_TAG.fullmatch(tag) or _SIGNED_TAG.fullmatch(tag))


def classify_tags(tags: list[str]) -> Tags:
    certs: dict[str, list[str]] = {}
    stacks, mirrors, signed = [], [], []
    for tag in sorted(set(tags)):
        if _SIGNED_TAG.fullmatch(tag):
            signed.append(tag)
        elif CERT_TAG_INFIX in tag:
            certs.setdefault(tag.split(CERT_TAG_INFIX, 1)[0], []).append(tag)
        elif _MIRROR_TAG.fullmatch(tag):
            mirrors.append(tag)
        elif tag != CERTIFIED_TAG:
            stacks.append(tag)
    return Tags(stacks, certs, CERTIFIED_TAG in tags, mirrors, signed)


@dataclass(frozen=True)
class RemoteCertificate:
    tag: str  # <stack>.cert-<gpu>
    artifact: str  # registry/repo@sha256:... of the artifact
    subject: str | None  # the image manifest digest it certifies
    status: str
    gpu_model: str
    driver: str
    created_at: str
    reasons: tuple[str, ...]
    image_id: str
    lock_hash: str
    metrics: dict[str, float] = field(default_factory=dict)  # the performance probes' numbers (perf_metrics)
    document: dict = field(default_factory=dict, compare=False)  # the whole certificate, as the artifact holds it
    signed_by: str = ""  # the trusted key's fingerprint (a verified attestation; registry/verify.py)

    def to_json(self) -> dict:
        return {"signed_by": self.signed_by or None, "status": self.status, "gpu_model": self.gpu_model, "driver":
                self.driver, "created_at": self.created_at, "reasons": list(self.reasons), "source": "registry",
                "artifact": self.artifact, "tag": self.tag, "image_id": self.image_id, "lock_hash": self.lock_hash,
                "metrics": self.metrics, "document": self.document}


def certificate_of(artifact: CertificateArtifact) -> RemoteCertificate:
    """Parse the certificate an artifact carries (the certificate's own loader and version check)."""
    try:
        cert = parse_certificate(artifact.data, f"the certificate artifact {artifact.ref}")
    except EnvkitError as exc:
        registry = artifact.ref.split("/", 1)[0]
        raise EngineError(f"registry {registry}: {exc.message}",
                          hint=f"the artifact {artifact.pinned} is unreadable to this envkit; re-attach it "
                               f"(the next nightly run does), or read it with the envkit version that wrote it") \
            from None
    return RemoteCertificate(artifact.ref.rsplit(":", 1)[1], artifact.pinned, artifact.subject, cert.status,
                             cert.gpu_model, cert.driver, cert.created_at, tuple(cert.reasons), cert.image_id,
                             cert.lock_hash, perf_metrics(cert), cert.to_json())


def latest_per_gpu(certs: list[tuple[str, str, str]]) -> dict[str, str]:
    """(gpu model, status, created_at) -> {gpu model: status of its newest certificate}, sorted by GPU."""
    newest: dict[str, tuple[str, str]] = {}
    for gpu, status, created in certs:
        if gpu not in newest or created >= newest[gpu][1]:
            newest[gpu] = (status, created)
    return {gpu: newest[gpu][0] for gpu in sorted(newest)}


CERTIFIED_TAG = "certified"
CERTIFICATE_TYPE = "application/vnd.envkit.certificate.v1+json"
CERT_TAG_INFIX = ".cert-"


def certificate_tag(stack_tag: str, gpu_slug: str) -> str:
    return f"{stack_tag}{CERT_TAG_INFIX}{gpu_slug}"[:128]


@dataclass(frozen=True)
class CertificateArtifact:
    """A certificate artifact as the registry holds it."""
    ref: str  # registry/repo:<stack>.cert-<gpu>
    digest: str  # the artifact manifest's digest
    subject: str | None  # digest of the image manifest it is attached to
    annotations: dict
    data: bytes  # the certificate document

    @property
    def pinned(self) -> str:
        return f"{_strip_tag(self.ref)}@{self.digest}"


def _strip_tag(ref: str) -> str:
    ref = ref.split("@", 1)[0]
    head, _, last = ref.rpartition("/")
    if ":" in last:
        last = last.rsplit(":", 1)[0]
    return f"{head}/{last}" if head else last


def split_repository(registry_repo: str) -> tuple[str, str]:
    """``127.0.0.1:5000/vision/torch25`` -> (``127.0.0.1:5000``, ``vision/torch25``)."""
    if not registry_repo or registry_repo != registry_repo.strip() or "@" in registry_repo \
            or _strip_tag(registry_repo) != registry_repo:
        raise EngineError(f"bad registry repository {registry_repo!r}: give REGISTRY/PATH without a tag or digest",
                          hint="e.g. registry.example.com:5000/vision/torch25")
    first, sep, rest = registry_repo.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    path = registry_repo if "/" in registry_repo else f"library/{registry_repo}"
    return "docker.io", path
