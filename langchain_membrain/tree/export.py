"""Export a :class:`~.tree.MembrainTree` to JSON, Mermaid or one self-contained HTML page.

All three are pure functions of the tree; they never modify it.

- :func:`tree_to_json`: the tree's own snapshot format, readable back with
  :meth:`MembrainTree.from_dict <langchain_membrain.tree.tree.MembrainTree.from_dict>`.
- :func:`tree_to_mermaid`: a Mermaid ``flowchart`` (paste it into a Markdown file on GitHub,
  or any Mermaid viewer).
- :func:`tree_to_rich`: a :class:`rich.tree.Tree` for the terminal (``membrain show``).
- :func:`tree_to_html`: one HTML file with inline CSS and JavaScript (no CDN, no web fonts, so
  it opens offline): collapsible aspects with their fact counts and a search box that filters
  the facts and opens the aspects above each match.
"""

from __future__ import annotations

import html
import re
import time
from typing import Any, Sequence

from rich.text import Text
from rich.tree import Tree

from .archive import HISTORY_KEY
from .kinds import KIND_KEY, SOURCES_KEY
from .nodes import Node
from .tree import MembrainTree, stated_valid_time

__all__ = ["forest_to_html", "forest_to_json", "forest_to_mermaid", "shorten", "tree_to_html", "tree_to_json",
           "tree_to_mermaid", "tree_to_rich"]


# ---------------------------------------------------------------------- JSON
def tree_to_json(tree: MembrainTree, *, embeddings: bool = True) -> dict[str, Any]:
    """The tree as a JSON-compatible dict (``json.dumps`` it to write a file).

    The format is :meth:`MembrainTree.to_dict`, so
    ``MembrainTree.from_dict(tree_to_json(tree))`` rebuilds the same tree. With
    ``embeddings=False`` the vectors are left out (a file a person can read; a tree rebuilt
    from it has no embeddings).
    """
    data = tree.to_dict()
    if not embeddings:
        for row in data["nodes"]:
            row["embedding"] = None
        data["dim"] = None
    return data


def forest_to_json(trees: Sequence[tuple[Sequence[str], MembrainTree]], *, embeddings: bool = True
                   ) -> dict[str, Any]:
    """Several namespaces' trees as one JSON-compatible dict:
    ``{"namespaces": [{"namespace": [labels...], "tree": tree_to_json(tree)}, ...]}``, in
    the order given (each ``tree`` readable back with ``MembrainTree.from_dict``)."""
    return {"namespaces": [{"namespace": list(ns), "tree": tree_to_json(tree, embeddings=embeddings)}
                           for ns, tree in trees]}


# ------------------------------------------------------------------- Mermaid
# Characters that would end a quoted Mermaid label or be read as markup, as Mermaid's own
# entity codes (``#quot;``) or numeric codes (``#91;``).
_MERMAID_ESCAPES = {
    '"': "#quot;",
    "#": "#35;",
    "<": "#lt;",
    ">": "#gt;",
    "[": "#91;",
    "]": "#93;",
    "{": "#123;",
    "}": "#125;",
    "(": "#40;",
    ")": "#41;",
    "|": "#124;",
    "`": "#96;",
    "&": "#38;",
}
_MERMAID_RE = re.compile("[" + re.escape("".join(_MERMAID_ESCAPES)) + "]")


def shorten(text: str, width: int = 72) -> str:
    """``text`` on one line of at most ``width`` characters (an ellipsis marks a cut;
    ``width <= 0`` keeps it whole)."""
    text = " ".join(str(text).split())
    if width > 0 and len(text) > width:
        return text[: max(width - 1, 0)].rstrip() + "…"
    return text


def mermaid_label(text: str, max_label: int = 40) -> str:
    """``text`` shortened and escaped so that it is safe inside a quoted Mermaid label."""
    return _MERMAID_RE.sub(lambda m: _MERMAID_ESCAPES[m.group(0)], shorten(text, max_label))


def tree_to_mermaid(tree: MembrainTree, max_label: int = 40, *, max_facts: int | None = None) -> str:
    """The tree as a Mermaid flowchart (top-down).

    The root is a stadium, aspects are rounded boxes labelled with their fact count, facts
    are plain boxes. Labels are cut to ``max_label`` characters and escaped (quotes,
    brackets, ``<``, ``>``, ``#``...), and node ids are generated (``n0``, ``n1``...), so any
    text is safe. ``max_facts`` shows at most that many facts per node and one
    "… N more facts" box for the rest (Mermaid renderers slow down past a few hundred
    nodes).
    """
    return "\n".join(["flowchart TD", *_mermaid_nodes(tree, max_label, max_facts, ""), *_MERMAID_CLASSES]) + "\n"


