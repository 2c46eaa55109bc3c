"""Person names from what the text says about them, for data of unknown formats (the `general` policy).

spaCy's NER alone misses ordinary names it has not seen (`Jean-loup Gailly`, `d'Arcy`), and flagging every proper
noun instead masks product, package and place names as secrets (a quarter of real text). This policy flags:

1. spaCy PERSON entities, widened over the name-shaped tokens that touch them on the same line (`Seán O'Neill`
   where NER took only `Seán`, a surname after a hyphen);
2. a display name before an address, `Ann Lee <ann@example.org>` (RFC 5322 §3.4 `name-addr`: the phrase before
   an angle address names the mailbox's owner); a lower-case display name only at the start of a line, where the
   line is that mailbox (`abdul rawoof <...>` in a contributors list);
3. names after a cue that says a person follows: one name after a title (`Dr.`, `Mrs`), a greeting (`Dear`,
   `Hi`), "my name is", or at the start of the answer to a request for a name ("What is your full name?" /
   "Sure, Ann Lee."); a list of names (separated by commas, "and" or "&"), each of two words or more, after a
   credit ("thanks to", "written by", an `Author:` field) or a copyright notice's years (`Copyright (c)
   2011-2014 Jean-loup Gailly and Mark Adler`), and on every line of a field that lists people (`Copyright:`,
   `Uploaders:`, continued on indented lines as in deb822 and DEP-5 copyright files). Credits and notices name
   projects and companies too, hence two words;
4. the name on each line of a list of people: three or more consecutive lines that each hold a name of two to
   four words and nothing else but a bullet and what the person did (`* Ann Lee -- lexers`), as in AUTHORS files;
5. names in the places business text (bank, HR, help desk) puts people: after "approved by", "submitted by" and
   other acts a person signs, "ticket / message / call from", "update / request / refund for", "assigned /
   escalated / sent to", "cc:", "on behalf of", fields such as `Employee:`, `Customer:`, `Assignee:`, and on the
   line after a sign-off ("Regards,"). Departments, companies and products stand there too, and the small NER
   model labels most names there ORG (it calls "Ticket from Crystal Frank:" a work of art), so the words must read
   as a name: two to four capitalised words (one after a sign-off), each a proper noun to the tagger, none an
   acronym (`IT`, `HR`) or a word of a department, company, product or time (`Customer Service`, `Accounts
   Payable`, `Google Cloud`, `Friday`), and not a modifier of a noun after it ("from Red Hat engineers"). A
   two-word product or company name that holds no such word ("Ticket from Red Hat.") is still taken for a name.

NER's PERSON entities are cut at their line's end, lose a leading title and punctuation at either end, and must
be written like a name (no digit, URL or markup); a one-word entity counts only as a re-mention of a word of a
longer name in the same text (alone, the small model's PERSON is as often a product or a licence term:
`Licensee`, `Qhull`).
A cued name is one to four capitalised words (name particles such as `van`, `de` allowed inside); a cued run that
holds an organisation word (`Inc`, `LLC`, `Foundation`, `Team`, `Authors`, ...) is an organisation and left alone,
as are the years and `(c)` of a notice. Labels: `PERSON` (rules 1, 3, 4, 5), `DISPLAY_NAME` (rule 2).
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import TYPE_CHECKING, Sequence

from sdp_core.data.records import Span
from sdp_core.detectors.base import Policy, normalise_spans, version_hash
from sdp_core.detectors.lexicon import HELD_OUT, CommonWords, NameLexicon, common_words, name_lexicon
from sdp_core.detectors.regex import UPPER, matches_at
from sdp_core.detectors.segments import SEGMENT_END, SegmentTagger
from sdp_core.detectors.spacy_tiers import (
    BATCH_SIZE,
    SPEAKER_TAG,
    _disabled,
    _speaker_tags,
    load_spacy,
    model_version,
    resolve_model,
    tag_pos,
)

if TYPE_CHECKING:
    from spacy.tokens import Doc, Token

NAMES_CODE_VERSION = "10"  # bump when the rules below change

_CAP = UPPER
_PARTICLE = r"(?:van|von|der|den|de|del|della|di|da|du|la|le|bin|ibn|al|el|ten|ter|zu|y|san|santa|mac|mc)"
# A capitalised name word: O'Neill, Jean-loup, Hatfield-Dodds, Müller, H.Merijn, initials (J., J.T.), d'Arcy; a
# sentence's full stop after a name is not part of it.
_WORD = rf"(?:(?:{_CAP}\.)+(?![^\W\d_])|(?:{_CAP}\.)*{_CAP}[^\W\d_]*(?:['’-][^\W\d_]+)*|[a-z]['’]{_CAP}[^\W\d_]+)"
_NAME = rf"{_WORD}(?:[ \t]+(?:{_PARTICLE}[ \t]+)*{_WORD}){{0,3}}"
_ADDR = r"<[A-Za-z0-9._%+'-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}>"
_LOWER_WORD = r"[^\W\d_][\w'’.-]*"
DISPLAY_NAME = re.compile(
    rf"(?<![\w'’.-])\"?(?P<cap>{_NAME})\"?[ \t]*(?={_ADDR})"
    rf"|^[ \t]*(?:(?:--|[-*•])[ \t]+)?\"?(?P<low>{_LOWER_WORD}(?:[ \t]+{_LOWER_WORD}){{0,3}})\"?[ \t]*(?={_ADDR})",
    re.M,
)

# The head of a block of changes credited to one person, alone on its line, as Debian changelogs write it ("  [ Ann
# Lee ]", "  [ gregor herrmann ]"), perhaps with the person's nickname after the name; two words or more (one word
# is as often a nickname or a team).
UPLOADER = re.compile(rf"^[ \t]*\[[ \t]+(?P<name>{_LOWER_WORD}(?:[ \t]+{_LOWER_WORD}){{1,4}}?)(?:[ \t]+\([^()\n]*\))?"
                      r"[ \t]+\][ \t]*$", re.M)
_YEARS = r"(?:(?:19|20)\d\d(?:[ \t]*[-–,/][ \t]*(?:(?:19|20)?\d\d))*[,.]?[ \t]*)+"
# Cues after which a single word is a name (a title, a greeting, a self-introduction) ...
PERSONAL_CUES = re.compile(
    r"\b(?:Mr|Mrs|Ms|Miss|Mx|Dr|Prof|Sir|Dame|Herr|Frau)\b\.?[ \t]+"
    r"|(?i:\bmy[ \t]+(?:full[ \t]+)?name[ \t]+is\b|\bname[ \t]*:"
    r"|\b(?:dear|hi|hello|thanks|thank[ \t]+you|bonjour|merci|hola|gracias|ciao|grazie|hallo|danke)\b,?)[ \t]*",
)
# ... and cues after which a name needs two words: credits and notices name projects and companies too
# (`Author: Explosion`, `Copyright 2020 Qhull`).
CREDIT_CUES = re.compile(
    r"(?i:\bthanks[ \t]+to|\bwritten[ \t]+by|\bcreated[ \t]+by|\bmaintained[ \t]+by"
    r"|^[ \t]*(?:author|maintainer|contact|upstream-contact)s?[ \t]*:)[ \t]*"
    rf"|(?i:\bcopyright\b)[ \t]*(?::[ \t]*)?(?:\((?i:c)\)|©)?[ \t]*{_YEARS}(?:by[ \t]+)?",
    re.M,
)
# A field whose value lists people, continued on indented lines (deb822 / RFC 5322 folding, as in DEP-5
# copyright files): every line of it is a holder list, after optional `(c)` and years.
FIELD = re.compile(r"^(?i:copyright|upstream-contact|authors?|maintainers?|contributors?|uploaders?)[ \t]*:"
                   r"(?P<body>.*(?:\n[ \t]+\S.*)*)", re.M)
_LINE_LEAD = re.compile(rf"[ \t]*(?:\((?i:c)\)|©)?[ \t]*(?:{_YEARS})?(?:by[ \t]+)?")
# An answer to a question or request for a name: the answer line starts with the name, after a speaker tag and
# an acknowledgement ("What is your full name?" / "USR: Sure, Ann Lee.").
ASKED = re.compile(
    r"(?i:\bname\b)[^\n]*[?.][ \t]*\n(?:[A-Z]{2,5}[ \t]*:)?[ \t]*"
    r"(?:(?i:sure|yes|yeah|ok|okay|of course|it is|it's|this is|i am|i'm|my (?:full )?name is)[ \t]*[,.!:]?[ \t]*)*"
)
# A list of people, one per line: three or more consecutive lines that each hold only a name of two to four
# words, optionally bulleted and followed by what the person did (`* Ann Lee -- lexers`, `Ann Lee (gh: @annl)`).
_LIST_NAME = rf"{_WORD}(?:[ \t]+(?:{_PARTICLE}[ \t]+)*{_WORD}){{1,3}}"
_LIST_LINE = rf"[ \t]*(?:[-*•][ \t]+)?(?:{_LIST_NAME})(?:[ \t]*(?:--|—|:|\(|<)[^\n]*)?[ \t]*"
NAME_LIST = re.compile(rf"^{_LIST_LINE}(?:\n{_LIST_LINE}){{2,}}$", re.M)
_LIST_ENTRY = re.compile(rf"^[ \t]*(?:[-*•][ \t]+)?(?P<name>{_LIST_NAME})", re.M)
_NAME_AT = re.compile(_NAME)
_SEPARATOR = re.compile(r"[ \t]*(?:,[ \t]*(?:and[ \t]+)?|[ \t]+and[ \t]+|[ \t]*&[ \t]*)")
ORGANISATION_WORDS = frozenset(
    "Inc Inc. LLC Ltd Ltd. Limited Corp Corp. Corporation Company GmbH AG AB Foundation Association Society "
    "Institute University College Team Authors Contributors Developers Project Community Group Labs Software "
    "Systems Technologies Consortium Council The".split()
)
# Cues of business text (bank, HR, help desk) after which a person usually follows, though a department, a
# company or a product may too ("Ticket from Ann Lee:", "approved by Ann Lee", "update for Ann Lee (user: ...)",
# "escalated to Ann Lee", "cc: Ann Lee", "Employee: Ann Lee"): what follows counts only when it looks like a name
# (see `PersonNamePolicy._role_name`). The small NER model often labels such a name ORG, GPE or even DATE.
ROLE_CUES = re.compile(
    r"(?i:\b(?:approved|authori[sz]ed|submitted|requested|reviewed|signed|reported|raised|opened|closed|logged"
    r"|filed|assigned|handled|processed|verified|checked|confirmed|initiated|escalated|prepared|issued|resolved"
    r"|rejected|declined|cancell?ed|referred|entered|updated|completed|countersigned|witnessed|copyrighted"
    r"|sent|received|managed|owned|supervised|interviewed)[ \t]+by"
    r"|\b(?:ticket|message|e-?mail|mail|note|call|request|letter|reply|response|complaint|feedback|query|enquiry"
    r"|inquiry|voicemail|chat)s?[ \t]+from"
    r"|\b(?:received|heard)[ \t]+from"
    r"|\b(?:update|request|refund|payment|payroll|payslip|claim|reimbursement|timesheet|leave|onboarding"
    r"|offboarding|appraisal|contract|ticket|case|invoice|expenses|application)s?[ \t]+for"
    r"|\b(?:assigned|reassigned|escalated|forwarded|transferred|sent|delegated|routed|addressed|paid|issued"
    r"|refunded|handed[ \t]+over)[ \t]+to"
    r"|\bon[ \t]+behalf[ \t]+of|\b(?:attn|attention|b?cc)[ \t]*:"
    r"|\b(?:employee|customer|client|requester|requestor|assignee|owner|agent|account[ \t]+holder|card[ \t]*holder"
    r"|beneficiary|payee|manager|approver|reporter|applicant|caller|recipient|sender|from|to)[ \t]*:)"
    r"[ \t]*"
)
# Where a match of ROLE_CUES ends (its tail): `by`, `from`, `for`, `to`, `of` or a colon. Its cue before the tail
# is one word ("approved", "cc", "cardholder") or two ("on behalf", "handed over", "e-mail", "account holder")
# joined by spaces, tabs or a hyphen, so a match starts at one of the last two word starts before its tail.
_ROLE_CUE_TAIL = re.compile(r"(?i:by|from|for|to|of)|:")
_WORD_START = re.compile(r"\b(?=\w)")


def role_cues(text: str) -> list[re.Match[str]]:
    """`ROLE_CUES.finditer(text)`'s matches, found by trying ROLE_CUES only at the last two word starts before each
    tail (`_ROLE_CUE_TAIL`): no other start can match (`regex.matches_at`). Scanning every position for the cue's
    150 words in any case took 0.19 ms a clinic note."""
    tails = [m.start() for m in _ROLE_CUE_TAIL.finditer(text)]
    if not tails:
        return []
    starts = [m.start() for m in _WORD_START.finditer(text)]
    ends = (bisect.bisect_left(starts, tail) for tail in tails)  # the first word start at or after each tail
    return matches_at(ROLE_CUES, text, sorted({s for k in ends for s in starts[max(0, k - 2):k]}))


# A sign-off: the name on the line after it may be a first name alone ("Regards,\nAnn").
SIGN_OFF = re.compile(
    r"(?i:\b(?:regards|thanks|thank[ \t]+you|cheers|sincerely|best(?:[ \t]+wishes)?)[ \t]*,[ \t]*\n)[ \t]*"
)
# Words that start or make up a department, a company, a product or a time rather than a person ("from Customer
# Service", "to Accounts Payable", "from Google Cloud", "by Friday Noon", "to All Staff").
NOT_A_NAME_WORDS = frozenset(
    "Service Services Support Desk Helpdesk Department Dept Office Team Payable Receivable Resources Operations "
    "Finance Financial Payroll Accounts Accounting Account Bank Banking Committee Board Center Centre Security "
    "Management Manager Sales Marketing Legal Compliance Admin Administration Administrator Relations Customer "
    "Customers Client Clients Staff Unit Division Branch Agent Agents Bot System Portal App Server Card "
    "Holdings Partners Solutions Enterprises Industries Cloud Code Studio Web Online Mobile Platform Network Networks "
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday Today Tomorrow Yesterday Morning Afternoon Evening "
    "The This That These Those Our Your My His Her Their All Any Each Every Some No Not New San Los Las "
    # places named after a person ("Victoria Station", "Grace Church"): a name word before them is no surname
    "Station Church Cathedral Street Road Avenue Square River Airport Tower Building Hotel School Library Museum "
    "Stadium Palace Theatre Theater Gallery Market Plaza Bridge Island Valley Beach Harbour Harbor".split()
)

# Nouns that may follow a name without it modifying them ("approved by Ann Lee today").
_TIME_NOUNS = frozenset("today tonight tomorrow yesterday morning afternoon evening night week".split())

# What a name is written with: letters, apostrophes, dots, hyphens and spaces.
_NAME_CHARS = re.compile(r"[^\W\d_](?:[^\W\d_]|['’. -])*")
# A token to widen a PERSON entity over: a name word, or a piece glued to one by `-` or `'`.
_NAME_TOKEN = re.compile(rf"^(?:{_WORD}|[-'’]|[^\W\d_]+)$")


def _is_organisation(name: str) -> bool:
    return any(w in ORGANISATION_WORDS for w in name.split())


def cued_names(text: str) -> list[Span]:
    """Rule 3: names after a cue, a list of them after a credit, a notice's years or in a field of people."""
    # (position, fewest words, whether a list of names may follow): one name after a personal cue ("Mr Nigel
    # Smith, DOB ..." goes on with something else), a list after a credit or in a field
    starts = [(m.end(), 1, False) for cue in (PERSONAL_CUES, ASKED) for m in cue.finditer(text)]
    starts += [(m.end(), 2, True) for m in CREDIT_CUES.finditer(text)]
    for field in FIELD.finditer(text):
        line_start = field.start("body")
        for line in field.group("body").split("\n"):
            lead = _LINE_LEAD.match(text, line_start)
            assert lead is not None  # every part of it is optional: it matches, if only the empty string
            starts.append((lead.end(), 2, True))
            line_start += len(line) + 1
    out = []
    for pos, min_words, is_list in starts:
        while (m := _NAME_AT.match(text, pos)) is not None:
            # "Hello, I ...": the pronoun is no name
            if len(m.group().split()) >= min_words and m.group() != "I" and not _is_organisation(m.group()):
                out.append(Span(m.start(), m.end(), "PERSON"))
            sep = _SEPARATOR.match(text, m.end()) if is_list else None
            if sep is None or sep.end() == m.end():
                break
            pos = sep.end()
    return out


