"""A teacher straight on the ``openai`` SDK, for any OpenAI-compatible endpoint.

``OpenAITeacher(client=openai.OpenAI(base_url=..., api_key=...), model="...")`` asks with
``response_format={"type": "json_schema", "json_schema": {..., "strict": true}}`` (or
``"json_object"`` with the schema in the prompt, for servers without JSON-schema support),
which vLLM, Ollama, LM Studio and OpenAI accept. ``OpenAITeacher.from_env()`` reads
``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``MEMBRAIN_TEACHER_MODEL``.

The teacher owns retries: it talks through copies of the clients with the SDK's own
retries switched off (``max_retries=0``) and ``timeout`` as the per-request timeout, so a
429 or 500 is seen, counted and retried once by the teacher's line (:mod:`.line`). Token counts come from the
response's ``usage`` field. The async path uses an :class:`openai.AsyncOpenAI` client
(given, or built from the sync client's settings).
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import openai
from pydantic import BaseModel

from ..errors import TeacherError
from . import prompts
from .answers import RawAnswer
from .guard import GuardedTeacher


class OpenAITeacher(GuardedTeacher):
    """A teacher that calls an OpenAI-compatible chat-completions endpoint.

    Args:
        client: an :class:`openai.OpenAI` client (default: one built from the environment).
        model: the model name sent with each request.
        async_client: an :class:`openai.AsyncOpenAI` for the async path (default: built
            from ``client``'s base URL, key and headers).
        response_format: ``"json_schema"`` (strict structured outputs) or ``"json_object"``.
        temperature: sampling temperature (default 0).
        extra_body: extra JSON fields sent with every request (server-specific options).
        **options: see :class:`~.guard.GuardedTeacher` (``mode``, ``fallback``,
            ``timeout``, ``max_concurrency``, ``max_retries``, ...).
    """

    name = "openai"

    def __init__(self, client: openai.OpenAI | None = None, model: str | None = None, *,
                 async_client: openai.AsyncOpenAI | None = None,
                 response_format: Literal["json_schema", "json_object"] = "json_schema",
                 temperature: float | None = 0.0, extra_body: dict[str, Any] | None = None, **options: Any):
        super().__init__(**options)
        if not model:
            raise TeacherError("OpenAITeacher needs a model name")
        if response_format not in ("json_schema", "json_object"):
            raise ValueError("response_format must be 'json_schema' or 'json_object'")
        client = client if client is not None else openai.OpenAI()
        if async_client is None:
            async_client = openai.AsyncOpenAI(base_url=client.base_url, api_key=client.api_key,
                                              organization=getattr(client, "organization", None),
                                              project=getattr(client, "project", None),
                                              default_headers=dict(getattr(client, "_custom_headers", {}) or {}),
                                              default_query=dict(getattr(client, "_custom_query", {}) or {}))
        self.model = model
        self.response_format = response_format
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.client = client.with_options(max_retries=0, timeout=self.timeout)
        self.async_client = async_client.with_options(max_retries=0, timeout=self.timeout)

    @classmethod
    def from_env(cls, **options: Any) -> "OpenAITeacher":
        """A teacher configured by ``OPENAI_BASE_URL`` (optional), ``OPENAI_API_KEY``
        (a placeholder is used when unset, as local servers need none) and
        ``MEMBRAIN_TEACHER_MODEL`` (required)."""
        model = os.environ.get("MEMBRAIN_TEACHER_MODEL")
        if not model:
            raise TeacherError("set MEMBRAIN_TEACHER_MODEL to the teacher's model name")
        base_url = os.environ.get("OPENAI_BASE_URL") or None
        api_key = os.environ.get("OPENAI_API_KEY") or "not-needed"
        return cls(openai.OpenAI(base_url=base_url, api_key=api_key), model,
                   async_client=openai.AsyncOpenAI(base_url=base_url, api_key=api_key), **options)

    def describe(self) -> str:
        return f"{self.model} at {self.client.base_url}"

    @staticmethod
    def _schema_note(schema: type[BaseModel]) -> str:
        """json_object mode: the answer's schema, appended to the instructions (compact,
        without the descriptions, which the instructions already give)."""
        def bare(node: Any) -> Any:
            if isinstance(node, dict):
                return {k: bare(v) for k, v in node.items() if k not in ("description", "title")}
            if isinstance(node, list):
                return [bare(v) for v in node]
            return node

        return "\nThe answer's JSON schema: " + json.dumps(bare(prompts.strict_json_schema(schema)),
                                                            separators=(",", ":"))

    def _extra_prompt_chars(self, schema: type[BaseModel]) -> int:
        return len(self._schema_note(schema)) if self.response_format == "json_object" else 0

    # ------------------------------------------------------------ requests
    def _body(self, messages: list[prompts.Message], schema: type[BaseModel]) -> dict[str, Any]:
        if self.response_format == "json_schema":
            fmt: dict[str, Any] = {"type": "json_schema", "json_schema": {
                "name": schema.__name__, "schema": prompts.strict_json_schema(schema), "strict": True}}
        else:
            fmt = {"type": "json_object"}
            messages = [{"role": "system", "content": messages[0]["content"] + self._schema_note(schema)},
                        *messages[1:]]
        body: dict[str, Any] = {"model": self.model, "messages": messages, "response_format": fmt}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.extra_body:
            body["extra_body"] = self.extra_body
        return body

    @staticmethod
    def _raw(completion: Any) -> RawAnswer:
        usage = getattr(completion, "usage", None)
        choices = getattr(completion, "choices", None) or []
        if not choices:
            return RawAnswer(parsed=None, parse_error="the response has no choices",
                             prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                             completion_tokens=getattr(usage, "completion_tokens", 0) or 0)
        choice = choices[0]
        msg = choice.message
        return RawAnswer(parsed=None, text=msg.content, finish_reason=choice.finish_reason,
                         refusal=getattr(msg, "refusal", None),
                         prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                         completion_tokens=getattr(usage, "completion_tokens", 0) or 0)

    def _request(self, messages: list[prompts.Message], schema: type[BaseModel]) -> RawAnswer:
        # The per-request timeout: the teacher's own, or less when an insert's budget cuts it.
        return self._raw(self.client.chat.completions.create(**self._body(messages, schema),
                                                             timeout=self.line.request_timeout()))

    async def _arequest(self, messages: list[prompts.Message], schema: type[BaseModel]) -> RawAnswer:
        return self._raw(await self.async_client.chat.completions.create(**self._body(messages, schema)))

    async def aclose(self) -> None:
        """Close both HTTP clients."""
        self.close()
        self.client.close()
        await self.async_client.close()
