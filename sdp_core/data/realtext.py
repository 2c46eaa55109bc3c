"""Real text with gold spans fixed by its structure: an evaluation set that no one on this project wrote.

Three sources, all already on a machine that runs the project, each read by its own structure:

- `metadata`: the core metadata of installed Python distributions (PEP 566 / PEP 621): the header fields and the
  start of the long description. `Author-email` / `Maintainer-email` are RFC 5322 address lists
  (`email.utils.getaddresses`): every address is an `email`, every display name that reads as a person (below) a
  `name`; `Author` / `Maintainer` are names separated by commas or "and".
- `authors`: AUTHORS files shipped in distributions' licence folders: one contributor per line, as
  `Name <address>` (RFC 5322), `- Name <address> (gh: @handle)`, `* Name -- what they did`, or a bare name or
  `@handle`. The handle after `@` is a `username`.
- `copyright`: copyright notices: `Copyright (c) YEARS HOLDER <address>` lines of distributions' licence files
  and the `Copyright:` fields of Debian machine-readable copyright files (`/usr/share/doc/*/copyright`, DEP-5),
  each with the licence text that follows it.

Every occurrence of a gold value in its record is a gold span (a description that names its author again), and
only those: other names in the text (people thanked, products, projects) carry no span, so precision measured on
this set is a lower bound. A holder or author counts as a person when it is two to five words, each capitalised (in
any cased script) or a name particle, none of them a word organisations use (`Team`, `Inc`, `Authors`, `Foundation`, ...); one-word
names (`Explosion`, `joke2k`) and organisations are not gold; a title (`Dr.`) is not part of a name.

Records are cut at line boundaries to at most `max_chars` characters, deduplicated by text, and sorted by
(source, origin) so the set is the same for the same installed files.

Two more sets are built apart from these: Debian changelog entries (`build_changelogs`: sign-off and `[ Name ]`
names and addresses) and upstream release notes (`build_release_notes`: ChangeLog and NEWS files, addresses and the
names before them), where the numbers (versions, dates, bug and pull-request references) are no secrets; and
translators' credits (`build_translations`: the headers of installed gettext catalogues, names and addresses of
translators of many languages, split by text domain into a development and a held-out half).
"""

from __future__ import annotations

import email.message
import email.utils
import importlib.metadata
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from sdp_core.data.records import Record, Span

SOURCES = ("metadata", "authors", "copyright")
LABELS = ("name", "email", "username")
DEBIAN_DOC = Path("/usr/share/doc")
MAX_CHARS = 700

# Words that make an author or holder an organisation or a group rather than a person.
ORG_WORDS = frozenset(
    "team authors author contributors contributor developers developer community project projects inc inc. llc "
    "ltd ltd. limited corp corp. corporation company co co. gmbh ag ab s.l. sa foundation association society "
    "institute university college school laboratory laboratories lab labs group groups systems software "
    "technologies technology research organization organisation consortium center centre council board the of "
    "for and et al al. others google microsoft facebook meta apache python debian ubuntu mozilla red hat ibm intel "
    "nvidia amazon openai huggingface hugging face deepmind explosion pallets python-dateutil maintainers "
    "individual sun oracle adobe nokia apple fsf gnu free open source copyright communications devices networks "
    "solutions computing services industries enterprises partners consulting media studio studios games holdings "
    "international digital graphics press publishing".split()
)
NAME_PARTICLES = frozenset("van von der den de del della di da du la le bin ibn al el y zu ten ter".split())
_NAME_WORD = re.compile(r"^[^\W\d_][\w'’.-]*$")
_ADDRESS = re.compile(r"^[\w.%+'-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}$")
_HANDLE = re.compile(r"(?<![\w.@])@([A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))(?![\w@.-]*\.[A-Za-z]{2,}\b)")


_TITLE = re.compile(r"^(?:Dr|Prof|Mr|Mrs|Ms|Sir)\.?\s+")


def _untitled(value: str) -> str:
    """A name without its title: `Dr. Tobias Quathamer` -> `Tobias Quathamer` (the title says who follows)."""
    return _TITLE.sub("", value.strip())