def listed_names(text: str) -> list[Span]:
    """Rule 4: the name on each line of a list of people."""
    out = []
    for block in NAME_LIST.finditer(text):
        for m in _LIST_ENTRY.finditer(text, block.start(), block.end()):
            if not _is_organisation(m.group("name")):
                out.append(Span(m.start("name"), m.end("name"), "PERSON"))
    return out


def uploader_names(text: str) -> list[Span]:
    """Rule 2b: the person a block of changes is credited to (`[ Ann Lee ]`)."""
    if "[" not in text:
        return []
    return [Span(m.start("name"), m.end("name"), "PERSON") for m in UPLOADER.finditer(text)
            if not _is_organisation(m.group("name"))]


def re_mentions(text: str, names: list[Span]) -> list[Span]:
    """Every other whole-word occurrence of a name of two words or more that a rule of the text's structure found
    (rules 2–4; NER's guesses are not repeated): a person named in a sign-off or a credit is the same person where
    the text names them again ("Thanks to Ann Lee" above "-- Ann Lee <ann@example.org>")."""
    def joins(char: str, punctuation: str) -> bool:  # a character that would make the match part of a longer word
        return bool(char) and (char.isalnum() or char in punctuation)  # '' (the text's edge) joins nothing

    out = []
    for value, label in {(text[s.start:s.end], s.label) for s in names if len(text[s.start:s.end].split()) > 1}:
        start = text.find(value)
        while start >= 0:  # str.find, not a regex per name: each would be compiled anew for every text
            end = start + len(value)
            whole = not joins(text[start - 1:start], "_'’.-") and not joins(text[end:end + 1], "_'’-")
            if whole:
                out.append(Span(start, end, label))
            start = text.find(value, end if whole else start + 1)  # no overlapping matches, as a regex finds them
    return out


