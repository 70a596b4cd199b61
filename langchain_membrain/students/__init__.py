"""The students: the small networks that learn online to decide as the teacher does.

Owns the features (what a network sees of a closure or a descent), the networks (torch for
training, numpy for inference without torch), their training (cross-entropy on the teacher's
labels, replay, calibration of their confidence), decoding of their outputs into actions,
the shadow record of student against teacher, the shipped prior and the checkpoint format.

May import: ``errors``, ``tree``, ``index``, ``teachers``.
"""
