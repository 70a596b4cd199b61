"""Every ```python block of README.md runs as written, and says what it does.

Each block's text runs unchanged, in a temporary working directory (the files it writes land
there); only environment variables differ: ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` point
``ChatOpenAI``, ``openai.OpenAI()`` and ``create_agent("openai:...")`` at the local
OpenAI-protocol server of tests/llm (``openai_server.py``), where a scripted "LLM" answers
every question with a valid answer: the teacher's structured questions (placement, batch,
memory operation, naming, formation) and an agent's tool calls. Nothing leaves the machine.

The rule for namespaces: **a block that starts with an import starts a fresh namespace; a
block that does not continues the namespace of the block before it** (README.md's stats
snippet reads the names of the teacher block above it). So a block of its own must import and
build everything it uses, as a reader pasting only it would need. The test of a continuing
block runs the blocks it continues first.

Top-level statements run one by one in the block's namespace (same code, same order), so the
test also keeps the value of each expression statement and of each assignment's target: the
results a block's comments state are asserted on those (``CHECKS``). A block added to the
README later runs without further ado (it must at least not raise); ``MIN_BLOCKS`` keeps a
broken extraction from passing with fewer blocks than the README has.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

sys.path.insert(0, str(Path(__file__).parent / "llm"))
from openai_server import (  # noqa: E402
    OpenAITestServer,
    Reply,
    answer,
    last_user_text,
    schema_name,
    tool_calls,
)

from langchain_membrain import HeuristicTeacher, LLMTeacher, MembrainMemory, MembrainStore  # noqa: E402
from langchain_membrain.teachers.openai_teacher import OpenAITeacher  # noqa: E402
from langchain_membrain.teachers.prompts import parse_data_block  # noqa: E402

README = Path(__file__).parents[1] / "README.md"
MIN_BLOCKS = 6  # the python blocks README.md has today

BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclass
class Block:
    index: int
    line: int  # README line of the block's first line of code
    text: str

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0].strip()

    @property
    def continues(self) -> bool:
        return not self.first_line.startswith(("import ", "from "))


def readme_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    return [Block(i, text.count("\n", 0, m.start(1)) + 1, m.group(1)) for i, m in enumerate(BLOCK.finditer(text))]


BLOCKS = readme_blocks()


def chain(block: Block) -> list[Block]:
    """The blocks that run for ``block``: those it continues, then itself."""
    start = block.index
    while BLOCKS[start].continues:
        start -= 1
        assert start >= 0, "README.md's first python block continues nothing"
    return BLOCKS[start:block.index + 1]


# ------------------------------------------------------------------ running a block
@dataclass
class Run:
    """A block's namespace after it ran, and the values its statements gave."""

    ns: dict[str, Any]
    values: list[tuple[str, Any]] = field(default_factory=list)  # (statement source, value)
    every_value: list[Any] = field(default_factory=list)  # of all the blocks run, for closing

    def at(self, prefix: str) -> Any:
        """The value of the one statement whose source starts with ``prefix``: an
        expression's value, or what an assignment bound."""
        found = [value for source, value in self.values if source.startswith(prefix)]
        assert len(found) == 1, f"{len(found)} statements start with {prefix!r}"
        return found[0]


def run_block(block: Block, run: Run) -> None:
    """Run ``block``'s statements in ``run.ns``, keeping what each one gave; tracebacks name
    README.md and its line numbers."""
    tree = ast.parse(block.text, filename=str(README))
    sources = [ast.get_source_segment(block.text, stmt) or "" for stmt in tree.body]
    ast.increment_lineno(tree, block.line - 1)
    run.values = []
    for stmt, source in zip(tree.body, sources):
        if isinstance(stmt, ast.Expr):
            value = eval(compile(ast.Expression(stmt.value), str(README), "eval"), run.ns)
        else:
            exec(compile(ast.Module([stmt], type_ignores=[]), str(README), "exec"), run.ns)
            targets = stmt.targets if isinstance(stmt, ast.Assign) else []
            value = run.ns[targets[0].id] if len(targets) == 1 and isinstance(targets[0], ast.Name) else None
        run.values.append((source, value))
        run.every_value.append(value)


def close_all(run: Run) -> None:
    """Close every memory and store the blocks left open (a block may build several)."""
    for value in [*run.every_value, *run.ns.values()]:
        if isinstance(value, (MembrainMemory, MembrainStore)):
            value.close()


# ------------------------------------------------------------------ the scripted LLM
FORMED_DATE = "2023-05-07"
SUMMARY = "Caroline went to an LGBTQ support group the day before 8 May 2023."