def display_names(text: str) -> list[Span]:
    """Rule 2: the display name of every `name <address>` (RFC 5322 name-addr)."""
    if "<" not in text:
        return []
    out = []
    for m in DISPLAY_NAME.finditer(text):
        group = "cap" if m.group("cap") else "low"
        if _is_organisation(m.group(group)):
            continue
        out.append(Span(m.start(group), m.end(group), "DISPLAY_NAME"))
    return out


# Rule 6: a word before a name that says a person follows, and one after it that says a person acts (English,
# French, Spanish, Italian, German): "spoke with", "salary of", "de", "von"; "called", "wants", "a appelé", "hat".
# A single unknown word needs one of the acts a person does (`PERSON_ACTS`): "Chopard wants", not "Python has".
PERSON_BEFORE = frozenset(
    "with for from to by of about thanks met called phoned emailed contact contacted told asked de du à a par pour "
    "avec chez con para por di da per a von für an mit bei".split()
)
PERSON_ACTS = frozenset(
    "called phoned rang emailed wrote writes said says asked asks wants wanted needs needed paid pays joined lost "
    "moved relocated lives lived confirmed reported requested signed visited complained replied approved submitted "
    "souhaite veut demande habite llamó quiere solicitó desea vive desidera vuole chiede abita möchte bittet wohnt"
    .split()
)
PERSON_AFTER = PERSON_ACTS | frozenset("cannot can't could will would has had is was a est es está ha è hat ist will"
                                       .split())
