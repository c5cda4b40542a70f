"""Two realistic team stacks of the corpus (tests/network/corpus) resolved against the live index, built on
the real engine and verified.

nlp:              torch 2.5 + transformers + torchaudio: the payload imports both (torchaudio loads its
                  compiled extension, which fails when it was built against another torch), then a tiny BERT
                  made in the test runs a forward and a backward pass inside the image.
vision-lightning: torch 2.5 + torchvision + lightning: the payload imports them (torchvision's compiled ops).

Both use the example team's base and torch release (the framework layer is shared with the example's image
only when the joint solve pins the framework's closure as the example's lock does; not measured). The images
(and the classic builder's stage images) are removed.
"""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest

from envkit.support.labels import TEAM_LABEL

from .conftest import ROOT, envkit

pytestmark = [pytest.mark.integration, pytest.mark.network]

CORPUS = ROOT / "tests" / "network" / "corpus"
STACKS = ("nlp", "vision-lightning")  # the corpus's specs (tests/network/test_corpus.py resolves them too)

TINY_BERT = textwrap.dedent("""
    import torch, transformers
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64)
    model = transformers.BertForSequenceClassification(config)
    ids = torch.randint(0, 100, (4, 16))
    out = model(input_ids=ids, labels=torch.tensor([0, 1, 0, 1]))
    out.loss.backward()
    print("tiny-bert", transformers.__version__, round(float(out.loss), 3), out.logits.shape[0])
""")


@pytest.fixture(scope="module")
def stacks(engine, tmp_path_factory):
    """Each corpus spec copied beside its own lock and built (`envkit build --json`): {stack: (lock, image doc)}."""
    work = tmp_path_factory.mktemp("stacks")
    built = {}
    try:
        for name in STACKS:
            spec = work / f"{name}.yaml"
            shutil.copyfile(CORPUS / f"{name}.yaml", spec)
            proc = envkit("build", spec, "--out", work / "out", "--json", check=True)
            (image,) = json.loads(proc.stdout)["images"]
            built[name] = (json.loads(spec.with_suffix(".lock").read_text())["images"][0], image)
        yield built
    finally:
        for image in engine.client.images.list(filters={"label": f"{TEAM_LABEL}=corpus"}):
            engine.client.images.remove(image.id, force=True)


def test_both_stacks_build_and_verify_importing_what_they_asked_for(stacks):
    for name, (locked, image) in stacks.items():
        assert image["status"] == "verified", (name, image)
        checks = {c["name"]: c for c in image["verification"]["checks"]}
        check = checks["requested_imports"]
        assert check["status"] == "passed", check
        assert {e["name"]: e["status"] for e in check["value"]} == {n: "ok" for n in locked["requested"]}, check


def test_the_companions_are_the_ones_paired_with_torch(stacks):
    versions = {name: {p["name"]: p["version"] for p in locked["packages"]} for name, (locked, _) in stacks.items()}
    assert versions["nlp"]["torch"] == versions["vision-lightning"]["torch"] == "2.5.1"
    assert versions["nlp"]["torchaudio"].startswith("2.5.")
    assert versions["vision-lightning"]["torchvision"].startswith("0.20.")
    assert stacks["nlp"][0]["requested"] == ["transformers", "torchaudio"]


def test_a_tiny_transformer_trains_a_step_inside_the_image(stacks):
    tag = stacks["nlp"][1]["tag"]
    proc = envkit("run", tag, "--no-gpus", "--", "python3", "-c", TINY_BERT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("tiny-bert 4.") and proc.stdout.split()[-1] == "4", proc.stdout