def forest_to_mermaid(trees: Sequence[MembrainTree], max_label: int = 40, *, max_facts: int | None = None) -> str:
    """Several trees (a memory's namespaces) as one Mermaid flowchart: each tree as
    :func:`tree_to_mermaid` draws it, its root labelled with its subject (the namespace)."""
    nodes = [line for i, tree in enumerate(trees) for line in _mermaid_nodes(tree, max_label, max_facts, f"t{i}")]
    return "\n".join(["flowchart TD", *nodes, *_MERMAID_CLASSES]) + "\n"


_MERMAID_CLASSES = [
    "    classDef root fill:#1f3b57,color:#ffffff,stroke:#1f3b57",
    "    classDef aspect fill:#e3eefa,stroke:#4a78a8,color:#10263b",
    "    classDef fact fill:#ffffff,stroke:#b8c2cc,color:#333333",
    "    classDef more fill:#f4f4f4,stroke:#cccccc,color:#777777,stroke-dasharray:3 3",
]


def _mermaid_nodes(tree: MembrainTree, max_label: int, max_facts: int | None, prefix: str) -> list[str]:
    """The flowchart lines of one tree, its node ids ``{prefix}n0``, ``{prefix}n1``..."""
    lines: list[str] = []
    ids: dict[str, str] = {}

    def mid(node_id: str) -> str:
        if node_id not in ids:
            ids[node_id] = f"{prefix}n{len(ids)}"
        return ids[node_id]

    root = tree.root_id
    subject = tree.subject or "memories"
    lines.append(f'    {mid(root)}(["{mermaid_label(subject, max_label)} · {tree.fact_count(root)}"]):::root')
    stack = [root]
    more = 0
    while stack:
        parent = stack.pop()
        facts_shown = 0
        hidden = 0
        children = tree.children(parent)
        for child in children:
            node = tree.node(child)
            if node.kind == "aspect":
                label = f"{mermaid_label(node.text, max_label)} · {tree.fact_count(child)}"
                lines.append(f'    {mid(parent)} --> {mid(child)}("{label}"):::aspect')
                stack.append(child)
            else:
                if max_facts is not None and facts_shown >= max_facts:
                    hidden += 1
                    continue
                facts_shown += 1
                lines.append(f'    {mid(parent)} --> {mid(child)}["{mermaid_label(node.text, max_label)}"]:::fact')
        if hidden:
            more += 1
            lines.append(f'    {mid(parent)} --> {prefix}more{more}["… {hidden} more facts"]:::more')
    return lines


# ---------------------------------------------------------------------- rich
def tree_to_rich(tree: MembrainTree, *, depth: int | None = None, max_facts: int | None = 10,
                 width: int = 72, title: str | None = None) -> Tree:
    """The tree as a :class:`rich.tree.Tree` (``rich.print`` it).

    Aspects come first with their fact counts, then the facts, shortened to ``width``
    characters; at most ``max_facts`` facts per node (None: all) and aspects down to
    ``depth`` levels (None: all); ``title`` replaces the subject on the top line."""
    root_id = tree.root_id
    n = tree.fact_count(root_id)
    label = title or (tree.subject or "memories")
    top = Tree(Text.assemble((label, "bold"), (f"  {n} fact{'s' if n != 1 else ''}", "dim")),
               guide_style="grey50")

    def fill(branch: Tree, node_id: str, level: int) -> None:
        children = tree.children(node_id)
        aspects = [c for c in children if tree.node(c).kind == "aspect"]
        facts = [c for c in children if tree.node(c).kind == "fact"]
        if depth is not None and level >= depth:
            if aspects or facts:
                branch.add(Text("…", style="dim"))
            return
        for a in aspects:
            count = tree.fact_count(a)
            label = Text.assemble((tree.node(a).text or "(unnamed)", "bold cyan"), (f" ({count})", "dim"))
            label.no_wrap, label.overflow = True, "ellipsis"
            sub = branch.add(label)
            fill(sub, a, level + 1)
        shown = facts if max_facts is None else facts[:max_facts]
        for f in shown:
            branch.add(Text(shorten(tree.node(f).text, width), no_wrap=True, overflow="ellipsis"))
        if len(facts) > len(shown):
            more = len(facts) - len(shown)
            branch.add(Text(f"… and {more} more fact{'s' if more != 1 else ''}", style="dim italic"))

    fill(top, root_id, 0)
    return top


