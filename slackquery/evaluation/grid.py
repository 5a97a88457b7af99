"""Fusion parameter grids: a small spec language, expanded into named configurations.

A grid answers "which fusion setting helps, and by how much" with evidence, so the default
is always part of it and each configuration is named by what it changes. The spec is
either inline or a YAML file:

- inline: `rrf_k=10,30,60;arm.context=on,off` — axes separated by `;`, values by `,`.
  By default the grid is a *sweep*: each axis varies alone while every other setting keeps
  its default (one row per value, plus the default once). Prefix `product:` for the full
  cross product of all axes.
- YAML file (a path ending in `.yaml`/`.yml`): `{mode: sweep|product, axes: {name: [values]}}`.
- `standard`: the built-in sweep documented in docs/evaluation.md (`STANDARD_GRID`).

Axes: `rrf_k`, `candidate_window`, `max_per_thread` (integers >= 1), `answer_cue_boost`
and `root_field_weight` (finite numbers >= 0; 0 is off), `route_aware` (on/off, true/false),
`context_target` (best, root, thread), `rerank` (none, scores: serving/stages.py), and,
for every arm of the registry
(serving/arms.py), by its name: `arm.<arm>` (on/off: whether it runs), `weight.<arm>` (its
weight for every route) and `weight.<route>.<arm>` (its weight for one route: exact,
conceptual or mixed).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.arms import ARMS, CONTEXT_TARGETS, ROUTES, arm_names
from serving.fusion import RERANKERS
from slackquery.errors import SlackqueryError
from slackquery.evaluation.queries import read_yaml

INT_AXES = ("rrf_k", "candidate_window", "max_per_thread")
FLOAT_AXES = ("answer_cue_boost", "root_field_weight")
BOOL_AXES = ("route_aware",)
CHOICE_AXES = {"context_target": CONTEXT_TARGETS, "rerank": RERANKERS}
FIXED_AXES = (*INT_AXES, *FLOAT_AXES, *BOOL_AXES, *CHOICE_AXES)
# Axes derived from the arm registry, each mapped to the arm it concerns.
ARM_AXES = {f"arm.{name}": name for name in arm_names(ARMS)}
WEIGHT_AXES = {
    **{f"weight.{name}": (ROUTES, name) for name in arm_names(ARMS)},
    **{f"weight.{route}.{name}": ((route,), name) for route in ROUTES for name in arm_names(ARMS)},
}
AXES = (*FIXED_AXES, *ARM_AXES, *WEIGHT_AXES)
MAX_CONFIGS = 200

STANDARD_GRID = (
    "rrf_k=10,20,30,60;candidate_window=30,50,100,200;arm.context=on,off;"
    "answer_cue_boost=0,0.1,0.25,1;arm.aspects=on,off;arm.authors=on,off;arm.scope=on,off;"
    "arm.latest=on,off;"
    "context_target=best,root,thread;route_aware=on,off;"
    "weight.conceptual.lexical=0.5,1;weight.conceptual.context=0.5,0.65;"
    "weight.conceptual.aspects=1,1.5;weight.conceptual.authors=0.5;"
    "root_field_weight=0,0.5"
)

_TRUE = {"on", "true", "yes", "1"}
_FALSE = {"off", "false", "no", "0"}


@dataclass(frozen=True)
class GridPoint:
    """One configuration of the grid: a readable name and the settings it overrides."""

    name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_default(self) -> bool:
        """True for the unchanged default configuration."""
        return not self.overrides


DEFAULT_POINT = GridPoint(name="default")


def parse_grid(spec: str) -> list[GridPoint]:
    """Expand a grid spec (inline, `standard` or a YAML path) into named configurations.

    The default configuration always comes first, exactly once, so every report can
    compare against it.
    """
    spec = spec.strip()
    if not spec:
        raise SlackqueryError("--grid: empty grid spec")
    if spec == "standard":
        spec = STANDARD_GRID
    if spec.endswith((".yaml", ".yml")):
        mode, axes = _read_grid_file(Path(spec))
    else:
        mode = "sweep"
        if spec.startswith("product:"):
            mode, spec = "product", spec.removeprefix("product:")
        axes = _parse_inline(spec)
    return expand(axes, mode=mode)


def parse_config(spec: str) -> GridPoint:
    """One configuration in the grid's syntax: `default`, or axes with one value each
    (`rrf_k=60;arm.context=off`), all applied together."""
    spec = spec.strip()
    if spec in ("", DEFAULT_POINT.name):
        return DEFAULT_POINT
    axes = _parse_inline(spec)
    several = [name for name, values in axes.items() if len(values) != 1]
    if several:
        raise SlackqueryError(
            f"configuration {spec!r}: give one value per axis (axis {several[0]!r} has "
            f"{len(axes[several[0]])}); use --grid for several"
        )
    overrides = {name: values[0] for name, values in axes.items()}
    return GridPoint(_name(overrides), overrides)


def expand(axes: Mapping[str, list[Any]], *, mode: str = "sweep") -> list[GridPoint]:
    """Named configurations for typed axis values, as a sweep or a cross product."""
    points = [DEFAULT_POINT]
    if mode == "sweep":
        for axis, values in axes.items():
            points.extend(GridPoint(_name({axis: v}), {axis: v}) for v in values)
    elif mode == "product":
        names = list(axes)
        for combo in itertools.product(*(axes[name] for name in names)):
            overrides = dict(zip(names, combo, strict=True))
            points.append(GridPoint(_name(overrides), overrides))
    else:
        raise SlackqueryError(f"--grid: mode must be sweep or product, got {mode!r}")
    unique = list({point.name: point for point in points}.values())
    if len(unique) > MAX_CONFIGS:
        raise SlackqueryError(
            f"--grid: {len(unique)} configurations is more than {MAX_CONFIGS}; "
            "use a sweep or fewer values"
        )
    return unique


def _parse_inline(spec: str) -> dict[str, list[Any]]:
    axes: dict[str, list[Any]] = {}
    for part in filter(None, (chunk.strip() for chunk in spec.split(";"))):
        name, sep, values = part.partition("=")
        name = name.strip()
        if not sep or not values.strip():
            raise SlackqueryError(f"--grid: expected name=value,value in {part!r}")
        _add_axis(axes, name, [value.strip() for value in values.split(",")])
    if not axes:
        raise SlackqueryError("--grid: no axes given")
    return axes


def _read_grid_file(path: Path) -> tuple[str, dict[str, list[Any]]]:
    document = read_yaml(path, "grid file")
    if not isinstance(document, Mapping) or not isinstance(document.get("axes"), Mapping):
        raise SlackqueryError(f"{path}: expected a mapping with `axes: {{name: [values]}}`")
    mode = document.get("mode", "sweep")
    axes: dict[str, list[Any]] = {}
    for name, values in document["axes"].items():
        if not isinstance(values, list) or not values:
            raise SlackqueryError(f"{path}: axis {name!r} needs a non-empty list of values")
        _add_axis(axes, str(name), values)
    return str(mode), axes


def _add_axis(axes: dict[str, list[Any]], name: str, values: list[Any]) -> None:
    if name not in AXES:
        raise SlackqueryError(
            f"--grid: unknown axis {name!r} (known: {', '.join(FIXED_AXES)}; and arm.<arm>, "
            "weight.<arm>, "
            f"weight.<route>.<arm> for arms {', '.join(arm_names(ARMS))})"
        )
    if name in axes:
        raise SlackqueryError(f"--grid: axis {name!r} given twice")
    axes[name] = list(dict.fromkeys(_parse_value(name, value) for value in values))


def _parse_value(axis: str, value: Any) -> Any:
    if axis in INT_AXES:
        try:
            number = int(str(value))
        except ValueError:
            number = 0
        if number < 1:
            raise SlackqueryError(f"--grid: {axis} values must be integers >= 1, got {value!r}")
        return number
    if axis in FLOAT_AXES or axis in WEIGHT_AXES:
        try:
            amount = float(str(value))
        except ValueError:
            amount = -1.0
        if not 0 <= amount < math.inf:  # NaN fails both; 1e400 reads as infinity
            raise SlackqueryError(
                f"--grid: {axis} values must be finite numbers >= 0, got {value!r}"
            )
        return amount
    if axis in BOOL_AXES or axis in ARM_AXES:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise SlackqueryError(f"--grid: {axis} values must be on or off, got {value!r}")
    text = str(value).lower()  # the one axis left: a choice
    if text not in CHOICE_AXES[axis]:
        raise SlackqueryError(
            f"--grid: {axis} values must be one of {', '.join(CHOICE_AXES[axis])}, got {value!r}"
        )
    return text


def _name(overrides: Mapping[str, Any]) -> str:
    return " ".join(f"{axis}={_format(value)}" for axis, value in overrides.items())


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
