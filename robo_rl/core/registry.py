"""One small open registry type, used for algorithms, tasks, physics backends, transports and terms.

An entry registers where it is defined (`REGISTRY.register("name", entry)` at the bottom of its module);
nothing else names it. A registry may also resolve whole families of names by prefix (`gym:<id>`,
`mjlab:<id>`): the resolver builds the entry from the rest of the name when it is asked for.

Lookups of unknown names raise one `ConfigError` line listing what is valid, so a user's typo in a config
or on the command line is answered with the choices.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from robo_rl.core.config import ConfigError

T = TypeVar("T")

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")


class Registry(Generic[T]):
    """Name -> entry, open to registration from anywhere (a test module, a user's script).

    Args:
        kind: what the entries are, singular ("algorithm", "task", "physics backend"), for messages.
        field: the config field that names an entry (e.g. "algo_name"), for messages; None: no field.
        entry_type: when given, `register` refuses entries of another type.
    """

    def __init__(self, kind: str, *, field: str | None = None, entry_type: type | None = None):
        self.kind = kind
        self.field = field
        self.entry_type = entry_type
        self._entries: dict[str, T] = {}
        self._prefixes: dict[str, tuple[Callable[[str], T], str, str]] = {}  # prefix -> (resolver, describes, help)
        self._default: str | None = None

    def register(self, name: str, entry: T, *, default: bool = False) -> T:
        """Add `entry` under `name` (lower case, digits, '-', '_'); ValueError if taken or malformed. Returns entry.

        `default=True` makes it what `default` names (a config field's default); only one entry may be it.
        """
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"{self.kind} name {name!r}: use lower-case letters, digits, '-' and '_', "
                             "starting with a letter")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered; registered: {', '.join(self._entries)}")
        if self.entry_type is not None and not isinstance(entry, self.entry_type):
            raise ValueError(f"{self.kind} {name!r}: expected a {self.entry_type.__name__}, "
                             f"got {type(entry).__name__}")
        if default and self._default is not None:
            raise ValueError(f"{self.kind} {name!r}: the default is already {self._default!r}")
        self._entries[name] = entry
        if default:
            self._default = name
        return entry

    def register_prefix(self, prefix: str, resolver: Callable[[str], T], *, describes: str, help: str = "") -> None:
        """Resolve every name `prefix + rest` with `resolver(rest)`.

        Args:
            describes: what rest is ("gymnasium id"), for messages: `gym:<gymnasium id>`.
            help: one line on the family for listings (`robo-rl tasks`): what it is, an example, where its
                names and its framework come from.
        """
        if not prefix.endswith(":"):
            raise ValueError(f"{self.kind} prefix {prefix!r} must end with ':'")
        if prefix in self._prefixes:
            raise ValueError(f"{self.kind} prefix {prefix!r} is already registered")
        self._prefixes[prefix] = (resolver, describes, help)

    def unregister(self, name: str) -> None:
        """Remove `name` (a test's or script's own entry); KeyError if absent."""
        del self._entries[name]
        if self._default == name:
            self._default = None

    @property
    def default(self) -> str:
        """The name registered with `default=True`; LookupError if none is."""
        if self._default is None:
            raise LookupError(f"no default {self.kind} is registered")
        return self._default

    @contextmanager
    def registered(self, name: str, entry: T) -> Iterator[T]:
        """`register` for the duration of a with-block (tests)."""
        self.register(name, entry)
        try:
            yield entry
        finally:
            self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """The entry of `name` (registered, or resolved by a prefix); one-line ConfigError listing the valid names."""
        for prefix, (resolver, _, _) in self._prefixes.items():
            if isinstance(name, str) and name.startswith(prefix):
                return resolver(name[len(prefix):])
        if name not in self._entries:
            raise ConfigError(self.unknown_message(name))
        return self._entries[name]

    def unknown_message(self, name: object) -> str:
        """The one line for an unknown `name`: the field, the value and every valid choice."""
        choices = ", ".join(self._entries)
        if self._prefixes:
            choices += ", or " + " / ".join(f"{p}<{what}>" for p, (_, what, _) in self._prefixes.items())
        where = f"config error: {self.field} = {name!r}: " if self.field else f"{name!r}: "
        return f"{where}unknown {self.kind}; valid: {choices}"

    def names(self) -> tuple[str, ...]:
        """Registered names in registration order (prefix families not included)."""
        return tuple(self._entries)

    def prefixes(self) -> dict[str, str]:
        """Registered prefixes -> what follows each."""
        return {p: what for p, (_, what, _) in self._prefixes.items()}

    def prefix_help(self, prefix: str) -> str:
        """The help line registered with `prefix` ("" when none was given); KeyError for an unregistered prefix."""
        return self._prefixes[prefix][2]

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(list(self._entries.items()))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
