"""The answer schemas of the LLM teachers' questions (pydantic models).

One schema per question (:data:`SCHEMAS`, by question name); node numbers in an answer are
the ones the question showed (:mod:`.prompts`). All fields are required (nullable where
optional) so that the same schemas work with OpenAI's strict json_schema mode, tool calls
and plain JSON mode.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Stage1Answer(BaseModel):
    """Where the new fact goes from the current node."""

    choice: int = Field(description="0 to attach the new fact under the current node, "
                                    "or the number of the child aspect to descend into")


class ActionSpec(BaseModel):
    """One stage-2 action; node numbers are the ones shown in the data."""

    type: Literal["promote", "demote", "group"] = Field(description="the kind of action")
    node: int | None = Field(description="promote/demote: number of the fact that moves; group: null")
    target: int | None = Field(description="demote: number of the sibling aspect to move into; else null")
    members: list[int] | None = Field(description="group: numbers of the two or more facts "
                                                   "(same parent) to put under a new aspect; else null")
    label: str | None = Field(description="group: a 1 to 4 word label for the new aspect; else null")


class Stage2Answer(BaseModel):
    """The action series for a closure; an empty list keeps the arrangement (Idle)."""

    actions: list[ActionSpec] = Field(description="actions in the order to apply them; [] to change nothing")


class AspectName(BaseModel):
    """A label for a new aspect."""

    label: str = Field(description="1 to 4 words naming what the facts have in common")


class PlaceAnswer(BaseModel):
    """One-call placement: the destination and the stage-2 actions at once."""

    parent: int = Field(description="number of the root or aspect the new fact goes under")
    actions: list[ActionSpec] = Field(description="actions to apply after the fact is attached "
                                                  "(0 is the new fact); [] to change nothing")


class BatchEntry(BaseModel):
    """Where one of several new facts goes, and the actions once it is attached."""

    fact: int = Field(description="the new fact's number")
    parent: int = Field(description="number of the root or outline aspect the fact goes under")
    actions: list[ActionSpec] = Field(description="actions to apply after the fact is attached; [] to change nothing")


class PlaceBatchAnswer(BaseModel):
    """The batch question: one entry per new fact, in the order shown."""

    placements: list[BatchEntry] = Field(description="one entry per new fact, in the order shown")


class OperationAnswer(BaseModel):
    """The memory operation for a new item (operations.py)."""

    operation: Literal["ADD", "UPDATE", "DELETE", "IGNORE"] = Field(
        description="ADD a new memory; UPDATE an old fact it replaces; DELETE an old fact it "
                    "retracts; IGNORE when it is not a memory (greeting, thanks, question, small talk)")
    target: int | None = Field(description="UPDATE/DELETE: the number of the old fact; else null")
    keep: bool | None = Field(description="DELETE: true when the new item is itself a memory to store "
                                          "(\"our cat died\"), false when it only retracts; else null")


class OperationPlaceAnswer(BaseModel):
    """The memory operation and, for an item that is stored as a new fact, its placement:
    one question for the whole insert."""

    operation: Literal["ADD", "UPDATE", "DELETE", "IGNORE"] = Field(
        description="ADD a new memory; UPDATE an old fact it replaces; DELETE an old fact it "
                    "retracts; IGNORE when it is not a memory (greeting, thanks, question, small talk)")
    target: int | None = Field(description="UPDATE/DELETE: the number of the old fact among the candidates; "
                                           "else null")
    keep: bool | None = Field(description="DELETE: true when the new item is itself a memory to store; "
                                          "else null")
    parent: int | None = Field(description="ADD, or DELETE with keep: number (in the outline) of the root or "
                                            "aspect the new fact goes under; else null")
    actions: list[ActionSpec] | None = Field(description="with parent: actions to apply after the fact is "
                                                         "attached (0 is the new fact), [] for none; else null")


SCHEMAS: dict[str, type[BaseModel]] = {
    "stage1": Stage1Answer,
    "stage2": Stage2Answer,
    "name": AspectName,
    "place": PlaceAnswer,
    "place_batch": PlaceBatchAnswer,
    "operation": OperationAnswer,
    "operation_place": OperationPlaceAnswer,
}


def strict_json_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The pydantic schema made acceptable to OpenAI's ``strict`` structured outputs:
    every object closed (``additionalProperties: false``) with all its properties required,
    and no ``default`` keys."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            node = {k: fix(v) for k, v in node.items() if k != "default"}
            if node.get("type") == "object" or "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node.get("properties", {}))
            return node
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    return fix(schema.model_json_schema())
