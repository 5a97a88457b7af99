"""String columns as arrays that a reader can map instead of decoding one object per row.

A packed column `name` is three arrays: `<name>.bytes` (the UTF-8 of every value, one
after another), `<name>.offsets` (int64, value i is `bytes[offsets[i]:offsets[i + 1]]`)
and `<name>.nulls` (bool). A million Python strings cost ~50 bytes of object overhead each
and seconds to build; packed and mapped, a value is decoded only when it is read.
"""

from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from itertools import pairwise

import numpy as np

PARTS = {
    "bytes": np.dtype(np.uint8),
    "offsets": np.dtype(np.int64),
    "nulls": np.dtype(np.bool_),
}


def dtypes(name: str) -> dict[str, np.dtype]:
    """The array names and dtypes of the packed column `name`."""
    return {f"{name}.{part}": dtype for part, dtype in PARTS.items()}


def pack(name: str, values: Sequence[object]) -> dict[str, np.ndarray]:
    """The arrays of the packed column `name` holding `values` (None is a null)."""
    encoded = [b"" if value is None else str(value).encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    return {
        f"{name}.bytes": np.frombuffer(b"".join(encoded), dtype=np.uint8),
        f"{name}.offsets": offsets,
        f"{name}.nulls": np.fromiter((value is None for value in values), bool, len(values)),
    }


class PackedStrings(Sequence):
    """A read-only column of optional strings over its packed arrays (maps or in memory)."""

    def __init__(self, arrays: Mapping[str, np.ndarray], name: str):
        self._arrays = {part: arrays[f"{name}.{part}"] for part in PARTS}
        # Memoryviews, not the arrays: indexing one gives a Python int or bytes slice
        # directly, ~5x faster than NumPy scalars (a binary search reads ~20 values).
        self._data = memoryview(arrays[f"{name}.bytes"])
        self._offsets = memoryview(arrays[f"{name}.offsets"])
        self._nulls = memoryview(arrays[f"{name}.nulls"])
        if len(self._offsets) != len(self._nulls) + 1:
            raise ValueError(f"packed column {name} has offsets for another length")

    def __len__(self) -> int:
        return len(self._nulls)

    def __getitem__(self, row: int) -> str | None:  # type: ignore[override]
        if self._nulls[row]:
            return None
        return str(self._data[self._offsets[row] : self._offsets[row + 1]], "utf-8")

    def equals(self, start: int, values: Sequence[str]) -> np.ndarray:
        """Per value, whether row `start + i` holds it (False past the last row).

        One comparison of the rows' bytes and lengths when all are equal, as they are in
        a sound artifact; value by value otherwise, to say which differ.
        """
        count = max(0, min(len(values), len(self) - start))
        same = np.zeros(len(values), dtype=bool)
        encoded = [value.encode("utf-8") for value in values[:count]]
        offsets = self._arrays["offsets"][start : start + count + 1]
        if (
            not self._arrays["nulls"][start : start + count].any()
            and np.array_equal(np.fromiter(map(len, encoded), np.int64, count), np.diff(offsets))
            and b"".join(encoded) == self._data[offsets[0] : offsets[-1]].tobytes()
        ):
            same[:count] = True
        else:
            same[:count] = [self[start + i] == value for i, value in enumerate(values[:count])]
        return same

    def ascends_strictly(self) -> bool:
        """Whether the values ascend strictly, none null, compared as UTF-8 bytes (whose
        order is code point order) without decoding them."""
        if self._arrays["nulls"].any():
            return False
        data = self._data.tobytes()
        values = [data[start:end] for start, end in pairwise(self._arrays["offsets"].tolist())]
        return all(earlier < later for earlier, later in pairwise(values))


def is_strictly_ascending(values: Sequence[str]) -> bool:
    """Whether `values` ascend strictly (str order is code point order, the UTF-8 byte
    order DuckDB sorts by)."""
    if isinstance(values, PackedStrings):
        return values.ascends_strictly()
    return all(earlier < later for earlier, later in pairwise(values))


# Lookups a `SortedKeys` remembers (then it forgets them all and starts again): a query's
# words are looked up several times per search and common words in most searches (at 1M
# rows a binary search decodes ~20 packed values, ~20 µs).
REMEMBERED_KEYS = 4096


class SortedKeys(Mapping[str, int]):
    """Strictly ascending strings as a key -> index mapping, found by binary search: a
    lookup reads ~20 values of a million-row column instead of a dict of all of them."""

    def __init__(self, keys: Sequence[str]):
        self.keys_in_order = keys
        # A plain dict, not `lru_cache` on a method: that would be a reference cycle
        # holding an evicted artifact's maps open until the garbage collector ran.
        self._found: dict[str, int] = {}

    def _search(self, key: str) -> int:
        index = bisect_left(self.keys_in_order, key)
        if index < len(self.keys_in_order) and self.keys_in_order[index] == key:
            return index
        return -1

    def __getitem__(self, key: str) -> int:
        index = self._found.get(key)
        if index is None:
            index = self._search(key)
            if len(self._found) >= REMEMBERED_KEYS:
                self._found.clear()
            self._found[key] = index
        if index < 0:
            raise KeyError(key)
        return index

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_in_order)

    def __len__(self) -> int:
        return len(self.keys_in_order)
