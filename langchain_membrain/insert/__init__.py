"""The insert: what happens to one input between ``add()`` and the tree.

Owns the insert graph (a LangGraph ``StateGraph``: stage-1 descent, stage-2 rewriting,
teacher supervision), the learner that runs its steps (the decisions they take, records.py;
the student's, decisions.py; the teacher's joint question, asking.py), formation of facts
from inputs, the memory operation (ADD, UPDATE, DELETE, IGNORE), batch questions, the
background worker that trains, the writes that commit, and the statistics of it all.

May import: ``errors``, ``tree``, ``index``, ``storage``, ``teachers``, ``students``.
"""