_LEX_WORD = re.compile(rf"{_WORD}|(?i:{_PARTICLE})(?=[ \t])")
_PARTICLE_WORD = re.compile(rf"(?i:{_PARTICLE})")
_BEFORE = re.compile(r"([^\W\d_]+)[ \t]*[,:]?[ \t]*$")
# Words before a name that only a person follows: "spoke with", "met", "talked to" (a single unknown word too).
PERSON_MET = re.compile(r"(?i:\b(?:spoke|spoken|talked|speaking|talking|met|meeting)[ \t]+(?:with|to)?|\b(?:met"
                        r"|phoned|emailed|contacted|told|asked|informed|reminded|thanked))[ \t]*$")
_AFTER = re.compile(r"(?:[ \t]*\([^()\n]{1,40}\))?(?:(['’]s)\b|[ \t]+([^\W\d_']+(?:'t)?))")

Word = tuple[int, int, str]  # start, end, text

# A handle in parentheses right after a name: "Jacek Ziarnik (wserwach)" (one word, no common word: not "(author)").
_HANDLE_AFTER = re.compile(r"[ \t]*\((?P<handle>[A-Za-z0-9][A-Za-z0-9._-]{1,38})\)")


def handles_after(text: str, names: list[Span], common: CommonWords) -> list[Span]:
    """A username in parentheses after a detected name, labelled `USERNAME`."""
    out = []
    for name in names:
        m = _HANDLE_AFTER.match(text, name.end)
        if m and not common(m.group("handle")) and not m.group("handle").isdigit():
            out.append(Span(m.start("handle"), m.end("handle"), "USERNAME"))
    return out


