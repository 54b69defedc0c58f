"""The unit-of-privacy sentence of a meta-analysis under the record unit.

The paper's protocol states "every client holds at least min_records = m records": there
``min_records`` is a setting, the public lower bound its noise is calibrated to. The
meta-analysis' designs publish every silo's own record count instead (each node's first
reply) and are calibrated on those counts: the silo summaries always, the secure sums when no
``min_records`` is stated. Their results, the Flower document and what ``fa-hetdp run`` prints
once said "every client holds at least min_records = <the smallest count>", a setting no one
had made; they now say that every count is public, and which is the smallest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context
from test_dropin import (
    FEATURES,
    SEED,
    fast_poll,  # noqa: F401  (the autouse fixture: no poll wait)
    make_grid,
    partition_configs,
    server_context,
)
from test_flower_helpers import run_config
from test_meta_flower import RECORDS, our_grid, run_meta, silos_file

import fa_hetdp
from fa_hetdp.protocol.guarantee import (
    PUBLIC_COUNTS_UNIT_OF_PRIVACY,
    RECORD_UNIT_OF_PRIVACY,
    unit_of_privacy,
)
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis

COUNTS = (40, 25, 60, 33)  # the smallest silo: 25 records


def _federation() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    ids = np.repeat(np.arange(len(COUNTS)), COUNTS)
    return rng.uniform(size=(ids.size, 3)), ids


def _public(m: int) -> str:
    return PUBLIC_COUNTS_UNIT_OF_PRIVACY.format(m=m)


def test_the_two_record_sentences_differ_only_in_what_is_public() -> None:
    stated, public = unit_of_privacy("record", min_records=20), unit_of_privacy("record", 25)
    assert stated == RECORD_UNIT_OF_PRIVACY.format(m=20)  # the paper's, unchanged
    assert "every client holds at least min_records = 20 records" in stated
    assert public == _public(25) and "min_records" not in public
    assert "every client's record count public (the smallest: 25 records)" in public
    for sentence in (stated, public):
        assert sentence.startswith("one record of one client; replace-one neighbouring")
        assert sentence.endswith("protected only as a group (k times the GDP mu)")
    with pytest.raises(ValueError, match="'record' with min_records"):
        unit_of_privacy("record")


@pytest.mark.parametrize("design", ["silo-summaries", "secure-sums"])
def test_a_meta_analysis_without_min_records_states_the_public_counts(design: str) -> None:
    x, ids = _federation()
    res = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=1e-5, rng=3, privacy_unit="record", design=design
    )
    assert res.design == design
    assert res.unit_of_privacy == _public(min(COUNTS))
    assert "min_records" not in res.unit_of_privacy


def test_secure_sums_at_a_stated_min_records_name_it() -> None:
    x, ids = _federation()
    res = fa_hetdp.private_meta_analysis(
        x, ids, epsilon=1.0, delta=1e-5, rng=3, privacy_unit="record", design="secure-sums",
        min_records=20,
    )  # fmt: skip
    assert res.unit_of_privacy == RECORD_UNIT_OF_PRIVACY.format(m=20)


def test_a_drop_in_meta_measurement_without_min_records_states_the_public_counts() -> None:
    parts = np.split(np.arange(sum(COUNTS)), np.cumsum(COUNTS)[:-1])

    def records(context: Context) -> np.ndarray:
        return np.asarray(FEATURES[parts[int(context.node_config["partition-id"])]])

    configs = partition_configs(len(COUNTS), **{"privacy-unit": "record"})
    result = fa_hetdp.flower.measure(
        make_grid(records, configs), server_context(), epsilon=1.0, delta=1e-5, seed=SEED,
        analysis="meta", privacy_unit="record", design="secure-sums",
    )  # fmt: skip
    assert isinstance(result, PrivateMetaAnalysis) and result.design == "secure-sums"
    assert sorted(int(m) for m in result.records_per_client) == sorted(COUNTS)
    assert result.unit_of_privacy == _public(min(COUNTS))


def test_fa_hetdp_run_prints_the_public_counts_for_a_silo_summaries_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.run import RunSetup, print_result

    config = run_config(tmp_path, silos_file(tmp_path, design="silo-summaries"))
    _, document = run_meta(config, our_grid(config))
    assert document["status"] == "success" and document["design"] == "silo-summaries"
    privacy: dict[str, Any] = document["privacy"]
    assert privacy["unit_of_privacy"] == _public(RECORDS)
    assert privacy["guarantee"]["unit_of_privacy"] == _public(RECORDS)
    print_result(RunSetup("silos-small", 4, {}, {}, dim=6, analysis="meta"), document)
    out = capsys.readouterr().out
    assert f"unit of privacy: {_public(RECORDS)}" in out
    assert "min_records" not in out
