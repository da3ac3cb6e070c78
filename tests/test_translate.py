"""Translators, the link's interface (msgboard/links/translate.py): the
language's statements, its errors with their positions, apply and reverse,
and at random that reverse undoes apply wherever each step is invertible
and that a BOUNCE on the far board comes home as a BOUNCE here would have
made it."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from msgboard import Message
from msgboard.client import Client
from msgboard.errors import InvalidArgument
from msgboard.links import IDENTITY, Origin, compile_translator, selector_translator
from msgboard.links.translate import BOUNCED_FROM, LINK_REPLY_TO
from msgboard.spec import ORIGIN_BOARD, ORIGIN_QUEUE, ORIGIN_SEQ
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

HERE = Origin("b-site1", "orders", 42)


def bounce(m: Message, queue: str) -> Message:
    """What the engine's BOUNCE on ``queue`` makes of ``m``
    (engine/network.py, ``Network.take``): to its reply_to, address and
    reply_to swapped, the address kept in x-bounced-from."""
    return Message(
        tuple=m.tuple,
        address=m.reply_to,
        headers={**m.headers, BOUNCED_FROM: m.address},
        reply_to=m.address if m.address else queue,
        body=m.body,
    )


# -- the statements -----------------------------------------------------------


def test_the_empty_text_is_the_identity() -> None:
    """Given "" (or only separators), I expect the identity: apply and
    reverse hand back the very message."""
    m = Message(address="a.b", headers={"h": "1"}, reply_to="r")
    for text in ("", " ", ";;", "\n ; \n"):
        t = compile_translator(text)
        assert t.identity and t.apply(m, HERE) is m and t.reverse(m) is m
    assert IDENTITY.identity and IDENTITY.text == ""


def test_a_prefix_mounts_the_remote_namespace_and_reverse_unmounts_it() -> None:
    """Given prefix +site1., I expect rec.pets to cross as site1.rec.pets
    and come back as rec.pets; prefix -P (or strip P) removes P when the
    address starts with it and leaves other addresses alone."""
    t = compile_translator("prefix +site1.")
    out = t.apply(Message(address="rec.pets", body=b"x", key="k7", priority=3), HERE)
    assert (out.address, out.body, out.key, out.priority) == ("site1.rec.pets", b"x", "k7", 3)
    assert t.reverse(out).address == "rec.pets"
    for text in ("prefix -rec.", "strip rec.", "prefix - rec."):
        s = compile_translator(text)
        assert s.rewrite("rec.pets") == "pets"
        assert s.rewrite("misc.pets") == "misc.pets"
        assert s.unwrite("pets") == "rec.pets"


def test_word_maps_topic_words_in_both_directions() -> None:
    """Given word cats=felines dogs=canines, I expect every such word of the
    address mapped (never part of a word), and the inverse on the way back."""
    t = compile_translator("word cats=felines dogs=canines")
    assert t.rewrite("pets.cats.dogs.catsup") == "pets.felines.canines.catsup"
    assert t.unwrite("pets.felines.canines") == "pets.cats.dogs"
    assert t.rewrite("") == ""


def test_statements_apply_in_the_order_written() -> None:
    """Given a strip then a prefix, I expect the strip first; reversed in
    the opposite order."""
    t = compile_translator("strip rec.\nprefix +site1.\nword cats=felines")
    assert t.rewrite("rec.pets.cats") == "site1.pets.felines"
    assert t.unwrite("site1.pets.felines") == "rec.pets.cats"


def test_headers_are_set_and_removed_and_the_origin_recorded() -> None:
    """Given header set/del and origin, I expect the headers changed, the
    origin (board, queue, seq) recorded, and nothing else of the message
    touched. Each crossing records its own origin (the last hop's)."""
    t = compile_translator(
        'header set x-site=1 ; header del secret ; header set "a b"="c;d" ; origin'
    )
    m = Message(address="a", headers={"secret": "s", "keep": "k"}, tuple=(1, "x"), expires_at=99)
    out = t.apply(m, HERE)
    assert dict(out.headers) == {
        "keep": "k",
        "x-site": "1",
        "a b": "c;d",
        ORIGIN_BOARD: "b-site1",
        ORIGIN_QUEUE: "orders",
        ORIGIN_SEQ: "42",
    }
    assert (out.tuple, out.expires_at, out.address) == ((1, "x"), 99, "a")
    assert dict(m.headers) == {"secret": "s", "keep": "k"}  # the original untouched
    again = t.apply(out, Origin("b-central", "in", 7))
    assert again.headers[ORIGIN_BOARD] == "b-central" and again.headers[ORIGIN_SEQ] == "7"
    assert ORIGIN_BOARD not in compile_translator("header set a=1").apply(m, HERE).headers


def test_the_last_header_statement_on_a_name_wins() -> None:
    """Given set then del of one header, I expect it removed; del then set,
    I expect it set."""
    m = Message(headers={"h": "0"})
    assert "h" not in compile_translator("header set h=1; header del h").apply(m, HERE).headers
    out = compile_translator("header del h; header set h=2").apply(m, HERE)
    assert out.headers["h"] == "2"
    assert compile_translator("header set h=").apply(m, HERE).headers["h"] == ""


def test_reply_sends_the_reply_to_the_far_queue_and_reverse_brings_it_back() -> None:
    """Given reply back-site1, I expect the forwarded reply_to to be that
    far queue, the message's own reply_to carried in x-link-reply-to, the
    origin recorded; and reverse to restore address and reply_to."""
    t = compile_translator("prefix +site1. ; reply back-site1")
    assert t.origin and t.reply == "back-site1"
    m = Message(address="rec.pets", reply_to="answers")
    out = t.apply(m, HERE)
    assert (out.address, out.reply_to) == ("site1.rec.pets", "back-site1")
    assert out.headers[LINK_REPLY_TO] == "answers" and out.headers[ORIGIN_BOARD] == "b-site1"
    home = t.reverse(out)
    assert (home.address, home.reply_to) == ("rec.pets", "answers")
    assert LINK_REPLY_TO not in home.headers


def test_a_bounce_on_the_far_board_comes_home_as_a_bounce_here() -> None:
    """Given a message forwarded with prefix +site1. and reply back-site1,
    bounced on the far board (to back-site1, addresses swapped), I expect
    reverse to make of it what a BOUNCE here would have made of the
    original: address the original reply_to, reply_to and x-bounced-from
    the original address."""
    t = compile_translator("prefix +site1. ; word cats=felines ; reply back-site1")
    m = Message(address="rec.pets.cats", reply_to="answers", body=b"b")
    far = bounce(t.apply(m, HERE), "central")
    assert (far.address, far.reply_to) == ("back-site1", "site1.rec.pets.felines")
    home = t.reverse(far)
    local = bounce(m, "orders")
    assert (home.address, home.reply_to, home.headers[BOUNCED_FROM]) == (
        local.address,
        local.reply_to,
        local.headers[BOUNCED_FROM],
    )
    assert LINK_REPLY_TO not in home.headers


# -- errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "at", "words"),
    [
        ("prefix", 7, "expected +PREFIX or -PREFIX, found the end"),
        ("prefix site1.", 8, "expected +PREFIX or -PREFIX, found 'site1.'"),
        ("prefix +", 9, "expected the prefix"),
        ("prefix +a b", 11, "expected ';' or the end, found 'b'"),
        ("strip a; frobnicate x", 10, "unknown statement 'frobnicate'"),
        ("word a=", 8, "expected the word that 'a' becomes"),
        ("word a b", 8, "expected '=' after 'a'"),
        ("word a=b a=c", 10, "the word 'a' is mapped twice"),
        ("word a=c b=c", 12, "'a' and 'b' both become 'c' (not invertible)"),
        ("word a.b=c", 6, "has no '.'"),
        ("header put x=1", 8, "expected set or del, found 'put'"),
        ("header set x", 13, "expected '=' after 'x'"),
        ('header set x="abc', 14, "no closing quote"),
        ('header set x="\\q"', 14, "a bad quoted string"),
        ("header del x-msgboard-hops", 12, "the board's own"),
        ("origin on", 8, "expected ';' or the end, found 'on'"),
        ("reply", 6, "expected the far board's queue"),
        ("=", 1, "expected a statement, found '='"),
        ("prefix +a\nprefix", 17, "expected +PREFIX"),
    ],
)
def test_a_translator_that_does_not_parse_names_where(text: str, at: int, words: str) -> None:
    """Given a translator that does not parse, I expect InvalidArgument on
    the field translator, naming the 1-based character position."""
    with pytest.raises(InvalidArgument) as e:
        compile_translator(text)
    assert e.value.field == "translator"
    assert str(e.value).startswith(f"translator: at {at}: "), str(e.value)
    assert words in str(e.value)


