"""Slice definitions and their deterministic, fingerprinted builds (gate.quality)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from gate.quality import vocab as V
from gate.quality.builders import build_row, build_rows
from gate.quality.datasets_io import build_slice, fingerprint
from gate.quality.spec import SliceSpec, load_slice, slice_names
from gate.quality.text import TextSpace, build_text_rows

SPACE = V.TokenSpace(vocab_size=128, max_len=512)
SLICES = ["code-closure", "local-control", "long-copy", "long-range-retrieval", "numbers"]


def test_every_issue_slice_is_defined() -> None:
    assert slice_names() == SLICES
    deps = {n: load_slice(n).dependency for n in SLICES}
    assert deps["local-control"] == "local" and list(deps.values()).count("long-range") == 4
    retrieval = load_slice("long-range-retrieval")
    assert retrieval.context_lengths[0] == 256 and retrieval.context_lengths[-1] == 8192
    assert retrieval.depths[0] == 0.0 and retrieval.depths[-1] == 1.0


def test_contexts_clip_to_the_model() -> None:
    spec = load_slice("long-range-retrieval")
    assert spec.lengths_for(512) == [256, 508]
    assert spec.lengths_for(100_000) == [256, 512, 1024, 2048, 4096, 8192]
    with pytest.raises(ValueError, match="no room"):
        spec.lengths_for(10)


@pytest.mark.parametrize("name", SLICES)
def test_rows_are_deterministic_nested_and_exact_length(name: str) -> None:
    spec = load_slice(name)
    rows = build_rows(spec, SPACE, seed=3, n=12)
    assert rows == build_rows(spec, SPACE, seed=3, n=12)
    assert build_rows(spec, SPACE, seed=3, n=5) == rows[:5]  # a top-up never changes judged rows
    assert build_rows(spec, SPACE, seed=4, n=12) != rows
    for row in rows:
        assert len(row.prompt) == row.context_len <= SPACE.max_len - spec.continuation
        assert len(row.answer) <= spec.continuation and row.answer
        assert all(0 <= t < SPACE.vocab_size for t in row.prompt + row.answer)
        assert row.prompt[0] == V.BOS


def test_retrieval_needle_is_unique_and_at_its_depth() -> None:
    spec = load_slice("long-range-retrieval")
    for i in range(10):
        row = build_row(spec, SPACE, 0, i)
        key, values = row.prompt[-1], row.answer
        assert row.prompt[row.evidence_at : row.evidence_at + 6] == [V.KEY, key, *values]
        assert row.prompt.count(key) == 2 and all(row.prompt.count(v) == 1 for v in values)
        free = row.context_len - 1 - 6 - 2
        assert row.evidence_at - 1 == round(row.depth * free)


def test_copy_span_is_far_and_local_span_is_near() -> None:
    far = build_row(load_slice("long-copy"), SPACE, 0, 1)  # 508-token context, depth 0
    near = build_row(load_slice("local-control"), SPACE, 0, 1)
    assert len(far.prompt) - far.evidence_at > 400
    assert len(near.prompt) - near.evidence_at <= 12
    assert far.prompt[far.evidence_at : far.evidence_at + 2] == far.prompt[-2:]  # the cue


def test_closure_answer_closes_the_named_scope() -> None:
    for i in range(6):
        row = build_row(load_slice("code-closure"), SPACE, 0, i)
        openers = [j for j, t in enumerate(row.prompt) if t in V.OPEN]
        assert len(openers) == 4 and not any(t in V.CLOSE for t in row.prompt)
        name = row.prompt[-1]
        opened = row.prompt.index(name)  # the name occurs once before its closing line
        assert row.prompt.count(name) == 2 and opened + 1 in openers
        assert row.answer == [V.CLOSE[V.OPEN.index(row.prompt[opened + 1])], V.NL]
        indent = len(row.prompt) - 1 - max(j for j, t in enumerate(row.prompt) if t == V.NL) - 1
        line = [V.NL, *[V.INDENT] * indent, name]
        assert row.prompt[-len(line) :] == line  # the closing line repeats the opening line's indent
        assert row.prompt[opened - indent - 1 : opened + 1] == line


def test_numbers_mix_recall_and_progression() -> None:
    rows = build_rows(load_slice("numbers"), SPACE, 0, 24)
    kinds = {r.kind for r in rows}
    assert kinds == {"digit-recall", "progression"}
    for r in rows:
        assert all(t in V.DIGITS for t in r.answer)
        if r.kind == "progression":
            terms = [V.DIGITS.index(t) for t in r.prompt[-8:] + r.answer]
            steps = {(b - a) % 10 for a, b in itertools.pairwise(terms)}
            assert len(steps) == 1


def test_build_is_saved_fingerprinted_and_reproducible(tmp_path: Path) -> None:
    spec = load_slice("local-control")
    a = build_slice(spec, SPACE, 0, 6, root=tmp_path / "a")
    b = build_slice(spec, SPACE, 0, 6, root=tmp_path / "b")
    assert a.fingerprint == b.fingerprint and a.fingerprint.startswith("sha256:")
    assert build_slice(spec, SPACE, 0, 6, root=tmp_path / "a").fingerprint == a.fingerprint  # cached
    assert build_slice(spec, SPACE, 1, 6, root=tmp_path / "a").fingerprint != a.fingerprint
    assert a.dataset.num_rows == 6 and list(a.dataset[0]["prompt"]) == build_row(spec, SPACE, 0, 0).prompt
    # tampering with the saved bytes changes the fingerprint
    arrow = next(a.path.glob("*.arrow"))
    arrow.write_bytes(arrow.read_bytes() + b"x")
    assert fingerprint(a.path) != a.fingerprint


def test_spec_validation() -> None:
    base = load_slice("local-control").model_dump(by_alias=True)
    with pytest.raises(ValueError):
        SliceSpec.model_validate({**base, "depths": [1.5]})
    with pytest.raises(ValueError):
        SliceSpec.model_validate({**base, "unknown": 1})


def test_small_vocab_is_refused() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        V.TokenSpace(vocab_size=40, max_len=512)


def test_text_space_uses_the_models_tokenizer() -> None:
    space = TextSpace(encode=lambda s: list(s.encode()), max_len=600, tokenizer_id="bytes", bos=(1,))
    for name in SLICES:
        spec = load_slice(name)
        rows = build_text_rows(spec, space, 0, 4)
        assert rows == build_text_rows(spec, space, 0, 4)
        for r in rows:
            assert r.prompt[0] == 1 and len(r.prompt) <= r.context_len
            assert r.prompt[1:] == list(r.prompt_text.encode()) and r.answer == list(r.answer_text.encode())
    retrieval = build_text_rows(load_slice("long-range-retrieval"), space, 0, 1)[0]
    code = retrieval.answer_text.strip(" .")
    assert f"is {code}." in retrieval.prompt_text
