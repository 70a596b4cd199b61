"""The formation question asked of an LLM teacher (formation.py): its prompt, its answer
schema and :class:`FormationQuestions`, the part of the guarded LLM teachers that asks it.

One request per input, within the prompt budget every question keeps
(:data:`~.prompts.QUESTION_BUDGET_CHARS`): the input is clipped first, then the working
summary shown beside it. The answer's times are ISO dates ("2023-05-08") turned into seconds
since the epoch (UTC); a date that does not parse loses its time, not its fact. The memory
then validates the answer's size (formation.check_answer).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from . import prompts

if TYPE_CHECKING:
    from .costs import TeacherStats
    from .line import RequestLine

_RULES = """"facts": the atomic facts it states, each one statement that could later be updated \
alone, written in the third person with names resolved ("Caroline went to a support group on \
7 May 2023", not "I went yesterday"), with "valid_from" and "valid_to" as ISO dates when the input \
says when it holds, else null. Small talk, greetings and questions that state nothing give no \
facts. "experiences": how-to lessons it teaches ("when planning a trip for two, check both \
calendars first"); usually none."""

FORMATION_SYSTEM = f"""You write a person's long-term memory. A new input arrives (a chat \
turn, a message or a document chunk), with its metadata (speaker, date, session) and the \
current summary of its session ("working"). Answer with {_RULES} And "working": the session's \
summary updated with this input, at most 5 sentences.

{prompts.DATA_RULE} Schema: {{"facts": [{{"text": ..., "valid_from": <date or null>, \
"valid_to": <date or null>}}], "experiences": [...], "working": ...}}."""

FORMATION_BATCH_SYSTEM = f"""You write a person's long-term memory. Several new inputs of one \
session arrive, numbered from 1 in the order they were said (chat turns, messages or document \
chunks), each with its metadata (speaker, date, session), and the current summary of the \
session ("working"). For each input that states something, an entry in "inputs" with its \
"number" and, for that input, {_RULES} And "working": the session's summary updated with these \
inputs, at most 5 sentences.

{prompts.DATA_RULE} Schema: {{"inputs": [{{"number": ..., "facts": [{{"text": ..., \
"valid_from": <date or null>, "valid_to": <date or null>}}], "experiences": [...]}}], \
"working": ...}}."""

#: Longest input quoted in the question; the working summary gets what the budget leaves.
INPUT_CHARS = 2400
#: The metadata a formation question shows beside an input.
SHOWN_METADATA = ("speaker", "date", "session", "source")


class FormedFact(BaseModel):
    text: str = Field(description="one atomic fact, third person, names resolved")
    valid_from: str | None = Field(description="ISO date from which it holds, or null")
    valid_to: str | None = Field(description="ISO date until which it held, or null")


class FormationAnswer(BaseModel):
    """What one input states (formation.py)."""

    facts: list[FormedFact] = Field(description="the atomic facts the input states; [] for small talk")
    experiences: list[str] = Field(description="how-to lessons the input teaches; usually []")
    working: str | None = Field(description="the session's summary updated with this input")


class FormedInput(BaseModel):
    number: int = Field(description="the input's number")
    facts: list[FormedFact] = Field(description="the atomic facts this input states")
    experiences: list[str] = Field(description="how-to lessons this input teaches; usually []")


class FormationBatchAnswer(BaseModel):
    """What several inputs of one session state."""

    inputs: list[FormedInput] = Field(description="one entry per input that states something")
    working: str | None = Field(description="the session's summary updated with these inputs")


def formation_batch_messages(items: list[Any], *,
                             budget_chars: int = prompts.QUESTION_BUDGET_CHARS) -> list[prompts.Message]:
    """The formation question for several inputs of one session, within ``budget_chars``:
    each input shorter, then the working summary, until it fits."""
    working = items[0].working if items else None
    for each, summary in ((1200, 1200), (600, 600), (300, 300), (150, 0), (60, 0)):
        payload = {"inputs": [{"number": n, "input": prompts.shorten(i.text, each), "metadata": _shown(i.metadata)}
                              for n, i in enumerate(items, 1)],
                   "working": prompts.shorten(working, summary) if working and summary else None}
        if prompts.fits(FORMATION_BATCH_SYSTEM, payload, budget_chars):
            break
    return [{"role": "system", "content": FORMATION_BATCH_SYSTEM},
            {"role": "user", "content": prompts.data_block(payload)}]


def _shown(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if isinstance(v, (str, int, float)) and k in SHOWN_METADATA}


def formation_messages(text: str, metadata: dict[str, Any], working: str | None, *,
                       budget_chars: int = prompts.QUESTION_BUDGET_CHARS) -> list[prompts.Message]:
    """The formation question for one input, within ``budget_chars``."""
    shown = _shown(metadata)
    for item, summary in ((INPUT_CHARS, 1600), (INPUT_CHARS, 600), (1200, 300), (600, 0)):
        payload = {"input": prompts.shorten(text, item), "metadata": shown,
                   "working": prompts.shorten(working, summary) if working and summary else None}
        if prompts.fits(FORMATION_SYSTEM, payload, budget_chars):
            break
    return [{"role": "system", "content": FORMATION_SYSTEM}, {"role": "user", "content": prompts.data_block(payload)}]


def as_epoch(date: str | None) -> float | None:
    """An ISO date or time as seconds since the epoch (UTC when it names no zone); None for
    None or what does not parse."""
    if not date:
        return None
    try:
        when = datetime.fromisoformat(date.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


class FormationQuestions:
    """Mixed into the guarded LLM teachers: ``form`` asks the formation question as one
    guarded question on the teacher's line (retry with the error quoted, counted, budgeted), when ``forms`` is
    set (``formation=True``): each input then costs one more request, so it is opt-in."""

    forms: bool = False

    if TYPE_CHECKING:  # what GuardedTeacher provides (guard.py)
        line: RequestLine
        _stats: TeacherStats

        def _question_budget(self, schema: type[BaseModel]) -> int: ...

    def form(self, item: Any) -> dict[str, Any]:
        """The LLM's formation of ``item`` (formation.FormationInput) as the mapping
        formation.check_answer reads; TeacherCallError when unusable (the memory then keeps
        the input as said)."""
        msgs = formation_messages(item.text, item.metadata, item.working,
                                  budget_chars=self._question_budget(FormationAnswer))

        def validate(answer: FormationAnswer) -> dict[str, Any]:
            facts = [{"text": f.text, "valid_from": as_epoch(f.valid_from), "valid_to": as_epoch(f.valid_to)}
                     for f in answer.facts]
            return {"facts": facts, "experiences": list(answer.experiences), "working": answer.working}

        self._stats.add("formation", decisions=1)
        return self.line.run(self.line.ask("formation", msgs, FormationAnswer, validate))

    def form_batch(self, items: list[Any]) -> dict[str, Any]:
        """The LLM's formation of several inputs of one session in one question, as the
        mapping formation.check_batch_answer reads (which drops entries for inputs not shown)."""
        msgs = formation_batch_messages(items, budget_chars=self._question_budget(FormationBatchAnswer))

        def validate(answer: FormationBatchAnswer) -> dict[str, Any]:
            entries = [{"number": e.number, "experiences": list(e.experiences),
                        "facts": [{"text": f.text, "valid_from": as_epoch(f.valid_from),
                                   "valid_to": as_epoch(f.valid_to)} for f in e.facts]} for e in answer.inputs]
            return {"inputs": entries, "working": answer.working}

        self._stats.add("formation", decisions=len(items))
        return self.line.run(self.line.ask("formation", msgs, FormationBatchAnswer, validate))