def test_a_selectors_translator_is_named_within_its_spec() -> None:
    """Given a selector's translator, I expect errors on spec.translator,
    and a translator on a selector that crosses no link refused."""
    with pytest.raises(InvalidArgument) as e:
        selector_translator("prefix", crossing=True)
    assert e.value.field == "spec.translator" and "at 7" in str(e.value)
    with pytest.raises(InvalidArgument) as e:
        selector_translator("prefix +a.", crossing=False)
    assert e.value.field == "spec.translator" and "crosses a link" in str(e.value)
    assert selector_translator("", crossing=False) is IDENTITY
    assert selector_translator("prefix +a.", crossing=True).rewrite("b") == "a.b"
    with pytest.raises(InvalidArgument, match="longer than"):
        compile_translator("origin;" * 1000)


def test_create_selector_refuses_a_bad_translator_on_the_wire(server: ServerThread) -> None:
    """Given CreateSelector with a translator that does not parse, I expect
    INVALID_ARGUMENT with a BadRequest on spec.translator naming the
    position, and no selector made."""
    from google.rpc import error_details_pb2, status_pb2

    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="a")))
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="b")))
    spec = pb.SelectorSpec(source="a", destination="b", translator="word cats")
    with pytest.raises(grpc.RpcError) as e:
        stub.CreateSelector(pb.CreateSelectorRequest(spec=spec))
    err: object = e.value
    assert isinstance(err, grpc.Call) and err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith("spec.translator: at 10: expected '=' after 'cats'")
    [raw] = [v for k, v in err.trailing_metadata() if k == "grpc-status-details-bin"]
    fields = []
    for d in status_pb2.Status.FromString(raw).details:
        bad = error_details_pb2.BadRequest()
        if d.Unpack(bad):
            fields += [v.field for v in bad.field_violations]
    assert fields == ["spec.translator"]
    with Client(server.address) as c:
        assert c.list_selectors("a") == []
        with pytest.raises(InvalidArgument, match="crosses a link"):
            c.create_selector("a", to="b", translator="prefix +x.")


