"""Quickstart: the README's first ten lines. Runs offline (no API key needed)."""

from langchain_membrain import MembrainMemory
from langchain_membrain.export import tree_to_rich
from rich import print

memory = MembrainMemory()  # in memory; MembrainMemory("membrain.db") keeps it on disk
memory.add_many([
    "I'm allergic to peanuts", "I've been vegetarian since 2019", "I love miso ramen",
    "My son Tom plays football", "My sister Ines lives in Manchester",
    "We went to Kyoto in April", "Next trip: the Azores in September",
], namespace="users/maya")
for hit in memory.search("what can't I eat?", namespace="users/maya", limit=2):
    print(f"{hit.score:.2f}  {hit.text}  [cyan]{' › '.join(hit.path) or '(top level)'}[/]")
print(tree_to_rich(memory.tree("users/maya")))