def _name_token(word: str) -> bool:
    """A capitalised word or initial of any cased script (`Ann`, `O'Neil`, `J.`, `Мирослав`)."""
    return word[0].isupper() and _NAME_WORD.match(word) is not None


def is_person_name(value: str) -> bool:
    """Two to five words, each capitalised in its script (or a particle such as `van`), none an organisation word."""
    words = value.split()
    if not 2 <= len(words) <= 5:
        return False
    if any(w.lower().strip(",.") in ORG_WORDS for w in words):
        return False
    if not any(c.islower() for c in value):
        return False
    return all(_name_token(w) or w in NAME_PARTICLES for w in words) and _name_token(words[-1])


def is_address(value: str) -> bool:
    """An RFC 5322 addr-spec with a dotted domain (not `user@MASKED` or a bare `@handle`)."""
    return bool(_ADDRESS.match(value))


@dataclass
class _Draft:
    """A record under construction: its text and the gold values found in its structure."""

    source: str
    origin: str
    text: str
    values: dict[str, str]  # gold value -> label

    def record(self) -> Record | None:
        spans = _occurrences(self.text, self.values)
        if not self.text.strip():
            return None
        return Record(self.text, tuple(spans), meta={"source": self.source, "origin": self.origin})


def _occurrences(text: str, values: dict[str, str]) -> list[Span]:
    """Every word-bounded occurrence of each gold value; longer values first, so `Ann Lee <ann@x.org>`'s address
    is not also taken as part of a name, and overlapping shorter values are dropped."""
    taken = [False] * len(text)
    spans = []
    for value in sorted(values, key=len, reverse=True):
        before = "(?<=@)" if values[value] == "username" else r"(?<![\w@.+-])"  # a handle is the word after `@`
        pattern = re.compile(rf"{before}{re.escape(value)}(?![\w@-]|\.\w)")
        for m in pattern.finditer(text):
            if not any(taken[m.start() : m.end()]):
                taken[m.start() : m.end()] = [True] * (m.end() - m.start())
                spans.append(Span(m.start(), m.end(), values[value]))
    return sorted(spans)


def _names(field: str) -> list[str]:
    """`A, B and C` -> the person names among them."""
    parts = [_untitled(p) for p in re.split(r",\s*|\s+and\s+|\s*&\s*|;\s*", field)]
    return [p for p in parts if is_person_name(p)]


def _addresses(field: str) -> dict[str, str]:
    """Gold values of an RFC 5322 address list: addresses and the display names that read as persons."""
    out = {}
    for display, address in email.utils.getaddresses([field]):
        if is_address(address):
            out[address] = "email"
            display = _untitled(display.strip().strip('"'))
            if is_person_name(display):
                out[display] = "name"
    return out


def _chunks(lines: list[str], max_chars: int) -> Iterator[str]:
    """Consecutive lines joined into pieces of at most `max_chars` characters (a longer line is its own piece)."""
    piece: list[str] = []
    size = 0
    for line in lines:
        if piece and size + len(line) + 1 > max_chars:
            yield "\n".join(piece)
            piece, size = [], 0
        piece.append(line)
        size += len(line) + 1
    if piece:
        yield "\n".join(piece)


HEADER_FIELDS = ("Name", "Version", "Summary", "Home-page", "Author", "Author-email", "Maintainer",
                 "Maintainer-email", "License", "Project-URL")  # fmt: skip


def _metadata(dist: importlib.metadata.Distribution) -> email.message.Message:
    """A distribution's metadata, as the email message it is (its typed protocol has no `get`)."""
    return cast(email.message.Message, dist.metadata)


