"""Two realistic team stacks resolved against the live index, built on the real engine and verified.

nlp:    torch 2.5 + transformers + torchaudio: the payload imports both (torchaudio loads its compiled
        extension, which fails when it was built against another torch), then a tiny BERT made in the test
        runs a forward and a backward pass inside the image.
vision: torch 2.5 + torchvision + lightning: the payload imports them (torchvision's compiled ops).

Both use the example team's base and torch release, so on an engine that built examples/team.yaml the
framework layer is usually reused (when the joint solve pins the framework's closure as the example's lock
does) and only the extras are installed. The images (and the classic builder's stage images) are removed.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from envkit.labels import TEAM_LABEL

from .conftest import envkit

pytestmark = [pytest.mark.integration, pytest.mark.network]

SPEC = """\
version: 1
team: stacks
fleet:
  min_driver: "550.54.15"
  gpus: [A100, H100, L40S]
defaults:
  base:
    bootstrap: {suite: bookworm, mirror: "http://deb.debian.org/debian"}
images:
  - name: nlp
    framework: "torch==2.5.*"
    pip: ["transformers==4.*", "torchaudio"]
  - name: vision
    framework: "torch==2.5.*"
    pip: ["torchvision", "lightning"]
"""

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
    work = tmp_path_factory.mktemp("stacks")
    spec = work / "team.yaml"
    spec.write_text(SPEC)
    try:
        proc = envkit("build", spec, "--out", work / "out", "--json", check=True)
        yield spec, json.loads(proc.stdout)
    finally:
        for image in engine.client.images.list(filters={"label": f"{TEAM_LABEL}=stacks"}):
            engine.client.images.remove(image.id, force=True)


def test_both_stacks_build_and_verify(stacks):
    _, doc = stacks
    assert {i["name"]: i["status"] for i in doc["images"]} == {"nlp": "verified", "vision": "verified"}, doc


def test_the_companions_are_the_ones_paired_with_torch(stacks):
    spec, _ = stacks
    lock = json.loads(spec.with_suffix(".lock").read_text())
    versions = {i["name"]: {p["name"]: p["version"] for p in i["packages"]} for i in lock["images"]}
    assert versions["nlp"]["torch"] == versions["vision"]["torch"] == "2.5.1"
    assert versions["nlp"]["torchaudio"].startswith("2.5.") and versions["vision"]["torchvision"].startswith("0.20.")
    assert {i["name"]: i["requested"] for i in lock["images"]} == {"nlp": ["transformers", "torchaudio"],
                                                                  "vision": ["torchvision", "lightning"]}


def test_a_tiny_transformer_trains_a_step_inside_the_image(stacks):
    _, doc = stacks
    tag = next(i["tag"] for i in doc["images"] if i["name"] == "nlp")
    proc = envkit("run", tag, "--no-gpus", "--", "python3", "-c", TINY_BERT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("tiny-bert 4.") and proc.stdout.split()[-1] == "4", proc.stdout
