"""Stories of the console's data side, below the pages: a message shown as
text rows (envelope, typed tuple, headers, body as text, JSON or hex), the
forms read with the CLI's notation (patterns, the typed tuple editor,
headers), and the routing network laid out from a real board's listings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from msgboard.associative import AddressPattern, Pattern, parse_template, template
from msgboard.console import forms, graph, messages
from msgboard.engine import Board
from msgboard.errors import InvalidArgument
from msgboard.message import Message
from msgboard.results import QueueStats, SelectorView
from msgboard.spec import LinkSpec, Op, QueueSpec, Role, SelectorSpec

# -------------------------------------------------------------- messages


def test_a_message_is_shown_with_its_types_kept() -> None:
    """Given a message with every field type, expect each field's type named
    and its text telling int 1 from float 1.0, bytes in hex, null as null;
    the tuple in the CLI's notation; only the envelope rows that are set."""
    m = Message(
        tuple=("job", 1, 1.0, None, True, b"\x00\xff"),
        address="rec.pets",
        headers={"b": "2", "a": "1"},
        content_type="application/json",
        body=b'{"x": [1, 2]}',
    )
    s = messages.shown(m)
    assert [(f.type, f.text) for f in s.fields] == [
        ("str", "job"),
        ("int", "1"),
        ("float", "1.0"),
        ("null", "null"),
        ("bool", "true"),
        ("bytes", "00 ff"),
    ]
    assert json.loads(s.tuple_json) == ["job", 1, 1.0, None, True, {"bytes": "AP8="}]
    assert s.headers == [("a", "1"), ("b", "2")]
    labels = [label for label, _ in s.envelope]
    assert "address" in labels and "reply to" not in labels and "expires at" not in labels
    assert s.dead_letter is None and s.body_size == 13


def test_the_body_views() -> None:
    """Given bodies of JSON, text and binary, expect JSON pretty-printed (or
    why not), text decoded, a hex dump with offsets and ASCII, the default
    view chosen from the content type and the bytes, and large bodies cut
    with the bytes left out counted."""
    assert messages.body_json(b'{"a":1}').text == '{\n  "a": 1\n}'
    assert "not JSON" in messages.body_json(b"plain").error
    assert messages.body_text("héllo".encode()).text == "héllo"
    bad = messages.body_text(b"ok\xff")
    assert "not valid UTF-8" in bad.error and bad.text == "ok\ufffd"
    dump = messages.body_hex(b"Hello, world!\x00\x01\x02 more").text.splitlines()
    assert (
        dump[0] == "00000000  48 65 6c 6c 6f 2c 20 77 6f 72 6c 64 21 00 01 02  |Hello, world!...|"
    )
    assert dump[1].startswith("00000010  20 6d 6f 72 65")
    assert messages.default_view("application/json", b"[1]") == "json"
    assert messages.default_view("application/json", b"[1") == "text"
    assert messages.default_view("", b"\xff\xfe") == "hex"
    big = b"a" * (messages.MAX_BODY_TEXT + 10)
    assert messages.body_text(big).left_out == 10
    assert messages.body_hex(big).left_out == len(big) - messages.MAX_BODY_HEX
    # A multi-byte character cut by the bound is not called invalid.
    cut = b"a" * (messages.MAX_BODY_TEXT - 1) + "é".encode() + b"z"
    assert messages.body_text(cut).error == ""
    assert messages.default_view("", cut) == "text"


def test_a_dead_letter_names_its_reason_and_origin() -> None:
    """Given the headers the board writes on a dead letter, expect the
    reason, the origin queue and seq read back."""
    m = Message(
        headers={
            "x-dead-letter-reason": "max-deliveries",
            "x-dead-letter-queue": "jobs",
            "x-dead-letter-seq": "42",
        }
    )
    assert messages.dead_letter_of(m) == messages.DeadLetter("max-deliveries", "jobs", 42)
    assert messages.dead_letter_of(Message(headers={"x": "y"})) is None


# ----------------------------------------------------------------- forms


