"""No change in behaviour: the decisions and the generated CUDA of the CI cases of
schedule_snapshot.py (the Qwen3 layer at 1, 512 and 3000 tokens, the running example and the
Llama-3.2-1B layer, on sm_80, sm_90 and sm_90a) match the committed digests."""

from __future__ import annotations

import pytest

from schedule_snapshot import CI_CASES, load_fixture, run_cases


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    return run_cases(CI_CASES, tmp_path_factory.mktemp("models"))


@pytest.mark.parametrize("case", CI_CASES, ids=lambda c: c.name)
def test_decisions_and_cuda_unchanged(case, snapshot):
    want = load_fixture()[case.name]
    assert snapshot[case.name] == want, f"{case.name}: digests changed (regenerate by hand only for a deliberate change)"
