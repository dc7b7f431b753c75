"""Reading a spec document (YAML or JSON) strictly: what a parser would silently accept is refused.

A spec buys capacity, so the loader refuses, each with one message naming the place:

- bytes that are not UTF-8 (which byte, at which offset and line) and documents larger than
  ``MAX_DOCUMENT_BYTES``;
- **duplicate keys**: YAML and JSON parsers keep the last one, so a second ``max_upfront_fee_usd``
  further down would silently replace the budget; both lines are named;
- **anchors, aliases and merge keys**: they let a few lines expand into gigabytes ("billion laughs";
  a 1 KB spec took 157 s and all memory before this). The composer meets the first anchor before
  anything is expanded, so such a spec fails in microseconds and nothing of it is printed;
- nesting deeper than ``MAX_DEPTH`` (PyYAML composes recursively; a deep enough document would
  otherwise end in a RecursionError traceback);
- numbers YAML 1.1 reads differently than a person wrote them: a leading zero is octal (``0060`` minutes
  would be 48) and colons are base 60 (``1:00`` would be 60); YAML 1.2 dropped both (YAML 1.2.2 spec,
  "Changes in version 1.2": octal is ``0o``, sexagesimal numbers are gone), so the loader asks for an
  unambiguous spelling instead of guessing;
- timestamps are kept as the text written: PyYAML would build them itself and fail on an impossible date
  (``2027-02-29``, second 60, offset ``+25:00``) with a bare ``ValueError``, so every time is read by the one
  strict reader of instants (``core/instants.py``), which names the field and what to write;
- the ``!!set``, ``!!omap``, ``!!pairs`` and ``!!binary`` types: a set's order changes between runs (the
  home region is the first of ``capacity.regions``), and nothing in a spec is binary.

``parse_document`` also returns the line of every mapping key and sequence item, so validation
errors can say where in the file a bad value is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.events import AliasEvent, NodeEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from capserve.core.errors import SpecError

# A campaign spec is a few kilobytes; 256 KiB leaves room for long gate lists and notes while
# keeping the pure-Python parser well under a second.
MAX_DOCUMENT_BYTES = 256 * 1024
# The deepest real spec path is about 5 levels (evaluation.load.prompt.tokens).
MAX_DEPTH = 32

Path = tuple[str | int, ...]

_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF8_BOM = b"\xef\xbb\xbf"


class _Refused(Exception):
    """A construct the strict loader does not accept; the message says which and where."""


@dataclass(frozen=True)
class Document:
    """A parsed document and the 1-based line of each key or item, by its path."""

    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without anchors, aliases, merge keys or duplicate keys, and with a depth limit."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        if isinstance(event, AliasEvent):
            raise _Refused(
                f"line {line}: alias *{event.anchor}: YAML anchors and aliases are not allowed in a spec "
                "(they can make a few lines expand into gigabytes); write the values out"
            )
        if isinstance(event, NodeEvent) and event.anchor is not None:
            raise _Refused(
                f"line {line}: anchor &{event.anchor}: YAML anchors and aliases are not allowed in a spec "
                "(they can make a few lines expand into gigabytes); write the values out"
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"line {line}: nested more than {MAX_DEPTH} levels deep; a spec needs about 5")
            node: Node | None = super().compose_node(parent, index)
            return node
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(node.value).replace("_", "").lstrip("+-")
        line = node.start_mark.line + 1
        if ":" in text:
            raise _Refused(
                f"line {line}: {node.value!r} is a base-60 number in YAML 1.1 (it would read as "
                f"{super().construct_yaml_int(node)}); write the plain number, or quote it if it is text"
            )
        if len(text) > 1 and text.startswith("0") and text[1:2] not in ("x", "b", "o"):
            raise _Refused(
                f"line {line}: {node.value!r} has a leading zero, which YAML 1.1 reads as octal (it would be "
                f"{super().construct_yaml_int(node)}); write it without the leading zero"
            )
        value: int = super().construct_yaml_int(node)
        return value

    def construct_yaml_float(self, node: ScalarNode) -> float:
        if ":" in str(node.value):
            raise _Refused(
                f"line {node.start_mark.line + 1}: {node.value!r} is a base-60 number in YAML 1.1; write the "
                "plain number, or quote it if it is text"
            )
        value: float = super().construct_yaml_float(node)
        return value

    def construct_timestamp_text(self, node: ScalarNode) -> str:
        return str(node.value)

    def construct_refused_type(self, node: Node) -> None:
        kind = node.tag.rsplit(":", 1)[-1]
        raise _Refused(
            f"line {node.start_mark.line + 1}: the YAML type !!{kind} is not allowed in a spec; use a plain list, "
            "mapping or string"
        )

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, str] = {}
        for key_node, _ in node.value:
            mark = key_node.start_mark
            line, where = mark.line + 1, f"line {mark.line + 1} column {mark.column + 1}"
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _Refused(f"line {line}: merge keys (<<) are not allowed in a spec; write the fields out")
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                raise _Refused(f"line {line}: a key must be a plain value, not a list or mapping") from None
            if first is not None:
                raise _Refused(
                    f"duplicate key {key!r} at {first} and {where}: a parser would silently keep "
                    "the last one; remove one of them"
                )
            seen[key] = where
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)
_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", _StrictLoader.construct_timestamp_text)
for _refused in ("set", "omap", "pairs", "binary"):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_refused}", _StrictLoader.construct_refused_type)


def decode_utf8(raw: bytes, source: str) -> str:
    """UTF-8 text (a leading byte-order mark is dropped); any other encoding is named with its offset."""
    if raw.startswith(_UTF16_BOMS):
        raise SpecError(f"{source}: the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError(
            f"{source}: not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} "
            f"(line {line}, column {column}) {exc.reason}; save the file as UTF-8"
        ) from None
    return text.removeprefix(_UTF8_BOM.decode("utf-8"))


def parse_document(raw: bytes, source: str) -> Document:
    """Parse one YAML (or JSON) document strictly; every refusal is one ``SpecError``."""
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise SpecError(
            f"{source}: {len(raw):,} bytes is more than a spec may have ({MAX_DOCUMENT_BYTES:,} bytes); "
            "is this the right file?"
        )
    text = decode_utf8(raw, source)
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)
        node = loader.get_single_node()
        if node is None:
            raise SpecError(f"{source}: the document is empty")
        data = loader.construct_document(node)
    except _Refused as exc:
        raise SpecError(f"{source}: {exc}") from None
    except yaml.reader.ReaderError as exc:
        # Raised before any parsing, for characters YAML never allows (NUL, most control characters).
        line = text.count("\n", 0, exc.position) + 1
        raise SpecError(
            f"{source}: character U+{exc.character:04X} at line {line} is not allowed in YAML; "
            "remove it (is this a binary file?)"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and context_mark is not None:
            problem += f" ({context} that starts at line {context_mark.line + 1}, column {context_mark.column + 1})"
        raise SpecError(f"{source}: not valid YAML{at}: {problem}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return Document(data=data, lines=_lines(node))


def _lines(node: Node, path: Path = ()) -> dict[Path, int]:
    """The line of each key and sequence item below ``node``."""
    found: dict[Path, int] = {}
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode):
                child = (*path, str(key_node.value))
                found[child] = key_node.start_mark.line + 1
                found.update(_lines(value_node, child))
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            found[child] = item.start_mark.line + 1
            found.update(_lines(item, child))
    return found
