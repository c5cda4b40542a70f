"""The devel flavour: its compiler pins in the lock (the devel group, from envkit/devel.py), what the
resolver asks the closure for, and what the devel template renders for CUDA 12.4 (Debian's toolkit
.deb) and CUDA 13 (the index's wheels alone). No index: a fake closure stands in for uv."""

import pytest

from envkit import devel as held  # what a locked devel image holds (render reads it)
from envkit.catalog.files import load_catalog
from envkit.resolve import devel
from envkit.index.closure import Pin
from envkit.errors import EnvkitError, ResolutionError
from envkit.render.files import context_for, render_files
from tests.unit.lockfixtures import make_devel_image, make_image, make_lock
from tests.unit.resolve.test_resolve import FakeClosure, _h, catalog, load, make_spec, run  # noqa: F401 (fixture)


def _dockerfile(image, **options) -> str:
    return render_files(make_lock(image), image, "team.yaml", **options)["Dockerfile"].decode()


def _stage(text: str, name: str) -> str:
    body = text.split(f" AS {name}\n", 1)[1]
    return body.split("\nFROM ", 1)[0]


class DevelClosure(FakeClosure):
    """FakeClosure, plus the compiler's closure: each requirement at a fixed release of its series."""

    RELEASES = {"nvidia-cuda-nvcc": "88", "nvidia-cuda-crt": "88", "nvidia-nvvm": "88", "nvidia-cuda-cccl": "85",
                "nvidia-cuda-runtime": "96", "nvidia-cuda-nvcc-cu12": "131", "nvidia-cuda-cccl-cu12": "127.post1"}

    def __call__(self, requirements, **kw):
        if not any(r.startswith(("nvidia-cuda-nvcc", "cuda-toolkit")) for r in requirements):
            return super().__call__(requirements, **kw)
        self.calls.append({"requirements": list(requirements), **kw})
        locked = {p.name: p for p in kw.get("constraints") or ()}
        pins = []
        for req in requirements:
            name, _, series = req.partition("==")
            name = name.split("[")[0]
            if name in locked:
                pins.append(locked[name])
            elif series:
                version = series.replace("*", self.RELEASES[name])
                pins.append(Pin(name, version, _h(f"{name}=={version}")))
        return sorted(pins, key=lambda p: p.name)


# --- what the closure is asked for ----------------------------------------------------------------

def test_cuda13_asks_for_the_compiler_wheels_of_the_locked_series():
    reqs = devel.requirements("13.0", [])
    assert reqs == ["nvidia-cuda-nvcc==13.0.*", "nvidia-cuda-crt==13.0.*", "nvidia-nvvm==13.0.*",
                    "nvidia-cuda-runtime==13.0.*", "nvidia-cuda-cccl==13.0.*"]


def test_cuda13_follows_nvidias_toolkit_pins_when_the_framework_locks_cuda_toolkit():
    reqs = devel.requirements("13.0", [Pin("cuda-toolkit", "13.0.3.0", ())])
    assert reqs[0] == "cuda-toolkit[nvcc,cccl]"


def test_cuda12_asks_for_the_cu12_wheels():
    assert devel.requirements("12.4", []) == ["nvidia-cuda-nvcc-cu12==12.4.*", "nvidia-cuda-cccl-cu12==12.4.*"]


def test_lock_packages_are_constrained_by_the_image_and_keep_only_what_is_new():
    closure = DevelClosure()
    locked = [Pin("torch", "2.14.1", _h("t")), Pin("nvidia-cuda-runtime", "13.0.96", _h("r"))]
    packages = devel.lock_packages("img", "13.0", locked, python="3.13", glibc="2.41",
                                   index_url="https://pypi.org/simple", closure=closure, toolkits=("12.4",))
    assert {p.name: p.version for p in packages} == {
        "nvidia-cuda-nvcc": "13.0.88", "nvidia-cuda-crt": "13.0.88", "nvidia-nvvm": "13.0.88",
        "nvidia-cuda-cccl": "13.0.85"}
    assert {p.group for p in packages} == {"devel"} and all(p.hashes for p in packages)
    assert closure.calls[-1]["constraints"] == locked  # the framework's runtime stays the framework's


@pytest.mark.parametrize("cuda,needle", [("12.6", "knows no CUDA compiler for CUDA 12.6"),
                                         ("11.8", "knows no CUDA compiler for CUDA 11.8"),
                                         (None, "has no CUDA runtime")])
