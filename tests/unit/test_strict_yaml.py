"""The strict document reader: what a YAML/JSON parser would silently accept is refused, naming the place."""

from __future__ import annotations

import pytest

from capserve.core import strict_yaml
from capserve.core.errors import SpecError
from capserve.core.strict_yaml import MAX_DEPTH, MAX_DOCUMENT_BYTES, parse_document

BILLION_LAUGHS = b"""\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def refused(raw: bytes) -> str:
    with pytest.raises(SpecError) as caught:
        parse_document(raw, "spec.yaml")
    return str(caught.value)


def test_a_plain_document_parses_with_the_line_of_every_key() -> None:
    document = parse_document(b"name: k3\ncapacity:\n  regions:\n    - us-east-2\n    - us-west-2\n", "s")
    assert document.data == {"name": "k3", "capacity": {"regions": ["us-east-2", "us-west-2"]}}
    assert document.lines[("capacity", "regions", 1)] == 5
    assert document.line_of(("capacity", "regions", 1, "deeper")) == 5
    assert document.line_of(("nowhere",)) is None


def test_json_is_read_too() -> None:
    assert parse_document(b'{"name": "k3", "capacity": {"instance_count": 1}}', "s").data["capacity"] == {
        "instance_count": 1
    }


def test_the_alias_bomb_fails_at_its_first_anchor_before_anything_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing may be constructed (that is where aliases expand: the bomb took 157 s and all memory).
    def never(*_: object, **__: object) -> None:
        raise AssertionError("the document was constructed")

    monkeypatch.setattr(strict_yaml._StrictLoader, "construct_document", never)
    message = refused(BILLION_LAUGHS)
    assert "line 1: anchor &a" in message and "not allowed" in message
    assert "lol" not in message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"base: &base {a: 1}\nother: *base\n", "anchor &base"),
        (b"a: 1\nb: *nothing\n", "alias *nothing"),
        (b"<<: {budget: 1}\nbudget: 2\n", "merge keys (<<) are not allowed"),
        (b"capacity:\n  max_upfront_fee_usd: 4000\n  max_upfront_fee_usd: 400000\n", "duplicate key"),
        (b'{"name": "a", "name": "b"}', "duplicate key 'name' at line 1 column 2 and line 1 column 15"),
        (b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5), f"nested more than {MAX_DEPTH} levels"),
        (b"", "the document is empty"),
        (b"# only a comment\n", "the document is empty"),
        (b"a: 1\n---\nb: 2\n", "not valid YAML at line 2"),
        (b"name: [k3\n", "not valid YAML at line 2"),
        (b"name: k3\x00\n", "character U+0000 at line 1"),
        (b"name: caf\xe9\n", "not UTF-8: byte 0xe9 at byte offset 9 (line 1, column 10)"),
        (b"\xff\xfen\x00a\x00", "UTF-16"),
        (b"? [a, b]\n: 1\n", "a key must be a plain value"),
    ],
)
def test_refusals_name_the_place(raw: bytes, expected: str) -> None:
    message = refused(raw)
    assert expected in message, message
    assert message.startswith("spec.yaml: ")


def test_duplicate_keys_name_both_lines() -> None:
    message = refused(b"capacity:\n  max_upfront_fee_usd: 4000\n  regions: [x]\n  max_upfront_fee_usd: 400000\n")
    assert "duplicate key 'max_upfront_fee_usd' at line 2 column 3 and line 4 column 3" in message


def test_a_utf8_byte_order_mark_is_fine() -> None:
    assert parse_document(b"\xef\xbb\xbfname: k3\n", "s").data == {"name": "k3"}


def test_size_limit() -> None:
    message = refused(b"a: " + b"x" * MAX_DOCUMENT_BYTES + b"\n")
    assert "more than a spec may have" in message
