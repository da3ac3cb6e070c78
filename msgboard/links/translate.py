"""Translators: what a link's interface does to a message crossing it.

The Channel design's *translator* (seeds 004, section 4.2) relocates a
remote namespace into a subspace of the local one, like mounting a file
system or NAT. A crossing selector (a push ``--to LINK:QUEUE`` or a pull
``LINK:QUEUE --to LOCAL``) carries one, written in a small text language
and compiled when the selector is created (``compile_translator``); the
link applies it once per message (``Translator.apply``) and undoes its
address part on what comes home (``Translator.reverse``).

The language: statements separated by ``;`` or new lines, applied in the
order written::

    prefix +P        add P in front of the address      (prefix +site1.)
    prefix -P        remove P from the front, if there  (also: strip P)
    word A=B [C=D]   map topic words: every dot-separated word A becomes B
    header set N=V   set header N to V
    header del N     remove header N
    origin           record where it came from: x-origin-board,
                     x-origin-queue, x-origin-seq (a link records them on
                     every message it carries anyway; the statement says
                     so in the translator, and records them when a
                     translator is applied by hand)
    reply Q          the forwarded reply_to becomes Q, a queue on the board
                     it crosses to (the way home); the message's own reply_to
                     travels in header x-link-reply-to; implies origin

A value is a bare word (no space, ``;``, ``=`` or ``"``) or a double-quoted
string with JSON's escapes. The empty text is the identity.

**Reverse.** The address statements (prefix, strip, word) are undone in
reverse order: ``reverse(apply(m))`` has ``m``'s address wherever each
step is invertible (a strip whose prefix was there, a word mapping whose
target word was not in the address already), and ``m``'s reply_to when
the translator says ``reply``. A message that came back on a BOUNCE on
the far board (``x-bounced-from`` equal to its reply_to, as a BOUNCE
leaves it) gets its reply_to and ``x-bounced-from`` reversed and its
address back from ``x-link-reply-to``: exactly what a BOUNCE here would
have made of the original message. Header statements are one way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from msgboard.errors import InvalidArgument
from msgboard.message import Message, build

# Origin headers (``origin``): the board, queue and seq a message was on
# before it crossed its last link (the link stamps them too).
from msgboard.spec import ORIGIN_BOARD, ORIGIN_QUEUE, ORIGIN_SEQ, SelectorSpec

#: The message's own reply_to, when ``reply`` replaced it.
LINK_REPLY_TO = "x-link-reply-to"
#: What the engine's BOUNCE sets (``engine/network.py``).
BOUNCED_FROM = "x-bounced-from"
#: Headers the board keeps for itself (the hop count): a translator may
#: not set or remove them.
RESERVED_PREFIX = "x-msgboard-"
#: The longest translator text, in characters.
MAX_TEXT = 4096

Rewrite = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a forwarded message was posted: its board's id (its data's,
    ``Board.board_id``), queue and seq."""

    board: str
    queue: str
    seq: int

    def key(self) -> str:
        """The idempotency key a forwarded message carries:
        ``link:<board>:<queue>:<seq>``."""
        return f"link:{self.board}:{self.queue}:{self.seq}"


def _identity(s: str) -> str:
    return s


def _chain(steps: list[Rewrite]) -> Rewrite:
    if not steps:
        return _identity
    if len(steps) == 1:
        return steps[0]

    def run(s: str) -> str:
        for f in steps:
            s = f(s)
        return s

    return run


def _add(p: str) -> Rewrite:
    return lambda s: p + s


def _strip(p: str) -> Rewrite:
    n = len(p)
    return lambda s: s[n:] if s.startswith(p) else s


def _words(table: dict[str, str]) -> Rewrite:
    get = table.get

    def run(s: str) -> str:
        if not s:
            return s
        return ".".join([get(w, w) for w in s.split(".")])

    return run


