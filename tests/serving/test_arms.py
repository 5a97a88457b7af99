"""The arm registry: a new arm is one unit plus one registration, and the stages' slot."""

from collections.abc import Iterator

import numpy as np
import pytest

from serving.arms import ARMS, Arm
from serving.context import QueryContext
from serving.engine import SearchEngine
from serving.fusion import FusionConfig
from serving.models import SearchHit, SearchRequest
from serving.ranking import ArmRanking, FusedHit
from serving.stages import STAGES, Stage
from slackquery.evaluation.grid import ARM_AXES, WEIGHT_AXES
from slackquery.settings import Settings

from .slack_export import message_id

PINNED = message_id(34)  # Zoë's 429 message


def rank_pinned(ctx: QueryContext) -> ArmRanking:
    """A toy arm: always votes for one message, if the query may see it."""
    row = np.array([ctx.artifact.row_of[PINNED]], dtype=np.int64)
    keep = ctx.eligible(row, kind=ctx.artifact.is_message)
    return ArmRanking(row[keep], np.ones(int(keep.sum()), dtype=np.float32))


TOY = Arm(
    "pinned",
    rank_pinned,
    {"exact": 5.0, "conceptual": 5.0, "mixed": 5.0},
    "Toy arm: the pinned message.",
)


@pytest.fixture
def toy_engine(published: Settings) -> Iterator[SearchEngine]:
    search_engine = SearchEngine(published, arms=(*ARMS, TOY))
    yield search_engine
    search_engine.close()


def test_a_registered_arm_is_fused_weighted_and_reported(toy_engine: SearchEngine) -> None:
    response = toy_engine.search(SearchRequest(query="staging disk full"))
    assert response.weights["pinned"] == 5.0
    top = response.results[0]
    assert top.document_id == PINNED
    assert top.pinned.rank == 1  # type: ignore[attr-defined]
    assert response.model_dump()["results"][0]["pinned"] == {"rank": 1, "score": 1.0}
    # Lexical mode is not among the toy's modes; disabling it by name removes it.
    assert "pinned" not in toy_engine.search(SearchRequest(query="disk", mode="lexical")).weights
    off = FusionConfig(disabled_arms=frozenset({"pinned"}))
    assert "pinned" not in toy_engine.search(SearchRequest(query="staging disk full"), off).weights


def test_the_arm_respects_filters_through_the_shared_mask(toy_engine: SearchEngine) -> None:
    response = toy_engine.search(SearchRequest(query="staging disk full", channel_ids=["#support"]))
    assert PINNED not in {hit.document_id for hit in response.results}


def test_everything_per_arm_is_derived_from_the_registry() -> None:
    names = [arm.name for arm in ARMS]
    assert [name for name in SearchHit.model_fields if name in names] == names
    assert set(ARM_AXES.values()) == set(names)
    assert {arm for _, arm in WEIGHT_AXES.values()} == set(names)
    for route in ("exact", "conceptual", "mixed"):
        assert set(FusionConfig().weights(route)) == set(names)


def test_a_stage_after_fusion_sees_every_hit(published: Settings) -> None:
    seen: list[int] = []

    def reverse(ctx: QueryContext, hits: list[FusedHit]) -> list[FusedHit]:
        seen.append(len(hits))
        return hits[::-1]

    plain = SearchEngine(published)
    reversed_engine = SearchEngine(published, stages=(*STAGES, Stage("reverse", reverse)))
    try:
        request = SearchRequest(query="staging disk full", limit=50)
        forward = [hit.document_id for hit in plain.search(request).results]
        backward = [hit.document_id for hit in reversed_engine.search(request).results]
    finally:
        plain.close()
        reversed_engine.close()
    assert seen == [len(forward)] and backward == forward[::-1]
