"""The build's progress model and its plain lines (the terminal bar: tests/integration/test_progress_terminal.py)."""

from envkit.cli.common import Ctx
from envkit.cli.progress import BuildView
from envkit.engine.protocol import BuildEvent
from envkit.support.progress import InstallCount, Planned


def test_pip_lines_count_packages_and_bytes():
    count = InstallCount(total=3)
    assert count.feed("Collecting torch==2.5.1 (from -r /tmp/envkit/framework.txt (line 3))") == "package"
    assert count.feed("  Downloading https://files.example/torch-2.5.1-cp311.whl (906.4 MB)") == "bytes"
    assert count.feed("Collecting numpy==2.1.3") == "package"
    assert count.feed("  Downloading https://files.example/numpy.whl (16.3 kB)") == "bytes"
    assert count.feed("Installing collected packages: numpy, torch") is None
    assert (count.done, round(count.downloaded)) == (2, 906_416_300)
    assert count.words() == "packages 2/3, 0.91 GB downloaded"


def test_uv_install_lines_count_packages():
    count = InstallCount(total=2)
    assert count.feed("Resolved 2 packages in 1ms") is None
    assert count.feed("Installed 2 packages in 310ms") is None
    assert count.feed(" + nvidia-cublas-cu12==12.4.5.8") == "package"
    assert count.feed(" + torch==2.5.1+cu124") == "package"
    assert count.feed(" - torch==2.5.0") is None
    assert count.words() == "packages 2/2, 0.00 GB downloaded"


def test_a_ci_log_gets_a_line_per_step_and_per_ten_packages(capsys):
    with BuildView(Ctx(False, False, False), live=False) as view:
        view("torch25", Planned(25))
        view("torch25", BuildEvent("step", "FROM base", 1, 3))
        for i in range(25):
            view("torch25", BuildEvent("log", f"Collecting pkg{i}==1.0"))
        view("torch25", BuildEvent("step", "LABEL a=b", 3, 3))
        view("torch25", "verifying inside the image")
    assert capsys.readouterr().err.splitlines() == [
        "envkit: [torch25] step 1/3: FROM base",
        "envkit: [torch25] packages 10/25, 0.00 GB downloaded",
        "envkit: [torch25] packages 20/25, 0.00 GB downloaded",
        "envkit: [torch25] packages 25/25, 0.00 GB downloaded",
        "envkit: [torch25] step 3/3: LABEL a=b",
        "envkit: [torch25] verifying inside the image"]


def test_a_pull_counts_its_layers_on_a_terminal_and_prints_lines_elsewhere(capsys):
    from envkit.cli.progress import LayerView

    with LayerView(Ctx(False, False, False), "pull x", live=True) as view:
        for line in ("a1: Pulling fs layer", "b2: Pulling fs layer", "a1: Verifying Checksum", "a1: Pull complete",
                     "b2: Already exists"):
            view(line)
        task = view.bars.tasks[0]
        assert (task.completed, task.total) == (2, 2)
        view("Digest: sha256:abc")  # not a layer's line: printed above the bar
    with LayerView(Ctx(False, False, False), "pull x", live=False) as view:
        view("a1: Pull complete")
    assert capsys.readouterr().err.splitlines()[-1] == "envkit: a1: Pull complete"


def test_bytes_done_and_total_come_from_the_locks_sizes_and_cached_steps_count():
    from envkit.app.build import planned
    from tests.unit.lockfixtures import make_image

    image = make_image()
    image = image.model_copy(update={"packages": tuple(p.model_copy(update={"size": s}) for p, s in
                                                       zip(image.packages, (900_000_000, 600_000_000, 20_000_000)))})
    plan = planned(image)  # torch (framework), nvidia-cudnn-cu12 (cuda), numpy (extra)
    assert plan.total_bytes == 1_520_000_000 and plan.groups["cuda"] == ("nvidia-cudnn-cu12",)
    count = InstallCount.of(plan)
    count.step("RUN mkdir -p /tmp/envkit-uv && uv pip install -r /tmp/envkit/cuda.txt && rm -rf /tmp/envkit-uv")
    assert count.feed(" ---> Using cache") == "group"  # the CUDA layer came from the engine's cache
    assert count.words() == "packages 1/3, 0.60/1.52 GB"
    count.step("RUN mkdir -p /tmp/envkit-uv && uv pip install -r /tmp/envkit/framework.txt")
    assert count.feed(" + torch==2.5.1") == "package"
    assert count.feed(" + torch==2.5.1") == "package" and count.done == 2  # counted once
    assert count.words() == "packages 2/3, 1.50/1.52 GB"
    count.step("COPY requirements/extra.txt /tmp/envkit/extra.txt")
    assert count.feed(" ---> Using cache") is None  # not an install step
    # BuildKit: the vertex's name (its RUN line) before "cached"
    assert count.feed("[runtime 12/20] RUN --mount=type=bind,source=requirements/extra.txt,target=/tmp/envkit-extra.txt"
                      " uv pip install -r /tmp/envkit-extra.txt: cached") == "group"
    assert count.words() == "packages 3/3, 1.52/1.52 GB"