def readme_llm(request: dict[str, Any]) -> Reply:
    """An LLM that answers every question README.md's blocks ask with a valid answer: new
    facts go under the root and change nothing else (ADD), a formation question states one
    dated fact, and an agent saves what the user says, then answers."""
    tools = [t["function"]["name"] for t in request.get("tools") or []]
    if "save_memory" in tools:  # the agent of the store block
        if request["messages"][-1]["role"] == "tool":
            return tool_calls()  # a plain answer: "done"
        return tool_calls(("save_memory", {"content": last_user_text(request)}))
    name = schema_name(request)
    nulls = {"target": None, "keep": None}
    if name == "FormationAnswer":
        return answer({"facts": [{"text": "Caroline went to an LGBTQ support group on 7 May 2023",
                                  "valid_from": FORMED_DATE, "valid_to": None}],
                       "experiences": [], "working": SUMMARY})
    if name == "FormationBatchAnswer":
        data = parse_data_block(last_user_text(request))
        return answer({"inputs": [{"number": i["number"], "facts": [], "experiences": []} for i in data["inputs"]],
                       "working": SUMMARY})
    if name == "OperationPlaceAnswer":
        return answer({"operation": "ADD", **nulls, "parent": 1, "actions": []})
    if name == "OperationAnswer":
        return answer({"operation": "ADD", **nulls})
    if name == "PlaceAnswer":
        return answer({"parent": 1, "actions": []})
    if name == "PlaceBatchAnswer":
        data = parse_data_block(last_user_text(request))
        return answer({"placements": [{"fact": f["number"], "parent": 1, "actions": []} for f in data["new_facts"]]})
    if name == "Stage1Answer":
        return answer({"choice": 0})
    if name == "Stage2Answer":
        return answer({"actions": []})
    if name == "AspectName":
        return answer({"label": "things"})
    raise AssertionError(f"README.md asked the LLM an unexpected question: {name or tools}")


# ------------------------------------------------------------------ what the comments state
def check_quickstart(run: Run, server: OpenAITestServer, printed: str) -> None:
    memory = run.ns["memory"]
    # "offline: bundled MiniLM, heuristic teacher, in memory"
    assert isinstance(memory.teacher, HeuristicTeacher)
    assert type(memory.embeddings).__name__ == "MiniLMEmbeddings"
    assert memory.config.storage is None
    assert not server.requests
    # search(..., limit=2): two hits printed as "score  text  path"
    lines = printed.splitlines()
    assert len(lines) == 2 and all(re.match(r"0\.\d\d  \S", line) for line in lines), printed


def check_teachers(run: Run, server: OpenAITestServer, printed: str) -> None:
    # "1. any LangChain chat model with structured output ...: LLMTeacher"
    assert isinstance(run.at('memory = MembrainMemory("membrain.db", teacher=ChatOpenAI(').teacher, LLMTeacher)
    # "2. an OpenAI client and a model name: OpenAITeacher, strict JSON-schema answers"
    second = run.at('memory = MembrainMemory("membrain.db", teacher=openai.OpenAI(),').teacher
    assert isinstance(second, OpenAITeacher) and second.response_format == "json_schema"
    assert second.model == "gpt-4o-mini"
    # "3. a local OpenAI-compatible server: Ollama ..."
    local = run.at('memory = MembrainMemory("membrain.db", teacher=openai.OpenAI(base_url=').teacher
    assert isinstance(local, OpenAITeacher) and local.model == "llama3.1"
    assert str(local.client.base_url).startswith("http://localhost:11434/v1")
    # "a server without JSON-schema support ...: build the teacher yourself"
    own = run.ns["teacher"]
    assert isinstance(own, OpenAITeacher) and own.response_format == "json_object" and own.model == "my-model"
    assert not server.requests  # building a memory asks its teacher nothing


def check_stats(run: Run, server: OpenAITestServer, printed: str) -> None:
    # {"placement": ..., "audit": ..., "operation": ..., "naming": ...}
    assert {"placement", "audit", "operation", "naming"} <= set(run.at('s["questions"]'))
    # "over the last 100 inserts": a rate
    assert run.at('s["recent_teacher_calls_per_insert"]') >= 0
    # "the student's agreement with the teacher": a share, or None before any audit
    agreement = run.at('s["stage1"]["agreement"]')
    assert agreement is None or 0 <= agreement <= 1
    # "memory operations the student decided alone"
    assert 0 <= run.at('s["operations"]["student_share"]') <= 1
    # "LLM teachers: calls, tokens, latency, failures, retries"
    total = run.at('s["teacher"]["total"]')
    assert {"calls", "failures", "retries", "latency_s"} <= set(total) and any("tokens" in k for k in total)
    assert total["calls"] >= 1 and server.requests  # the LLM was asked
    assert run.ns["s"]["teacher_failures"] == 0


