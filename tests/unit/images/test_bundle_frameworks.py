"""Offline bundles of JAX and TensorFlow images, and what a bundle holds for any framework: the offline
render (wheels and .debs from the bundle, no index, no CA), where the wheels are downloaded from (the
lock's index, then the spec's), the wheelhouse check, and make_bundle's manifest with its network and
engine parts replaced by small files. The builds themselves are in tests/integration/test_bundle_jax.py and test_bundle_tf.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from envkit.images import bundle as bundle_mod, wheelhouse
from envkit.images.wheelhouse import check_wheels, download_wheels
from envkit.images.bundle import make_bundle
from envkit.images.bundle_manifest import verify_bundle
from envkit.errors import BuildError
from envkit.lock import Package, sealed
from envkit.render import installer
from envkit.render.files import render_files
from tests.unit.lockfixtures import make_jax_image, make_lock, make_tf_image

COMPILER = (("nvidia-cuda-nvcc", "13.5.37"), ("nvidia-cuda-crt", "13.5.37"), ("nvidia-nvvm", "13.5.37"),
            ("nvidia-cuda-cccl", "13.3.5.0.6"))


def jax_devel():
    image = make_jax_image()
    packages = (*image.packages, *(Package(name=n, version=v, hashes=("sha256:" + "9" * 64,), group="framework")
                                   for n, v in COMPILER))
    return make_jax_image(flavour="devel", packages=packages)


@pytest.mark.parametrize("image", [make_jax_image(), make_tf_image(), jax_devel()], ids=["jax", "tf", "jax-devel"])
@pytest.mark.parametrize("buildkit", [False, True], ids=["classic", "buildkit"])
def test_the_offline_render_reaches_no_index(image, buildkit):
    files = render_files(make_lock(image), image, "team.yaml", buildkit=buildkit, wheelhouse=True)
    text = files["Dockerfile"].decode()
    assert "apt-get update" not in text and "PIP_CERT" not in text and "site-ca" not in text
    assert text.count("--no-index --find-links /tmp/envkit/wheelhouse") == text.count("pip install")
    assert 'LABEL io.envkit.build="offline"' in text
    framework = files["requirements/framework.txt"].decode()
    assert all(f"{p.name}=={p.version} \\\n" in framework for p in image.packages if p.group == "framework")
    if image.flavour == "devel":  # the toolchain's .debs from the bundle as well
        assert "debs/devel" in text and "nvcc-tools" not in text


def _fake_pip(monkeypatch, wheels: dict[str, bytes]):
    seen = {}

    def run_all(cmds, env):
        done = []
        for cmd in cmds:
            seen.update(cmd=cmd, env=env)
            with open(cmd[cmd.index("-r") + 1]) as fh:
                seen.setdefault("requirements", []).append(fh.read())
            dest = cmd[cmd.index("-d") + 1]
            for name, data in wheels.items():
                with open(f"{dest}/{name}", "wb") as fh:
                    fh.write(data)
            done.append(subprocess.CompletedProcess(cmd, 0, "", ""))
        return done

    monkeypatch.setattr(wheelhouse.procs, "run_all", run_all)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://elsewhere.example/simple")
    return seen


def _locked(name: str, version: str, data: bytes, group="framework") -> Package:
    return Package(name=name, version=version, hashes=("sha256:" + hashlib.sha256(data).hexdigest(),), group=group)


def test_wheels_come_from_the_locks_index_then_the_specs(monkeypatch, tmp_path):
    """A framework on an index of its own (a PyTorch variant) has its extras on the spec's index: both are
    asked, the lock's first; the host's pip settings are not."""
    wheels = {"torch-2.5.1+cu124-cp311-cp311-linux_x86_64.whl": b"t", "numpy-2.1.3-cp311-cp311-manylinux_2_17_x86_64.whl": b"n"}
    seen = _fake_pip(monkeypatch, wheels)
    image = make_jax_image(index_url="https://download.pytorch.org/whl/cu124",
                           packages=(_locked("torch", "2.5.1+cu124", b"t"), _locked("numpy", "2.1.3", b"n", "extra")))
    download_wheels(image, tmp_path, ca_bundle=None, extra_index_url="https://pypi.org/simple")
    cmd = seen["cmd"]
    assert cmd[cmd.index("--index-url") + 1] == "https://download.pytorch.org/whl/cu124"
    assert cmd[cmd.index("--extra-index-url") + 1] == "https://pypi.org/simple"
    assert "--require-hashes" in cmd and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert not any(k.startswith("PIP_") and k != "PIP_CONFIG_FILE" for k in seen["env"])


def test_the_same_index_is_asked_once(monkeypatch, tmp_path):
    seen = _fake_pip(monkeypatch, {"jax-0.12.0.1-py3-none-any.whl": b"j"})
    image = make_jax_image(packages=(_locked("jax", "0.12.0.1", b"j"),))
    download_wheels(image, tmp_path, ca_bundle=None, extra_index_url=image.index_url)
    assert "--extra-index-url" not in seen["cmd"]


def test_a_plain_http_index_is_a_trusted_host_for_the_download(monkeypatch, tmp_path):
    seen = _fake_pip(monkeypatch, {"jax-0.12.0.1-py3-none-any.whl": b"j"})
    image = make_jax_image(index_url="http://mirror.corp.example:8080/simple", extra_index_url="https://pypi.org/simple",
                           packages=(_locked("jax", "0.12.0.1", b"j"),))
    download_wheels(image, tmp_path, ca_bundle=None)
    cmd = seen["cmd"]
    assert cmd[cmd.index("--trusted-host") + 1] == "mirror.corp.example:8080" and cmd.count("--trusted-host") == 1


def test_the_ca_bundle_is_not_overridden_by_the_environment(monkeypatch, tmp_path):
    """pip's requests lets REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE win over `--cert`: with a bundle they are not passed."""
    seen = _fake_pip(monkeypatch, {"jax-0.12.0.1-py3-none-any.whl": b"j"})
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("CURL_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    image = make_jax_image(packages=(_locked("jax", "0.12.0.1", b"j"),))
    download_wheels(image, tmp_path / "a", ca_bundle=tmp_path / "ca.pem")
    assert seen["cmd"][seen["cmd"].index("--cert") + 1] == str(tmp_path / "ca.pem")
    assert "REQUESTS_CA_BUNDLE" not in seen["env"] and "CURL_CA_BUNDLE" not in seen["env"]
    download_wheels(image, tmp_path / "b", ca_bundle=None)
    assert seen["env"]["REQUESTS_CA_BUNDLE"] == "/etc/ssl/certs/ca-certificates.crt"


def test_the_downloads_run_side_by_side_each_package_in_one_of_them(monkeypatch, tmp_path):
    data = {f"pkg{i}": f"wheel {i}".encode() for i in range(10)}
    seen = _fake_pip(monkeypatch, {f"{name}-1.0-py3-none-any.whl": body for name, body in data.items()})
    image = make_jax_image(packages=tuple(_locked(name, "1.0", body) for name, body in data.items()))
    assert len(download_wheels(image, tmp_path, ca_bundle=None)) == 10
    assert len(seen["requirements"]) == wheelhouse.DOWNLOADS
    lines = sorted(line.split(" ")[0] for text in seen["requirements"] for line in text.splitlines())
    assert lines == sorted(f"{name}==1.0" for name in data)
    assert all("--hash=sha256:" in line for text in seen["requirements"] for line in text.splitlines())


def test_the_wheelhouse_matches_versions_as_versions(tmp_path):
    """A wheel's file name spells its version normalised; the lock's spelling may differ."""
    (tmp_path / "certifi-2026.10.19.post1-py3-none-any.whl").write_bytes(b"c")
    (tmp_path / "nvidia_cuda_cccl-13.3.5.0.6-py3-none-manylinux_2_27_x86_64.whl").write_bytes(b"x")
    packages = [_locked("certifi", "2026.10.19-post1", b"c"), _locked("nvidia-cuda-cccl", "13.3.5.0.6", b"x")]
    assert [p.name for p in check_wheels(packages, tmp_path)] == [
        "certifi-2026.10.19.post1-py3-none-any.whl", "nvidia_cuda_cccl-13.3.5.0.6-py3-none-manylinux_2_27_x86_64.whl"]
    (tmp_path / "bad-1.0.whl.part").write_bytes(b"?")
    with pytest.raises(BuildError, match="is not a wheel"):
        check_wheels(packages, tmp_path)


def fake_fetch_pinned(url, sha256, path, *, ca_bundle=None, hint):
    """make_bundle's uv wheel download, replaced by a small file of its name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"uv wheel")
    return path


@pytest.fixture
def offline_parts(monkeypatch):
    """make_bundle's network and engine parts, replaced by small files (every wheel of the lock)."""
    seen: dict = {"debs": None}

    class Base:
        id = "sha256:" + "b" * 64

    def download_wheels(image, dest, *, ca_bundle, extra_index_url=None):
        dest.mkdir(parents=True, exist_ok=True)
        for p in image.packages:
            (dest / f"{p.name.replace('-', '_')}-{p.version}-py3-none-any.whl").write_bytes(p.name.encode())

    def fetch_debs(engine, lock, image, dest):
        seen["debs"] = image.flavour
        for group in ("os", *(("devel",) if image.flavour == "devel" else ())):
            (dest / group).mkdir(parents=True)
            (dest / group / f"{group}_1_amd64.deb").write_bytes(b"deb")

    monkeypatch.setattr(bundle_mod, "ensure_base", lambda engine, base, progress, phases=None: Base())
    monkeypatch.setattr(bundle_mod, "download_wheels", download_wheels)
    monkeypatch.setattr(bundle_mod, "fetch_debs", fetch_debs)
    monkeypatch.setattr(bundle_mod, "fetch_pinned", fake_fetch_pinned)
    monkeypatch.setattr(bundle_mod, "fetch_toolkit_deb", lambda image, dest: pytest.fail("a CUDA 13 bundle has no .deb"))
    monkeypatch.setattr(bundle_mod, "save_image", lambda engine, ref, path: path.write_bytes(b"tar"))
    return seen


@pytest.mark.parametrize("image", [make_jax_image(), make_tf_image(), jax_devel()], ids=["jax", "tf", "jax-devel"])
def test_a_bundle_holds_one_wheel_per_locked_package_and_the_lock_cut_to_its_image(offline_parts, tmp_path, image):
    lock = make_lock(image, sealed(make_tf_image(name="other")))
    path = make_bundle(object(), lock, image.name, tmp_path / "b", ca_bundle=None)
    manifest = verify_bundle(path)
    assert manifest["image"] == image.name and manifest["lock_hash"] == image.hash
    assert manifest["flavour"] == image.flavour
    wheels = sorted(f for f in manifest["files"] if f.startswith("context/wheelhouse/"))
    assert len(wheels) == len(image.packages)
    locked = json.loads((path / "envkit.lock").read_text())
    assert [i["name"] for i in locked["images"]] == [image.name]
    assert ("context/requirements/devel.txt" in manifest["files"]) == (image.flavour == "devel")
    assert any(f.startswith("context/debs/devel/") for f in manifest["files"]) == (image.flavour == "devel")
    assert not any(f.startswith("context/debs/nvcc/") for f in manifest["files"])
    assert f"installer/{installer.wheel_name('x86_64')}" in manifest["files"]  # what --reproducible installs with


def _dead_pid() -> int:
    proc = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True)
    return int(proc.stdout)  # exited and reaped