def test_refused_cudas_say_why_and_what_to_do(cuda, needle):
    with pytest.raises(ResolutionError, match=needle) as err:
        devel.lock_packages("img", cuda, [], python="3.11", glibc="2.36", index_url="x", closure=DevelClosure(),
                            toolkits=("12.4",))
    assert "flavour: runtime" in err.value.hint


# --- the resolver locks the devel group ----------------------------------------------------------

def _devel_spec(**kw):
    return load(make_spec(**kw).replace('    framework: "', '    flavour: devel\n    framework: "', 1))


@pytest.mark.parametrize("cuda,expected", [
    # (the fake torch closure holds no CUDA runtime, so here the compiler's closure brings the headers' wheel)
    (">=13.0,<13.2", {"nvidia-cuda-nvcc": "13.0.88", "nvidia-cuda-crt": "13.0.88", "nvidia-nvvm": "13.0.88",
                      "nvidia-cuda-cccl": "13.0.85", "nvidia-cuda-runtime": "13.0.96"}),
    ("==12.4.*", {"nvidia-cuda-nvcc-cu12": "12.4.131", "nvidia-cuda-cccl-cu12": "12.4.127.post1"}),
], ids=["cuda13", "cuda12.4"])
def test_resolve_locks_the_devel_group_for_devel_images(catalog, cuda, expected):  # noqa: F811
    closure = DevelClosure()
    image = run(catalog, closure=closure, spec=_devel_spec(cuda=cuda)).images[0]
    assert image.flavour == "devel"
    assert {p.name: p.version for p in image.packages if p.group == "devel"} == expected
    framework = [p for p in image.packages if p.group == "framework"]
    assert closure.calls[-1]["constraints"] == [Pin(p.name, p.version, p.hashes) for p in framework]
    # CUDA 12: the compiler's programs from Debian's .deb, which the lock pins (render reads it there); CUDA 13: none
    deb = load_catalog().debian_toolkits().get(image.cuda_major_minor)
    assert (image.toolkit_deb and (image.toolkit_deb.sha256, image.toolkit_deb.url.endswith(deb.path))) == (
        deb and (deb.sha256, True))


def test_runtime_images_lock_no_devel_group(catalog):  # noqa: F811
    closure = DevelClosure()
    image = run(catalog, closure=closure, cuda=">=13.0,<13.2").images[0]
    assert not [p for p in image.packages if p.group == "devel"]
    assert len(closure.calls) == 1  # the framework closure only


def test_resolve_refuses_a_devel_image_of_a_cuda_without_compiler(catalog):  # noqa: F811
    with pytest.raises(ResolutionError, match="CUDA 12.8"):
        run(catalog, closure=DevelClosure(), spec=_devel_spec(cuda="==12.8.*"))


# --- render -----------------------------------------------------------------------------------------

def test_cuda13_devel_takes_everything_from_the_lock_and_no_deb():
    image = make_devel_image("13.0")
    text = _dockerfile(image)
    assert " AS nvcc-tools" not in text and ".deb" not in text and "cuda-tools" not in text
    assert " AS nvcc\n" not in text  # online: the compiler's wheels are installed into the venv where it runs
    assert "uv pip install --python /opt/venv/bin/python" in text and "-r /tmp/envkit/devel.txt" in text
    offline = _dockerfile(image, wheelhouse=True)
    assert "COPY --from=nvcc /opt/devel/ /opt/venv/" in offline
    # nvcc, cicc and the rest are the wheels' own, linked into CUDA_HOME's bin/ and nvvm/
    assert 'for d in "$nv"/*/bin "$nv"/*/nvvm; do cp -rsn "$d"/. "/opt/cuda/${d##*/}/"; done' in text
    assert "/opt/venv/lib/python3.13/site-packages/nvidia" in text
    devel_txt = render_files(make_lock(image), image, "team.yaml")["requirements/devel.txt"].decode()
    assert "nvidia-cuda-nvcc==13.0.88 \\\n    --hash=sha256:" in devel_txt
    assert "nvidia-cuda-runtime" not in devel_txt and "torch" not in devel_txt  # the framework's, not devel's
    ctx = context_for(make_lock(image), image, "team.yaml")
    assert ctx.nvcc_deb_url == "" and ctx.nvcc_deb_sha256 == ""


