"""The arm registry: a new arm is one unit plus one registration, and the stages' slot."""

from collections.abc import Iterator

import numpy as np
import pytest

from serving.access import Requester
from serving.arms import ARMS, Arm
from serving.context import QueryContext
from serving.engine import SearchEngine
from serving.fusion import FusionConfig
from serving.models import SearchHit, SearchRequest
from serving.ranking import ArmRanking, FusedHit
from serving.stages import STAGES, Stage
from slackquery.evaluation.grid import ARM_AXES, WEIGHT_AXES
from slackquery.settings import Settings

from .slack_export import ACME, message_id

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


def lexical_scores(engine: SearchEngine, request: SearchRequest, **kwargs: object) -> dict:
    return {hit.document_id: hit.lexical.score for hit in engine.search(request, **kwargs).results}


def test_a_reply_is_found_by_its_roots_words_at_the_root_field_weight(
    engine: SearchEngine,
) -> None:
    # Only the thread's root says "payments"; its four replies answer it in other words.
    payments = SearchRequest(query="payments", mode="lexical", limit=20)
    whole_threads = FusionConfig(max_per_thread=10)
    scores = lexical_scores(engine, payments, fusion=whole_threads)
    root, replies = message_id(0), [message_id(index) for index in range(1, 5)]
    assert list(scores) == [root, *replies]
    weight = FusionConfig().root_field_weight
    assert 0 < weight < 1
    for reply in replies:
        assert scores[reply] == pytest.approx(weight * scores[root], rel=1e-6)
    off = FusionConfig(max_per_thread=10, root_field_weight=0)
    assert list(lexical_scores(engine, payments, fusion=off)) == [root]
    # A reply's own words and its root's add up: "pool" is in reply 1 only.
    both = lexical_scores(engine, SearchRequest(query="payments pool", mode="lexical"))
    alone = lexical_scores(engine, SearchRequest(query="pool", mode="lexical"))
    assert both[message_id(1)] == pytest.approx(
        alone[message_id(1)] + weight * scores[root], rel=1e-6
    )


def test_a_root_lends_its_words_only_to_replies_the_query_may_rank(engine: SearchEngine) -> None:
    narwhal = SearchRequest(query="narwhal", mode="lexical")
    root, reply = message_id(41, "G1"), message_id(42, "G1")
    bob, chen = Requester("U2", ACME), Requester("U3", ACME)  # Bob is in the private channel
    assert list(lexical_scores(engine, narwhal, requester=bob)) == [root, reply]
    assert lexical_scores(engine, narwhal, requester=chen) == {}
    # Filters apply to the reply: a root they exclude (Bob wrote the reply, not the root)
    # still lends its words to a reply that matches on its own.
    by_bob = lexical_scores(
        engine, SearchRequest(query="narwhal launch", mode="lexical", author_ids=["U2"])
    )
    launch = lexical_scores(engine, SearchRequest(query="launch", mode="lexical"))
    root_alone = lexical_scores(engine, narwhal)[root]  # the operator's idf, as above
    weight = FusionConfig().root_field_weight
    assert list(by_bob) == [reply]
    assert by_bob[reply] == pytest.approx(launch[reply] + weight * root_alone, rel=1e-6)
