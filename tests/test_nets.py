"""nets.py runs the networks of models.py in numpy (a process that does not train never
imports torch): the same logits, to float32 rounding, for every network and shape; and
torchfile.py reads and writes the checkpoints torch reads and writes."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from langchain_membrain.students import features as ft
from langchain_membrain.students import nets, torchfile
from langchain_membrain.students.features import Stage1Features, Stage2Features
from langchain_membrain.students.models import (
    OperationNet,
    Stage1Net,
    Stage2Net,
    collate_stage1,
    collate_stage2,
)
from langchain_membrain.students.nets import ModelConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def randomised(net: torch.nn.Module, seed: int) -> dict[str, np.ndarray]:
    """Give every parameter random values of a trained network's scale; its state as numpy."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return {k: v.numpy().copy() for k, v in net.state_dict().items()}


def stage1_example(rng: np.random.Generator, cfg: ModelConfig, T: int, n_cand: int) -> Stage1Features:
    return Stage1Features(rng.normal(size=(T, cfg.dim)).astype(np.float32),
                          rng.normal(size=(T, cfg.dim)).astype(np.float32),
                          rng.integers(0, len(ft.KINDS), T), rng.integers(0, len(ft.ROLES), T),
                          rng.normal(size=(T, cfg.stage1_num)).astype(np.float32), n_cand)


def stage2_example(rng: np.random.Generator, cfg: ModelConfig, n: int, a: int, promote: bool) -> Stage2Features:
    T = 2 + n + a + 2
    return Stage2Features(rng.normal(size=(T, cfg.dim)).astype(np.float32),
                          rng.normal(size=(T, cfg.dim)).astype(np.float32),
                          rng.integers(0, len(ft.KINDS), T), rng.integers(0, len(ft.ROLES), T),
                          rng.normal(size=(T, cfg.stage2_num)).astype(np.float32), [f"n{i}" for i in range(T)],
                          np.arange(2, 2 + n), np.arange(2 + n, 2 + n + a),
                          rng.normal(size=(n, a, cfg.demote_pair_num)).astype(np.float32),
                          rng.normal(size=(n, n, cfg.group_pair_num)).astype(np.float32),
                          "n2", "n1", "n0" if promote else None)


@pytest.mark.parametrize("layers", [1, 2])
def test_placement_networks_in_numpy_compute_the_torch_logits(layers):
    cfg = ModelConfig(dim=48, layers=layers)
    rng = np.random.default_rng(layers)
    s1, s2 = Stage1Net(cfg).eval(), Stage2Net(cfg).eval()
    w1, w2 = randomised(s1, 1), randomised(s2, 2)
    assert {k: v.shape for k, v in w1.items()} == nets.parameter_shapes(cfg, "stage1")
    assert list(w1) == list(nets.parameter_shapes(cfg, "stage1"))
    assert {k: v.shape for k, v in w2.items()} == nets.parameter_shapes(cfg, "stage2")
    with torch.no_grad():
        for T, n_cand in ((2, 1), (5, 3), (40, 32)):
            f = stage1_example(rng, cfg, T, n_cand)
            want = s1(collate_stage1([f]))[0].numpy()
            np.testing.assert_allclose(nets.stage1_logits(w1, cfg, f), want, rtol=1e-4, atol=1e-4)
        for n, a, promote in ((1, 0, False), (1, 3, True), (4, 0, True), (6, 5, False)):
            f = stage2_example(rng, cfg, n, a, promote)
            want = [t[0].numpy() for t in s2(collate_stage2([f]))]
            got = nets.stage2_logits(w2, cfg, f)
            for g, w in zip(got, want):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_operation_network_in_numpy_computes_the_torch_logits():
    dim, k, n_flags, n_pair = 24, 5, 6, 5
    net = OperationNet(dim, k, n_flags, n_pair).eval()
    w = randomised(net, 3)
    assert {n: a.shape for n, a in w.items()} == nets.operation_shapes(dim, k, n_flags, n_pair)
    rng = np.random.default_rng(0)
    for present in (0, 2, 5):
        e = rng.normal(size=dim).astype(np.float32)
        flags = rng.random(n_flags).astype(np.float32)
        cands = rng.normal(size=(k, dim)).astype(np.float32)
        pairnum = rng.normal(size=(k, n_pair)).astype(np.float32)
        pairnum[:, -1] = np.arange(k) < present
        with torch.no_grad():
            want = net(*(torch.from_numpy(x)[None] for x in (e, flags, cands, pairnum)))[0].numpy()
        got = nets.operation_logits(w, e, flags, cands, pairnum)
        assert np.array_equal(np.isinf(got), np.isinf(want))
        np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-4, atol=1e-4)


def test_a_checkpoint_read_and_written_without_torch_is_what_torch_wrote():
    cfg = ModelConfig(dim=16)
    net = Stage1Net(cfg)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    net(collate_stage1([stage1_example(np.random.default_rng(0), cfg, 4, 2)])).sum().backward()
    opt.step()
    state = {"format": 1, "net": net.state_dict(), "opt": opt.state_dict(), "rows": [[-1.5, 2.0, 1]],
             "t": (0.5, None, True), "name": "é"}
    buf = io.BytesIO()
    torch.save(state, buf)
    read = torchfile.load(buf.getvalue())
    assert isinstance(read["net"]["encoder.text.weight"], np.ndarray)
    assert read["opt"]["state"][0]["step"].shape == ()  # a 0-d tensor stays 0-d
    assert read["net"]._metadata == state["net"]._metadata
    back = torch.load(io.BytesIO(torchfile.save(read)), weights_only=True)

    def same(a, b):
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        elif isinstance(a, dict):
            assert type(a) is type(b) and list(a) == list(b)
            for key in a:
                same(a[key], b[key])
        elif isinstance(a, (list, tuple)):
            assert type(a) is type(b) and len(a) == len(b)
            for x, y in zip(a, b):
                same(x, y)
        else:
            assert type(a) is type(b) and a == b

    same(state, back)
    again = torch.optim.AdamW(net.parameters(), lr=1e-2)
    again.load_state_dict(back["opt"])  # what a trainer that builds torch later does


def test_what_torchfile_does_not_understand_is_refused():
    buf = io.BytesIO()
    torch.save({"x": torch.zeros(2, dtype=torch.float16)}, buf)
    with pytest.raises(torchfile.UnsupportedFile):
        torchfile.load(buf.getvalue())
    with pytest.raises(torchfile.UnsupportedFile):
        torchfile.load(b"not a zip")
