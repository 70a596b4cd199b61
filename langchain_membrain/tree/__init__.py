"""The memory's data: one namespace's tree and what it is made of.

Owns the tree (root, aspects, facts; closure and two-layer subtree), its nodes, rows and
archive, the stage actions (Promote, Demote, Group) and placement, memory kinds, records,
inputs and filters, the topic labels, the tree's evaluation and export.

May import: ``errors``. Nothing here imports torch, an index or a database.
"""
