"""The line to one LLM endpoint: how a guarded teacher's requests are sent.

:class:`RequestLine` is held by each :class:`~.guard.GuardedTeacher` (``teacher.line``),
which hands it its one-request callables (``_request`` / ``_arequest``), its ``describe``
(for log lines) and its :class:`~.costs.TeacherStats`. The teacher writes its questions;
the line sends them:

- **one retry** (``max_retries``) that quotes the rejected answer and the validation error
  back to the model; HTTP 429 waits for ``Retry-After`` (capped at ``max_backoff_s``) first;
- a **per-call timeout** and a **concurrency limit** (one semaphore shared by the sync and
  async paths). A sync request runs on a daemon thread (workers.py), waited for ``timeout``
  at most whatever the client's own timeout: abandoned then, it never blocks an exit;
- a **deadline** (:func:`~.budget.deadline`, per insert: ``teacher_budget``; a ``Cutoff``: ``close()``):
  a sync request is cut when it passes (kind ``"budget"``), and none is sent after it;
- a **circuit breaker** (:class:`~.budget.CircuitBreaker`): after ``threshold`` failed
  requests in a row no request is sent (:class:`TeacherUnavailable`) until a back-off has
  passed. No answer within a deadline ``threshold`` times in a row (a hanging endpoint, or a
  model slower than the insert's budget) opens a second breaker that only stops requests
  under a deadline (the questions go to the background instead);
- **one report of the teacher's health** (:meth:`RequestLine._report`, logger
  ``langchain_membrain``): the teacher is *down* for the inserts while either breaker is
  open. One warning is logged when it goes down and one when it answers again, however many
  inserts it affects; a breaker that opens or closes in between is logged at INFO;
- **cost accounting** per stage (costs.py, ``teacher.stats()``); :meth:`RequestLine.requests_sent`
  counts the calling thread's requests, so a caller counts a question's exactly.

Each question is written once, as a generator that holds all of the logic above and does
no I/O (core.py): :meth:`RequestLine.ask` is the guarded question's loop; the sync and the
async methods only drive it (:meth:`RequestLine.run`, :meth:`RequestLine.arun`), so they
cannot decide, retry or count differently.

Retries are owned by the line: the openai SDK's own retries are switched off by
:class:`~.openai_teacher.OpenAITeacher` (give a LangChain model ``max_retries=0`` as well),
so ``timeout * (1 + max_retries)`` (plus a capped 429 wait) bounds the time one decision
can wait on the LLM.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from typing import Any, Awaitable, Callable, Generic, TypeVar

from pydantic import BaseModel

from . import budget, prompts
from .answers import FEEDBACK_KINDS, RawAnswer, TeacherCallError, TeacherUnavailable, check_raw, classify_failure
from .core import Core, Done, Send, Sleep, advance
from .costs import TeacherStats
from .workers import DaemonWorkers, acquire_within, wait_within

T = TypeVar("T")
V = TypeVar("V")

logger = logging.getLogger("langchain_membrain")

Request = Callable[[list[prompts.Message], type[BaseModel]], RawAnswer]
AsyncRequest = Callable[[list[prompts.Message], type[BaseModel]], Awaitable[RawAnswer]]


# Per thread (or asyncio task), as context variables: the requests each line sent from it (by
# the line's id), whether its request in flight is an insert's (under a deadline), and on a
# worker thread the timeout of the request it runs.
_SENT: contextvars.ContextVar[dict[int, int] | None] = contextvars.ContextVar("membrain_sent", default=None)
_FOREGROUND: contextvars.ContextVar[bool] = contextvars.ContextVar("membrain_foreground", default=False)
_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar("membrain_timeout", default=None)


class RequestLine:
    """The line to one LLM endpoint: sends a teacher's questions, guarded.

    Args:
        request: sends one request and returns the raw structured answer (may raise
            anything); called on a worker thread.
        arequest: the same, on the event loop.
        describe: who answers, for log lines.
        stats: the teacher's counters, which the line adds each request to.
        name: the worker threads' name prefix.
        timeout, max_concurrency, max_retries, max_backoff_s, breaker: see
            :class:`~.guard.GuardedTeacher`.
    """

    def __init__(self, request: Request, arequest: AsyncRequest, describe: Callable[[], str], stats: TeacherStats, *,
                 name: str = "llm", timeout: float = 30.0, max_concurrency: int = 4, max_retries: int = 1,
                 max_backoff_s: float = 5.0, breaker: budget.CircuitBreaker | None = None):
        if timeout <= 0 or max_concurrency < 1 or max_retries < 0:
            raise ValueError("timeout > 0, max_concurrency >= 1 and max_retries >= 0 are required")
        self.request, self.arequest, self.describe, self.stats = request, arequest, describe, stats
        self.timeout = float(timeout)
        self.max_concurrency = int(max_concurrency)
        self.max_retries = int(max_retries)
        self.max_backoff_s = float(max_backoff_s)
        self._sem = threading.BoundedSemaphore(self.max_concurrency)
        self.breaker = breaker if breaker is not None else budget.CircuitBreaker()
        self.slow = self.breaker.twin()  # answers slower than a deadline (see budget.py)
        self._health_lock = threading.Lock()
        self._down = False  # either breaker open: reported once by _report
        # The sync requests' threads, two per slot: an abandoned call frees its slot at once.
        self._workers = DaemonWorkers(2 * self.max_concurrency, name=f"{name}-teacher")

    # ------------------------------------------------------------- public
    def health(self) -> dict[str, Any]:
        """The circuit breakers' state (:meth:`~.budget.CircuitBreaker.snapshot`: ``state``,
        ``consecutive_failures``, ``retry_in_s``...), with ``slow``: the breaker for answers
        slower than an insert's budget."""
        return {**self.breaker.snapshot(), "slow": self.slow.snapshot()}

    def requests_sent(self) -> int:
        """Requests sent on this line from the calling thread (retries and failed ones
        included, questions it did not send excluded): a caller counts one question's
        requests as the difference around it."""
        return (_SENT.get() or {}).get(id(self), 0)

    def request_timeout(self) -> float:
        """The timeout of the request being sent from this thread (a deadline may cut it)."""
        timeout = _TIMEOUT.get()
        return self.timeout if timeout is None else timeout

    def close(self) -> None:
        """Release the idle worker threads; returns at once (one blocked in an abandoned
        request is a daemon: it never keeps the process alive)."""
        self._workers.shutdown()

    # ------------------------------------------------- driving a core (core.py)
    # run and arun are the only code that differs between the sync and async questions, so
    # the two cannot drift apart.
    def run(self, core: Core[T]) -> T:
        """Run ``core`` on this thread (blocking)."""
        step = advance(core, None)
        while not isinstance(step, Done):
            step = advance(core, self._perform(step))
        return step.value

    async def arun(self, core: Core[T]) -> T:
        """Run ``core`` on the event loop."""
        step = advance(core, None)
        while not isinstance(step, Done):
            step = advance(core, await self._aperform(step))
        return step.value

    def _perform(self, step: Send | Sleep) -> RawAnswer | Exception | None:
        """Carry out one step: a request's answer or what it raised (the core counts and
        classifies it); None after a sleep. Under a deadline (budget.deadline) the request's
        timeout is cut to what is left, and no request is sent once too little is left:
        the step then gives a TeacherUnavailable, as it does while a breaker is open."""
        end = budget.current_deadline()
        if isinstance(step, Sleep):
            seconds = step.seconds if end is None else min(step.seconds, max(0.0, end - time.monotonic()))
            time.sleep(seconds)
            return None
        timeout = self.timeout
        if end is not None:
            timeout = min(timeout, end - time.monotonic())
            if timeout < budget.MIN_REQUEST_S:
                return (TeacherUnavailable("closing", "the memory is closing: the question is dropped") if budget.cut_off()
                        else TeacherUnavailable("budget", "the insert's teacher budget is spent; asked in the background"))
        refused = self._admit(foreground=budget.insert_deadline() is not None)
        if refused is not None:
            return refused
        if not acquire_within(self._sem):
            self._release_probes()
            return TeacherUnavailable("busy", "every request slot stayed taken until the deadline")
        self._count_sent(+1)
        _FOREGROUND.set(budget.insert_deadline() is not None)
        try:
            return self._sync_request(step.messages, step.schema, timeout)
        except TeacherUnavailable as exc:  # queued behind abandoned calls, never started: not sent
            self._count_sent(-1)
            self._release_probes()
            return exc
        except Exception as exc:  # noqa: BLE001 - handed to the core
            if timeout < self.timeout and classify_failure(exc).kind == "timeout":
                return TeacherCallError("budget", f"no answer within the insert's teacher budget ({timeout:.2g} s left)")
            return exc
        finally:
            self._sem.release()

    async def _aperform(self, step: Send | Sleep) -> RawAnswer | Exception | None:
        """As :meth:`_perform`, on the event loop (with no deadline). It polls the same
        (thread) semaphore, so that sync and async requests share one concurrency limit."""
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        refused = self._admit(foreground=False)
        if refused is not None:
            return refused
        while not self._sem.acquire(blocking=False):
            await asyncio.sleep(0.005)
        self._count_sent(+1)
        _FOREGROUND.set(False)
        try:
            return await asyncio.wait_for(self.arequest(step.messages, step.schema), self.timeout)
        except Exception as exc:  # noqa: BLE001 - handed to the core
            return exc
        finally:
            self._sem.release()

    def _count_sent(self, step: int) -> None:
        sent = _SENT.get()
        if sent is None:
            sent = {}
            _SENT.set(sent)
        sent[id(self)] = sent.get(id(self), 0) + step

    # -------------------------------------------------------- the breakers
    def _admit(self, *, foreground: bool) -> TeacherUnavailable | None:
        """None when a request may be sent now, else why not. The slow breaker only stops
        requests under a deadline: in the background a slow teacher is still asked."""
        if not self.breaker.allow():
            return TeacherUnavailable("down", f"the teacher is not asked while it keeps failing "
                                              f"(retried in {self.breaker.snapshot()['retry_in_s']:g} s)")
        if foreground and not self.slow.allow():
            self.breaker.release()
            return TeacherUnavailable("slow", "the teacher answers slower than the insert's budget; "
                                              "asked in the background")
        return None

    def _release_probes(self) -> None:
        self.breaker.release()
        self.slow.release()

    def _answered(self) -> None:
        """A request was answered with a usable answer: both breakers close."""
        if self.breaker.success():
            self._report(f"the teacher {self.describe()} answers again")
        if _FOREGROUND.get() and self.slow.success():
            self._report(f"the teacher {self.describe()} answers within the insert's budget again")

    def _note_failure(self, err: TeacherCallError) -> None:
        """A request failed (a cut by the deadline tells nothing about the teacher's health,
        but no answer within the insert's budget, again and again, stops asking it there)."""
        if err.kind == "budget":
            self.breaker.inconclusive()
            if budget.cut_off():  # cut by close(): tells nothing about the teacher's speed
                self.slow.release()
                return
            if self.slow.failure("budget"):
                self._report(f"the teacher {self.describe()} gave no answer within the insert's budget "
                             f"{self.slow.threshold} times in a row (it hangs, or answers slower than the budget): "
                             f"inserts are decided by the student or the offline rule and their questions go to "
                             f"the background (the inserts ask it again after {self.slow.backoff_s:g} s)")
            return
        self.slow.release()
        if self.breaker.failure(f"{err.kind}: {err.detail}"[:200]):
            self._report(f"the teacher {self.describe()} is failing ({self.breaker.threshold} failed requests in a "
                         f"row, the last {err.kind}: {err.detail[:160]}); inserts are decided by the student or "
                         f"the offline rule, and the teacher is asked again after {self.breaker.backoff_s:g} s "
                         f"(back-off doubling up to {self.breaker.max_backoff_s:g} s)")
        else:
            logger.debug("membrain: teacher request failed (%s: %s)", err.kind, err.detail[:160])

    def _report(self, change: str) -> None:
        """The one place that logs the teacher's health, after a breaker opened or closed
        (``change`` says which and why). The teacher is down while either breaker is open:
        going down and coming back are each logged once at WARNING (the inserts go on
        without it, then ask it again); a change that leaves it down is logged at INFO."""
        with self._health_lock:
            down = self.breaker.state != "closed" or self.slow.state != "closed"
            was_down, self._down = self._down, down
        if down and not was_down:
            logger.warning("membrain: %s", change)
        elif was_down and not down:
            logger.warning("membrain: %s; inserts ask it again", change)
        else:
            logger.info("membrain: %s", change)

    # ------------------------------------------------- the guarded question
    def ask(self, stage: str, messages: list[prompts.Message], schema: type[BaseModel],
            validate: Callable[[Any], T]) -> Core[T]:
        """One guarded question: up to ``1 + max_retries`` requests, each counted with its
        latency and tokens; a failed answer is quoted back on the retry, a 429 waits first.
        Returns the validated answer or raises the last TeacherCallError. A request that is
        not sent (TeacherUnavailable) ends the question: counted as ``skipped`` when it was
        its first, never as a call."""
        msgs = messages
        last: TeacherCallError | None = None
        for attempt in range(1 + self.max_retries):
            if last is not None:
                msgs = self._next_messages(messages, last)
                if last.kind == "rate_limit":
                    yield Sleep(self._backoff(last))
            t0 = time.perf_counter()  # the latency includes the wait for a concurrency slot
            raw: RawAnswer | None = None
            reply = yield Send(msgs, schema)
            if isinstance(reply, TeacherUnavailable):
                if last is None:
                    self.stats.add(stage, skipped=1)
                raise last or reply
            if attempt:
                self.stats.add(stage, retries=1)
            self.stats.add(stage, max_prompt_tokens=prompts.prompt_tokens(msgs))
            try:
                if isinstance(reply, Exception):
                    raise reply
                raw = reply
                self._count_call(stage, raw, time.perf_counter() - t0)
                value = validate(check_raw(raw, schema))
            except Exception as exc:  # noqa: BLE001 - every failure is counted, none escapes
                if raw is None:
                    self._count_call(stage, None, time.perf_counter() - t0)
                last = self._failed(stage, exc, raw)
                if last.kind == "budget":
                    break  # no time is left for a retry: the question goes to the background
                continue
            self._answered()
            return value
        assert last is not None
        raise last

    # ------------------------------------------------------- the transport
    def _sync_request(self, msgs: list[prompts.Message], schema: type[BaseModel], timeout: float) -> RawAnswer:
        """Send one request on a worker thread; wait ``timeout`` s at most, or until this
        thread's deadline (workers.wait_within). A request past its time is abandoned."""
        future = self._workers.submit(self._request_on_worker, msgs, schema, timeout)
        ended = wait_within(future, timeout)
        if ended == "done":
            return future.result()
        if ended == "never_started":
            raise TeacherUnavailable("busy", "every worker thread is waiting on an abandoned call")
        raise (TeacherCallError("budget", "the deadline passed while the request was waited for")
               if ended == "deadline" else TeacherCallError("timeout", f"no answer within {timeout:g} s"))

    def _request_on_worker(self, msgs: list[prompts.Message], schema: type[BaseModel], timeout: float) -> RawAnswer:
        """``request`` on a worker thread, ``timeout`` its :meth:`request_timeout`."""
        token = _TIMEOUT.set(timeout)
        try:
            return self.request(msgs, schema)
        finally:
            _TIMEOUT.reset(token)

    def _count_call(self, stage: str, raw: RawAnswer | None, latency: float) -> None:
        if raw is None:
            self.stats.add(stage, calls=1, latency_s=latency)
        else:
            self.stats.add(stage, calls=1, latency_s=latency, prompt_tokens=raw.prompt_tokens or 0,
                           completion_tokens=raw.completion_tokens or 0)

    def _failed(self, stage: str, exc: BaseException, raw: RawAnswer | None) -> TeacherCallError:
        err = classify_failure(exc)
        if err.answer is None and raw is not None:
            err.answer = raw.text
        self.stats.add(stage, failures=1, failure_kind=err.kind)
        self._note_failure(err)
        return err

    @staticmethod
    def _next_messages(messages: list[prompts.Message], last: TeacherCallError) -> list[prompts.Message]:
        if last.kind in FEEDBACK_KINDS:
            return [*messages, prompts.retry_message(last.answer, last.detail)]
        return messages  # transport failures: the same question again

    def _backoff(self, err: TeacherCallError) -> float:
        return max(0.0, min(err.retry_after if err.retry_after is not None else 1.0, self.max_backoff_s))


class OnTheLine(Generic[V]):
    """A teacher's attribute that reads and writes its line's attribute of the same name (a
    descriptor: ``teacher.timeout = 10`` changes the timeout the line sends with)."""

    def __set_name__(self, cls: type, name: str) -> None:
        self.name = name

    def __get__(self, owner: Any, cls: type | None = None) -> V:
        if owner is None:
            return self  # type: ignore[return-value]  # the class's attribute: the descriptor
        return getattr(owner.line, self.name)

    def __set__(self, owner: Any, value: V) -> None:
        setattr(owner.line, self.name, value)
