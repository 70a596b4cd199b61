"""membrain's insert pipeline as a subgraph of your own LangGraph graph.

    python examples/langgraph_subgraph.py

``mem.graph`` is a compiled ``StateGraph`` (embed -> stage-1 descent -> attach -> stage-2
rewrite -> train, with teacher nodes where the small models are unsure). Its input keys
are ``text``, ``namespace`` and ``metadata``; it writes back ``key`` and ``parent_path``.
Any graph whose state has those keys can use it as a node.

Here a small "note taker" routes each message: a question is answered from memory, anything
else is cleaned up and filed by membrain's subgraph, then confirmed with the place it went.
Runs offline (MiniLM embeddings, heuristic teacher).
"""

from __future__ import annotations

from datetime import date
from typing import Any, Literal, TypedDict

from langgraph.graph import END, START, StateGraph

from langchain_membrain import MembrainMemory


class NoteState(TypedDict, total=False):
    message: str  # what the user typed
    # shared with membrain's insert graph (inputs, then outputs)
    text: str
    namespace: str
    metadata: dict[str, Any]
    key: str | None
    parent_path: list[str]
    # ours
    reply: str


def build_note_taker(mem: MembrainMemory):
    """A graph: route -> (recall | clean -> remember (membrain's subgraph) -> confirm)."""

    def route(state: NoteState) -> Literal["recall", "clean"]:
        return "recall" if state["message"].rstrip().endswith("?") else "clean"

    def recall(state: NoteState) -> dict[str, Any]:
        hits = mem.search(state["message"], namespace=state["namespace"], limit=2)
        if not hits:
            return {"reply": "I have no notes about that yet."}
        lines = [f"- {h.text}  ({' › '.join(h.path) or 'top level'})" for h in hits]
        return {"reply": "From my notes:\n" + "\n".join(lines)}

    def clean(state: NoteState) -> dict[str, Any]:
        text = state["message"].strip()
        for prefix in ("remember that ", "note: ", "note that "):
            if text.lower().startswith(prefix):
                text = text[len(prefix):]
        text = text[:1].upper() + text[1:]
        # key None: a new memory each time, even when a checkpointer keeps the last key
        return {"text": text, "key": None,
                "metadata": {"source": "note-taker", "day": date.today().isoformat()}}

    def confirm(state: NoteState) -> dict[str, Any]:
        where = " › ".join(state.get("parent_path") or []) or "the top level"
        return {"reply": f"Noted under {where} (key {state['key'][:8]})."}

    builder = StateGraph(NoteState)
    builder.add_node("recall", recall)
    builder.add_node("clean", clean)
    builder.add_node("remember", mem.graph)  # <- the whole membrain insert pipeline, as one node
    builder.add_node("confirm", confirm)
    builder.add_conditional_edges(START, route)
    builder.add_edge("clean", "remember")
    builder.add_edge("remember", "confirm")
    builder.add_edge("confirm", END)
    builder.add_edge("recall", END)
    return builder.compile()


MESSAGES = [
    "remember that my passport expires in March 2027",
    "note: the car needs new tyres before winter",
    "My dentist appointment is on the 14th at 9am",
    "The passport office in town opens at 8:30",
    "When does my passport expire?",
]


def main() -> None:
    """Run the note taker over a few messages and show the resulting tree."""
    from rich import print

    from langchain_membrain.tree.export import tree_to_rich

    with MembrainMemory() as mem:
        app = build_note_taker(mem)
        namespace = "notes/me"
        # The first message streamed with subgraphs=True: membrain's own steps are visible.
        print(f"[bold green]you>[/] {MESSAGES[0]}")
        for path, update in app.stream({"message": MESSAGES[0], "namespace": namespace},
                                       stream_mode="updates", subgraphs=True):
            where = "membrain" if path else "note taker"
            print(f"  [dim]{where}: {', '.join(update)}[/]")
            if not path and "confirm" in update:
                print(f"[bold magenta]bot>[/] {update['confirm']['reply']}")
        for message in MESSAGES[1:]:
            out = app.invoke({"message": message, "namespace": namespace})
            print(f"[bold green]you>[/] {message}\n[bold magenta]bot>[/] {out['reply']}")
        print(tree_to_rich(mem.tree(namespace)))


if __name__ == "__main__":
    main()