def test_a_pattern_form_reads_the_cli_notation() -> None:
    """Given a template a line (alternatives), an address pattern and a
    filter as the CLI takes them, expect the same pattern the CLI builds."""
    f = forms.PatternForm.of(
        {
            "template": '["job", "?int"]\n\n["task", "?"]',
            "address": "topic:a.*",
            "filter": "priority > 3",
        }
    )
    p = f.pattern()
    assert p.templates == (parse_template(["job", "?int"]), parse_template(["task", "?"]))
    assert p.address == AddressPattern.topic("a.*") and p.filter == "priority > 3"
    assert p.matches(Message(tuple=("job", 5), address="a.b", priority=4))
    assert not p.matches(Message(tuple=("job", 5.0), address="a.b", priority=4))
    assert forms.PatternForm.of({}).pattern() is not None
    assert forms.PatternForm.of({}).empty


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"template": '["a"]\n["b"'}, "template line 2: not JSON"),
        ({"template": '["?integer"]'}, "template line 1[0]: unknown formal"),
        ({"address": "topic:a*"}, "mixes a wildcard"),
        ({"filter": "priority >"}, "pattern.filter"),
    ],
)
def test_a_bad_pattern_form_names_the_part(form: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        forms.PatternForm.of(form).pattern()


def test_the_tuple_editor_keeps_types() -> None:
    """Given rows typed int, float, null, bytes, bool and str, expect a tuple
    where "1" as int and "1" as float are two values, null is None, bytes
    come from hex; each row reads back from ``field_row``."""
    kinds = ["int", "float", "null", "bytes", "bool", "str", "str"]
    texts = ["1", "1", "", "de ad:BE ef", "TRUE", " spaced ", "?x"]
    t = forms.typed_tuple(kinds, texts)
    assert t == (1, 1.0, None, b"\xde\xad\xbe\xef", True, " spaced ", "?x")
    assert [type(v) for v in t[:2]] == [int, float]
    rows = [forms.field_row(v) for v in t]
    assert forms.typed_tuple([k for k, _ in rows], [x for _, x in rows]) == t
    assert forms.typed_tuple([], []) == ()


@pytest.mark.parametrize(
    ("kinds", "texts", "message"),
    [
        (["str", "int"], ["a", "1.5"], r"tuple\[1\]: '1.5' is not an int"),
        (["int"], [str(2**63)], r"tuple\[0\]: integer .* does not fit in 64 bits"),
        (["float"], ["one"], r"tuple\[0\]: 'one' is not a float"),
        (["bool"], ["yes"], r"tuple\[0\]: 'yes' is not a bool"),
        (["bytes"], ["abc"], r"tuple\[0\]: 'abc' is not hex"),
        (["null"], ["0"], r"tuple\[0\]: a null field has no value"),
        (["date"], ["x"], r"tuple\[0\]: unknown type 'date'"),
        (["int"], [], "1 types but 0 values"),
    ],
)
def test_the_tuple_editor_names_a_bad_field(
    kinds: list[str], texts: list[str], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        forms.typed_tuple(kinds, texts)


def test_a_chooser_lists_a_bounded_number_of_queues() -> None:
    """Given more queues than a chooser lists, expect the first ones, and
    the chosen one kept even past the bound (never one that is not there)."""
    names = [f"q{i:05}" for i in range(forms.MAX_CHOICES + 50)]
    assert forms.choices(names) == names[: forms.MAX_CHOICES]
    assert forms.choices(names, names[-1]) == [*names[: forms.MAX_CHOICES], names[-1]]
    assert forms.choices(names, "nope") == names[: forms.MAX_CHOICES]
    assert forms.choices(["a", "b"], "a") == ["a", "b"]


def test_headers_and_numbers_from_a_form() -> None:
    assert forms.headers_from_text("a: 1\n\n b : x:y \n") == {"a": "1", "b": "x:y"}
    with pytest.raises(InvalidArgument, match="headers line 2"):
        forms.headers_from_text("a: 1\nnocolon")
    assert forms.int_field({"priority": " -3 "}, "priority") == -3
    assert forms.int_field({}, "priority", 7) == 7
    with pytest.raises(InvalidArgument, match=r"priority: '2\.5' is not a whole number"):
        forms.int_field({"priority": "2.5"}, "priority")


# ----------------------------------------------------------------- graph


def test_the_network_is_laid_out_from_a_real_board(tmp_path: Path) -> None:
    """Given a board with orders -> (MOVE) work -> a consumer, orders ->
    (COPY) audit, a DELETE on audit, orders' dead letters to dlq and a
    detached durable selector, expect queues as nodes in columns by flow,
    every selector an edge labelled with its op, pattern and credit, the
    consumer at the end, the dead-letter route dashed, and links to browse
    each queue and to browse the source with each selector's pattern."""
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("dlq"))
        board.create_queue(QueueSpec("orders", dead_letter="dlq"))
        for name in ("work", "audit"):
            board.create_queue(QueueSpec(name))
        move = board.create_selector(
            SelectorSpec(
                "orders",
                Pattern(AddressPattern.topic("eu.#"), (template("order", int),)),
                Op.MOVE,
                "work",
                credit=10,
            )
        )
        copy = board.create_selector(SelectorSpec("orders", op=Op.COPY, destination="audit"))
        drop = board.create_selector(
            SelectorSpec("audit", Pattern(filter="priority < 0"), Op.DELETE)
        )
        idle = board.create_selector(SelectorSpec("dlq", role=Role.DEFAULT, credit=5))
        board.subscribe(
            "work", deliver=lambda d: None, end=lambda e: None, credit=3, identity="alice"
        )
        board.post("orders", [Message(tuple=("order", 1), address="eu.fr")])
        stats = board.stats().queues
        sels = board.list_selectors()
        cons = board.list_consumers()
        dls = {q.spec.name: q.spec.dead_letter for q in board.list_queues() if q.spec.dead_letter}
    g = graph.layout(stats, sels, cons, dls)
    nodes = {n.key: n for n in g.nodes}
    edges = {e.key: e for e in g.edges}
    rank = {k: n.rank for k, n in nodes.items()}
    assert rank["q:orders"] == 0 and rank["q:work"] == 1 and rank["q:audit"] == 1
    assert rank["q:dlq"] == 1 and rank[f"end:{idle.id}"] == 2
    [consumer] = [n for n in g.nodes if n.kind == "consumer"]
    assert consumer.rank == 2 and "alice" in consumer.label and "credit 3" in consumer.detail
    assert nodes["q:work"].detail.startswith("1 waiting")  # moved there, delivered, unacked
    e = edges[move.id]
    assert (e.source, e.target, e.kind) == ("q:orders", "q:work", "move")
    assert (e.label, e.pattern) == ("MOVE · credit 10", 'topic:eu.# ["order", "?int"]')
    back = forms.PatternForm.of(dict(_query(e.href))).pattern()
    assert back == Pattern(AddressPattern.topic("eu.#"), (template("order", int),))
    assert (edges[copy.id].label, edges[copy.id].pattern) == (
        "COPY · credit unlimited",
        "everything",
    )
    assert (edges[drop.id].label, edges[drop.id].pattern) == ("DELETE", "where priority < 0")
    assert nodes[f"end:{drop.id}"].label == "drop"
    assert edges[idle.id].label == "default MOVE · credit 5"
    long = SelectorSpec("orders", Pattern(filter="address LIKE '" + "x" * 50 + "'"))
    cut = graph.layout(stats, [SelectorView("s", long, True, False, 0, 0, 0)], [])
    # A long pattern is drawn whole, over lines (issue 35: it was cut).
    assert "x" * 50 in cut.edges[0].pattern and len(cut.edges[0].lines) > 1
    assert all(len(line) <= graph.LABEL_CHARS for line in cut.edges[0].lines[:1])
    assert "".join(cut.edges[0].lines).replace(" ", "") == cut.edges[0].pattern.replace(" ", "")
    assert "x" * 50 in cut.edges[0].title
    assert edges["dl:orders"].kind == "dead-letter" and edges["dl:orders"].target == "q:dlq"
    assert nodes["q:orders"].href == "/browse/orders"
    # Every box is inside the drawing, and no two overlap.
    for n in g.nodes:
        assert n.x > 0 and n.x + n.w < g.width and n.y > 0 and n.y + n.h < g.height
    boxes = [(n.x, n.y) for n in g.nodes]
    assert len(set(boxes)) == len(boxes)
    assert all(e.path.startswith("M ") for e in g.edges)


def test_a_cycle_through_dead_letters_still_lays_out() -> None:
    """Given a queue whose dead-letter queue feeds it back (and one that is
    its own dead-letter queue), expect every node placed once and the edge
    that closes the cycle drawn as an arc."""

    def row(name: str) -> QueueStats:
        return QueueStats(name, False, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    back = SelectorView("sel-1", SelectorSpec("retry", destination="main"), True, False, 0, 0, 0)
    g = graph.layout(
        [row("main"), row("retry"), row("self")], [back], [], {"main": "retry", "self": "self"}
    )
    ranks = {n.key: n.rank for n in g.nodes}
    assert len(ranks) == 3 and ranks["q:self"] == 0
    assert ranks["q:main"] != ranks["q:retry"]
    assert all(e.path for e in g.edges)


def _query(link: str) -> list[tuple[str, str]]:
    from urllib.parse import parse_qsl, urlsplit

    return parse_qsl(urlsplit(link).query)


def test_a_link_is_an_arrow_to_the_remote_queue(board: Board) -> None:
    """Given a MOVE across a link to a queue of another board and a pull from
    one, I expect each drawn as an arrow to (or from) a box naming the link
    and the remote queue, and no box for the internal outbox ``$link.ID``
    (issue 35: the page drew the outbox and no remote end)."""
    board.create_link(LinkSpec("central", "127.0.0.1:1"))
    for name in ("orders", "inbox"):
        board.create_queue(QueueSpec(name))
    push = board.create_selector(
        SelectorSpec("orders", destination="orders.all", destination_link="central")
    )
    pull = board.create_selector(
        SelectorSpec("requests", destination="inbox", source_link="central")
    )
    stats = board.stats().queues
    assert any(q.name.startswith("$link.") for q in stats)  # the outbox exists
    g = graph.layout(stats, board.list_selectors(), [], {})
    nodes = {n.key: n for n in g.nodes}
    edges = {e.key: e for e in g.edges}
    assert not [k for k in nodes if "$link." in k]
    assert edges[push.id].target == "remote:central:orders.all"
    assert nodes["remote:central:orders.all"].label == "central:orders.all"
    assert edges[pull.id].source == "remote:central:requests"
    assert edges[pull.id].target == "q:inbox"