def _person_context(text: str, start: int, end: int) -> tuple[bool, bool, bool]:
    """Whether the word before [start, end) says a person follows, whether the word after it says a person acts,
    and whether that act, or the words before, are what only a person does or has done to them."""
    before = _BEFORE.search(text, max(0, start - 40), start)
    after = _AFTER.match(text, end)
    act = after.group(2).casefold() if after and after.group(2) else ""
    met = PERSON_MET.search(text, max(0, start - 40), start) is not None
    return (bool(before and before.group(1).casefold() in PERSON_BEFORE),
            bool(after and (after.group(1) or act in PERSON_AFTER)), act in PERSON_ACTS or met)


def lexicon_names(text: str, lexicon: NameLexicon, common: CommonWords, proper_nouns: frozenset[int] = frozenset()
                  ) -> list[Span]:
    """Rule 6: names by their words. A run of capitalised words (name particles inside) is cut at every common
    word that is not a known name (`Customer`, `Service`, `Bitte`, `The`) and at organisation and department words,
    unless the common word stands beside a name: after a known given name it is a surname (`Galina Moor`), and a
    known given name that is also a common word begins a name before another name word (`An Goossens`);
    a piece of two to four words is a name when one of them is a known given name or surname (it then starts at its
    first known given name: "Gehalt von Concetta Scholz" is "Concetta Scholz"), or, with no known word, when the
    word before or after it says a person is named ("spoke with", "de", "phoned"), or the part after a particle
    ("Pratica di Giuseppe Mantegazza"); a one-word piece must be a known name with such a word beside it, or an
    unknown one beside what only a person does or has done to them ("Chopard wants", "spoke with Igor"). `proper_nouns` holds the start of every
    token the tagger reads as a proper noun."""
    out = []
    for run in _NAME_AT.finditer(text):
        piece: list[Word] = []
        words = [(m.start(), m.end(), m.group()) for m in _LEX_WORD.finditer(text, run.start(), run.end())]
        keep = [bool(_PARTICLE_WORD.fullmatch(w)) or not _not_a_name(w, lexicon, common, start in proper_nouns)
                for start, _, w in words]
        # a common or stop word is a name beside a name: a surname after a known given name ("Galina Moor", "Mona
        # Each"), a known given name before another name word ("An Goossens", "Sara Chaudet")
        for i, (_, _, w) in enumerate(words):
            if not keep[i] and _may_be_name(w):
                keep[i] = ((i > 0 and keep[i - 1] and lexicon.is_given(words[i - 1][2]))
                           or (i + 1 < len(words) and keep[i + 1] and lexicon.is_given(w)
                               and not _PARTICLE_WORD.fullmatch(words[i + 1][2])))
        for word, kept in [*zip(words, keep), (None, False)]:
            if word is not None and kept:
                piece.append(word)
                continue
            # the piece, else its part after each particle inside it ("Anschrift von Emir Marti")
            cuts = [0, *(i + 1 for i, w in enumerate(piece) if 0 < i < len(piece) - 1 and _PARTICLE_WORD.fullmatch(w[2]))]
            span = next((s for i in cuts if (s := _lexicon_piece(text, piece[i:], lexicon)) is not None), None)
            out.extend([span] if span else [])
            piece = []
    return out