def test_cuda12_devel_keeps_debians_toolkit_pinned_by_sha256_and_never_installed():
    image = make_devel_image("12.4")
    text = _dockerfile(image)
    tools = _stage(text, "nvcc-tools")
    assert f'echo "{load_catalog().debian_toolkits()["12.4"].sha256}  /tmp/nvcc.deb" | sha256sum -c -' in tools
    assert "http://deb.debian.org/debian/pool/non-free/n/nvidia-cuda-toolkit/" in tools
    assert "dpkg-deb -x" in tools and "dpkg -i" not in tools and "apt-get install" not in tools
    assert "COPY --from=nvcc-tools /opt/cuda-tools/ /opt/cuda/" in text
    assert '"$nv"/*/bin' not in text  # the .deb's programs, not the wheels' ptxas
    devel_txt = render_files(make_lock(image), image, "team.yaml")["requirements/devel.txt"].decode()
    assert "nvidia-cuda-nvcc-cu12==12.4.131 \\\n    --hash=sha256:" in devel_txt


def test_devel_image_is_the_runtime_image_plus_layers():
    runtime = _dockerfile(make_image())
    devel_text = _dockerfile(make_devel_image("12.4"))
    runtime_stage = _stage(runtime, "runtime").split("# --- labels last")[0].rstrip()
    assert _stage(devel_text, "runtime").startswith(runtime_stage)
    added = _stage(devel_text, "runtime")[len(runtime_stage):]
    assert "g++ python3-dev ninja-build" in added and "rm -rf /var/lib/apt/lists/*" in added
    assert "ENV CUDA_HOME=/opt/cuda" in added
    assert 'io.envkit.flavour="devel"' in devel_text and "io.envkit.flavour" not in runtime
    # the devel packages are no part of the framework layer: it stays the runtime image's
    for name in ("requirements/framework.txt", "requirements/extra.txt"):
        assert (render_files(make_lock(make_image()), make_image(), "t")[name]
                == render_files(make_lock(make_devel_image()), make_devel_image(), "t")[name])


def test_a_devel_lock_without_devel_packages_is_refused_with_the_way_out():
    image = make_devel_image("12.4", packages=make_image().packages)  # as an older envkit locked it: no devel group
    with pytest.raises(EnvkitError, match="has no devel packages") as err:
        render_files(make_lock(image), image, "team.yaml")
    assert "envkit resolve" in err.value.hint


@pytest.mark.parametrize("changes", [dict(cuda_major_minor="12.6", cuda="12.6.77", toolkit_deb=None),
                                     dict(cuda_major_minor=None, cuda=None)], ids=["unknown-cuda", "cpu"])
def test_render_refuses_a_cuda_it_has_no_compiler_for(changes):
    image = make_devel_image("12.4", **changes)
    with pytest.raises(EnvkitError, match="CUDA"):
        render_files(make_lock(image), image, "team.yaml")


@pytest.mark.parametrize("cuda", ["12.4", "13.0"])
@pytest.mark.parametrize("buildkit", [False, True], ids=["classic", "buildkit"])
@pytest.mark.parametrize("wheelhouse", [False, True], ids=["online", "wheelhouse"])
def test_every_devel_variant_passes_hadolint(tmp_path, cuda, buildkit, wheelhouse):
    from tests.unit.render.test_lint import lint

    path = tmp_path / "Dockerfile"
    path.write_text(_dockerfile(make_devel_image(cuda, apt=("git",)), buildkit=buildkit, wheelhouse=wheelhouse))
    result = lint(path)
    assert result.returncode == 0, result.stdout + result.stderr


# --- bundles and old locks -----------------------------------------------------------------------

def test_only_cuda12_locks_a_toolkit_deb_on_the_bases_mirror():
    """The catalog's .deb (cuda.yaml's debian_toolkits), on the base's Debian mirror, pinned into the lock."""
    packaged = load_catalog()
    cuda13 = make_devel_image("13.0")
    assert devel.toolkit_for(packaged, "img", "13.0", cuda13.base) is None and cuda13.toolkit_deb is None
    deb = devel.toolkit_for(packaged, "img", "12.4", make_image().base)
    assert deb is not None and deb.sha256 == packaged.debian_toolkits()["12.4"].sha256
    assert deb.url.startswith("http://deb.debian.org/debian/pool/non-free/") and deb.url.endswith("_amd64.deb")
    mirrored = make_image().base.model_copy(update={"bootstrap": {"mirror": "https://mirror.example/debian/"}})
    assert devel.toolkit_for(packaged, "img", "12.4", mirrored).url.startswith("https://mirror.example/debian/pool/")
    with pytest.raises(ResolutionError, match="knows no CUDA compiler for CUDA 12.6"):
        devel.toolkit_for(packaged, "img", "12.6", make_image().base)


def test_as_devel_keeps_the_runtime_packages_and_adds_the_group():
    base = make_image()
    image = devel.as_devel(base, closure=DevelClosure())
    assert image.flavour == "devel" and image.hash != base.hash
    assert {p for p in image.packages if p.group != "devel"} == set(base.packages)
    assert {p.name for p in held.packages(image)} == {"nvidia-cuda-nvcc-cu12", "nvidia-cuda-cccl-cu12"}
    assert image.toolkit_deb == make_devel_image("12.4").toolkit_deb  # the lock names the .deb