def test_a_lock_without_sizes_counts_packages_and_pips_downloads():
    count = InstallCount.of(Planned(2))
    count.feed("Collecting torch==2.5.1")
    assert count.words() == "packages 1/2, 0.00 GB downloaded"


def test_the_terminal_bar_fills_by_bytes(capsys):
    plan = Planned(2, {"torch": 900, "numpy": 100}, 1000, {"framework": ("torch",), "extra": ("numpy",)})
    with BuildView(Ctx(False, False, False), live=True) as view:
        view("torch25", plan)
        view("torch25", BuildEvent("step", "RUN uv pip install -r /tmp/envkit/framework.txt", 2, 3))
        view("torch25", BuildEvent("log", " + torch==2.5.1"))
        task = view.bars.tasks[view.installs["torch25"]]
        assert (task.completed, task.total, task.fields["unit"]) == (900, 1000, "bytes")
        assert "packages 1/2, 0.00/0.00 MB" in task.description


# --- push and pull: bytes per layer ------------------------------------------------------------
def test_the_engines_stream_gives_bytes_per_layer_and_status_lines():
    from envkit.registry.publish import _stream
    from envkit.support.progress import LayerBytes

    chunks = [{"status": "Pulling fs layer", "id": "a1", "progressDetail": {}},
              {"status": "Downloading", "id": "a1", "progressDetail": {"current": 100, "total": 400}},
              {"status": "Downloading", "id": "b2", "progressDetail": {"current": 50, "total": 100}},
              {"status": "Extracting", "id": "a1", "progressDetail": {"current": 400, "total": 400}},  # not a transfer
              {"status": "Downloading", "id": "a1", "progressDetail": {"current": 400, "total": 400}},
              {"status": "Pull complete", "id": "a1"},
              {"status": "latest: digest: sha256:" + "f" * 64 + " size: 528"}]
    lines, moved = [], []
    assert _stream(chunks, lines.append, transfer=moved.append) == "sha256:" + "f" * 64
    assert moved == [LayerBytes("a1", 100, 400), LayerBytes("b2", 50, 100), LayerBytes("a1", 400, 400)]
    assert lines[:2] == ["a1: Pulling fs layer", "a1: Pull complete"] and len(lines) == 3


def test_a_log_gets_a_line_per_quarter_of_the_bytes():
    from envkit.support.progress import LayerBytes, transfer_lines

    said = []
    feed = transfer_lines(said.append, "[torch25] pushed")
    for current in (10, 20, 30, 60, 90, 100):
        feed(LayerBytes("a1", current * 10**7, 10**9))
    assert said == ["[torch25] pushed: 0.30/1.00 GB", "[torch25] pushed: 0.60/1.00 GB",
                    "[torch25] pushed: 0.90/1.00 GB", "[torch25] pushed: 1.00/1.00 GB"]


def test_a_pull_on_a_terminal_fills_by_bytes_once_sizes_are_known():
    from envkit.cli.progress import LayerView
    from envkit.support.progress import LayerBytes

    with LayerView(Ctx(False, False, False), "pull x", live=True) as view:
        view("a1: Pulling fs layer")
        view("b2: Pulling fs layer")
        task = view.bars.tasks[0]
        assert (task.completed, task.total) == (0, 2)  # no size yet: layers
        view.transfer(LayerBytes("a1", 300 * 10**6, 400 * 10**6))
        view.transfer(LayerBytes("b2", 50 * 10**6, 100 * 10**6))
        assert (task.completed, task.total, task.fields["unit"]) == (350 * 10**6, 500 * 10**6, "bytes")
        assert task.description == "pull x: layers 0/2, 350.00/500.00 MB"
        view("a1: Pull complete")  # a finished layer counts whole
        assert task.completed == 450 * 10**6 and task.description.startswith("pull x: layers 1/2, ")


