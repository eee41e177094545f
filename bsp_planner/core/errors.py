"""One error type for every bad input, so the CLI can print it plainly and exit non-zero."""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """A bad input: says which file, which line or field, and what was expected (exit status 2)."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        self.message = message
        where = [self.path, f"line {line}" if line is not None else None, f"field '{field}'" if field else None]
        prefix = ", ".join(w for w in where if w)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class OutputUnwritable(InputError):
    """An output that could not be written (a full disk, a read-only folder): names the path and the
    system's reason; whatever was there before is intact (exit status 3)."""

    exit_code = 3

    @classmethod
    def from_os_error(cls, exc: OSError, path: str | Path, field: str | None = None) -> OutputUnwritable:
        cause = exc.strerror or str(exc)
        inside = exc.filename is not None and str(exc.filename).startswith(f"{path}/")
        failed = f" ({exc.filename})" if inside else ""  # which file of a folder, never a source's name
        return cls(f"cannot write it: {cause}{failed}; nothing was left half-written", path=path, field=field)


class InputWarning(UserWarning):
    """An input that can be used but is probably not what was meant (the CLI prints it as a warning)."""


def open_text(path: str | Path, what: str):
    """A text input file as a StringIO (newlines kept as written, for csv; a UTF-8 byte-order mark
    dropped): a file that is not UTF-8 or cannot be read is an InputError naming it, never a
    UnicodeDecodeError from deep inside a reader."""
    import io

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the {what} file: {exc.strerror or exc}", path=path) from None
    try:  # a byte-order mark (as spreadsheets write) is not part of the text: dropped
        return io.StringIO(data.decode("utf-8-sig"), newline="")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"not a UTF-8 text {what} file (byte {exc.start}: {exc.reason})", path=path, line=line
        ) from None