def _not_a_name(word: str, lexicon: NameLexicon, common: CommonWords, proper_noun: bool) -> bool:
    """A stop word, an organisation or department word, an acronym, or a common word that is no known name."""
    return (word.casefold() in common.stop or word in NOT_A_NAME_WORDS or word in ORGANISATION_WORDS
            or (word.isupper() and len(word) > 1 and "." not in word)
            or (not lexicon.knows(word) and common(word, proper_noun)))


def _may_be_name(word: str) -> bool:
    """A capitalised word that is no organisation or department word and no acronym (`Moor`, `Each`, `May`)."""
    return (word[:1].isupper() and word not in NOT_A_NAME_WORDS and word not in ORGANISATION_WORDS
            and not (word.isupper() and len(word) > 1))


def _lexicon_piece(text: str, piece: list[Word], lexicon: NameLexicon) -> Span | None:
    while piece and _PARTICLE_WORD.fullmatch(piece[0][2]):
        piece = piece[1:]
    while piece and _PARTICLE_WORD.fullmatch(piece[-1][2]):
        piece = piece[:-1]
    if not piece:
        return None
    known = [lexicon.knows(w) for _, _, w in piece]
    given = [i for i, (_, _, w) in enumerate(piece) if lexicon.is_given(w)]
    if given and given[0] > 0 and not any(known[: given[0]]) and len(piece) - given[0] >= 2:
        piece, known = piece[given[0]:], known[given[0]:]  # "Akte Sofia Trimmel": the name starts at its given name
    start, end = piece[0][0], piece[-1][1]
    words = sum(not _PARTICLE_WORD.fullmatch(w) for _, _, w in piece)
    if words > 4:
        return None
    before, after, act = _person_context(text, start, end)
    if (words >= 2 and (any(known) or before or after)) or (any(known) and (before or after)) or act:
        return Span(start, end, "PERSON")
    return None


_SEGMENT_WORD = re.compile(r"[\w'’-]+")
_WORD_PIECE = re.compile(r"[^\W\d_]+")
# E-mail addresses and web addresses: no rule reads a name inside one from the model (NER's PERSON must be written
# with letters, apostrophes, dots, hyphens and spaces only)
_ADDRESS_CHUNK = re.compile(r"[^\s<>()]+@[^\s<>()]+|(?i:\b(?:https?://|www\.))\S+")


