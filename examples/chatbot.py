"""A terminal chatbot that remembers you across runs.

    python examples/chatbot.py                      # chat; memories kept in ./chatbot.db
    python examples/chatbot.py --script turns.txt   # feed turns from a file (one per line)

Every message you type is stored in membrain (SQLite, ``--db``); before each answer the
memories closest to your message are retrieved, shown with their place in the tree, and
given to the chat model. Type ``/tree`` to see the tree, ``/quit`` to leave.

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set, the chat model is ``ChatOpenAI``
(``MEMBRAIN_CHAT_MODEL``, default ``gpt-4o-mini``) and the LLM teacher
(``MEMBRAIN_TEACHER_MODEL``, default the chat model) organises the tree. Without them
everything runs offline: a scripted reply model and the heuristic teacher.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from rich.console import Console
from rich.markup import escape

from langchain_membrain import MembrainMemory
from langchain_membrain.errors import MembrainError
from langchain_membrain.tree.export import shorten, tree_to_rich

SYSTEM = ("You are a friendly assistant with a long-term memory of this user. "
          "Use what you remember when it helps; do not invent memories.\n"
          "What you remember (most relevant first):\n{memories}")


class ScriptedChatModel(BaseChatModel):
    """An offline stand-in for a chat model: it answers from the memories in the system
    prompt, so the chatbot runs (and can be tested) without any API."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        system = next((m.content for m in messages if isinstance(m, SystemMessage)), "")
        remembered = [ln[2:] for ln in str(system).splitlines() if ln.startswith("- ")]
        said = str(messages[-1].content)
        if remembered:
            reply = f"Noted. That reminds me of what you told me before: \"{remembered[0]}\""
        elif not any(isinstance(m, AIMessage) for m in messages):
            reply = f"Nice to meet you! I'll remember that: \"{shorten(said, 60)}\""
        else:
            reply = f"Got it, I'll remember that: \"{shorten(said, 60)}\""
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=reply))])


def online() -> bool:
    """Whether an OpenAI-compatible endpoint is configured."""
    return bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


def make_chat_model() -> BaseChatModel:
    """ChatOpenAI when an endpoint is configured, else the scripted offline model."""
    if not online():
        return ScriptedChatModel()
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=os.environ.get("MEMBRAIN_CHAT_MODEL", "gpt-4o-mini"),
                      api_key=os.environ.get("OPENAI_API_KEY") or "not-needed")


def make_teacher() -> Any:
    """The LLM teacher when an endpoint is configured, else None (the heuristic teacher)."""
    if not online():
        return None
    from langchain_membrain.teachers.openai_teacher import OpenAITeacher

    os.environ.setdefault("MEMBRAIN_TEACHER_MODEL", os.environ.get("MEMBRAIN_CHAT_MODEL", "gpt-4o-mini"))
    return OpenAITeacher.from_env()


def turns_from(path: str | None) -> Any:
    """User turns: the lines of ``path`` (blank and ``#`` lines skipped) or the keyboard."""
    if path is not None:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    yield line, True
        return
    while True:
        try:
            yield input("you> ").strip(), False
        except EOFError:
            return


def chat(args: argparse.Namespace, console: Console) -> None:
    """The chat loop: recall, answer, remember."""
    namespace = ("chatbot", args.user)
    model = make_chat_model()
    with MembrainMemory(args.db, teacher=make_teacher()) as memory:
        known = memory.search(namespace=namespace, limit=10_000)
        mode = "online" if online() else "offline (scripted replies, heuristic teacher)"
        console.print(f"[bold]membrain chatbot[/] · {mode} · {len(known)} memories of "
                      f"[bold]{escape(args.user)}[/] from earlier conversations · /tree, /quit")
        history: list[BaseMessage] = []
        for text, scripted in turns_from(args.script):
            if scripted:
                console.print(f"[bold green]you>[/] {escape(text)}")
            if not text:
                continue
            if text in ("/quit", "/exit"):
                break
            if text == "/tree":
                if memory.search(namespace=namespace, limit=1):
                    console.print(tree_to_rich(memory.tree(namespace), title=f"what I know about {args.user}"))
                else:
                    console.print("[dim]I don't remember anything yet.[/]")
                continue
            hits = memory.search(text, namespace=namespace, limit=args.k)
            hits = [h for h in hits if (h.score or 0.0) >= args.min_score]
            for h in hits:
                path = " › ".join(h.path) or "·"
                console.print(f"  [dim]recalled {h.score:.2f}[/] {escape(shorten(h.text, 70))} [cyan]{escape(path)}[/]")
            memories = "\n".join(f"- {h.text}" for h in hits) or "(nothing yet)"
            messages = [SystemMessage(SYSTEM.format(memories=memories)), *history[-6:], HumanMessage(text)]
            reply = model.invoke(messages).content
            console.print(f"[bold magenta]bot>[/] {escape(str(reply))}")
            history += [HumanMessage(text), AIMessage(str(reply))]
            memory.add(text, namespace=namespace,
                       metadata={"speaker": "user", "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
        total = len(memory.search(namespace=namespace, limit=10_000))
        console.print(f"[dim]{total} memories of {escape(args.user)} kept in {escape(args.db)}[/]")


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and chat; a bad file or database is one line, not a traceback."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="chatbot.db", help="SQLite file (default chatbot.db)")
    parser.add_argument("--user", default="me", help="whose memories (default 'me')")
    parser.add_argument("--script", metavar="FILE", help="read user turns from FILE instead of the keyboard")
    parser.add_argument("-k", type=int, default=3, help="memories recalled per turn (default 3)")
    # A hit's score is its lexical match (0 to 1) plus 0.2 x its cosine's z-score among the
    # user's memories: 0.15 recalls what shares words with the turn or stands out by meaning.
    # (0.2 sat exactly on the score of a memory one deviation above the mean, and float
    # rounding put it on either side.)
    parser.add_argument("--min-score", type=float, default=0.15, help="recall threshold (default 0.15)")
    args = parser.parse_args(argv)
    console = Console(highlight=False)
    try:
        chat(args, console)
    except (OSError, MembrainError) as exc:
        Console(stderr=True).print(f"[red]chatbot: {escape(str(exc))}[/]", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
