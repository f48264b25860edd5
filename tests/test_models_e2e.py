"""Whole models (tests/models.py) through the compiler: the generated C,
built with the host compiler, against onnxruntime on several seeded inputs,
plus the memory plan's invariants and the graph rewrites the models rely on
(BatchNorm folding, activation fusion)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import models
from cuvil_mcu.compiler import compile_model
from cuvil_mcu.sim import host
from helpers import run_ort

SAMPLES = 3


def _inputs(c, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((SAMPLES, *c.graph.tensors[n].shape)).astype(np.float32)
            for n in c.graph.inputs]


@pytest.fixture(scope="module", params=sorted(models.ALL))
def compiled(request):
    model = models.ALL[request.param](seed=0)
    c = compile_model(model, verify_each=True)
    g = c.graph
    exe = host.build(c.header, c.prefix, [g.tensors[n].nbytes for n in g.inputs],
                     [g.tensors[n].nbytes for n in g.outputs])
    return request.param, model, c, exe


def test_matches_onnxruntime(compiled):
    """max |C - onnxruntime| <= 1e-4 * max(1, range of the output), per
    output, on SAMPLES inputs run back to back through one arena."""
    name, model, c, exe = compiled
    xs = _inputs(c, seed=1)
    c_out = host.run(exe, xs, c.out_specs, SAMPLES)
    for s in range(SAMPLES):
        feeds = {n: x[s] for n, x in zip(c.graph.inputs, xs)}
        ref = run_ort(model, feeds)
        assert len(ref) == len(c_out)
        for i, (r, y) in enumerate(zip(ref, c_out)):
            y = y[s]
            assert y.shape == r.shape, f"{name} output {i}: shape {y.shape} != {r.shape}"
            tol = 1e-4 * max(1.0, float(np.max(r) - np.min(r)))
            err = np.abs(y.astype(np.float64) - r.astype(np.float64))
            worst = int(np.argmax(err))
            assert err.max() <= tol, (
                f"{name} sample {s} output {i}: max error {err.max():.3g} > {tol:.3g} at flat index "
                f"{worst}: C {y.reshape(-1)[worst]!r}, onnxruntime {r.reshape(-1)[worst]!r}")


def test_plan_bounds(compiled):
    """lower bound <= arena <= every buffer side by side, and no two buffers
    that are live at the same step share a byte."""
    name, _, c, _ = compiled
    p = c.plan
    total = sum(b.size for b in p.buffers)
    assert p.lower_bound <= p.arena_size <= total, (
        f"{name}: arena {p.arena_size} outside [lower bound {p.lower_bound}, sum of buffers {total}]")
    bufs = [b for b in p.buffers if b.size]
    for i, a in enumerate(bufs):
        oa = p.offsets[a.name]
        assert oa % a.align == 0, f"{name}: buffer {a.name} misaligned at {oa}"
        assert oa + a.size <= p.arena_size, f"{name}: buffer {a.name} ends past the arena"
        for bb in bufs[i + 1:]:
            ob = p.offsets[bb.name]
            live_together = a.first <= bb.last and bb.first <= a.last
            share_bytes = oa < ob + bb.size and ob < oa + a.size
            assert not (live_together and share_bytes), (
                f"{name}: {a.name} [{oa}, {oa + a.size}) steps {a.first}..{a.last} overlaps "
                f"{bb.name} [{ob}, {ob + bb.size}) steps {bb.first}..{bb.last}")


def test_tensor_sizes_cover_buffers(compiled):
    """Every run-time tensor fits its buffer, so the plan's sizes come from the
    graph's real tensors."""
    name, _, c, _ = compiled
    g, p = c.graph, c.plan
    size_of = {b.name: b.size for b in p.buffers}
    for t, off in p.tensor_offset.items():
        owner = next(b for b in p.buffers if t in b.members)
        assert g.tensors[t].nbytes <= size_of[owner.name], f"{name}: tensor {t} larger than its buffer"
        assert off == p.offsets[owner.name]


@pytest.mark.parametrize("name", ["dscnn", "mobilenet"])
def test_batchnorm_folded_and_activations_fused(name):
    model = models.ALL[name](seed=0)
    src = [n.op_type for n in model.graph.node]
    c = compile_model(model, verify_each=True)
    left = [f"{n.name} ({n.op_type})" for n in c.graph.nodes
            if n.op_type in ("BatchNormalization", "Relu", "Clip")]
    assert left == [], f"{name}: not folded/fused: {left}"
    # Every BN and activation of the model is recorded as folded into a kernel.
    fused = Counter(f.split(" ", 1)[0] for n in c.graph.nodes for f in n.fused)
    for op in ("BatchNormalization", "Relu", "Clip"):
        assert fused[op] == src.count(op), f"{name}: {fused[op]} {op} fused, the model has {src.count(op)}"
    assert c.op_counts["Conv"] == src.count("Conv")


def test_dscnn_is_the_shipped_shape():
    """The example-model builder keeps its interface (input 1x1x49x10, 12
    class probabilities) and is deterministic in its seed."""
    a, b, other = models.dscnn(seed=0), models.dscnn(seed=0), models.dscnn(seed=1)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != other.SerializeToString()
    dims = [d.dim_value for d in a.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 1, 49, 10]
    assert [d.dim_value for d in a.graph.output[0].type.tensor_type.shape.dim] == [1, 12]
