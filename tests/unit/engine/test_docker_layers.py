"""``docker history``'s rows matched to an image's layers (``engine.docker_layers.matched``): the history has a row
per step and does not say which made a layer."""

from envkit.engine.docker_layers import EMPTY_TAR, matched

A, B, C = (f"sha256:{c * 64}" for c in "abc")


def test_as_many_rows_as_layers_are_the_layers_sizes():
    assert matched([A, B], [120, 0]) == (120, 0)


def test_steps_without_a_layer_are_the_rows_without_bytes():
    # FROM (a layer), ENV, LABEL, RUN (a layer), CMD: lowest first
    assert matched([A, B], [120, 0, 0, 3000, 0]) == (120, 3000)


def test_an_empty_layer_is_zero_bytes_where_it_stands():
    assert matched([A, EMPTY_TAR, B], [120, 0, 0, 3000]) == (120, 0, 3000)


def test_rows_that_cannot_be_told_apart_give_no_sizes():
    assert matched([A, B, C], [120, 0, 0, 3000]) is None  # which zero row is C's?
    assert matched([A], [120, 5, 0]) is None