def metadata_drafts(dists: Iterable[importlib.metadata.Distribution], max_chars: int = MAX_CHARS) -> Iterator[_Draft]:
    """One record per distribution: its header fields, then the long description up to `max_chars`."""
    for dist in dists:
        meta = _metadata(dist)
        name = meta.get("Name")
        if not name:
            continue
        values: dict[str, str] = {}
        header = []
        for key in HEADER_FIELDS:
            for value in meta.get_all(key) or ():
                value = " ".join(str(value).split())
                if not value or value == "UNKNOWN":
                    continue
                header.append(f"{key}: {value}")
                if key.endswith("-email"):
                    values.update(_addresses(value))
                elif key in ("Author", "Maintainer"):
                    values.update(dict.fromkeys(_names(value), "name"))
                    values.update(_addresses(value))
        body = str(meta.get_payload() or meta.get("Description") or "").strip()  # one part: a string
        text = "\n".join(header)
        if body:
            text += "\n\n" + next(_chunks(body.splitlines(), max(0, max_chars - len(text))), "")
        yield _Draft("metadata", name, text, values)


_AUTHOR_LINE = re.compile(r"^\s*(?:[-*•]\s+)?(?P<who>[^<>()\n]*?)\s*(?:<(?P<addr>[^<>\s]+)>)?\s*"
                          r"(?:\((?:gh|github):\s*@(?P<handle>[\w-]+)\))?\s*(?:(?:--|—|:).*|\*\*\w\*\*)?\s*$")


def _author_line(line: str) -> tuple[str, dict[str, str]] | None:
    """A contributor line and its gold values, or None for a line that is not one contributor."""
    stripped = line.strip()
    if stripped.startswith("@") and re.fullmatch(r"@[\w-]+", stripped):
        return line, {stripped[1:]: "username"}
    m = _AUTHOR_LINE.match(line)
    if not m or "@MASKED" in line or "*" in (m.group("who") or "").strip("* "):
        return None
    who, addr, handle = (m.group("who") or "").strip(), m.group("addr"), m.group("handle")
    if addr is not None and not is_address(addr):
        return None
    values = {}
    if is_person_name(who):
        values[who] = "name"
    elif who or not addr:
        return None
    if addr:
        values[addr] = "email"
    if handle:
        values[handle] = "username"
    return line, values


def authors_drafts(files: Iterable[Path], max_chars: int = MAX_CHARS) -> Iterator[_Draft]:
    """Pieces of AUTHORS files made of the lines that name one contributor each."""
    for path in files:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        kept = [parsed for parsed in map(_author_line, lines) if parsed]
        values: dict[str, str] = {}
        for _, v in kept:
            values.update(v)
        for i, piece in enumerate(_chunks([line for line, _ in kept], max_chars)):
            yield _Draft("authors", f"{path.parent.parent.name}/{path.name}#{i}", piece, values)


_COPYRIGHT = re.compile(r"^\s*(?:Copyright\s*(?:\(c\)|©)?|\(c\)|©)\s*:?\s*(?:\(c\)|©)?\s*(?P<rest>.+)$", re.I)
_YEARS = re.compile(r"^(?:(?:19|20)\d\d(?:\s*[-–,]\s*(?:19|20)?\d\d)*[,.]?\s*)+(?:by\s+)?")


def _holder_values(holder: str) -> dict[str, str]:
    """Gold values of one copyright holder text (after the years): addresses and person names."""
    holder = re.sub(r"\.?\s*All [Rr]ights [Rr]eserved\.?", "", holder).strip(" .,")
    values = _addresses(holder) if "@" in holder else {}
    without = re.sub(r"<[^<>]*>|\([^()]*\)", "", holder)
    values.update(dict.fromkeys(_names(without), "name"))
    return values


