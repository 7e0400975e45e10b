"""pipecompress.errors: the one exception the package raises (pc.Error)."""


class Error(RuntimeError):
    """A PipeCompress call failed; str(e) is the library's one-line message."""