class Translator:
    """A compiled translator (``compile_translator``): ``apply`` it to a
    message crossing the interface, ``reverse`` it on one coming home.
    ``text`` is what it was compiled from."""

    __slots__ = ("_back", "_dels", "_fwd", "_origin", "_reply", "_sets", "identity", "text")

    def __init__(
        self,
        text: str,
        fwd: list[Rewrite],
        back: list[Rewrite],
        sets: dict[str, str],
        dels: tuple[str, ...],
        origin: bool,
        reply: str | None,
    ) -> None:
        self.text = text
        self._fwd = _chain(fwd)
        self._back = _chain(back[::-1])
        self._sets = sets
        self._dels = dels
        self._origin = origin
        self._reply = reply
        #: True when ``apply`` returns every message as it is.
        self.identity = not (fwd or sets or dels or origin or reply is not None)

    @property
    def origin(self) -> bool:
        """Whether ``apply`` records the origin headers."""
        return self._origin

    @property
    def reply(self) -> str | None:
        """The far queue ``reply`` names, or None."""
        return self._reply

    def rewrite(self, address: str) -> str:
        """``address`` as ``apply`` rewrites it."""
        return self._fwd(address)

    def unwrite(self, address: str) -> str:
        """``address`` as ``reverse`` rewrites it."""
        return self._back(address)

    def apply(self, msg: Message, origin: Origin) -> Message:
        """``msg`` as it leaves through the interface: address rewritten,
        headers set and removed, origin recorded, reply_to replaced, in that
        order. Everything else (tuple, body, key, priority, times) as it was."""
        if self.identity:
            return msg
        headers: Mapping[str, str] = msg.headers
        if self._sets or self._dels or self._origin or self._reply is not None:
            h = dict(headers)
            for n in self._dels:
                h.pop(n, None)
            h.update(self._sets)
            if self._origin:
                h[ORIGIN_BOARD] = origin.board
                h[ORIGIN_QUEUE] = origin.queue
                h[ORIGIN_SEQ] = str(origin.seq)
            reply_to = msg.reply_to
            if self._reply is not None:
                h[LINK_REPLY_TO] = msg.reply_to
                reply_to = self._reply
            headers = h
        else:
            reply_to = msg.reply_to
        return _with(msg, self._fwd(msg.address), headers, reply_to)

    def reverse(self, msg: Message) -> Message:
        """``msg``, coming home through the interface, with the address
        statements undone (see the module's docstring): as ``apply`` found
        it, or, if it came back on a BOUNCE on the far board, as a BOUNCE
        here would have made it."""
        if self.identity:
            return msg
        h = msg.headers
        back = self._back
        bounced = h.get(BOUNCED_FROM)
        if bounced is not None and bounced == msg.reply_to:
            out = dict(h)
            out[BOUNCED_FROM] = back(bounced)
            address = out.pop(LINK_REPLY_TO, msg.address)
            return _with(msg, address, out, back(msg.reply_to))
        if LINK_REPLY_TO in h:
            out = dict(h)
            reply_to = out.pop(LINK_REPLY_TO)
            return _with(msg, back(msg.address), out, reply_to)
        return _with(msg, back(msg.address), h, msg.reply_to)

    def __repr__(self) -> str:
        return f"Translator({self.text!r})"


def _with(m: Message, address: str, headers: Mapping[str, str], reply_to: str) -> Message:
    return build(
        m.tuple,
        address,
        m.priority,
        headers,
        reply_to,
        m.expires_at,
        m.content_type,
        m.body,
        m.queue,
        m.seq,
        m.posted_at,
        m.processed_at,
        m.delivery_count,
        m.section,
        None,
        False,
        m.key,
        m.not_before,
    )


# -- the parser --------------------------------------------------------------

_TOKEN = re.compile(
    r'(?P<end>;|\n)|(?P<eq>=)|(?P<str>"(?:[^"\\\n]|\\.)*(?P<close>")?)|(?P<bare>[^\s;="]+)'
)
_SPACE = re.compile(r"[ \t\r\f\v]*")


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # "word", "str", "=", "end"
    text: str
    at: int  # 1-based character position


def _fail(at: int, what: str) -> InvalidArgument:
    return InvalidArgument(f"translator: at {at}: {what}", field="translator")


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    i = 0
    n = len(text)
    while True:
        i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
        if i >= n:
            break
        m = _TOKEN.match(text, i)
        if m is None or m.end() == i:  # pragma: no cover - every char matches some branch
            raise _fail(i + 1, f"unexpected {text[i]!r}")
        if m.group("end") is not None:
            start = m.start("end")
            out.append(_Tok("end", m.group("end"), start + 1))
        elif m.group("eq") is not None:
            out.append(_Tok("=", "=", m.start("eq") + 1))
        elif m.group("str") is not None:
            start = m.start("str")
            raw = m.group("str")
            if m.group("close") is None:
                raise _fail(start + 1, "a quoted string with no closing quote")
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as e:
                raise _fail(start + 1, f"a bad quoted string ({e.msg})") from None
            out.append(_Tok("str", value, start + 1))
        else:
            start = m.start("bare")
            out.append(_Tok("word", m.group("bare"), start + 1))
        i = m.end()
    out.append(_Tok("end", "", n + 1))
    return out


