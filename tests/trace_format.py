"""A checker for the trace-event JSON format (the "Trace Event Format" that Chrome's trace
viewer and Perfetto read), written from the format's definition, not from our writer:

* the JSON object form: ``traceEvents`` (a list of events), optional ``displayTimeUnit``
  ("ms" or "ns") and ``otherData`` (an object);
* every event is an object with a one-letter phase ``ph``, a ``name``, ``pid`` and ``tid``
  integers, ``ts`` in microseconds (a number; metadata events have none) and, if present,
  ``args`` an object;
* complete events ("X") carry a ``dur`` >= 0; on one thread they form a tree: two either
  do not overlap or one holds the other;
* duration events ("B"/"E") pair up per thread, last in first out;
* instant events ("i"/"I") have a scope ``s`` of "g", "p" or "t" if any;
* counter events ("C") carry their series as numeric ``args``;
* nestable async events ("b"/"e"/"n") carry a ``cat`` and an ``id``; begins and ends of one
  (cat, id) pair up, last in first out, by name;
* metadata events ("M") are one of process_name / process_labels / process_sort_index /
  thread_name / thread_sort_index with the argument each takes.

``check`` raises AssertionError naming the first event that breaks a rule, and returns the
events by phase.
"""

from __future__ import annotations

import collections
import numbers
from typing import Any

PHASES = set("BEXiICbnestfPNODMVvRc(),")  # every phase the format defines
METADATA = {"process_name": "name", "process_labels": "labels", "process_sort_index": "sort_index",
            "thread_name": "name", "thread_sort_index": "sort_index"}


def _ns(us: float) -> int:
    """A timestamp in integer nanoseconds: sums of floats compare exactly this way."""
    return round(us * 1000)


def check(doc: Any) -> dict[str, list[dict[str, Any]]]:
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), "not the JSON object form"
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns"), doc.get("displayTimeUnit")
    assert isinstance(doc.get("otherData", {}), dict)
    by_phase: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    complete: dict[tuple[int, int], list[tuple[int, int, str]]] = collections.defaultdict(list)
    durations: dict[tuple[int, int], list[str]] = collections.defaultdict(list)
    asyncs: dict[tuple[str, Any], list[dict[str, Any]]] = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        assert isinstance(e, dict), e
        ph = e.get("ph")
        assert ph in PHASES, f"unknown phase {ph!r}: {e}"
        assert isinstance(e.get("name"), str), f"no name: {e}"
        assert isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), f"pid/tid: {e}"
        assert isinstance(e.get("args", {}), dict), f"args: {e}"
        by_phase[ph].append(e)
        if ph == "M":
            assert e["name"] in METADATA, f"unknown metadata {e['name']!r}"
            assert METADATA[e["name"]] in e.get("args", {}), f"metadata without its argument: {e}"
            if e["name"].endswith("sort_index"):
                assert isinstance(e["args"]["sort_index"], int), e
            continue
        assert isinstance(e.get("ts"), numbers.Real) and not isinstance(e["ts"], bool), f"ts: {e}"
        key = (e["pid"], e["tid"])
        if ph == "X":
            assert isinstance(e.get("dur"), numbers.Real) and e["dur"] >= 0, f"dur: {e}"
            complete[key].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"]))
        elif ph in ("B", "E"):
            durations[key].append(ph)
        elif ph in ("i", "I"):
            assert e.get("s", "t") in ("g", "p", "t"), f"instant scope: {e}"
        elif ph == "C":
            assert e.get("args") and all(isinstance(v, numbers.Real) for v in e["args"].values()), f"counter: {e}"
        elif ph in ("b", "e", "n"):
            assert "cat" in e and ("id" in e or "id2" in e), f"async without cat and id: {e}"
            asyncs[(e["cat"], e.get("id", e.get("id2")))].append(e)
    for key, spans in complete.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[tuple[int, str]] = []
        for start, end, name in spans:
            while open_ends and open_ends[-1][0] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1][0], (
                f"{name!r} [{start}, {end}] ns overlaps {open_ends[-1][1]!r} (ending {open_ends[-1][0]}) on {key}"
                " without nesting in it")
            open_ends.append((end, name))
    for key, phases in durations.items():
        depth = 0
        for ph in phases:
            depth += 1 if ph == "B" else -1
            assert depth >= 0, f"an E without its B on {key}"
        assert depth == 0, f"a B left open on {key}"
    for key, events in asyncs.items():
        stack: list[str] = []
        for e in sorted(events, key=lambda e: (e["ts"], e["ph"] != "e")):
            if e["ph"] == "b":
                stack.append(e["name"])
            elif e["ph"] == "e":
                assert stack and stack[-1] == e["name"], f"async end without its begin: {e}"
                stack.pop()
        assert not stack, f"async begins left open for {key}: {stack}"
    return by_phase


__all__ = ["check"]
