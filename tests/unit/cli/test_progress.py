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
    assert count.feed(" ---> Using cache") == "package"  # the CUDA layer came from the engine's cache
    assert count.words() == "packages 1/3, 0.60/1.52 GB"
    count.step("RUN mkdir -p /tmp/envkit-uv && uv pip install -r /tmp/envkit/framework.txt")
    assert count.feed(" + torch==2.5.1") == "package"
    assert count.feed(" + torch==2.5.1") == "package" and count.done == 2  # counted once
    assert count.words() == "packages 2/3, 1.50/1.52 GB"
    count.step("COPY requirements/extra.txt /tmp/envkit/extra.txt")
    assert count.feed(" ---> Using cache") is None  # not an install step
    # BuildKit: the vertex's name (its RUN line) before "cached"
    assert count.feed("[runtime 12/20] RUN --mount=type=bind,source=requirements/extra.txt,target=/tmp/envkit-extra.txt"
                      " uv pip install -r /tmp/envkit-extra.txt: cached") == "package"
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
