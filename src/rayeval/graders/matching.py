"""list_match and dict_match: grade the records of an answer field by field.

Both attach groups of composite leaves to records found in the answer and bind each
leaf to one member of its record; a leaf's own answer_field is validated but unused.
list_match pairs array items with ground-truth rows by a key; dict_match walks the keys
of an answer object.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ._common import MISSING, InvalidConfig, RejectedAnswer, echo_answer, is_finite_number
from .base import Grader
from .leaf import ADDITIVE, HARD_FAIL, Leaf, parse_composite_leaf
from .registry import register_grader
from .result import GraderResult, normalize_score

GATES_ALL_PASS = "gates_all_pass"


# --------------------------------------------------------------------------- shared


def _nonempty_text(config: dict, key: str, default: str | None = None) -> str:
    value = config.get(key, default)
    if not (isinstance(value, str) and value):
        raise InvalidConfig(f"{key} must be a non-empty string, got {value!r}")
    return value


def _where(entry: Any, field: str | None = None) -> str:
    """Where a ground-truth entry (``entry``: its index or key), or one of its fields, is: for
    messages, so only formatted when one is needed."""
    return f"ground_truth[{entry!r}]" if field is None else f"ground_truth[{entry!r}].{field}"


def _parse_leaf(config: Any, entry: Any, field: str | None = None) -> Leaf:
    try:
        return parse_composite_leaf(config)
    except InvalidConfig as exc:
        raise InvalidConfig(f"{_where(entry, field)}: {exc}") from None


def _parse_fields(fields: Any, entry: Any) -> dict[str, Leaf]:
    if not isinstance(fields, dict) or not fields:
        raise InvalidConfig(f"{_where(entry)}: fields must be a non-empty object")
    return {name: _parse_leaf(leaf, entry, name) for name, leaf in fields.items()}


NO_SCORING_LEAF = "at least one leaf must be a gate or additive leaf (not only hard_fail)"


def _has_scoring_leaf(groups: Iterable[dict[str, Leaf]]) -> bool:
    for leaves in groups:
        for leaf in leaves.values():
            if leaf.role != HARD_FAIL:
                return True
    return False


def _bind_fields(leaves: dict[str, Leaf], record: Any, prefix: str) -> Iterator[tuple[str, Leaf, Any]]:
    """(label, leaf, value) per field; a field absent from the record, or a non-object record, is MISSING."""
    is_object = isinstance(record, dict)
    for name, leaf in leaves.items():
        yield f"{prefix}.{name}", leaf, record.get(name, MISSING) if is_object else MISSING


class RecordGrade(NamedTuple):
    """How one record's leaves came out."""

    gates_passed: bool
    """Every gate leaf passed."""
    scoring_passed: bool
    """Every gate and additive leaf passed (a scalar additive leaf always passes)."""
    additive: float
    gate: float
    triggered: list[str]
    """Labels of hard_fail leaves that did not pass (a MISSING field triggers)."""


def _grade_leaves(bound: Iterable[tuple[str, Leaf, Any]], field_scores: dict[str, float]) -> RecordGrade:
    gates_passed = scoring_passed = True
    additive = gate = 0.0
    triggered: list[str] = []
    for label, leaf, value in bound:
        result = leaf.grade(value)
        field_scores[label] = result.score
        if leaf.role == HARD_FAIL:
            if not result.passed:
                triggered.append(label)
            continue
        if leaf.role == ADDITIVE:
            additive += result.score
        else:
            gate += result.score
            gates_passed = gates_passed and result.passed
        scoring_passed = scoring_passed and result.passed
    return RecordGrade(gates_passed, scoring_passed, additive, gate, triggered)


# --------------------------------------------------------------------------- list_match

_OBJECT = object()
_MULTISET = object()
# Tags that keep an object's or a multiset's canonical form from equalling an array's.