# ---------------------------------------------------------------------- HTML
_CSS = """
:root { --fg:#1d2733; --muted:#6b7785; --line:#d9e0e7; --accent:#2f6fad; --hit:#fff2a8;
        --aspect:#eef4fb; --bg:#ffffff; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial,
       sans-serif; color: var(--fg); background: var(--bg); }
header { position: sticky; top: 0; z-index: 2; background: #f7f9fb; border-bottom: 1px solid var(--line);
         padding: 12px 20px; display: flex; flex-wrap: wrap; gap: 10px 18px; align-items: center; }
header h1 { font-size: 18px; margin: 0; }
header .meta { color: var(--muted); font-size: 13px; }
#q { flex: 1 1 200px; max-width: 360px; padding: 7px 10px; font-size: 15px; border: 1px solid #b9c4cf;
     border-radius: 6px; }
button { font: inherit; font-size: 13px; padding: 5px 10px; border: 1px solid #b9c4cf; background: #fff;
         border-radius: 6px; cursor: pointer; }
button:hover { border-color: var(--accent); }
#status { color: var(--muted); font-size: 13px; min-width: 8em; }
main { padding: 14px 20px 40px; }
details { margin: 2px 0 2px 0; }
details > ul { list-style: none; margin: 2px 0 4px 9px; padding: 0 0 0 14px;
                           border-left: 1px solid var(--line); }
summary { cursor: pointer; padding: 3px 6px; border-radius: 5px; list-style-position: outside; }
summary:hover { background: var(--aspect); }
.aspect > summary .label { font-weight: 600; }
.root > summary .label { font-weight: 700; font-size: 16px; }
.count { display: inline-block; margin-left: 6px; padding: 0 7px; border-radius: 10px; font-size: 12px;
         background: var(--aspect); color: var(--accent); border: 1px solid #c9dbef; }
li.fact { padding: 2px 6px; margin: 1px 0; border-radius: 4px; }
li.fact:hover { background: #f5f7f9; }
li.fact .when { color: var(--muted); font-size: 12px; margin-left: 8px; }
li.fact .kind { color: #7a4d00; font-size: 12px; margin-left: 8px; }
li.fact .sources { display: block; color: var(--muted); font-size: 12px; margin-left: 14px; }
li.hit { background: var(--hit); }
li.hit:hover { background: var(--hit); }
.hidden { display: none !important; }
#empty { color: var(--muted); padding: 10px 6px; }
li.past { display: none; padding: 2px 6px; margin: 1px 0 1px 18px; color: var(--muted); font-size: 14px; }
body.show-history li.past { display: list-item; }
li.past s { text-decoration-thickness: 1px; }
"""

_JS = """
(function () {
  var q = document.getElementById('q');
  var status = document.getElementById('status');
  var empty = document.getElementById('empty');
  var facts = Array.prototype.slice.call(document.querySelectorAll('li.fact'));
  var aspects = Array.prototype.slice.call(document.querySelectorAll('li.aspect'));
  var total = facts.length;
  var timer = null;
  facts.forEach(function (li) { li._text = (li.getAttribute('data-text') || '').toLowerCase(); });

  function setAll(open) {
    document.querySelectorAll('details').forEach(function (d) { d.open = open; });
  }

  function openAncestors(el) {
    for (var p = el.parentElement; p; p = p.parentElement) {
      if (p.tagName === 'DETAILS') { p.open = true; }
    }
  }

  function apply() {
    var terms = q.value.toLowerCase().split(/\\s+/).filter(Boolean);
    var shown = 0;
    aspects.forEach(function (a) { a.classList.remove('hidden'); });
    facts.forEach(function (li) {
      var ok = terms.every(function (t) { return li._text.indexOf(t) !== -1; });
      li.classList.toggle('hidden', terms.length > 0 && !ok);
      li.classList.toggle('hit', terms.length > 0 && ok);
      if (ok) { shown += 1; }
    });
    if (terms.length) {
      // Hide aspects without a visible fact, then open the ancestors of every match.
      aspects.slice().reverse().forEach(function (a) {
        if (!a.querySelector('li.fact:not(.hidden)')) { a.classList.add('hidden'); }
      });
      facts.forEach(function (li) { if (!li.classList.contains('hidden')) { openAncestors(li); } });
      status.textContent = shown + ' of ' + total + ' facts match';
    } else {
      status.textContent = total + ' facts';
    }
    empty.classList.toggle('hidden', !(terms.length && shown === 0));
    if (history.replaceState) {
      history.replaceState(null, '', terms.length ? '#q=' + encodeURIComponent(q.value) : '#');
    }
  }

  q.addEventListener('input', function () { clearTimeout(timer); timer = setTimeout(apply, 80); });
  q.addEventListener('keydown', function (e) { if (e.key === 'Escape') { q.value = ''; apply(); } });
  document.getElementById('expand').addEventListener('click', function () { setAll(true); });
  var past = document.getElementById('history');
  if (past) {
    past.addEventListener('click', function () {
      var on = document.body.classList.toggle('show-history');
      past.textContent = on ? 'Hide history' : 'Show history';
    });
  }
  document.getElementById('collapse').addEventListener('click', function () {
    setAll(false);
    document.querySelectorAll('details.root').forEach(function (root) { root.open = true; });
  });
  var m = /^#q=(.*)$/.exec(location.hash);
  if (m) { q.value = decodeURIComponent(m[1]); }
  apply();
  window.membrain = { search: function (text) { q.value = text; apply(); }, expandAll: function () { setAll(true); } };
})();
"""