class JaxDevelClosure(DevelClosure):
    """DevelClosure whose jax[cuda13] closure holds the whole CUDA 13 compiler of its runtime's release, as
    the real one does (the plugin requires nvidia-cuda-nvcc for ptxas), with cccl in CCCL's own numbering."""

    def __call__(self, requirements, **kw):
        pins = super().__call__(requirements, **kw)
        if not requirements[0].startswith("jax[cuda13]"):
            return pins
        runtime = next(p.version for p in pins if p.name == "nvidia-cuda-runtime")
        extra = {"nvidia-cuda-nvcc": runtime, "nvidia-cuda-crt": runtime, "nvidia-nvvm": runtime,
                 "nvidia-cuda-cccl": "13.3.5.0.6"}
        return sorted([*pins, *(Pin(n, v, _h(f"{n}=={v}")) for n, v in extra.items())], key=lambda p: p.name)


def test_compiler_wheels_the_image_locks_are_asked_for_by_name_so_the_framework_pin_decides():
    locked = [Pin("nvidia-cuda-nvcc", "13.5.37", ()), Pin("nvidia-cuda-cccl", "13.3.5.0.6", ())]
    assert devel.requirements("13.5", locked) == [
        "nvidia-cuda-nvcc", "nvidia-cuda-crt==13.5.*", "nvidia-nvvm==13.5.*", "nvidia-cuda-runtime==13.5.*",
        "nvidia-cuda-cccl"]


def test_resolve_locks_a_jax_cuda13_devel_image_whose_closure_holds_the_compiler(catalog):  # noqa: F811
    closure = JaxDevelClosure()
    image = run(catalog, closure=closure, spec=_devel_spec(framework="jax[cuda13]>=0.10")).images[0]
    assert image.framework == "jax" and image.flavour == "devel"
    assert [p for p in image.packages if p.group == "devel"] == []  # nothing new: the framework's pins agree
    asked = closure.calls[-1]["requirements"]
    assert {"nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl"} <= set(asked)
    assert {p.name: p.version for p in held.packages(image)} == {
        "nvidia-cuda-nvcc": image.cuda, "nvidia-cuda-crt": image.cuda, "nvidia-nvvm": image.cuda,
        "nvidia-cuda-cccl": "13.3.5.0.6"}
    assert held.wheels_to_add(image) == ()


def test_resolve_refuses_a_framework_nvcc_of_another_cuda_release():
    closure = DevelClosure()
    locked = [Pin("nvidia-cuda-runtime", "13.2.51", _h("r")), Pin("nvidia-cuda-nvcc", "13.5.37", _h("n"))]
    with pytest.raises(ResolutionError, match="nvidia-cuda-nvcc 13.5.37") as err:
        devel.lock_packages("img", "13.2", locked, python="3.13", glibc="2.41", index_url="x", closure=closure,
                            toolkits=("12.4",))
    assert "cuda:" in err.value.hint


def test_resolve_refuses_a_jax_cuda12_devel_image_naming_its_cuda_and_the_way_out(catalog):  # noqa: F811
    spec = _devel_spec(framework="jax[cuda12]>=0.10", cuda="==12.9.*")
    closure = JaxDevelClosure()
    with pytest.raises(ResolutionError, match="no CUDA compiler for CUDA 12.9") as err:
        run(catalog, closure=closure, spec=spec)
    # no cuda: constraint takes jax[cuda12] to CUDA 13: the way out is the other extra
    assert "jax[cuda12] installs CUDA 12 wheels only" in err.value.hint and "'jax[cuda13]>=0.10'" in err.value.hint
    assert '">=13"' not in err.value.hint
    assert closure.calls == [] and err.value.location.line == 11  # refused when planned, at its flavour: line


def test_resolve_refuses_a_tensorflow_devel_image_before_compiling_anything(catalog):  # noqa: F811
    closure = DevelClosure()
    spec = _devel_spec(framework="tensorflow[and-cuda]>=2.16")
    with pytest.raises(ResolutionError, match="makes only for PyTorch and JAX images: no tensorflow") as err:
        run(catalog, closure=closure, spec=spec)
    assert "flavour: runtime" in err.value.hint and "see docs/images.md" in err.value.message
    assert closure.calls == []  # refused when planned (explain too), before any closure
    assert err.value.location.line == 11  # its flavour: line