def _copyright_values(lines: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in lines:
        m = _COPYRIGHT.match(line)
        if m and "<year>" not in line and "<name" not in line:
            values.update(_holder_values(_YEARS.sub("", m.group("rest").strip())))
    return values


def licence_drafts(files: Iterable[Path], max_chars: int = MAX_CHARS) -> Iterator[_Draft]:
    """Each paragraph holding a copyright line, with the paragraph after it, from licence files."""
    for path in files:
        paragraphs = re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace"))
        for i, para in enumerate(paragraphs):
            if not any(_COPYRIGHT.match(line) for line in para.splitlines()):
                continue
            lines = para.splitlines() + ([""] + paragraphs[i + 1].splitlines() if i + 1 < len(paragraphs) else [])
            text = next(_chunks(lines, max_chars))
            yield _Draft("copyright", f"{path.parent.parent.name}/{path.name}#{i}", text,
                         _copyright_values(para.splitlines()))


def debian_drafts(files: Iterable[Path], max_chars: int = MAX_CHARS) -> Iterator[_Draft]:
    """DEP-5 stanzas with a `Copyright:` field (years, then a holder per line) or an `Upstream-Contact:`."""
    for path in files:
        for i, stanza in enumerate(re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace"))):
            fields = re.findall(r"^(Copyright|Upstream-Contact):(.*(?:\n[ \t]+.*)*)", stanza, re.M)
            if not fields:
                continue
            values: dict[str, str] = {}
            for key, body in fields:
                for line in body.splitlines():
                    line = line.strip()
                    if key == "Copyright":
                        values.update(_holder_values(_YEARS.sub("", re.sub(r"^(?:\(c\)|©)\s*", "", line))))
                    else:
                        values.update(_addresses(line))
            text = next(_chunks(stanza.strip("\n").splitlines(), max_chars))
            yield _Draft("copyright", f"debian/{path.parent.name}#{i}", text, values)


def _licence_files(dist: importlib.metadata.Distribution) -> list[Path]:
    files = [f for f in dist.files or () if ".dist-info" in str(f) and re.search(r"(?i)licen[cs]e|copying|notice",
                                                                                  f.name)]
    return [Path(str(dist.locate_file(f))) for f in files if Path(str(dist.locate_file(f))).is_file()]


def _authors_files(dist: importlib.metadata.Distribution) -> list[Path]:
    files = [f for f in dist.files or () if ".dist-info" in str(f) and f.name.upper().startswith("AUTHORS")]
    return [Path(str(dist.locate_file(f))) for f in files if Path(str(dist.locate_file(f))).is_file()]


def build_realtext(
    paths: list[str] | None = None, debian_doc: Path | None = DEBIAN_DOC, max_chars: int = MAX_CHARS
) -> list[Record]:
    """Every record of the three sources, from the distributions on `paths` (default `sys.path`) and the Debian
    copyright files under `debian_doc` (skipped when absent or None). Each record's `meta` names its source and
    origin (distribution, file and piece)."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    for dist in importlib.metadata.distributions() if paths is None else importlib.metadata.distributions(path=paths):
        name = (_metadata(dist).get("Name") or "").lower().replace("_", "-")
        if name and name not in seen:
            seen[name] = dist
    dists = [seen[n] for n in sorted(seen)]
    debian = sorted(debian_doc.glob("*/copyright")) if debian_doc and debian_doc.is_dir() else []
    drafts = [
        *metadata_drafts(dists, max_chars),
        *authors_drafts((p for d in dists for p in _authors_files(d)), max_chars),
        *licence_drafts((p for d in dists for p in _licence_files(d)), max_chars),
        *debian_drafts(debian, max_chars),
    ]
    out: dict[str, Record] = {}
    for draft in drafts:
        record = draft.record()
        if record is not None and record.text not in out:
            out[record.text] = record
    return sorted(out.values(), key=lambda r: (r.meta["source"], r.meta["origin"]))


# -- a held-out source: Debian changelogs -------------------------------------------------------------------------

_SIGN_OFF = re.compile(r"^ -- (?P<who>.+?)\s*<(?P<addr>[^<>\s]+)>\s{1,3}(?P<date>\S.*)$", re.M)
_UPLOADER = re.compile(r"^  \[ (?P<who>[^\]\n]+?) \]$", re.M)
_ENTRY_HEAD = re.compile(r"^\S.*\(.*\).*;.*$", re.M)


def changelog_drafts(files: Iterable[Path], max_chars: int = MAX_CHARS, per_file: int = 20) -> Iterator[_Draft]:
    """The first `per_file` entries of each Debian changelog (`changelog.Debian.gz`, Debian Policy §4.4): a head
    line, change lines, and a sign-off ` -- Name <address>  date` whose name and address are gold, as are the names
    of the `[ Name ]` lines that credit each uploader's changes. An entry longer than `max_chars` keeps its first
    lines and its sign-off. Names elsewhere in an entry (people thanked, bug reporters) are not gold."""
    import gzip

    for path in files:
        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
        except (OSError, EOFError):
            continue
        starts = [m.start() for m in _ENTRY_HEAD.finditer(text)]
        for i, start in enumerate(starts[:per_file]):
            entry = text[start : starts[i + 1] if i + 1 < len(starts) else len(text)].strip("\n")
            sign_off = _SIGN_OFF.search(entry)
            if sign_off is None:
                continue
            values: dict[str, str] = {}
            if is_address(sign_off.group("addr")):
                values[sign_off.group("addr")] = "email"
            for who in [sign_off.group("who"), *(m.group("who") for m in _UPLOADER.finditer(entry))]:
                who = re.sub(r"\s*\([^()]*\)\s*$", "", who.strip().strip('"'))  # `Ann Lee (ann)`: the nick is optional
                if is_person_name(who):
                    values[who] = "name"
            body = entry[: sign_off.start()].rstrip("\n").splitlines()
            head = next(_chunks(body, max(0, max_chars - len(sign_off.group()) - 2)), "")
            yield _Draft("changelog", f"{path.parent.name}#{i}", f"{head}\n\n{sign_off.group()}", values)


def build_changelogs(debian_doc: Path | None = DEBIAN_DOC, max_chars: int = MAX_CHARS) -> list[Record]:
    """Every record of the Debian changelogs under `debian_doc` (none when absent), deduplicated, sorted by origin."""
    files = sorted(debian_doc.glob("*/changelog.Debian.gz")) if debian_doc and debian_doc.is_dir() else []
    return unique_records(changelog_drafts(files, max_chars))


def unique_records(drafts: Iterable[_Draft]) -> list[Record]:
    """The records of `drafts` (a draft without gold gives none), the first of each text, sorted by origin."""
    out: dict[str, Record] = {}
    for draft in drafts:
        record = draft.record()
        if record is not None and record.text not in out:
            out[record.text] = record
    return sorted(out.values(), key=lambda r: r.meta["origin"])


# `Name <address>` on a line of release notes: a GNU ChangeLog head (`2014-08-14  Alan Modra  <amodra@gmail.com>`), a
# sign-off (`-- Ann Lee <ann@example.org>`), a credit (`Patch by Ann Lee <ann@example.org>.`).
_NAME_ADDR = re.compile(r"(?P<who>[^\W\d_][^<>\n]{0,60}?)[ \t]*<(?P<addr>[^<>\s]+@[^<>\s]+)>")
_BARE_ADDRESS = re.compile(r"(?<![\w.%+'-])[\w.%+'-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}(?![\w-])")
RELEASE_NOTE_FILES = {"changelog": ("changelog.gz",), "news": ("NEWS.gz", "NEWS.md.gz")}
"""The upstream release notes Debian ships under `/usr/share/doc/<package>/` (never its own `changelog.Debian.gz` or
`NEWS.Debian.gz`), by kind: ChangeLog files and NEWS files."""


def release_note_drafts(files: Iterable[Path], max_chars: int = MAX_CHARS, per_file: int = 30) -> Iterator[_Draft]:
    """The first `per_file` pieces of each release-notes file: paragraphs (blank-line separated), cut at line
    boundaries to `max_chars`. Gold: every address (an RFC 5322 addr-spec with a dotted domain) and the display name
    before an `<address>` that reads as a person (the name a date, a dash or a word such as "by" leads in: the last two to
    five capitalised words before it). Versions, dates, bug and pull-request numbers and hardware names are not
    secrets and carry no span; nor do other names (people thanked in running text), so precision is a lower bound."""
    import gzip

    for path in files:
        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
        except (OSError, EOFError):
            continue
        pieces = (piece for paragraph in re.split(r"\n[ \t]*\n", text) if paragraph.strip()
                  for piece in _chunks(paragraph.strip("\n").splitlines(), max_chars))
        for i, piece in zip(range(per_file), pieces):
            values = {m.group(): "email" for m in _BARE_ADDRESS.finditer(piece) if is_address(m.group())}
            for m in _NAME_ADDR.finditer(piece):
                words = m.group("who").split()
                for k in range(min(5, len(words)), 1, -1):  # the longest tail of the words that reads as a person
                    if is_person_name(" ".join(words[-k:])):
                        values[" ".join(words[-k:])] = "name"
                        break
            yield _Draft(f"release:{path.name}", f"{path.parent.name}#{i}", piece, values)


def build_release_notes(kind: str, debian_doc: Path | None = DEBIAN_DOC, max_chars: int = MAX_CHARS) -> list[Record]:
    """Every record of the upstream release notes of `kind` (`RELEASE_NOTE_FILES`) under `debian_doc`, deduplicated,
    sorted by origin."""
    files = sorted(p for name in RELEASE_NOTE_FILES[kind] for p in debian_doc.glob(f"*/{name}")) if (
        debian_doc and debian_doc.is_dir()) else []
    return unique_records(release_note_drafts(files, max_chars))


# -- translators' credits: the headers of installed message catalogues -------------------------------------------

LOCALE_DIR = Path("/usr/share/locale")
TRANSLATION_SPLITS = ("dev", "heldout")


def translation_split(domain: str) -> str:
    """A catalogue's split, by its text domain (`coreutils`, `gettext-tools`, ...): a stable hash of the name, so a
    translator's header of one program never lands in both splits through another language of the same program."""
    import hashlib

    return TRANSLATION_SPLITS[hashlib.sha256(domain.encode()).digest()[0] % 2]


def translation_drafts(files: Iterable[Path]) -> Iterator[_Draft]:
    """The header entry of each compiled message catalogue (GNU gettext `.mo`, the translation of the empty msgid):
    `Last-Translator: Name <address>`, `Language-Team: Team <address>`, dates, versions and plural rules. Gold:
    every address, and the translator's display name when it reads as a person (in any script; a name written twice,
    `Name (Other Script)`, gives both). Team names are no person. Each header gives a second record: the same credit
    in the comment a PO file opens with (`# Name <address>, YEAR.`, the shape `msginit` writes and translators keep),
    with no field name before it; its words around the credit are this function's, the credit is the file's. The
    origin is `language/domain`."""
    import gettext

    for path in files:
        try:
            with path.open("rb") as f:
                catalogue = gettext.GNUTranslations(f)
        except (OSError, UnicodeDecodeError, ValueError, IndexError):  # IndexError: a malformed Plural-Forms
            continue
        header = catalogue._catalog.get("")  # type: ignore[attr-defined]  # the header entry, as the file has it
        if not isinstance(header, str) or "@" not in catalogue.info().get("last-translator", ""):
            continue
        values = {}
        for field in ("last-translator", "language-team"):
            for display, address in email.utils.getaddresses([catalogue.info().get(field, "")]):
                if not is_address(address):
                    continue
                values[address] = "email"
                if field == "last-translator":
                    display = _untitled(display.strip().strip('"'))
                    for who in [re.sub(r"\s*\(([^()]*)\)\s*$", "", display), *re.findall(r"\(([^()]*)\)\s*$", display)]:
                        if is_person_name(who.strip()):
                            values[who.strip()] = "name"
        language = path.parent.parent.name
        yield _Draft("translation:header", f"{language}/{path.stem}", header.strip("\n"), values)
        year = re.search(r"^PO-Revision-Date: ((?:19|20)\d\d)", header, re.M)
        credit = catalogue.info()["last-translator"].strip()
        comment = (f"# {language} translation of {path.stem}.\n# Copyright (C) {year.group(1) if year else ''} "
                   f"the {path.stem} authors.\n# This file is distributed under the same license as the {path.stem} "
                   f"package.\n# {credit}, {year.group(1) if year else ''}.\n#")
        yield _Draft("translation:comment", f"{language}/{path.stem}", comment, values)


def build_translations(split: str, locale_dir: Path | None = LOCALE_DIR) -> list[Record]:
    """Every translator's header of the catalogues under `locale_dir` (none when absent) whose text domain is in
    `split` (`translation_split`), deduplicated, sorted by origin. `meta["origin"]` starts with the language."""
    files = sorted(locale_dir.glob("*/LC_MESSAGES/*.mo")) if locale_dir and locale_dir.is_dir() else []
    return unique_records(translation_drafts(f for f in files if translation_split(f.stem) == split))


# -- commit logs: `git log` of a repository ------------------------------------------------------------------------

_COMMIT_HEAD = re.compile(r"^commit [0-9a-f]{40}\b", re.M)
_AUTHOR = re.compile(r"^Author:[ \t]*(?P<who>.+)$", re.M)
_TRAILER = re.compile(r"^[ \t]*(?P<key>[A-Z][A-Za-z]*(?:-[A-Za-z]+)*-by):[ \t]*(?P<who>\S.*?)[ \t]*$", re.M)
_IDENTITY = re.compile(r"^(?P<name>.*?)[ \t]*<(?P<address>[^<>\s]+)>$")


def _identity(who: str) -> dict[str, str]:
    """Gold values of a git identity, `Name <address>` as git writes it: the name is taken verbatim, not as an RFC 5322
    display name (git does not quote one such as `renovate[bot]`, which Python's `email.utils` parses differently from
    one patch release to the next); anything else is read as an address list (`_addresses`)."""
    m = _IDENTITY.match(who.strip())
    if m is None:
        return _addresses(who)
    out = {m.group("address"): "email"} if is_address(m.group("address")) else {}
    name = _untitled(m.group("name").strip().strip('"'))
    return {**out, name: "name"} if out and is_person_name(name) else out


def commit_drafts(log: str, max_chars: int = MAX_CHARS) -> Iterator[_Draft]:
    """Each commit of `git log`'s default (medium) output: `commit <hash>`, `Author: Name <address>`, the date and the
    indented message. Gold: the author's address and name (`_addresses`), and those of trailers that credit a person
    (`Signed-off-by:`, `Reported-by:`, `Co-authored-by:`, any `…-by:`): an address list, or a bare value that reads
    as a person. A commit longer than `max_chars` keeps its first lines. Names elsewhere in a message (people
    thanked in running text) and handles are not gold. The origin is the commit's hash."""
    starts = [m.start() for m in _COMMIT_HEAD.finditer(log)]
    for i, start in enumerate(starts):
        commit = log[start : starts[i + 1] if i + 1 < len(starts) else len(log)].strip("\n")
        author = _AUTHOR.search(commit)
        values = _identity(author.group("who")) if author else {}
        for m in _TRAILER.finditer(commit):
            who = m.group("who")
            values.update(_identity(who) if "@" in who else {who: "name"} if is_person_name(_untitled(who)) else {})
        text = next(_chunks(commit.splitlines(), max_chars), "")
        yield _Draft("commit", commit.split(None, 2)[1], text, values)


def build_commit_log(repo: Path, n: int, seed: int = 0, max_chars: int = MAX_CHARS) -> list[Record]:
    """A seeded sample of `n` commits (merges left out) of the git repository at `repo`, as `git log` prints them
    (`commit_drafts`), deduplicated, sorted by hash; none when `repo` is no repository."""
    import random
    import subprocess

    git = ["git", "-C", str(repo)]
    listed = subprocess.run([*git, "rev-list", "--no-merges", "HEAD"], capture_output=True, text=True)
    if listed.returncode != 0:
        return []
    hashes = sorted(random.Random(seed).sample(listed.stdout.split(), min(n, len(listed.stdout.split()))))
    log = subprocess.run([*git, "show", "-s", "--format=medium", "--no-color", "--encoding=UTF-8", *hashes],
                         capture_output=True, check=True).stdout.decode("utf-8", errors="replace")
    return unique_records(commit_drafts(log, max_chars))