def _said(t: _Tok) -> str:
    if t.kind == "end":
        return "the end" if not t.text else "';'" if t.text == ";" else "the end of the line"
    return repr(t.text)


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.fwd: list[Rewrite] = []
        self.back: list[Rewrite] = []
        self.sets: dict[str, str] = {}
        self.dels: list[str] = []
        self.origin = False
        self.reply: str | None = None

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "end" or t.text:
            self.i += 1
        return t

    def value(self, what: str) -> tuple[str, int]:
        t = self.next()
        if t.kind not in ("word", "str"):
            raise _fail(t.at, f"expected {what}, found {_said(t)}")
        return t.text, t.at

    def end(self) -> None:
        t = self.next()
        if t.kind != "end":
            raise _fail(t.at, f"expected ';' or the end, found {_said(t)}")

    def statements(self) -> None:
        while True:
            t = self.next()
            if t.kind == "end":
                if not t.text:
                    return
                continue
            if t.kind != "word":
                raise _fail(t.at, f"expected a statement, found {_said(t)}")
            verb = getattr(self, "s_" + t.text, None)
            if verb is None:
                raise _fail(
                    t.at,
                    f"unknown statement {t.text!r} (prefix, strip, word, header, origin, reply)",
                )
            verb(t)
            self.end()

    def s_prefix(self, t: _Tok) -> None:
        v, at = self.value("+PREFIX or -PREFIX")
        sign, rest = v[:1], v[1:]
        if sign not in ("+", "-"):
            raise _fail(at, f"expected +PREFIX or -PREFIX, found {v!r}")
        if not rest:
            rest, at = self.value("the prefix")
        self._prefix(sign == "+", rest, at)

    def s_strip(self, t: _Tok) -> None:
        v, at = self.value("the prefix to strip")
        self._prefix(False, v, at)

    def _prefix(self, add: bool, p: str, at: int) -> None:
        if not p:
            raise _fail(at, "an empty prefix")
        if add:
            self.fwd.append(_add(p))
            self.back.append(_strip(p))
        else:
            self.fwd.append(_strip(p))
            self.back.append(_add(p))

    def s_word(self, t: _Tok) -> None:
        table: dict[str, str] = {}
        targets: dict[str, str] = {}
        while True:
            a, at = self.value("WORD=WORD")
            self._word(a, at)
            eq = self.next()
            if eq.kind != "=":
                raise _fail(eq.at, f"expected '=' after {a!r}, found {_said(eq)}")
            b, bat = self.value(f"the word that {a!r} becomes")
            self._word(b, bat)
            if a in table:
                raise _fail(at, f"the word {a!r} is mapped twice")
            if b in targets:
                raise _fail(bat, f"{targets[b]!r} and {a!r} both become {b!r} (not invertible)")
            table[a] = b
            targets[b] = a
            if self.peek().kind == "end":
                break
        self.fwd.append(_words(table))
        self.back.append(_words({b: a for a, b in table.items()}))

    @staticmethod
    def _word(w: str, at: int) -> None:
        if not w or "." in w:
            raise _fail(at, f"a topic word is not empty and has no '.': {w!r}")

    def s_header(self, t: _Tok) -> None:
        how, at = self.value("set or del")
        if how not in ("set", "del"):
            raise _fail(at, f"expected set or del, found {how!r}")
        name, nat = self.value("a header name")
        if not name:
            raise _fail(nat, "an empty header name")
        if name.startswith(RESERVED_PREFIX):
            raise _fail(nat, f"header {name!r} is the board's own ({RESERVED_PREFIX}*)")
        if how == "del":
            self.dels.append(name)
            self.sets.pop(name, None)
            return
        eq = self.next()
        if eq.kind != "=":
            raise _fail(eq.at, f"expected '=' after {name!r}, found {_said(eq)}")
        nxt = self.peek()
        value = "" if nxt.kind == "end" else self.value("the header's value")[0]
        self.sets[name] = value

    def s_origin(self, t: _Tok) -> None:
        self.origin = True

    def s_reply(self, t: _Tok) -> None:
        q, at = self.value("the far board's queue")
        if not q:
            raise _fail(at, "an empty queue name")
        self.reply = q


def compile_translator(text: str) -> Translator:
    """The translator ``text`` says (the module's docstring); InvalidArgument
    (field ``translator``, the message naming the 1-based character
    position) if it does not parse. The empty text is the identity."""
    if len(text) > MAX_TEXT:
        raise _fail(MAX_TEXT + 1, f"longer than {MAX_TEXT} characters")
    p = _Parser(text)
    p.statements()
    # A statement that sets a header after ``del`` removed it wins, and the
    # other way round: ``sets`` and ``dels`` hold the last word on each.
    dels = tuple(n for n in dict.fromkeys(p.dels) if n not in p.sets)
    origin = p.origin or p.reply is not None
    return Translator(text, p.fwd, p.back, p.sets, dels, origin, p.reply)


def push_rewrite(spec: SelectorSpec) -> Callable[[Message], Message] | None:
    """What a push's forwarder does to each message (``registry.py``): its
    selector's translator applied, the origin read from the headers the
    link stamped; None for a selector with no translator."""
    if not spec.translator:
        return None
    t = compile_translator(spec.translator)

    def rewrite(m: Message) -> Message:
        h = m.headers
        seq = h.get(ORIGIN_SEQ, "")
        n = int(seq) if seq.isdigit() else 0
        origin = Origin(h.get(ORIGIN_BOARD, ""), h.get(ORIGIN_QUEUE, ""), n)
        return t.apply(m, origin)

    return rewrite


def selector_translator(text: str, crossing: bool, where: str = "spec") -> Translator:
    """The translator of a selector being created: ``text`` compiled, the
    error naming ``where.translator``; IDENTITY for "". A selector that does
    not cross a link (``crossing`` False) has no interface, so a translator
    there is InvalidArgument too."""
    if not text:
        return IDENTITY
    try:
        t = compile_translator(text)
    except InvalidArgument as e:
        raise e.within(where) from None
    if not crossing:
        raise InvalidArgument(
            f"{where}.translator: only a selector that crosses a link "
            "(destination_link or source_link) has a translator"
        )
    return t


#: The identity, the translator of a selector that names none.
IDENTITY = compile_translator("")
