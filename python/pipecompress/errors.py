"""pipecompress.errors: the one exception the package raises (pc.Error)."""


class Error(RuntimeError):
    """A PipeCompress call failed; str(e) is the library's one-line message. e.agreed is
    True when every worker raised it with the same message (a failure the workers agreed
    on at attach, such as another job's checkpoints in --checkpoint-dir): a program then
    says it once, from worker 0, as the uncaught-exception hook does."""

    def __init__(self, message, agreed=False):
        super().__init__(message)
        self.agreed = agreed