def check_operations(run: Run, server: OpenAITestServer, printed: str) -> None:
    old, key, memory = run.ns["old"], run.ns["key"], run.ns["memory"]
    # "UPDATE: key == old"
    assert key == old
    # "the current version only"
    assert [h.text for h in run.at('memory.search("where do I live", namespace="maya")')] == ["I live in York now."]
    # "and the superseded one"
    texts = [h.text for h in run.at('memory.search("where do I live", namespace="maya", include_history=True)')]
    assert set(texts) == {"I live in York now.", "I live in Leeds."}
    # "[superseded version, current version], oldest first"
    history = run.at("memory.history(key")
    assert [(r.text, r.status) for r in history] == [("I live in Leeds.", "superseded"),
                                                     ("I live in York now.", "current")]
    # "the log of items that were not memories": none here
    assert run.at("memory.ignored(") == []
    # "forget what was archived before 2024": the Leeds version was archived today, so stays
    assert run.at("memory.purge_history(") == 0
    assert len(memory.history(key, namespace="maya")) == 2


def check_formation(run: Run, server: OpenAITestServer, printed: str) -> None:
    hit, memory = run.ns["hit"], run.ns["memory"]
    # "the raw item's key" ... "raw"
    assert run.at('memory.get(key, namespace="chat").kind') == "raw"
    # "formed from it, dated by the LLM"
    assert run.at("hit.sources == [key]") is True
    assert hit.text == "Caroline went to an LGBTQ support group on 7 May 2023"
    dated = datetime.combine(date.fromisoformat(FORMED_DATE), datetime.min.time(), timezone.utc).timestamp()
    assert run.at("hit.valid_from") == dated
    # "the session's summary"
    assert run.at('memory.working("chat", session="1").text') == SUMMARY
    # "a kind stored directly": an experience, with no formation question of its own
    experience = run.at('memory.add("pack the charger first"')
    assert memory.get(experience, namespace="chat").kind == "experience"
    assert [schema_name(r) for r in server.requests].count("FormationAnswer") == 1


def check_store(run: Run, server: OpenAITestServer, printed: str) -> None:
    store = run.ns["store"]
    # "Maya's fact: the query names her" (Ben's is not searched)
    found = run.at('store.search(("users",), query="what does Maya eat?"')
    assert [(item.namespace, item.key) for item in found] == [(("users", "maya"), "diet")]
    # "the fact's place in the tree": Maya's only fact sits under her tree's root
    assert run.at('store.path(("users", "maya"), "diet")') == []
    # "may call save_memory": the scripted model does, and the memory keeps it
    reply = run.at("agent.invoke(")
    assert any(getattr(m, "name", None) == "save_memory" for m in reply["messages"])
    saved = store.memory.search("Portuguese", namespace=("memories",))
    assert [h.text for h in saved] == ["Remember that I'm learning Portuguese"]


Check = Callable[[Run, OpenAITestServer, str], None]

#: The checks of the blocks whose comments state results, by a text only that block holds.
CHECKS: dict[str, Check] = {
    "memory.add_many([\n    \"I'm allergic to peanuts\"": check_quickstart,
    'teacher_model="gpt-4o-mini"': check_teachers,
    "s = memory.stats()": check_stats,
    'old = memory.add("I live in Leeds."': check_operations,
    "formation=True": check_formation,
    "MembrainStore.from_conn_string": check_store,
}


# ------------------------------------------------------------------ the tests
def test_the_readme_has_its_python_blocks_and_each_check_finds_its_block():
    assert len(BLOCKS) >= MIN_BLOCKS
    for marker in CHECKS:
        assert sum(marker in b.text for b in BLOCKS) == 1, f"no single README.md block holds {marker!r}"


@pytest.fixture
def readme_env(tmp_path, monkeypatch):
    """The local server, and the OpenAI clients pointed at it by environment variables."""
    monkeypatch.chdir(tmp_path)
    for var in ("OPENAI_API_BASE", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_PROXY"):
        monkeypatch.delenv(var, raising=False)
    with OpenAITestServer(responder=readme_llm) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield server
    assert not server.errors, server.errors[0]
    assert not server.bad_requests, server.bad_requests


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.index}-{b.first_line[:40]}" for b in BLOCKS])
def test_readme_block_runs_as_written(block, readme_env, capsys):
    run = Run({"__name__": "__readme__"})
    try:
        for earlier in chain(block)[:-1]:
            run_block(earlier, run)
        capsys.readouterr()
        run_block(block, run)
        printed = capsys.readouterr().out
        for marker, check in CHECKS.items():
            if marker in block.text:
                check(run, readme_env, printed)
    finally:
        close_all(run)  # before the server stops: closing asks pending questions
