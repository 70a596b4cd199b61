"""Quickstart: the README's first ten lines. Runs offline (no API key needed)."""

from rich import print

from langchain_membrain import MembrainMemory
from langchain_membrain.tree.export import tree_to_rich

memory = MembrainMemory()  # in memory; MembrainMemory("membrain.db") keeps it on disk
memory.add_many([
    "I'm allergic to peanuts", "I've been vegetarian since 2019", "I love miso ramen",
    "Sam bakes sourdough every Sunday", "I can't stand coriander", "Our favourite restaurant is a tasca in Mouraria",
    "My son Tom plays football", "Tom turns eight in March", "My sister Ines lives in Manchester",
    "My parents visit every Christmas", "Tom wants a dinosaur cake", "Ines has two daughters",
    "We went to Kyoto in April", "Next trip: the Azores in September", "We took the night train to Porto",
    "I want to see the fjords in Norway", "We stayed in a ryokan near Gion", "Flights to the Azores are booked",
    "I run 5k three times a week", "My left knee hurts after long runs", "Physio every Tuesday at 8am",
    "I started bouldering at a gym in Marvila", "I sleep badly before deadlines", "I stretch every morning",
], namespace="users/maya")
for hit in memory.search("what can't I eat?", namespace="users/maya", limit=2):
    print(f"{hit.score:.2f}  {hit.text}  [cyan]{' › '.join(hit.path) or '(top level)'}[/]")
print(tree_to_rich(memory.tree("users/maya")))  # topics form from the first couple of dozen facts
memory.close()
