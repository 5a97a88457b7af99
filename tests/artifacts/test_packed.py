"""Packed string columns and the sorted-key lookups over them."""

import gc
import weakref

import pytest

from slackquery.artifacts import packed
from slackquery.artifacts.packed import PackedStrings, SortedKeys


def sorted_keys(count: int) -> SortedKeys:
    words = sorted(f"w{index:05d}" for index in range(count))
    return SortedKeys(PackedStrings(packed.pack("terms", words), "terms"))


def test_lookups_find_every_key_and_refuse_others_beyond_what_is_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(packed, "REMEMBERED_KEYS", 8)
    keys = sorted_keys(100)
    for _ in range(2):  # the second round reads what the first remembered, or forgot
        for index in range(100):
            assert keys[f"w{index:05d}"] == index
            assert f"x{index}" not in keys
    assert len(keys._found) <= 8


def test_an_unused_mapping_is_freed_without_the_garbage_collector() -> None:
    keys = sorted_keys(10)
    assert keys["w00003"] == 3
    gone = weakref.ref(keys)
    gc.disable()
    try:
        del keys
        assert gone() is None  # no reference cycle keeps it (and its maps) alive
    finally:
        gc.enable()