def format_time(ts: float | None) -> str:
    """A timestamp as local "YYYY-MM-DD HH:MM"; empty for none."""
    if not ts:
        return ""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def format_valid_time(ts: float | None) -> str:
    """A fact's valid time as the page shows it: a bare date ("YYYY-MM-DD") for a UTC
    midnight (an ISO date the teacher named), else as :func:`format_time`."""
    if ts is None:
        return ""
    if ts % 86400 == 0:
        return time.strftime("%Y-%m-%d", time.gmtime(ts))
    return format_time(ts)


def fact_when(node: Node) -> str:
    """When a current fact holds, labelled so a reader can tell which time it is: its valid
    time where known ("valid from ...", "valid ... – ...", "valid until ...": the time its
    text names, else since its last UPDATE), else when it was stored ("stored ...")."""
    start, end = stated_valid_time(node)
    if start is not None and end is not None:
        return f"valid {format_valid_time(start)} – {format_valid_time(end)}"
    if start is not None:
        return f"valid from {format_valid_time(start)}"
    if end is not None:
        return f"valid until {format_valid_time(end)}"
    stored = format_time(node.created_at)
    return f"stored {stored}" if stored else ""


def tree_to_html(tree: MembrainTree, title: str | None = None, *, open_depth: int = 1) -> str:
    """One self-contained HTML page showing the tree.

    Aspects are ``<details>`` elements (collapsible without JavaScript) labelled with their
    fact count; aspects down to ``open_depth`` levels start open (0: only the root). The
    search box filters the facts (every word must appear, case-insensitive), hides aspects
    left empty and opens the aspects above each match; ``page.html#q=words`` opens with a search filled in.
    Superseded versions of a fact follow it, struck through, and deleted facts close the
    root's list (README, Memories that change): both hidden until "Show history" is pressed.
    A fact formed from raw items shows what was said under it; the raw items and the
    sessions' working memories close the root's list, each in a closed list of its own.
    All text is HTML-escaped and nothing is loaded from the network, so the file can be
    mailed or opened offline. A few thousand facts render in well under a second.
    """
    subject = tree.subject or "memories"
    title = title if title is not None else f"membrain: {subject}"
    n_facts = tree.fact_count(tree.root_id)
    n_aspects = len(tree.aspects())
    out, has_past = _html_tree(tree, open_depth)
    meta = (f"{n_facts} fact{'s' if n_facts != 1 else ''} · {n_aspects} aspect{'s' if n_aspects != 1 else ''}"
            f" · depth {tree.height()}")
    return _html_page(title, meta, "\n".join(out), has_past)


def forest_to_html(trees: Sequence[MembrainTree], title: str = "membrain", *, open_depth: int = 1) -> str:
    """Several trees (a memory's namespaces) on one self-contained HTML page, each as
    :func:`tree_to_html` shows it under its root (labelled with its subject, the
    namespace); the search box and the buttons act on all of them."""
    out: list[str] = []
    has_past = False
    for tree in trees:
        lines, past = _html_tree(tree, open_depth)
        out += lines
        has_past = has_past or past
    n_facts = sum(t.fact_count(t.root_id) for t in trees)
    n_aspects = sum(len(t.aspects()) for t in trees)
    meta = (f"{n_facts} fact{'s' if n_facts != 1 else ''} · {n_aspects} aspect{'s' if n_aspects != 1 else ''}"
            f" · {len(trees)} namespace{'s' if len(trees) != 1 else ''}")
    return _html_page(title, meta, "\n".join(out), has_past)


