"""The replay buffer both trainers share (replay.py): bounded, and drawing with the
caller's generator exactly as each trainer drew before it was shared."""

from __future__ import annotations

import random

import numpy as np

from langchain_membrain.students.replay import ReplayBuffer


def test_the_buffer_keeps_the_latest_examples():
    buf = ReplayBuffer(3)
    buf.extend(range(5))
    assert len(buf) == 3 and list(buf.items) == [2, 3, 4]


def test_a_python_generator_draws_as_random_sample_of_the_buffer():
    buf = ReplayBuffer(10)
    buf.extend(range(7))
    assert buf.sample(4, random.Random(5)) == random.Random(5).sample(list(range(7)), 4)
    assert buf.sample(20, random.Random(5)) == random.Random(5).sample(list(range(7)), 7)


def test_a_numpy_generator_draws_as_choice_without_replacement():
    buf = ReplayBuffer(10)
    buf.extend(range(7))
    picks = np.random.default_rng(2).choice(7, 4, replace=False)
    assert buf.sample(4, np.random.default_rng(2)) == [int(i) for i in picks]


def test_an_empty_buffer_draws_nothing_from_the_generator():
    rng, untouched = random.Random(1), random.Random(1)
    assert ReplayBuffer(4).sample(3, rng) == [] and rng.random() == untouched.random()
    gen = np.random.default_rng(1)
    assert ReplayBuffer(4).sample(3, gen) == [] and gen.random() == np.random.default_rng(1).random()
