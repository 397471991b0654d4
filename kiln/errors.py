"""The exception classes kiln raises, with TVM's names where user code catches them."""


class TVMError(RuntimeError):
    """An error raised by compiled code or the runtime (TVM's name, kept for compatibility)."""


class ScheduleError(TVMError, ValueError):
    """An illegal schedule primitive: the message names the stage, the axis and the rule."""


class ComputeDefinitionError(TVMError, ValueError):
    """A tensor expression that TVM rejects when it is defined (a reduction inside another
    expression of ``te.compute``): a TVMError, as TVM raises, and a ValueError."""


class CompileError(TVMError):
    """The C compiler (or NVRTC) rejected generated code, or could not be found."""


class HybridScriptError(TVMError, ValueError):
    """A hybrid-script function (``te.hybrid.script``) uses what the language does not
    have: the message names the function and the line."""
