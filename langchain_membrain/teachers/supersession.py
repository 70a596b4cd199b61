"""Whether a later statement supersedes an earlier one, read from the words people use in chat
to say that something changed.

Definitions (words are matched case-folded, a typographic apostrophe read as a plain one):

- A **change cue** (:data:`CHANGE`) says that a state was replaced ("moved to", "quit ... and
  joined", "switched from", "... now", "got promoted", "changed my number", "pushed back to",
  "started ... again") or that it ended ("passed away", "we divorced", "cancelled", "not ...
  after all", "no longer", "sold"). The :data:`REPLACING` cues say by themselves that the old
  state is over ("again": a state resumed ends the one since); the others ("started",
  "joined") may only say that something began.
- The **change sentence** of a text (:func:`change_sentence`) is its first sentence that holds
  a cue and is no question, or the statement a telling question carries ("Did I tell you I
  moved to Porto?"). In a text of several sentences only a replacing cue counts.
- Its **holder** is who it is about (:func:`holder`): the speaker, or the third party or thing
  the change sentence opens with ("my brother", "Ines", "Tom the cat", "the trip").
- The **old values it names** (:func:`named_old_values`): "from X to", or what follows "quit",
  "left" or "no longer at": "I moved from Paris to Rome" names Paris.
- ``new`` **supersedes** ``old`` (:func:`supersedes`) when ``new`` has a change sentence; its
  holder is the speaker or is named in ``old``; every old value it names is in ``old`` (a
  change away from something never stored corrects nothing stored); and the two are near: a
  cosine of their embeddings of at least :data:`NEAR`; or :data:`NEAR_SHARING` when they
  share a content word written in lower case (:func:`content_words`; with a replacing cue in
  the speaker's own change, a name too) or ``new`` names an old value; or, when the cue is a
  replacing one: :data:`NEAR_SLOT` when both name one attribute held one value at a time
  (:data:`SLOTS`: home, work, partner...), :data:`NEAR_NEAREST` when ``old`` is nearer to
  ``new`` than anything else it could supersede, by :data:`MARGIN`. A line of a transcript
  ("Kenji: ...") neither supersedes nor is superseded: it records what was said, and the facts
  a forming teacher draws from it are what change.

The cosines are all-MiniLM-L6-v2's; the bars were set on the tuning part of
``bench corrections`` and the tuning personas (which correct nothing). The offline operation
rule (operation_rule.py) updates the one fact an item supersedes; a search
(retrieval/supersession.py) reads the same relation between two facts stored apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

#: The change cues: a state replaced or ended. Each is a regular expression over the
#: case-folded text; ``\b`` bounds words.
CHANGE_PATTERNS = (
    # a value replaced
    r"(?<!\bfor )\bnow\b", r"\bthese days\b", r"\bnowadays\b", r"\binstead\b", r"\bany ?more\b", r"\bno longer\b",
    r"\bno more\b", r"\bmov(?:e|ed|ing)\b", r"\brelocat\w*", r"\bswitch(?:ed|ing)?\b", r"\bswap(?:ped|ping)?\b",
    r"\bchang(?:e|ed|ing)\b", r"\breplac(?:e|ed|ing)\b", r"\btransferr?(?:ed|ing)?\b", r"\bquit\b",
    r"\bleft\b", r"\bleaving\b", r"\bjoin(?:ed|ing)\b", r"\bstart(?:ed|ing)\b", r"\bbec(?:ame|oming)\b",
    r"\bpromoted\b", r"\bhired\b", r"\bretired\b", r"\bupgraded\b", r"\btraded\b", r"\b(?:my|our|got an?|have an?|has an?|found an?|started an?|bought an?|joined an?) new\b",
    r"\bagain\b", r"\bback (?:on|at|in|with)\b", r"\bturned\b", r"\bswitched\b", r"\bgot (?:engaged|married)\b",
    r"\bengaged\b", r"\bmarried\b", r"\btook (?:a|the|over|up)\b", r"\bhanded in\b", r"\bresigned\b",
    r"\bfired\b", r"\blaid off\b", r"\bredundant\b", r"\bended up\b", r"\bwent from\b", r"\bretrain\w*",
    r"\bemigrat\w*", r"\bregistered with\b", r"\bgot a (?:raise|pay rise|promotion)\b", r"\b(?:went|gone|going) "
    r"(?:vegan|vegetarian|veggie|teetotal|sober|freelance|part-time|full-time|back)\b", r"\bcame off\b",
    r"\bcome off\b", r"\b(?:went|gone|goes|going) (?:up|down)\b", r"\bdown to\b", r"\bextended\b",
    r"\bstol(?:e|en)\b", r"\bhealed\b", r"\bgot the keys\b", r"\bappointed\b", r"\bgraduated\b",
    r"\bqualified\b", r"\bfinished (?:my|our|the)\b", r"\belected\b", r"\bmet someone\b", r"\bseeing someone\b",
    r"\bopened (?:my|our|a|an) own\b", r"\bactually\b", r"\bshifted\b",
    r"\bbrought\b.{0,24}\bforward\b", r"\bpushed\b.{0,24}\b(?:back|forward)\b", r"\bgot (?:\w+ ){0,2}(?:worse|better)\b",
    r"\bfrom (?:today|tomorrow|now on)\b", r"\bchange of plans?\b",
    # a date moved
    r"\bpushed (?:back|forward|out)\b", r"\bpostponed\b", r"\bresched\w*", r"\bbrought forward\b",
    r"\bdelayed\b", r"\bbumped\b",
    # a state ended
    r"\bpassed away\b", r"\bdied\b", r"\bput down\b", r"\bcancel+(?:ed|ing)?\b", r"\bcalled off\b",
    r"\bafter all\b", r"\bfell through\b", r"\bscrapped\b", r"\bdropped (?:out|it)\b", r"\bbroke up\b",
    r"\bsplit (?:up)?\b", r"\bseparated\b", r"\bdivorc\w*", r"\bsold\b", r"\bgot rid of\b", r"\bgave up\b",
    r"\bgiven up\b", r"\bstopped\b", r"\bended\b", r"\bis over\b", r"\brehomed\b", r"\bgone\b", r"\blost\b",
    r"\bclosed\b", r"\bshut\b", r"\bwent back\b", r"\bexpired\b", r"\bdropped\b", r"(?:\bis|'s) off\b",
)
CHANGE = re.compile("|".join(CHANGE_PATTERNS))
# A search reads the same stored texts again and again: each text is read once per process
# (up to this many texts; lru_cache below).
_READ_CACHE = 8192
#: The cues that say by themselves that an old state is over ("now", "moved", "quit", "no
#: longer", "passed away", "cancelled"...), not only that something began: the only ones
#: that let a change statement supersede a fact it shares no word with.
REPLACING = re.compile(r"(?<!\bfor )\bnow\b|\bthese days\b|\bnowadays\b|\binstead\b|\bany ?more\b|\bno longer\b|\bno more\b"
                       r"|\bmoved\b|\brelocat\w*|\bemigrat\w*|\bswitch\w*|\bswap\w*|\bchanged\b|\breplaced\b"
                       r"|\btransferr?ed\b|\bquit\b|\bleft\b|\bpromoted\b|\bretired\b|\bresigned\b|\bfired\b"
                       r"|\blaid off\b|\bpassed away\b|\bdied\b|\bcancel+ed\b|\bcalled off\b|\bafter all\b"
                       r"|\bfell through\b|\bbroke up\b|\bsplit up\b|\bdivorc\w*|\bseparated\b|\bpushed\b.{0,24}\b(?:back|forward)\b"
                       r"|\bpostponed\b|\bresched\w*|\bbrought\b.{0,24}\bforward\b|\bwent from\b|\bactually\b"
                       r"|\bgot rid of\b|\bgave up\b|\bback on\b|\b(?:went|gone) (?:vegan|vegetarian|veggie|teetotal|sober)\b|\bstol(?:e|en)\b"
                       r"|\breplac\w*|\btransferring\b|\btraded\b|\bsomeone new\b|\bclosed down\b|\bfor good\b|\bdropped out\b"
                       r"|(?:\bis|'s) off\b|\bchange of plans?\b|(?<!\bnever )\bagain\b")

#: Cosines (all-MiniLM-L6-v2) at which a change statement is near enough to supersede a fact:
#: :data:`NEAR` whatever their words and whatever else is near; :data:`NEAR_SHARING` where
#: they share a content word; :data:`NEAR_NEAREST` where the fact is nearer to the statement
#: than anything else it could supersede, by :data:`MARGIN`; :data:`NEAR_SLOT` where both name
#: one attribute held one value at a time (:data:`SLOTS`).
NEAR = 0.55
NEAR_SHARING = 0.4
NEAR_NEAREST = 0.3
MARGIN = 0.05
NEAR_SLOT = 0.2

#: Words for people and animals that a sentence about a third party opens with ("my sister").
PEOPLE = frozenset("""
brother sister mum mom mother dad father parents son daughter kids kid children child baby wife
husband partner boyfriend girlfriend fiance fiancee friend friends colleague colleagues boss manager
neighbour neighbor neighbours cousin aunt uncle nan gran grandma grandpa granny grandad grandmother
grandfather niece nephew flatmate roommate housemate landlord landlady dog cat puppy kitten parrot
hamster rabbit horse teacher doctor dentist coach cousin in-laws stepdad stepmum stepson stepdaughter
buddy mate mates nephew nieces husband's wife's sibling siblings twin twins stepbrother stepsister
""".split())
#: Attributes of a person that hold one value at a time, each with the words that name it: a
#: change stated in a sentence naming an attribute replaces the value of a fact naming the
#: same one, however far apart their embeddings ("We moved to Amsterdam; we rent a flat in De
#: Pijp" replaces "Jordi and I rented our own place in Ruzafa"). Words are matched without
#: plural or verb endings (:func:`slots`); a change cue is never an attribute's word.
#: Attributes a person holds several of (hobbies, pets, friends, trips) are not here.
SLOTS: dict[str, frozenset[str]] = {name: frozenset(words.split()) for name, words in {
    "home": "live lives living flat apartment house home rent renting studio cottage bungalow condo "
            "flatshare houseshare address neighbourhood neighborhood landlord landlady lodging",
    "work": "work works working job employer company firm employed unemployed career role position "
            "title boss manager colleague colleagues profession",
    "partner": "partner boyfriend girlfriend husband wife dating single relationship married marriage divorced "
               "engaged fiance fiancee spouse courting widow widower",
    "diet": "eat eats eating diet vegan vegetarian veggie meat pescatarian keto gluten dairy",
    "phone": "phone mobile iphone android smartphone sim",
    "email": "email inbox gmail outlook hotmail",
    "car": "car drive drives vehicle hatchback estate suv",
    "commute": "commute commuting",
    "bank": "bank banking account mortgage",
    "gym": "gym membership",
    "school": "school course degree university college studying student studies semester module",
    "doctor": "doctor gp physician dentist surgery clinic therapist",
    "shift": "shift shifts rota nights",
    "smoking": "smoke smokes smoking smoker cigarettes cigarette vape vaping",
    "drinking": "drink drinking alcohol sober teetotal booze",
    "hair": "hair haircut beard",
    "pay": "salary pay wage earn earning earnings income",
    "weight": "weigh weight kilos pounds",
    "sleep": "sleep sleeping bedtime",
}.items()}
_SELF = frozenset("i i'm i've i'd i'll we we're we've we'd we'll me us".split())
_POSSESSIVE = frozenset(("my", "our"))

#: Words that carry no content of their own for :func:`content_words`.
_FILLER = frozenset("""
a an the and or but so to of in on at for with from by as is are was were be been being am i me my we
us our you your it its it's this that these those there here have has had do does did not no yes just
really very still also too now then than when what who where why how which i'm i've i'd we're we've
got get getting gonna going go went about after before again all any more most some such only own
same other into over out up down off since until while because if will would can could should may
might must shall lol haha oh ok okay well yeah yep actually anyway guess tell told know new last next
week weeks month months year years day days today yesterday tomorrow ago back she her hers he him his
they them their theirs every its
""".split())
#: Words that open a sentence with a capital without naming anyone ("Finally moved...").
_OPENERS = frozenset("""
finally big news update quick honestly basically btw fyi ugh sadly unfortunately good great crazy
anyway hey hi so well oh ah also plus sorry turns long short heads weirdly funny apparently
surprise officially yesterday today tonight last this next as since from after from starting
please they them he she it someone somebody everyone nobody everybody people forget scratch ignore
remember note correction update
""".split())
#: Words after a name's "'s" that make it "is" or "has", not a possessive ("Darwin's off").
_NOT_A_NOUN = frozenset("off on too away done gone finally home always never here there not no".split())
#: Verbs a chat sentence opens with when its subject, the speaker, is left out ("Saw the nurse
#: today", "Got promoted"); words ending in "ed" or "ing" are read so too.
_DROPPED_SUBJECT = frozenset("""
saw got went had took made found left came did met gave bought sold told heard felt kept ran won
lost put sent spent began broke chose drove fell forgot hid rode rang sang sat slept spoke stood
swam threw woke wore wrote
""".split())
_SPEAKER = re.compile(r"^\s*[A-Z][\w'.-]*(?:\s[A-Z][\w'.-]*){0,2}:\s+(?=\S)")
_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+|,\s+(?:and|but|so)\s+")
_NAMED_OLD = (re.compile(r"\b(?:mov|switch|chang|went|gone|transferr|swapp|upgrad|downgrad|convert|shift|relocat)\w*"
                         r"(?:\s+\w+){0,3}?\s+from\s+(?:the\s+|my\s+|our\s+)?([a-z0-9][\w'-]*(?:\s+[a-z0-9][\w'-]*)?)"
                         r"\s+(?:to|into|over to)\b"),
              re.compile(r"\b(?:quit|left|leaving|no longer (?:at|with|in|on)|not at)\s+(?:the\s+|my\s+|our\s+)?"
                         r"([a-z0-9][\w'-]*(?:\s+[a-z0-9][\w'-]*)?)"))


#: How people shorten words when they text, read as the words themselves ("im w/ my bf rn"
#: is "i'm with my boyfriend right now").
TEXTING = {
    "im": "i'm", "ive": "i've", "dont": "don't", "didnt": "didn't", "doesnt": "doesn't",
    "isnt": "isn't", "wasnt": "wasn't", "cant": "can't", "havent": "haven't", "arent": "aren't", "u": "you",
    "ur": "your", "rn": "right now", "atm": "at the moment", "b4": "before", "2day": "today",
    "tmrw": "tomorrow", "tmr": "tomorrow", "tmw": "tomorrow", "2moro": "tomorrow", "2nite": "tonight",
    "tonite": "tonight", "w/": "with", "w/o": "without", "bf": "boyfriend", "gf": "girlfriend",
    "hubby": "husband", "abt": "about", "bc": "because", "cuz": "because", "coz": "because", "bday": "birthday",
    "nxt": "next", "wk": "week", "wks": "weeks", "yr": "year", "yrs": "years", "ppl": "people",
    "pls": "please", "thru": "through", "tho": "though", "nomore": "no more",
    "ngl": "not gonna lie", "tbh": "to be honest", "fyi": "for your information",
}
_TEXTED = re.compile(r"(?<![\w'/])(?:" + "|".join(re.escape(w) for w in sorted(TEXTING, key=len, reverse=True))
                     + r")(?![\w'/])")


def _fold(text: str) -> str:
    """``text`` case-folded, a typographic apostrophe read as a plain one and :data:`TEXTING`'s
    short forms as the words they stand for."""
    return _TEXTED.sub(lambda m: TEXTING[m.group(0)], text.casefold().replace("’", "'"))


#: Openers that turn a statement into a question without asking anything: "Did I tell you I
#: moved to Porto?", "Did I say we split up?", "Can you believe I sold the car?", "Guess who
#: got a job at Spotify?", "You'll never guess where I live now?", "You know what? ...".
TELLING = re.compile(r"^\s*(?:(?:did|have|had)\s+(?:i|we)\s+(?:ever\s+|already\s+)?(?:tell|told|mention|mentioned|say|said)"
                      r"(?:\s+(?:to\s+)?(?:you|u))?(?:\s+(?:that|about))?"
                      r"|did\s+(?:you|u)\s+(?:know|hear)(?:\s+that)?|have\s+(?:you|u)\s+heard(?:\s+that)?"
                      r"|(?:can|could|would)\s+(?:you|u)\s+believe(?:\s+that)?"
                      r"|(?:you(?:'ll|\s+will|\s+wont|'d)?\s+never\s+)?guess(?=\s+(?:who|where|what|how))"
                      r"|(?:you\s+)?(?:guess|know)\s+what[?!,:]*)\s+", re.IGNORECASE)


def carried_statement(sentence: str) -> str | None:
    """The statement a telling question carries ("Did I tell you I moved to Porto?" -> "I
    moved to Porto"; "Guess who got a new job?" -> "who got a new job", the speaker); None
    for a sentence that does not open so, or that carries a single word ("Can you believe
    it?")."""
    match = TELLING.match(sentence)
    carried = None if match is None else sentence[match.end():].strip().rstrip("?!. ")
    return carried if carried and len(carried.split()) > 1 else None


@lru_cache(maxsize=_READ_CACHE)
def change_cue(text: str) -> bool:
    """Whether ``text`` holds a change cue (:data:`CHANGE_PATTERNS`)."""
    return CHANGE.search(_fold(text)) is not None


def content_words(text: str, *, names: bool = True) -> set[str]:
    """The words of ``text`` that carry content: case-folded, without filler words, change
    cues or a trailing possessive "'s", three letters or more; without ``names``, only the
    words written in lower case (a person's name is in every fact about them)."""
    if not names:
        text = " ".join(w for w in re.findall(r"[\w'’-]+", text) if not w[:1].isupper())
    words = (w.removesuffix("'s") for w in _WORD.findall(_fold(text)))
    return {w for w in words if len(w) >= 3 and w not in _FILLER and not CHANGE.fullmatch(w)}


def same_word(a: str, b: str) -> bool:
    """Whether two words are one for these rules: equal, or sharing their first five
    letters ("smoking", "smoke" share four: equal up to a short word's stem of four)."""
    if a == b:
        return True
    n = min(len(a), len(b))
    return a[:5] == b[:5] if n >= 5 else n == 4 and a[:4] == b[:4]


def holder(text: str) -> str | None:
    """Who the change in ``text`` is about, read from the first word of the sentence that
    holds the cue (after openers such as "Finally" or "Big news"): None for the speaker ("I",
    "we", "my phone", a sentence opening with its verb), else the third party or thing it
    opens with: a word of :data:`PEOPLE`, bare or after "my"/"our" ("my brother" ->
    "brother"), someone after "his"/"her"/"their" ("Her husband Per died" -> "husband"), a
    capitalised name ("Ines moved" -> "ines"), the thing after "the" ("The Iceland trip is
    off" -> "iceland trip") or after a name's "'s", or something new ("A new cafe opened")."""
    pieces = [p for p in _SENTENCE.split(text.strip()) if p.strip()] or [text]
    sentence = next((p for p in pieces if change_cue(p)), pieces[0])
    words = re.findall(r"[\w'’-]+", sentence)
    for i, word in enumerate(words):
        low = _fold(word)
        if [_fold(w) for w in words[i + 1: i + 3]] in (["and", "i"], ["and", "me"]):
            return None  # "June and I are taking the train": the speaker too
        if low in _OPENERS or low in ("just", "so", "and"):
            continue  # "Finally, ...", "Big news: ..."
        if low in ("a", "an"):
            return "something new"  # "A new cafe opened": no stored fact's holder
        if low == "the":  # "The Iceland trip is off": the Iceland trip; "The hot dog stand closed": not Rex
            thing = [w for w in _WORD.findall(_fold(" ".join(words[i + 1: i + 3]))) if content_words(w)]
            return _thing_or_speaker(" ".join(thing) or None, words)
        if low in _POSSESSIVE or low in ("his", "her", "their"):
            # "my phone" is the speaker's, "my best friend" is not; "her ..." is someone else's
            after = [_fold(w).removesuffix("'s") for w in words[i + 1: i + 4]]
            return next((w for w in after if w in PEOPLE), None if low in _POSSESSIVE else low)
        if low.endswith("'s") and i + 1 < len(words) and _fold(words[i + 1]) not in _NOT_A_NOUN | _FILLER \
                and not change_cue(words[i + 1]):
            return _thing_or_speaker(_fold(words[i + 1]), words)  # "Bronagh's clinic": the clinic
        low = low.removesuffix("'s")
        if low in PEOPLE:
            return _thing_or_speaker(low, words)
        if low in _DROPPED_SUBJECT or low.endswith(("ed", "ing")):
            return None
        if word[:1].isupper() and low not in _SELF and low not in _FILLER and not change_cue(low):
            return low
        return None  # the subject is the speaker, or a thing ("the trip", "moved to ...")
    return None


@lru_cache(maxsize=_READ_CACHE)
def speakers_own(text: str) -> bool:
    """Whether ``text`` is the speaker's own statement about themself: no line of a transcript
    ("Kenji: ..."); its :func:`holder` (read in its change sentence, else its first sentence)
    is the speaker; and it says so, with "I", "my", "we"... or a verb without its subject
    ("Got promoted!"). "Note 3 about things" is no one's."""
    if _SPEAKER.match(text):
        return False
    sentence = change_sentence(text) or text
    words = [w.removesuffix("'s") for w in _words_of(sentence)]
    first = words[0] if words else ""
    said = bool((_SELF | _POSSESSIVE) & set(words)) or first in _DROPPED_SUBJECT or first.endswith("ed")
    return said and holder(sentence) is None


def _thing_or_speaker(holder: str | None, words: list[str]) -> str | None:
    """``holder``, unless the sentence (``words``) acts on the speaker ("The cardiologist has
    me on a low-salt diet", "My boss moved me to sales"): then the speaker (None)."""
    return None if {"me", "my", "i", "i'm"} & {_fold(w) for w in words[1:]} else holder


def named_old_values(text: str) -> list[str]:
    """The old values ``text`` names: the content words of "from X to" after a verb of change
    ("moved", "switched", "went"...), or after "quit", "left", "leaving" or "no longer at"
    ("I moved from Paris to Rome" -> ["paris"]; "cycling from Passau to Vienna" names none)."""
    out = []
    for match in (m for pattern in _NAMED_OLD for m in pattern.finditer(_fold(text))):
        words = {w for w in content_words(match.group(1)) if not w.endswith("ly")}  # "quit completely"
        if words:
            out.append(sorted(words)[0] if len(words) == 1 else " ".join(sorted(words)))
    return out


def slots(text: str) -> set[str]:
    """The attributes (:data:`SLOTS`) whose words ``text`` holds, its change cues aside, a
    word read with or without "s", "es", "ed" or "ing" ("rented" names the home); moving
    to a place, emigrating or relocating names the home too."""
    words = {_bare(w) for w in content_words(text, names=False)}
    found = {name for name, named in _SLOTS_BARE.items() if words & named}
    if _HOME_MOVE.search(text):
        found.add("home")
    return found


def _bare(word: str) -> str:
    """``word`` without a plural or verb ending and a final "e", for :func:`slots` ("lives",
    "living", "lived" -> "liv")."""
    for end in ("ing", "es", "ed", "s", "d"):
        if word.endswith(end) and len(word) - len(end) >= 3:
            word = word[: -len(end)]
            break
    return word.removesuffix("e")


#: :data:`SLOTS` with each word as :func:`_bare` leaves it.
_SLOTS_BARE = {name: frozenset(_bare(w) for w in words) for name, words in SLOTS.items()}
_HOME_MOVE = re.compile(r"\b[Mm]ov(?:ed|ing) (?:(?:back )?to [A-Z]|in\b|out\b|house\b)|\b[Ee]migrat|\b[Rr]elocat")


def _names(old: str, value: str) -> bool:
    """Whether every word of ``value`` is a word of ``old`` (:func:`same_word`)."""
    words = _content_of(old, True)
    return all(any(same_word(w, o) for o in words) for w in value.split())


def change_sentence(text: str) -> str | None:
    """The first sentence of ``text`` that states a change: it holds a change cue and is no
    question, or it is the statement a telling question carries (:func:`carried_statement`);
    None if none does. "How was your move?" states none. In a text of several sentences
    only a cue of :data:`REPLACING` counts: "I started", "I joined" in a paragraph of chat
    are more often news than a correction."""
    pieces = [p for p in _SENTENCE.split(text.strip()) if p.strip()]
    cue = CHANGE if len(pieces) == 1 else REPLACING
    for piece in pieces:
        statement = carried_statement(piece) or (None if piece.rstrip().endswith("?") else piece)
        if statement is not None and cue.search(_fold(statement)):
            return statement
    return None


def supersedes(new: str, old: str, cosine: float, runner_up: float = 1.0, *, near: float = NEAR,
               near_sharing: float = NEAR_SHARING, near_nearest: float = NEAR_NEAREST, margin: float = MARGIN,
               near_slot: float = NEAR_SLOT) -> bool:
    """Whether the statement ``new`` supersedes the earlier fact ``old`` (module docstring);
    ``cosine``: the cosine of their embeddings; ``runner_up``: the highest cosine of ``new``
    with anything else it could supersede (1: unknown); the rest: the bars. The change is
    read in ``new``'s :func:`change_sentence`. A line of a transcript, with a leading speaker
    label ("Kenji: ..."), neither supersedes nor is superseded: it records what was said
    (the facts a forming teacher draws from it are what change)."""
    if _SPEAKER.match(old):
        return False
    change = _change_in(new)
    if change is None:
        return False
    if change.holder is not None and not any(same_word(h, w) for h in change.holder.split() for w in _words_of(old)):
        return False
    if any(not _names(old, value) for value in change.named):
        return False
    # A third party's name is in every fact about them; the names in the speaker's own change
    # that ends a state are the things it is about ("Someone stole my Brompton").
    old_words = _content_of(old, change.names)
    sharing = bool(change.named) or any(same_word(w, o) for w in change.words for o in old_words)
    if cosine >= near or sharing and cosine >= near_sharing:
        return True
    if change.replacing and change.holder is None and cosine >= near_slot and change.slots & _slots_of(old):
        return True
    return _near_enough_if_nearest(change, cosine, near_nearest) and cosine - runner_up >= margin


def _near_enough_if_nearest(change: _Change, cosine: float, near_nearest: float) -> bool:
    """The runner-up rule's condition on the change itself: a replacing cue, near enough."""
    return change.replacing and cosine >= near_nearest


def may_supersede_as_nearest(new: str, cosine: float, *, near_nearest: float = NEAR_NEAREST) -> bool:
    """Whether :func:`supersedes` could hold for ``new`` at ``cosine`` by the one rule that
    reads the runner-up (a replacing change, and ``old`` nearer to it than anything else it
    could supersede): when it cannot, the runner-up need not be looked up."""
    change = _change_in(new)
    return change is not None and _near_enough_if_nearest(change, cosine, near_nearest)


@dataclass(frozen=True)
class _Change:
    """What :func:`supersedes` reads of a later statement, once per text: its change
    sentence's holder, the old values it names, whether its cue is a replacing one, whether
    names count among its words (the speaker's own change that ends a state), those words
    (the holder aside) and the attributes it names."""

    holder: str | None
    named: tuple[str, ...]
    replacing: bool
    names: bool
    words: frozenset[str]
    slots: frozenset[str]


@lru_cache(maxsize=_READ_CACHE)
def _change_in(new: str) -> _Change | None:
    """The change ``new`` states (:class:`_Change`), None when it states none or is a line
    of a transcript."""
    if _SPEAKER.match(new):
        return None
    sentence = change_sentence(new)
    if sentence is None:
        return None
    who = holder(sentence)
    replacing = REPLACING.search(_fold(sentence)) is not None
    names = who is None and replacing
    return _Change(who, tuple(named_old_values(sentence)), replacing, names,
                   frozenset(content_words(sentence, names=names) - {who}), frozenset(slots(sentence)))


@lru_cache(maxsize=_READ_CACHE)
def _words_of(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(_fold(text)))


@lru_cache(maxsize=_READ_CACHE)
def _content_of(text: str, names: bool) -> frozenset[str]:
    return frozenset(content_words(text, names=names))


@lru_cache(maxsize=_READ_CACHE)
def _slots_of(text: str) -> frozenset[str]:
    return frozenset(slots(text))


def word_lists() -> frozenset[str]:
    """Every pattern and word list :func:`supersedes` reads, for a digest of the rule."""
    return frozenset(CHANGE_PATTERNS) | {REPLACING.pattern} | PEOPLE | _SELF | _FILLER | _OPENERS | _NOT_A_NOUN | {p.pattern for p in _NAMED_OLD} | {_HOME_MOVE.pattern} | {f"{k}:{' '.join(sorted(v))}" for k, v in SLOTS.items()} | {_SENTENCE.pattern, _SPEAKER.pattern, TELLING.pattern} | _DROPPED_SUBJECT | {f"{k}={v}" for k, v in TEXTING.items()}