def _html_tree(tree: MembrainTree, open_depth: int) -> tuple[list[str], bool]:
    """One tree's ``<li>`` lines for the page (its root and everything below), and whether
    it shows archived versions."""
    subject = tree.subject or "memories"
    esc = html.escape
    out: list[str] = []

    def fact_li(node_id: str) -> str:
        node = tree.node(node_id)
        when = fact_when(node)
        when_html = f'<span class="when">{esc(when)}</span>' if when else ""
        kind = node.metadata.get(KIND_KEY, "fact")
        kind_html = f'<span class="kind">{esc(kind)}</span>' if kind != "fact" else ""
        said = [tree.archive[s].text for s in node.metadata.get(SOURCES_KEY, ()) if s in tree.archive]
        sources_html = "".join(f'<span class="sources">from: “{esc(shorten(t, 160))}”</span>' for t in said)
        return (f'<li class="fact" id="{esc(node_id)}" data-text="{esc(node.text)}" '
                f'title="{esc(node_id)}">{esc(node.text)}{kind_html}{when_html}{sources_html}</li>')

    def beside(kind: str, label: str) -> None:
        """The raw items or working memories, in one closed list under the root."""
        entries = tree.current_working() if kind == "working" else tree.archived(kind)
        if not entries:
            return
        out.append(f'<li class="aspect" data-id="{kind}"><details class="aspect"><summary>'
                   f'<span class="label">{esc(label)}</span><span class="count">{len(entries)}</span></summary><ul>')
        out.extend(f'<li class="fact" id="{esc(e.id)}" data-text="{esc(e.text)}" title="{esc(e.id)}">{esc(e.text)}'
                   f'<span class="when">{esc(format_time(e.created_at))}</span></li>' for e in entries)
        out.append("</ul></details></li>")

    past: dict[str, list] = {}  # fact key -> its archived versions, oldest first
    for entry in tree.archived("history"):
        past.setdefault(entry.metadata.get(HISTORY_KEY, {}).get("key", entry.id), []).append(entry)

    def past_li(entry) -> str:
        h = entry.metadata.get(HISTORY_KEY, {})
        what = "superseded" if h.get("operation") == "update" else "deleted"
        span = f"{format_time(h.get('valid_from'))} – {format_time(h.get('valid_to'))}"
        return (f'<li class="past {what}" data-id="{esc(entry.id)}" title="{esc(what)} ({esc(entry.id)})">'
                f'<s>{esc(entry.text)}</s><span class="when">{esc(what)} · {esc(span)}</span></li>')

    def container(node_id: str, depth: int) -> None:
        # Iterative over siblings, recursive over depth (trees are shallow: tens of levels).
        node = tree.node(node_id)
        kind = "root" if node.kind == "root" else "aspect"
        label = subject if node.kind == "root" else node.text
        is_open = " open" if depth <= open_depth or node.kind == "root" else ""
        count = tree.fact_count(node_id)
        unit = "fact" if count == 1 else "facts"
        out.append(f'<li class="{kind}" data-id="{esc(node_id)}"><details class="{kind}"{is_open}>'
                   f'<summary><span class="label">{esc(label)}</span>'
                   f'<span class="count" title="{count} {unit} below">{count}</span></summary><ul>')
        children = tree.children(node_id)
        # Aspects first (the structure), then the facts attached directly here.
        for child in children:
            if tree.node(child).kind == "aspect":
                container(child, depth + 1)
        for child in children:
            if tree.node(child).kind == "fact":
                out.append(fact_li(child))
                out.extend(past_li(e) for e in past.get(child, ()))
        if node.kind == "root":  # the versions of facts no longer in the tree (deleted)
            out.extend(past_li(e) for k, es in past.items() if k not in tree for e in es)
            beside("raw", "said (raw items)")
            beside("working", "session summaries (working memory)")
        out.append("</ul></details></li>")

    container(tree.root_id, 0)
    return out, bool(past)


def _html_page(title: str, meta: str, body: str, has_past: bool) -> str:
    esc = html.escape
    history_button = '\n  <button id="history" type="button">Show history</button>' if has_past else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="langchain-membrain">
<title>{esc(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<header>
  <h1>{esc(title)}</h1>
  <span class="meta">{esc(meta)}</span>
  <input id="q" type="search" placeholder="Search facts…" autocomplete="off" aria-label="Search facts">
  <span id="status" aria-live="polite"></span>
  <button id="expand" type="button">Expand all</button>
  <button id="collapse" type="button">Collapse</button>{history_button}
</header>
<main>
<ul class="tree" style="list-style:none;margin:0;padding:0">
{body}
</ul>
<div id="empty" class="hidden">No fact matches this search.</div>
</main>
<script>{_JS}</script>
</body>
</html>
"""