# --- the base bootstrap ------------------------------------------------------------------------
DEBOOTSTRAP = """I: Retrieving InRelease
I: Checking Release signature
I: Retrieving Packages
I: Validating Packages
I: Resolving dependencies of required packages...
I: Retrieving adduser 3.134
I: Validating adduser 3.134
I: Retrieving apt 2.6.1
I: Validating apt 2.6.1
I: Retrieving libc6 2.36-9+deb12u9
I: Validating libc6 2.36-9+deb12u9
I: Chosen extractor for .deb packages: dpkg-deb
I: Extracting adduser...
I: Extracting apt...
I: Extracting libc6...
I: Installing core packages...
I: Unpacking required packages...
I: Unpacking adduser...
I: Unpacking apt...
I: Unpacking libc6:amd64...
I: Configuring required packages...
I: Configuring adduser...
I: Configuring apt...
I: Configuring libc6:amd64...
I: Unpacking the base system...
I: Base system installed successfully."""  # (the shape of bookworm minbase's 88 packages, three of them)


def test_debootstraps_lines_give_each_phase_against_the_packages_it_retrieved():
    from envkit.images.base import DebootstrapCount

    count = DebootstrapCount()
    phases = [p for p in (count.feed(line) for line in DEBOOTSTRAP.splitlines()) if p is not None]
    assert [(p.phase, p.done, p.total) for p in phases] == [
        ("retrieving", 1, None), ("retrieving", 2, None), ("retrieving", 3, None),
        ("extracting", 1, 3), ("extracting", 2, 3), ("extracting", 3, 3),
        ("unpacking", 1, 3), ("unpacking", 2, 3), ("unpacking", 3, 3),
        ("configuring", 1, 3), ("configuring", 2, 3), ("configuring", 3, 3)]


def test_the_bootstrap_is_a_bar_on_a_terminal_and_a_line_per_phase_elsewhere(capsys):
    from envkit.images.base import DebootstrapCount

    count = DebootstrapCount()
    phases = [p for p in (count.feed(line) for line in DEBOOTSTRAP.splitlines()) if p is not None]
    with BuildView(Ctx(False, False, False), live=False) as view:
        for phase in phases:
            view("torch25", phase)
    assert capsys.readouterr().err.splitlines() == [
        "envkit: [torch25] bootstrap: retrieving 1 packages",
        "envkit: [torch25] bootstrap: extracting 1/3 packages", "envkit: [torch25] bootstrap: extracting 3/3 packages",
        "envkit: [torch25] bootstrap: unpacking 1/3 packages", "envkit: [torch25] bootstrap: unpacking 3/3 packages",
        "envkit: [torch25] bootstrap: configuring 1/3 packages",
        "envkit: [torch25] bootstrap: configuring 3/3 packages"]
    with BuildView(Ctx(False, False, False), live=True) as view:
        for phase in phases[:5]:
            view("torch25", phase)
        task = view.bars.tasks[view.phases["torch25 bootstrap"]]
        assert (task.completed, task.total) == (2, 3)
        assert task.description == r"\[torch25] bootstrap: extracting 2/3 packages"  # (rich markup escaped)


def test_run_lines_hands_over_each_line_as_it_comes_and_leaves_no_file(tmp_path, monkeypatch):
    from envkit.support import procs

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    seen = []
    proc = procs.run_lines(["sh", "-c", "echo one; sleep 0.3; echo two >&2; printf three; exit 3"], seen.append,
                           poll=0.05)
    assert seen == ["one", "two", "three"] and proc.returncode == 3 and proc.stdout == "one\ntwo\nthree"
    assert list(tmp_path.iterdir()) == []  # its output file has no name (a killed envkit leaves none behind)


def test_the_nightlys_log_says_a_bootstrap_phase_as_it_starts_and_ends():
    from envkit.app.nightly import _say
    from envkit.images.base import DebootstrapCount

    count = DebootstrapCount()
    said = []
    for line in DEBOOTSTRAP.splitlines():
        if (phase := count.feed(line)) is not None:
            _say(said.append, "torch25", phase)
    _say(said.append, "torch25", BuildEvent("step", "FROM base", 1, 3))
    assert said[:3] == ["[torch25] bootstrap: retrieving 1 packages", "[torch25] bootstrap: extracting 1/3 packages",
                        "[torch25] bootstrap: extracting 3/3 packages"]
    assert len(said) == 8 and said[-1] == "[torch25] FROM base"
