"""Pairing the candidate's parameters and buffers with the reference's, so both run with the same (perturbed) values.

Same names pair first. The rest pair by (shape, dtype): where a (shape, dtype) occurs once on each side the two
tensors pair; where it repeats, tensors pair by the last part of their names (``ln.weight`` with ``weight``), in
registration order among equal suffixes. The mapping is *unique* only when every tensor on both sides pairs this
way; otherwise there is none, both sides keep their seeded initialisation and the record says so (flag
``unmatched_params``; identity defaults such as a LayerNorm's weight 1 and bias 0 are then not exercised).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

Tensor = tuple[str, tuple[int, ...], str]  # (name, shape, dtype), in registration order


@dataclass(frozen=True)
class Mapping:
    """``pairs`` maps a candidate name to the reference name whose values it gets; ``unique`` is False when some
    tensor found no partner (``candidate_only``, ``reference_only``)."""

    pairs: dict[str, str] = field(default_factory=dict)
    unique: bool = True
    candidate_only: list[str] = field(default_factory=list)
    reference_only: list[str] = field(default_factory=list)

    @property
    def renamed(self) -> dict[str, str]:
        """The pairs whose names differ (what the record shows)."""
        return {c: r for c, r in self.pairs.items() if c != r}


def _suffix(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _by_suffix(refs: list[str], cands: list[str]) -> dict[str, str] | None:
    """Pair tensors of one repeated (shape, dtype) by name suffix, in order among equal suffixes; None if the
    suffixes differ."""
    ref_groups: dict[str, list[str]] = defaultdict(list)
    cand_groups: dict[str, list[str]] = defaultdict(list)
    for name in refs:
        ref_groups[_suffix(name)].append(name)
    for name in cands:
        cand_groups[_suffix(name)].append(name)
    if {k: len(v) for k, v in ref_groups.items()} != {k: len(v) for k, v in cand_groups.items()}:
        return None
    return {c: r for suffix in ref_groups for c, r in zip(cand_groups[suffix], ref_groups[suffix])}


def map_parameters(reference: list[Tensor], candidate: list[Tensor]) -> Mapping:
    """The candidate-to-reference pairing of parameters and buffers (see the module docstring)."""
    ref = {name: (tuple(shape), dtype) for name, shape, dtype in reference}
    cand = {name: (tuple(shape), dtype) for name, shape, dtype in candidate}
    pairs = {name: name for name in cand if name in ref and ref[name] == cand[name]}
    rest_ref = [name for name, *_ in reference if name not in pairs.values()]
    rest_cand = [name for name, *_ in candidate if name not in pairs]
    groups_ref: dict[Any, list[str]] = defaultdict(list)
    groups_cand: dict[Any, list[str]] = defaultdict(list)
    for name in rest_ref:
        groups_ref[ref[name]].append(name)
    for name in rest_cand:
        groups_cand[cand[name]].append(name)
    unique = True
    for key in set(groups_ref) | set(groups_cand):
        refs, cands = groups_ref.get(key, []), groups_cand.get(key, [])
        if len(refs) != len(cands):
            unique = False
            continue
        if len(refs) == 1:
            pairs[cands[0]] = refs[0]
            continue
        matched = _by_suffix(refs, cands)
        if matched is None:
            unique = False
            continue
        pairs.update(matched)
    if not unique:
        same = {name: name for name in cand if name in ref and ref[name] == cand[name]}
        return Mapping(same, False, sorted(set(cand) - set(same)), sorted(set(ref) - set(same.values())))
    return Mapping(pairs, True)


def for_candidate(state: dict[str, Any], mapping: Mapping) -> dict[str, Any]:
    """The reference's state under the candidate's names (only the paired tensors)."""
    return {c: state[r] for c, r in mapping.pairs.items() if r in state}
