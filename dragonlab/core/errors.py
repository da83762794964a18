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
"""


class DragonlabError(Exception):
    """Raised by dragonlab on purpose, with a message meant for the user."""


class InputError(DragonlabError, ValueError):
    """A malformed script, file, field or parameter; the message says which."""


class UnavailableError(DragonlabError, RuntimeError):
    """A service the work needs (an RPC tracker, an LLM endpoint) cannot be used."""