# -- at random ----------------------------------------------------------------

WORDS = ["a", "b", "cats", "dogs", "rec", "site1", ""]
words = st.sampled_from(WORDS)
addresses = st.lists(words, min_size=1, max_size=4).map(".".join)
bare = st.sampled_from(["a.", "rec.", "site1.", "x", "b.c."])


@st.composite
def statements(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["add", "strip", "word", "set", "del"]))
    if kind == "add":
        return f"prefix +{draw(bare)}"
    if kind == "strip":
        return f"strip {draw(bare)}"
    if kind == "word":
        pool = [w for w in WORDS if w] + ["felines", "z"]
        src = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
        dst = draw(st.permutations(pool).map(lambda p: p[: len(src)]))
        return "word " + " ".join(f"{a}={b}" for a, b in zip(src, dst, strict=True))
    if kind == "set":
        return f"header set h{draw(st.integers(0, 2))}={draw(bare)}"
    return f"header del h{draw(st.integers(0, 2))}"


texts = st.lists(statements(), max_size=5).map(" ; ".join)


def invertible(text: str, address: str) -> bool:
    """Whether every address step of ``text`` is invertible on ``address``,
    checked step by step with each statement compiled alone: a strip finds
    its prefix, a word mapping meets none of its target words unmapped."""
    for part in text.split(" ; "):
        if not part:
            continue
        t = compile_translator(part)
        if part.startswith("strip ") and not address.startswith(part[6:]):
            return False
        if part.startswith("word "):
            pairs = [p.split("=") for p in part[5:].split()]
            sources = {a for a, _ in pairs}
            targets = {b for _, b in pairs}
            if any(w in targets and w not in sources for w in address.split(".")):
                return False
        address = t.rewrite(address)
    return True


@settings(max_examples=400, deadline=None)
@given(text=texts, address=addresses, reply=st.sampled_from(["", "answers"]))
def test_reverse_undoes_apply_where_each_step_is_invertible(
    text: str, address: str, reply: str
) -> None:
    """At random: reverse(apply(m)) has m's address and reply_to whenever
    every address step is invertible on m's address (with and without a
    ``reply`` statement)."""
    assume(invertible(text, address))
    for full in (text, f"{text} ; reply back" if text else "reply back"):
        t = compile_translator(full)
        m = Message(address=address, reply_to=reply, headers={"h0": "v"}, body=b"B")
        home = t.reverse(t.apply(m, HERE))
        assert (home.address, home.reply_to, home.body) == (address, reply, b"B")


@settings(max_examples=300, deadline=None)
@given(text=texts, address=addresses.filter(bool), reply=st.sampled_from(["answers", "r.q"]))
def test_a_far_bounce_comes_home_as_a_local_bounce_at_random(
    text: str, address: str, reply: str
) -> None:
    """At random: with ``reply back``, reverse(bounce(apply(m))) has the
    address, reply_to and x-bounced-from that bounce(m) has, wherever every
    address step is invertible on m's address and leaves an address (a
    BOUNCE of a message with none replies to its queue's name instead)."""
    assume(invertible(text, address))
    t = compile_translator(f"{text} ; reply back" if text else "reply back")
    assume(t.rewrite(address))
    m = Message(address=address, reply_to=reply)
    home = t.reverse(bounce(t.apply(m, HERE), "central"))
    local = bounce(m, "orders")
    assert (home.address, home.reply_to, home.headers[BOUNCED_FROM]) == (
        local.address,
        local.reply_to,
        local.headers[BOUNCED_FROM],
    )


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=' +-=;\n"\\abprefixstwordheadsetlorigny.', max_size=30))
def test_any_text_compiles_or_is_refused_with_a_position(text: str) -> None:
    """At random: any text either compiles or is InvalidArgument on
    translator naming a position within the text (or just past its end);
    nothing else escapes."""
    try:
        compile_translator(text)
    except InvalidArgument as e:
        assert e.field == "translator"
        at = int(str(e).split(":")[1].split()[1])
        assert 1 <= at <= len(text) + 1
