"""read_df: the engine walks one disk usage at a time; the others are told to ask again (pure logic: a fake client)."""

import docker.errors
import pytest

from envkit.engine.docker_df import read_df

BUSY = docker.errors.APIError("409 Client Error", explanation="a disk usage operation is already running")


class Client:
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    def df(self):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self):
        self.now = 0.0
        self.slept = []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


def test_a_busy_engine_is_asked_again_until_its_walk_ends():
    clock = Clock()
    client = Client([BUSY, BUSY, {"LayersSize": 7}])
    assert read_df(client, sleep=clock.sleep, clock=lambda: clock.now) == {"LayersSize": 7}
    assert client.calls == 3 and clock.slept == [0.2, 0.4]


def test_another_refusal_is_raised_at_once():
    other = docker.errors.APIError("500 Server Error", explanation="no space left on device")
    clock = Clock()
    with pytest.raises(docker.errors.APIError, match="500"):
        read_df(Client([other]), sleep=clock.sleep, clock=lambda: clock.now)
    assert clock.slept == []


def test_a_walk_that_outlasts_the_patience_raises_the_busy_answer():
    clock = Clock()
    client = Client([BUSY] * 100)
    with pytest.raises(docker.errors.APIError) as caught:
        read_df(client, patience=10, sleep=clock.sleep, clock=lambda: clock.now)
    assert "already running" in str(caught.value.explanation) and clock.now <= 10


def test_an_empty_answer_is_an_empty_usage():
    assert read_df(Client([None])) == {}
