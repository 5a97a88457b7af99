"""Grid specs: inline, product, YAML files and the built-in standard sweep."""

from pathlib import Path

import pytest

from slackquery.errors import SlackqueryError
from slackquery.evaluation.grid import STANDARD_GRID, parse_grid
from slackquery.evaluation.runner import fusion_config


def test_sweep_varies_one_axis_at_a_time_with_the_default_first() -> None:
    points = parse_grid("rrf_k=10,60;arm.context=off")
    assert [p.name for p in points] == ["default", "rrf_k=10", "rrf_k=60", "arm.context=off"]
    assert points[0].is_default
    assert points[1].overrides == {"rrf_k": 10}
    assert points[3].overrides == {"arm.context": False}


def test_answer_cue_boost_axis_takes_numbers() -> None:
    points = parse_grid("answer_cue_boost=0,0.5,1")
    assert [p.name for p in points] == [
        "default",
        "answer_cue_boost=0",
        "answer_cue_boost=0.5",
        "answer_cue_boost=1",
    ]
    assert points[1].overrides == {"answer_cue_boost": 0.0}


def test_product_crosses_axes() -> None:
    points = parse_grid("product:rrf_k=10,60;route_aware=on,off")
    assert len(points) == 5
    assert points[-1].name == "rrf_k=60 route_aware=off"
    assert points[-1].overrides == {"rrf_k": 60, "route_aware": False}


def test_weights_are_named_by_arm_and_route() -> None:
    [_, point] = parse_grid("weight.conceptual.lexical=0.5")
    assert point.overrides == {"weight.conceptual.lexical": 0.5}
    assert point.name == "weight.conceptual.lexical=0.5"
    [_, everywhere] = parse_grid("weight.semantic=2")
    assert everywhere.overrides == {"weight.semantic": 2.0}


def test_grid_file(tmp_path: Path) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(
        "mode: product\naxes:\n  candidate_window: [50, 100]\n  weight.context: [0]\n",
        encoding="utf-8",
    )
    names = [p.name for p in parse_grid(str(path))]
    assert names == [
        "default",
        "candidate_window=50 weight.context=0",
        "candidate_window=100 weight.context=0",
    ]


def test_context_target_axis() -> None:
    points = parse_grid("context_target=root,Thread")
    assert [point.name for point in points] == [
        "default",
        "context_target=root",
        "context_target=thread",
    ]
    assert points[1].overrides == {"context_target": "root"}


def test_rerank_axis_names_a_registered_reranker() -> None:
    points = parse_grid("rerank=scores")
    assert points[1].overrides == {"rerank": "scores"}
    assert fusion_config(points[1]).rerank == "scores"
    with pytest.raises(SlackqueryError, match="rerank values must be one of none, scores"):
        parse_grid("rerank=cross-encoder")


def test_standard_grid_is_a_sweep() -> None:
    points = parse_grid("standard")
    assert points == parse_grid(STANDARD_GRID)
    assert len(points) == 1 + 4 + 4 + 2 + 4 + 2 + 2 + 2 + 2 + 3 + 2 + 2 + 2 + 2 + 1 + 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty grid spec"),
        ("rrf=10", "unknown axis 'rrf'"),
        ("rrf_k", "expected name=value"),
        ("rrf_k=0", "integers >= 1"),
        ("rrf_k=ten", "integers >= 1"),
        ("route_aware=maybe", "on or off"),
        ("answer_cue_boost=-0.5", "numbers >= 0"),
        ("answer_cue_boost=lots", "numbers >= 0"),
        ("root_field_weight=-1", "numbers >= 0"),
        ("root_field_weight=1e400", "finite numbers >= 0, got '1e400'"),
        ("answer_cue_boost=inf", "finite numbers >= 0, got 'inf'"),
        ("weight.lexical=nan", "finite numbers >= 0, got 'nan'"),
        ("context_target=middle", "one of best, root, thread"),
        ("weights=1:1:0", "unknown axis 'weights'"),
        ("weight.lexical=-1", "numbers >= 0"),
        ("weight.conceptual.nothing=1", "unknown axis"),
        ("arm.lexical=maybe", "on or off"),
        ("rrf_k=1;rrf_k=2", "given twice"),
        (
            "product:"
            + ";".join(f"{a}=1,2,3,4,5,6" for a in ("rrf_k", "candidate_window", "max_per_thread")),
            "more than 200",
        ),
        ("missing.yaml", "grid file not found"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(SlackqueryError, match=message):
        parse_grid(spec)


def test_a_grid_file_error_is_one_line(tmp_path: Path) -> None:
    malformed = tmp_path / "grid.yaml"
    malformed.write_text("axes:\n  rrf_k: [1\n", encoding="utf-8")
    with pytest.raises(SlackqueryError) as raised:
        parse_grid(str(malformed))
    assert str(raised.value) == f"{malformed}: not valid YAML at line 3"
    infinite = tmp_path / "infinite.yml"
    infinite.write_text("axes:\n  answer_cue_boost: [.inf]\n", encoding="utf-8")
    with pytest.raises(SlackqueryError, match="finite numbers >= 0, got inf"):
        parse_grid(str(infinite))