def test_staging_left_by_a_killed_maker_on_this_host_goes_before_the_next_bundle(offline_parts, tmp_path):
    """A SIGKILLed `bundle make` leaves its staging directory (GBs of wheels) beside --out; the next run on
    this host removes it, but never one whose maker still runs, nor one another host is making."""
    import socket

    out = tmp_path / "b"
    dead = tmp_path / f"{bundle_mod._staging_prefix(out, _dead_pid())}abc123"
    replaced = tmp_path / f"{bundle_mod._staging_prefix(out, _dead_pid())}old-xyz"  # killed while replacing
    alive = tmp_path / f"{bundle_mod._staging_prefix(out, os.getpid())}live"
    elsewhere = tmp_path / f".b.envkit-{socket.gethostname()}x-{_dead_pid()}-abc"
    other_bundle = tmp_path / f"{bundle_mod._staging_prefix(tmp_path / 'b2', _dead_pid())}abc"
    for d in (dead, replaced, alive, elsewhere, other_bundle):
        (d / "context").mkdir(parents=True)
    assert bundle_mod.stale_staging(out) == sorted([dead, replaced])
    said = []
    make_bundle(object(), make_lock(make_jax_image()), make_jax_image().name, out, ca_bundle=None, progress=said.append)
    assert not dead.exists() and not replaced.exists() and alive.exists() and elsewhere.exists() and other_bundle.exists()
    assert f"removing {dead.name}, left by an envkit that was killed while making this bundle" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["b", alive.name, elsewhere.name, other_bundle.name])
