"""envkit.index.sizes: each locked wheel's bytes, from the index's listing (PEP 700) or a HEAD, against a real
HTTP index on 127.0.0.1; and the lock keeping its bytes and hashes when sizes are absent."""

from __future__ import annotations

import json

from envkit.index.closure import locked_wheels
from envkit.index.sizes import uv_known, with_sizes
from envkit.lock import Package, load_lock, wheel_bytes, write_lock
from tests.unit.index.test_index import build_wheel, make_index, server  # noqa: F401 (the fixture)
from tests.unit.lockfixtures import make_image, make_lock

TAG = "cp311-cp311-manylinux_2_28_x86_64"


def _image(server, wheels, **changes):
    packages = tuple(Package(name=name, version="1.0", hashes=(f"sha256:{w.sha256}",), group="framework")
                     for name, w in wheels.items())
    return make_image(**{"index_url": server.url + "/simple/", "packages": packages, **changes})


def test_sizes_come_from_the_listing_or_a_head(server, tmp_path):
    listed, unlisted = build_wheel("alpha", "1.0", [], tag=TAG, pad=1000), build_wheel("beta", "1.0", [], tag=TAG,
                                                                                          pad=3000)
    server.add("alpha", listed)
    server.add("beta", unlisted, with_size=False)  # an index without PEP 700: the HEAD's Content-Length
    index = make_index(server, tmp_path)
    image = with_sizes(_image(server, {"alpha": listed, "beta": unlisted}), lambda url: index)
    assert {p.name: p.size for p in image.packages} == {"alpha": len(listed.data), "beta": len(unlisted.data)}
    heads = [h for h in server.hits if h.method == "HEAD"]
    assert [h.path for h in heads] == [f"/files/{unlisted.filename}"]  # the listed size needs no request
    assert wheel_bytes(image.packages) == len(listed.data) + len(unlisted.data)


def test_the_wheel_is_the_one_with_the_locked_hash_and_a_fitting_tag(server, tmp_path):
    locked = build_wheel("alpha", "1.0", [], tag=TAG, pad=1000)
    other = build_wheel("alpha", "1.0", [], tag="cp311-cp311-manylinux_2_39_x86_64", pad=5000)  # glibc too new
    unrelated = build_wheel("alpha", "1.0", [], tag=TAG, pad=9000)  # not in the lock's hashes
    for w in (locked, other, unrelated):
        server.add("alpha", w)
    index = make_index(server, tmp_path)
    image = _image(server, {"alpha": locked})
    image = image.model_copy(update={"packages": (image.packages[0].model_copy(
        update={"hashes": (f"sha256:{locked.sha256}", f"sha256:{other.sha256}")}),)})
    assert with_sizes(image, lambda url: index).packages[0].size == len(locked.data)


def test_a_package_no_index_sizes_stays_unknown_and_the_hash_holds(server, tmp_path):
    wheel = build_wheel("alpha", "1.0", [], tag=TAG, pad=1000)
    server.add("alpha", wheel)
    index = make_index(server, tmp_path)
    image = _image(server, {"alpha": wheel, "gamma": build_wheel("gamma", "1.0", [], tag=TAG, pad=10)})
    sized = with_sizes(image, lambda url: index)  # gamma: 404 from the index
    assert [p.size for p in sized.packages] == [len(wheel.data), None]
    assert wheel_bytes(sized.packages) is None  # a partial total would understate
    assert sized.content_hash() == image.content_hash() == image.hash


def test_the_framework_index_first_then_the_specs(server, tmp_path):
    wheel = build_wheel("alpha", "1.0", [], tag=TAG, pad=1000)
    server.add("alpha", wheel)
    asked = []

    def index_for(url):  # the framework's index (/nothing/) lists no alpha: 404
        asked.append(url)
        index = make_index(server, tmp_path)
        index.url = url.rstrip("/")
        return index

    image = _image(server, {"alpha": wheel}, index_url=server.url + "/nothing/",
                   extra_index_url=server.url + "/simple/")
    assert with_sizes(image, index_for).packages[0].size == len(wheel.data)
    assert asked == [server.url + "/nothing/", server.url + "/simple/"]