def may_hold_name(segment: str, lexicon: NameLexicon, common: CommonWords, starts_line: bool = True) -> bool:
    """Whether the model must read a segment (`segments.py`). It need not when every word is either common (in
    any case) or no name to any rule: NER's PERSON and the proper nouns that rules 1, 5 and 6 read are names,
    and a name is a word with no digit (`SpO2`, `MRN-52504`), outside e-mail and web addresses, not an acronym of
    three letters or fewer (`BP`, `LDL`: rules 5 and 6 take no acronym), and either capitalised (or of a script
    without case) or, in lower case ("gregor herrmann"), no common word nor a form of a common verb ("gave") that
    is no known name. The first word of a segment (after a dialog's speaker tag) may be a capitalised common word
    that names no one ("He", "Please", "Plan") unless it is a known name ("Will") or common only as a noun, which
    rule 6 reads differently as a proper noun; inside a line (`starts_line` false: no sign-off can stand before
    it), such a noun alone is a name to rule 6 only before what only a person does ("Chopard wants"), and is read
    only where the segment says one ("Assessment: type 2 diabetes" is not read)."""
    words = _SEGMENT_WORD.findall(_ADDRESS_CHUNK.sub(" ", SPEAKER_TAG.sub("", segment, count=1)))
    for k, word in enumerate(words):
        if any(c.isdigit() for c in word):
            continue
        for piece in _WORD_PIECE.findall(word):
            if piece.isupper() and len(piece) <= 3:
                continue
            if piece.islower():
                if not common(piece) and (lexicon.knows(piece) or not common.inflected_verb(piece)):
                    return True
            elif k > 0 or lexicon.knows(piece):
                return True
            elif not common(piece, True) and (starts_line or not common(piece)
                                              or any(w.casefold() in PERSON_ACTS for w in words)):
                return True
    return False


@functools.lru_cache(maxsize=2)
def segment_tagger(model: str) -> SegmentTagger:
    """NER and tagger of pipeline `model` (parts of speech from the attribute ruler's tag table, without running
    the ruler) over the segments of a text that may hold a name; one per process (a policy holds no pipeline, so
    it pickles into the detection pool's workers)."""
    nlp, lexicon, common = load_spacy(model), name_lexicon(), common_words(model)
    return SegmentTagger(nlp, _disabled(nlp, ["ner", "tagger"], PersonNamePolicy.name), tag_pos(model),
                         lambda segment, starts_line: may_hold_name(segment, lexicon, common, starts_line),
                         BATCH_SIZE)


