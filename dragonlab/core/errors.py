"""dragonlab's errors: one hierarchy, so a caller (the CLI, a notebook, a batch job) can tell a
user's mistake or an unavailable service from a bug.

- `DragonlabError`: everything dragonlab raises on purpose. The CLI prints its message as one
  line and exits 2; anything else is a bug and keeps its traceback.
- `InputError` (also a `ValueError`): bad input, a malformed script, file, field or parameter.
  The message names the file, field or position; nothing has been written.
- `UnavailableError` (also a `RuntimeError`): a service the command needs cannot be used (an RPC
  tracker without servers, an LLM endpoint that keeps failing).

Each module keeps its own kinds (`CodecError`, `RecordFormatError`, `ChatError`, ...) so callers
can catch narrowly; each derives from one of these. Failures of a judged kernel are not errors:
the evaluator turns them into an `Evaluation` with the stage it stopped at.

`one_line(e)` is how any exception is shown in one line ("Type: first line of the message").
"""


class DragonlabError(Exception):
    """Raised by dragonlab on purpose, with a message meant for the user."""


class InputError(DragonlabError, ValueError):
    """A malformed script, file, field or parameter; the message says which."""


class UnavailableError(DragonlabError, RuntimeError):
    """A service the work needs (an RPC tracker, an LLM endpoint) cannot be used."""


def one_line(e: BaseException, *, last: bool = False, typed: bool = True, limit: int = 300) -> str:
    """An exception as one line for a log, a summary or a verdict: "Type: first non-empty line of
    the message", at most `limit` characters; just "Type" when the message is empty.

    `last`: the last non-empty line instead, for TVM's errors, which put the message after the IR
    they diagnose ("Error message: ..."), and for tracebacks passed on as text. `typed=False`: the
    line alone (the type's name when there is none), where the text names its own type (a
    worker's RemoteError) or the caller's context says what failed.
    """
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    name = type(e).__name__
    if not lines:
        return name[:limit]
    line = lines[-1] if last else lines[0]
    return (f"{name}: {line}" if typed else line)[:limit]