def test_a_lock_without_sizes_keeps_its_bytes_and_a_sized_one_its_hash(tmp_path):
    lock = make_lock()
    assert '"size"' not in lock.to_bytes().decode()  # locks from before sizes: byte for byte as they were
    image = lock.images[0]
    sized = image.model_copy(update={"packages": tuple(p.model_copy(update={"size": 1000 + i})
                                                       for i, p in enumerate(image.packages))})
    assert sized.content_hash() == image.hash
    path = tmp_path / "team.lock"
    write_lock(make_lock(sized), path)
    assert [p["size"] for p in json.loads(path.read_text())["images"][0]["packages"]] == [1000, 1001, 1002]
    assert load_lock(path).images[0].packages == sized.packages
    assert wheel_bytes(sized.packages) == 3003


def test_glibc_of_a_locks_platform():
    from tests.unit.lockfixtures import make_image

    for platform, glibc in (("x86_64-manylinux_2_36", "2.36"), ("x86_64-manylinux_2_28", "2.28")):
        assert make_image().model_copy(update={"platform": platform}).glibc == glibc


def test_sizes_uv_already_gave_need_no_listing(server, tmp_path):
    wheel = build_wheel("alpha", "1.0", [], tag=TAG, pad=1000)
    server.add("alpha", wheel)
    image = _image(server, {"alpha": wheel})
    sized = with_sizes(image, lambda url: make_index(server, tmp_path), known=lambda img: [(wheel.sha256, 4242)])
    assert sized.packages[0].size == 4242
    assert server.hits == []  # uv's answer alone: no listing asked


def test_uv_describes_the_locked_wheels_and_a_size_it_lacks_comes_from_the_listing(server, tmp_path, monkeypatch):
    """``uv_known``: uv's PEP 751 output for the pins (a real uv against a real index on 127.0.0.1), offline from
    its cache first; what it cannot say falls back to the listing."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    alpha = build_wheel("alpha", "1.0", [], tag=TAG, pad=1000)
    beta = build_wheel("beta", "1.0", [], tag=TAG, pad=2000)
    server.add("alpha", alpha)
    server.add("beta", beta, with_size=False)
    image = _image(server, {"alpha": alpha, "beta": beta})
    wheels = {w.name: w for w in locked_wheels([("alpha", "1.0"), ("beta", "1.0")], python="3.11", glibc="2.36",
                                               index_url=server.url + "/simple/", offline=False)}
    assert wheels["alpha"].sha256 == alpha.sha256 and wheels["alpha"].size == len(alpha.data)
    assert wheels["beta"].size is None  # the listing gives none: uv says none
    sized = with_sizes(image, lambda url: make_index(server, tmp_path), known=uv_known())
    assert [p.size for p in sized.packages] == [len(alpha.data), len(beta.data)]  # beta: a HEAD


def test_a_size_read_once_is_kept_for_the_pin_and_asks_neither_uv_nor_the_index_again(server, tmp_path):
    alpha = build_wheel("alpha", "1.0", [], tag=TAG, pad=1000)
    server.add("alpha", alpha)
    image = _image(server, {"alpha": alpha})
    first = with_sizes(image, lambda url: make_index(server, tmp_path), memo=make_index(server, tmp_path))
    assert first.packages[0].size == len(alpha.data) and server.hits  # the listing, this once
    server.hits.clear()

    def no_uv(img):
        raise AssertionError("uv asked for a size the memo keeps")

    again = with_sizes(image, lambda url: make_index(server, tmp_path), known=no_uv, memo=make_index(server, tmp_path))
    assert again.packages[0].size == len(alpha.data) and server.hits == []
    other = image.model_copy(update={"platform": "x86_64-manylinux_2_28"})  # another glibc: another pin
    with_sizes(other, lambda url: make_index(server, tmp_path), memo=make_index(server, tmp_path))
    assert server.hits  # not the memo's