class PersonNamePolicy(Policy):
    """Rules 1–6 above: rules 1, 5 and 6 read one spaCy pipeline (NER and tagger, with parts of speech from the
    attribute ruler's tag table, `spacy_tiers.tag_pos`: PROPN widens NER's PERSON spans and checks a cued name)
    over the segments of a text that may hold a name (`segment_tagger`), rules 2–4 the text's own structure."""

    name = "person_name"

    def __init__(self, model: str = "en_core_web_sm"):
        self.model = resolve_model(model)
        patterns = (DISPLAY_NAME, UPLOADER, PERSONAL_CUES, CREDIT_CUES, FIELD, ASKED, NAME_LIST, ROLE_CUES, SIGN_OFF)
        self.version = version_hash(NAMES_CODE_VERSION, self.model, model_version(self.model),
                                    *(p.pattern for p in patterns), sorted(ORGANISATION_WORDS),
                                    sorted(NOT_A_NAME_WORDS), sorted(_TIME_NOUNS), sorted(PERSON_BEFORE),
                                    sorted(PERSON_AFTER), sorted(PERSON_ACTS), HELD_OUT, model_version("faker"),
                                    SEGMENT_END.pattern)

    def _spacy_names(self, texts: Sequence[str]) -> list[list[Span]]:
        """Rules 1, 5 and 6, which read the model's entities and tags."""
        lexicon, common = name_lexicon(), common_words(self.model)
        out = []
        for text, doc in zip(texts, segment_tagger(self.model).docs(texts)):
            names: list[tuple[int, int]] = []
            for ent in doc.ents:
                if ent.label_ != "PERSON":
                    continue
                start, end = ent.start, ent.end
                # NER runs across line breaks in lists and headers: a name ends at its line's end
                end = next((i for i in range(start, end) if doc[i].is_space or "\n" in doc[i].text), end)
                # a title is a cue, not part of the name (NER includes it in "Mr Brown"); nor is punctuation
                # NER takes in at either end ("Ticket from Ann Lee:")
                while start < end and (PERSONAL_CUES.fullmatch(doc[start].text + " ") or doc[start].is_punct):
                    start += 1
                while end > start and doc[end - 1].is_punct:
                    end -= 1
                if end == start:
                    continue
                # widen over touching name-shaped tokens on the same line: "O" "'" "Neill", a PROPN surname
                while start > 0 and self._joins(doc[start - 1], doc[start], left=True):
                    start -= 1
                while end < len(doc) and self._joins(doc[end - 1], doc[end], left=False):
                    end += 1
                names.append((start, end))
            proper_nouns = frozenset(t.idx for t in doc if t.pos_ == "PROPN")
            out.append(self._plausible(doc, names) + self._role_names(doc, text)
                       + lexicon_names(text, lexicon, common, proper_nouns))
        return out

    @classmethod
    def _role_names(cls, doc: "Doc", text: str) -> list[Span]:
        """Rule 5: names after a cue of business text or a sign-off, a list of them joined by commas or "and"."""
        starts = [(m.end(), 2) for m in role_cues(text)] + [(m.end(), 1) for m in SIGN_OFF.finditer(text)]
        out = []
        for pos, min_words in starts:
            while (m := _NAME_AT.match(text, pos)) is not None:
                if cls._role_name(doc, m.start(), m.end(), min_words):
                    out.append(Span(m.start(), m.end(), "PERSON"))
                sep = _SEPARATOR.match(text, m.end())
                if sep is None or sep.end() == m.end():
                    break
                pos = sep.end()
        return out

    @staticmethod
    def _role_name(doc: "Doc", start: int, end: int, min_words: int) -> bool:
        """Whether the capitalised words at [start, end) after a role cue read as a person's name: enough words,
        none that starts or makes up a department, company, product or time, no acronym (`IT`, `HR`), every word a
        proper noun to the tagger, and not a modifier of a noun after it ("from Red Hat engineers")."""
        words = doc.text[start:end].split()
        if len(words) < min_words or _is_organisation(" ".join(words)):
            return False
        if any(w in NOT_A_NAME_WORDS or (w.isupper() and len(w) > 1 and "." not in w) for w in words):
            return False
        span = doc.char_span(start, end, alignment_mode="expand")
        if span is None or any(t.text[:1].isupper() and t.is_alpha and t.pos_ != "PROPN" for t in span):
            return False
        if span.end == len(doc) or "\n" in span[-1].whitespace_:
            return True
        after = doc[span.end]
        return after.pos_ not in ("NOUN", "PROPN") or after.lower_ in _TIME_NOUNS

    @staticmethod
    def _plausible(doc: "Doc", names: list[tuple[int, int]]) -> list[Span]:
        """The entities written like names; a one-word entity only as a re-mention of a longer name's word (a
        lone name after a title is a cued name)."""
        shaped = [(a, b) for a, b in names if _NAME_CHARS.fullmatch(doc[a:b].text)]
        long_words = {t.text for a, b in shaped if sum(t.is_alpha for t in doc[a:b]) > 1 for t in doc[a:b]}
        return [
            Span(doc[a].idx, doc[b - 1].idx + len(doc[b - 1].text), "PERSON")
            for a, b in shaped
            if sum(t.is_alpha for t in doc[a:b]) > 1 or doc[a:b].text in long_words
        ]

    @staticmethod
    def _joins(a: "Token", b: "Token", left: bool) -> bool:
        """Whether token `b` (right of `a`) or `a` (left of `b`, when `left`) belongs to the same name."""
        outer = a if left else b
        glued = a.idx + len(a.text) == b.idx  # no space between: d'Arcy, Hatfield-Dodds
        if "\n" in a.whitespace_ or outer.is_space or not _NAME_TOKEN.match(outer.text):
            return False
        if PERSONAL_CUES.fullmatch(outer.text + " "):  # a title before a name is not part of it
            return False
        return glued or (outer.pos_ == "PROPN" and outer.text[:1].isupper())

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        texts = list(texts)
        if not texts:
            return []
        common = common_words(self.model)
        results = []
        for text, entities in zip(texts, self._spacy_names(texts)):
            tags = _speaker_tags(text)
            structural = [*display_names(text), *uploader_names(text), *cued_names(text), *listed_names(text)]
            spans = [*entities, *structural, *re_mentions(text, structural)]
            spans += handles_after(text, spans, common)
            kept = [s for s in spans if not any(a <= s.start and s.end <= b for a, b in tags)]
            # a name found by several rules is one span: drop a name inside a longer one ("Crystal" in "Crystal Frank")
            kept = [s for s in kept if not any(o.label == s.label and o.start <= s.start and s.end <= o.end
                                               and (o.start, o.end) != (s.start, s.end) for o in kept)]
            results.append(normalise_spans(kept))
        return results