def _canonical(value: Any) -> Any:
    """A hashable stand-in that is equal exactly when the JSON values are (1 == 1.0 == true)."""
    if isinstance(value, list):
        return tuple(map(_canonical, value))
    if isinstance(value, dict):
        return (_OBJECT, frozenset((key, _canonical(item)) for key, item in value.items()))
    return value


def match_key(value: Any, sort: bool) -> Any:
    """The comparable form of a key; with ``sort`` an array key is an order-free multiset."""
    if sort and isinstance(value, list):
        return (_MULTISET, frozenset(Counter(map(_canonical, value)).items()))
    return _canonical(value)


class _ListMatchConfig(NamedTuple):
    answer_field: str
    match_key: str
    sort: bool
    deduplicate_by: str | None
    rule: str
    k: int | None
    tuple_pass_min: int
    additive_score_min: float
    rows: dict[Any, dict[str, Leaf]]
    denominator: float


def _parse_list_match(config: Any) -> _ListMatchConfig:
    """Checks run in the spec's table order, then row by row."""
    answer_field = _nonempty_text(config, "answer_field")
    key_name = _nonempty_text(config, "match_key")
    normalize = config.get("match_key_normalize", "none")
    if not isinstance(normalize, str):
        raise InvalidConfig(f"match_key_normalize must be a string, got {normalize!r}")
    dedupe = config.get("deduplicate_by")
    if dedupe is not None and (not isinstance(dedupe, str) or not dedupe):
        raise InvalidConfig(f"deduplicate_by must be null or a non-empty string, got {dedupe!r}")
    rule = _nonempty_text(config, "per_tuple_rule", GATES_ALL_PASS)
    k = config.get("k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise InvalidConfig(f"k must be null or a positive integer, got {k!r}")
    pass_min = config.get("tuple_pass_min", 0)
    if isinstance(pass_min, bool) or not isinstance(pass_min, int) or pass_min < 0:
        raise InvalidConfig(f"tuple_pass_min must be a non-negative integer, got {pass_min!r}")
    if k is not None and pass_min > k:
        raise InvalidConfig(f"tuple_pass_min ({pass_min}) exceeds k ({k})")
    ground_truth = config.get("ground_truth")
    if isinstance(ground_truth, list) and pass_min > len(ground_truth):
        raise InvalidConfig(f"tuple_pass_min ({pass_min}) exceeds the {len(ground_truth)} ground-truth rows")
    score_min = config.get("additive_score_min", 0)
    if not is_finite_number(score_min) or score_min < 0:
        raise InvalidConfig(f"additive_score_min must be a finite number >= 0, got {score_min!r}")
    if not isinstance(ground_truth, list) or not ground_truth:
        raise InvalidConfig("ground_truth must be a non-empty array")

    sort = normalize == "sort"
    rows: dict[Any, dict[str, Leaf]] = {}
    for index, row in enumerate(ground_truth):
        if not isinstance(row, dict):
            raise InvalidConfig(f"{_where(index)} must be an object")
        if key_name not in row:
            raise InvalidConfig(f"{_where(index)} has no {key_name!r} key")
        key = match_key(row[key_name], sort)
        if key in rows:
            raise InvalidConfig(f"{_where(index)}: duplicate {key_name} {row[key_name]!r}")
        rows[key] = _parse_fields(row.get("fields"), index)
    if not _has_scoring_leaf(rows.values()):
        raise InvalidConfig(NO_SCORING_LEAF)

    row_capacity = [sum(leaf.capacity for leaf in leaves.values() if leaf.role == ADDITIVE) for leaves in rows.values()]
    denominator = sum(heapq.nlargest(k, row_capacity) if k is not None else row_capacity)
    return _ListMatchConfig(
        answer_field, key_name, sort, dedupe, rule, k, pass_min, score_min, rows, float(denominator)
    )


def _first_per_value(items: list, member: str) -> list:
    """Keep the first item per value of ``member`` (absent counts as null); non-objects always stay."""
    seen: set = set()
    kept = []
    for item in items:
        if isinstance(item, dict):
            value = _canonical(item.get(member))
            if value in seen:
                continue
            seen.add(value)
        kept.append(item)
    return kept


def _answer_member(answer: Any, field: str, kind: type, kind_name: str) -> Any:
    """The literal top-level key's value; RejectedAnswer (a malformed answer, never a configuration
    error) when it is absent or of the wrong shape."""
    value = answer.get(field, MISSING) if isinstance(answer, dict) else MISSING
    if isinstance(value, kind):
        return value
    problem = "missing" if value is MISSING else f"not {kind_name} ({type(value).__name__})"
    message = f"answer field {field!r} is {problem}"
    raise RejectedAnswer(message, {"error": message})


@register_grader("list_match")
class ListMatchGrader(Grader):
    """Match answer tuples to ground-truth rows by key; additive leaves earn the score."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        spec = _parse_list_match(config)
        items = _answer_member(answer, spec.answer_field, list, "an array")
        if spec.deduplicate_by is not None:
            items = _first_per_value(items, spec.deduplicate_by)
        if spec.k is not None:
            items = items[: spec.k]

        consumed: set = set()
        field_scores: dict[str, float] = {}
        triggered: list[str] = []
        tuple_pass_count = 0
        additive_score = 0.0
        for item in items:
            if not isinstance(item, dict):
                continue
            raw_key = item.get(spec.match_key)
            key = match_key(raw_key, spec.sort)
            leaves = spec.rows.get(key)
            if leaves is None or key in consumed:
                continue
            consumed.add(key)
            grade = _grade_leaves(_bind_fields(leaves, item, str(raw_key)), field_scores)
            additive_score += grade.additive
            triggered.extend(grade.triggered)
            if grade.gates_passed if spec.rule == GATES_ALL_PASS else grade.scoring_passed:
                tuple_pass_count += 1

        veto, nothing_graded = bool(triggered), not consumed
        passed = (
            tuple_pass_count >= spec.tuple_pass_min
            and additive_score >= spec.additive_score_min
            and not veto
            and not nothing_graded
        )
        score = 0.0 if veto else normalize_score(additive_score, spec.denominator)
        metrics: dict[str, Any] = {
            "k": spec.k,
            "tuple_pass_count": tuple_pass_count,
            "tuple_pass_min": spec.tuple_pass_min,
            "additive_score": additive_score,
            "additive_score_min": spec.additive_score_min,
            "additive_score_denominator": spec.denominator,
            "n_tuples_evaluated": len(items),
            "hard_fail_triggered": triggered,
        }
        if nothing_graded:
            metrics["composite_error"] = "no answer tuple matched a ground-truth row"
        return GraderResult(
            passed=passed,
            score=score,
            score_max=1.0 if spec.denominator > 0 else 0.0,
            metrics=metrics,
            field_scores=field_scores,
            reasoning=(
                f"list_match: {'PASS' if passed else 'FAIL'}; {len(consumed)}/{len(spec.rows)} rows matched, "
                f"{tuple_pass_count} tuples passed (min {spec.tuple_pass_min}), additive "
                f"{additive_score:.4g}/{spec.denominator:.4g}" + (f"; hard fail triggered: {triggered}" if veto else "")
            ),
            agent_answer=echo_answer(answer),
        )


# --------------------------------------------------------------------------- dict_match


class _Entry(NamedTuple):
    """A ground-truth key: either one leaf on the member (scalar shape) or a leaf per field."""

    key: str
    leaf: Leaf | dict[str, Leaf]
    capacity: float

    @property
    def leaves(self) -> dict[str, Leaf]:
        """The entry's leaves by field (the scalar shape's one leaf under the entry's key)."""
        return {self.key: self.leaf} if isinstance(self.leaf, Leaf) else self.leaf


class _DictMatchConfig(NamedTuple):
    answer_field: str
    rule: str
    all_keys_required: bool
    entries: list[_Entry]


def _parse_dict_match(config: Any) -> _DictMatchConfig:
    """The spec; InvalidConfig for the first problem found."""
    answer_field = _nonempty_text(config, "answer_field")
    rule = _nonempty_text(config, "per_entry_rule", GATES_ALL_PASS)
    all_keys_required = config.get("all_keys_required", True)
    if not isinstance(all_keys_required, bool):
        raise InvalidConfig(f"all_keys_required must be a boolean, got {all_keys_required!r}")
    ground_truth = config.get("ground_truth")
    if not isinstance(ground_truth, dict) or not ground_truth:
        raise InvalidConfig("ground_truth must be a non-empty object")
    entries = _parse_entries(ground_truth)
    if not _has_scoring_leaf(entry.leaves for entry in entries):
        raise InvalidConfig(NO_SCORING_LEAF)
    return _DictMatchConfig(answer_field, rule, all_keys_required, entries)


def _parse_entries(ground_truth: dict) -> list[_Entry]:
    entries = []
    for key, entry in ground_truth.items():
        if not isinstance(entry, dict):
            raise InvalidConfig(f"{_where(key)} must be an object")
        if "predicate" in entry:  # the scalar shape wins over 'fields'
            leaf = _parse_leaf(entry, key)
            entries.append(_Entry(key, leaf, leaf.score_max))
        elif "fields" in entry:
            fields = _parse_fields(entry["fields"], key)
            entries.append(_Entry(key, fields, sum(leaf.score_max for leaf in fields.values())))
        else:
            raise InvalidConfig(f"{_where(key)} needs a 'predicate' (one leaf) or 'fields' (a leaf per field)")
    return entries


@register_grader("dict_match")
class DictMatchGrader(Grader):
    """Grade an answer object key by key; gate and additive capacity both count."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        spec = _parse_dict_match(config)
        member = _answer_member(answer, spec.answer_field, dict, "an object")

        field_scores: dict[str, float] = {}
        triggered: list[str] = []
        failing_keys: list[str] = []
        raw_score = denominator = 0.0
        for entry in spec.entries:
            denominator += entry.capacity
            if entry.key not in member:  # fails, but its hard_fail leaves are not evaluated
                field_scores[entry.key] = 0.0
                failing_keys.append(entry.key)
                continue
            value = member[entry.key]
            if isinstance(entry.leaf, Leaf):
                grade = _grade_leaves([(entry.key, entry.leaf, value)], field_scores)
                entry_passed = grade.scoring_passed and not grade.triggered
            else:
                grade = _grade_leaves(_bind_fields(entry.leaf, value, entry.key), field_scores)
                if spec.rule == GATES_ALL_PASS:
                    entry_passed = grade.gates_passed
                else:
                    entry_passed = grade.scoring_passed and not grade.triggered
            raw_score += grade.additive + grade.gate
            triggered.extend(grade.triggered)
            if not entry_passed:
                failing_keys.append(entry.key)

        veto = bool(triggered)
        passed = not failing_keys and not veto
        score = 0.0 if veto else normalize_score(raw_score, denominator)
        metrics: dict[str, Any] = {
            "entries_total": len(spec.entries),
            "entries_passed": len(spec.entries) - len(failing_keys),
            "raw_score": raw_score,
            "score_denominator": denominator,
            "hard_fail_triggered": triggered,
            "failing_keys": failing_keys,
        }
        if not spec.all_keys_required:
            metrics["all_keys_required_ignored"] = True
        return GraderResult(
            passed=passed,
            score=score,
            score_max=1.0,
            metrics=metrics,
            field_scores=field_scores,
            reasoning=(
                f"dict_match: {'PASS' if passed else 'FAIL'}; {metrics['entries_passed']}/{len(spec.entries)} "
                f"entries passed, score {raw_score:.4g}/{denominator:.4g}"
                + (f"; failing: {failing_keys}" if failing_keys else "")
                + (f"; hard fail triggered: {triggered}" if veto else "")
            ),
            agent_answer=echo_answer(answer),
        )
