"""What a method of ``bench locomo`` is: one retriever over one conversation."""

from __future__ import annotations


class Retriever:
    """One method on one conversation: ``search(question, k) -> [dia_id]``."""

    def search(self, q: str, k: int) -> list[str]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the method holds (a connection); called once its questions are asked."""
