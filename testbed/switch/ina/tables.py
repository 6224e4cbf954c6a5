"""Exact-match tables with named match fields, actions and action parameters,
as a P4Runtime server would program them (names as in p4/ina.p4info.txtpb).

    t.insert({"job_id": 1}, "Ingress.set_job", {"num_workers": 2, ...})
    t.modify(match, action, params); t.delete(match); t.set_default(action, params)
    t.entries() -> [{"match": {...}, "action": str, "params": {...}}]

Values may be ints, MAC strings ("02:00:00:00:00:01"), IPv4 strings, or
big-endian bytes (P4Runtime's encoding); they are stored as ints and checked
against the field's bitwidth. A `const_default` table (P4 `const
default_action`) refuses set_default. A table calls `validate(action, params)` before a
change (raise ValueError to refuse it) and `on_change(key, entry|None)` after,
which is how the pipeline keeps its vectorized copies (numpy arrays) in sync.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from testbed import wire


def to_int(value: Any, bitwidth: int, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected an integer, got {value!r}")
    if isinstance(value, int):
        v = value
    elif isinstance(value, (bytes, bytearray)):
        v = int.from_bytes(value, "big")
    elif isinstance(value, str):
        s = value.strip()
        if s.count(":") == 5 or s.count("-") == 5:
            v = int.from_bytes(wire.mac_bytes(s), "big")
        elif s.count(".") == 3:
            v = int.from_bytes(wire.ip_bytes(s), "big")
        else:
            v = int(s, 0)
    else:
        raise ValueError(f"{what}: unsupported value {value!r}")
    if not 0 <= v < (1 << bitwidth):
        raise ValueError(f"{what}: {value!r} does not fit in bit<{bitwidth}>")
    return v


class Table:
    def __init__(self, name: str, match_fields: dict[str, int],
                 actions: dict[str, dict[str, int]], default_action: tuple[str, dict],
                 *, size: int, default_only: frozenset[str] = frozenset(),
                 const_default: bool = False,
                 lock: threading.Lock | None = None,
                 validate: Callable[[str, dict], None] | None = None,
                 on_change: Callable[[tuple, tuple | None], None] | None = None):
        self.name = name
        self.match_fields = dict(match_fields)      # field name -> bitwidth
        self.actions = {a: dict(p) for a, p in actions.items()}  # action -> {param: bitwidth}
        self.default_only = frozenset(default_only)
        self.size = size
        self.const_default = const_default
        self._entries: dict[tuple, tuple[str, dict]] = {}
        self._lock = lock or threading.Lock()
        self._validate = validate
        self._on_change = on_change
        self.default = self._check_action(*default_action, default=True)

    # -- helpers ---------------------------------------------------------------
    def _key(self, match: dict) -> tuple:
        if set(match) != set(self.match_fields):
            raise ValueError(f"{self.name}: match needs fields {sorted(self.match_fields)}, "
                             f"got {sorted(match)}")
        return tuple(to_int(match[f], w, f"{self.name} match {f}")
                     for f, w in self.match_fields.items())

    def _check_action(self, action: str, params: dict | None, default: bool = False):
        if action not in self.actions:
            raise ValueError(f"{self.name}: unknown action {action!r}; "
                             f"actions: {sorted(self.actions)}")
        if action in self.default_only and not default:
            raise ValueError(f"{self.name}: {action} is a default-only action")
        spec = self.actions[action]
        params = dict(params or {})
        if set(params) != set(spec):
            raise ValueError(f"{self.name}: {action} needs params {sorted(spec)}, got {sorted(params)}")
        vals = {p: to_int(params[p], w, f"{self.name} {action}.{p}") for p, w in spec.items()}
        if self._validate:
            self._validate(action, vals)
        return action, vals

    def _changed(self, key, entry) -> None:
        if self._on_change:
            self._on_change(key, entry)

    # -- control plane ---------------------------------------------------------
    def insert(self, match: dict, action: str, params: dict | None = None) -> None:
        if not self.match_fields:
            raise ValueError(f"{self.name} is keyless: use set_default()")
        key = self._key(match)
        entry = self._check_action(action, params)
        with self._lock:
            if key in self._entries:
                raise KeyError(f"{self.name}: entry {match} already exists (use modify)")
            if len(self._entries) >= self.size:
                raise ValueError(f"{self.name}: table full ({self.size} entries)")
            self._entries[key] = entry
            self._changed(key, entry)

    def modify(self, match: dict, action: str, params: dict | None = None) -> None:
        key = self._key(match)
        entry = self._check_action(action, params)
        with self._lock:
            if key not in self._entries:
                raise KeyError(f"{self.name}: no entry {match} to modify")
            self._entries[key] = entry
            self._changed(key, entry)

    def delete(self, match: dict) -> None:
        key = self._key(match)
        with self._lock:
            if self._entries.pop(key, None) is None:
                raise KeyError(f"{self.name}: no entry {match} to delete")
            self._changed(key, None)

    def set_default(self, action: str, params: dict | None = None) -> None:
        if self.const_default:
            raise ValueError(f"{self.name}: the default action is const ({self.default[0]})")
        entry = self._check_action(action, params, default=True)
        with self._lock:
            self.default = entry
            self._changed((), entry)

    def entries(self) -> list[dict]:
        names = list(self.match_fields)
        with self._lock:
            return [{"match": dict(zip(names, k)), "action": a, "params": dict(p)}
                    for k, (a, p) in self._entries.items()]

    def lookup(self, *key: int) -> tuple[str, dict]:
        return self._entries.get(key, self.default)

    def __len__(self) -> int:
        return len(self._entries)
