"""Readers for the inputs `import` accepts: a Slack export (ZIP or folder) and Beacon JSON lines.

An export is read member by member and never extracted: a ZIP is checked for unsafe entry
names (`../`, absolute paths) before a single byte of content is read, and each day file is
read and parsed on its own, so memory holds one day file at a time.
"""

import codecs
import os
import re
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import orjson

from slackquery.errors import SlackqueryError

SourceFormat = Literal["slack-export", "beacon-jsonl"]
SOURCE_FORMATS: tuple[str, ...] = ("slack-export", "beacon-jsonl")

DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.json$")
CONVERSATION_LISTS = ("channels.json", "groups.json", "dms.json", "mpims.json")
USER_LISTS = ("users.json", "org_users.json")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")
# How a ZIP file starts: a local file header, or the end record of an empty archive.
_ZIP_SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06")


def detect_format(path: Path) -> SourceFormat:
    """Guess the input format: folders and ZIPs are exports, `.jsonl`/`.ndjson` are Beacon."""
    if path.is_dir():
        return "slack-export"
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return "beacon-jsonl"
    return "slack-export"


def unsafe_member_name(name: str) -> bool:
    """True for ZIP entry names that could escape an extraction folder."""
    normalized = name.replace("\\", "/")
    if normalized.startswith("/") or _WINDOWS_DRIVE.match(normalized):
        return True
    return ".." in PurePosixPath(normalized).parts


class ExportReader:
    """A Slack export seen as a list of relative POSIX member paths with a `read` method.

    The export may sit under one wrapping folder (`acme-export/channels.json`); `root`
    strips it so members are addressed as Slack documents them, and `outside` counts the
    files beside it (per top-level name), which are not read. `problems` lists what a
    folder's walk could not follow, as `(path inside the folder, problem)`, for warnings.
    """

    def __init__(self, path: Path, max_file_bytes: int) -> None:
        """`max_file_bytes`: a larger member is refused before it is read (a ZIP entry of a
        few megabytes can expand to more memory than the machine has)."""
        self.path = path
        self.max_file_bytes = max_file_bytes
        self._zip: zipfile.ZipFile | None = None
        self.problems: list[tuple[str, str]] = []
        if path.is_dir():
            names = self._walk_folder(path)
        elif path.is_file():
            names = self._open_zip(path)
        elif path.exists():  # a device, a pipe, a socket: `import /dev/stdin` cannot seek
            raise SlackqueryError(f"{path}: not a file or folder; give the export's ZIP or folder")
        else:
            raise SlackqueryError(f"{path}: no such file or folder")
        try:
            if not names:
                raise SlackqueryError(f"{path}: the export is empty (no files in it)")
            self.root = self._find_root(names)
        except BaseException:
            self.close()
            raise
        prefix_len = len(self.root)
        self.members: list[str] = sorted(
            name[prefix_len:] for name in names if name.startswith(self.root)
        )
        self.outside = Counter(
            name.split("/", 1)[0] for name in names if not name.startswith(self.root)
        )

    def _walk_folder(self, path: Path) -> list[str]:
        """Every file under the folder, following symbolic links to folders (an export
        assembled with links is read as it looks) but never into a folder that holds the
        link (a loop); what cannot be read is noted in `problems`."""
        names: list[str] = []
        pending: list[tuple[str, str, frozenset[str]]] = [
            (str(path), "", frozenset({os.path.realpath(path)}))
        ]
        while pending:
            folder, relative, ancestors = pending.pop()
            try:
                with os.scandir(folder) as scan:
                    entries = sorted(scan, key=lambda entry: entry.name)
            except OSError as error:
                if not relative:
                    raise SlackqueryError(
                        f"{path}: cannot read the folder ({error.strerror or error})"
                    ) from error
                self.problems.append((relative, f"folder not read ({error.strerror or error})"))
                continue
            for entry in entries:
                name = relative + entry.name
                if entry.is_dir():  # follows a link to a folder
                    real = os.path.realpath(entry.path)
                    if real in ancestors:
                        self.problems.append(
                            (name + "/", "a link to a folder that contains it: not followed")
                        )
                        continue
                    pending.append((entry.path, name + "/", ancestors | {real}))
                elif entry.is_file():
                    names.append(name)
                elif entry.is_symlink():
                    self.problems.append((name, "a broken symbolic link: not read"))
        return names

    def _open_zip(self, path: Path) -> list[str]:
        if not zipfile.is_zipfile(path):
            try:
                with path.open("rb") as handle:
                    starts_as_zip = handle.read(4) == _ZIP_SIGNATURES[0]
            except OSError as error:
                raise SlackqueryError(f"{path}: unreadable ({error.strerror or error})") from error
            if starts_as_zip:
                raise SlackqueryError(
                    f"{path}: truncated or damaged ZIP file (it starts as one but its "
                    "directory at the end is missing; was the download or copy cut short?)"
                )
            raise SlackqueryError(
                f"{path}: not a ZIP file (expected a Slack export ZIP, an unpacked export "
                "folder, or a .jsonl file with --format beacon-jsonl)"
            )
        try:
            archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as error:
            raise SlackqueryError(f"{path}: unreadable ZIP file ({error})") from error
        infos = archive.infolist()
        seen: set[str] = set()
        for info in infos:
            # A repeated name is ambiguous: reading by name would see the last entry only.
            problem = (
                "absolute or `..` path"
                if unsafe_member_name(info.filename)
                else "the name appears twice"
                if info.filename in seen
                else None
            )
            if problem is not None:
                archive.close()
                raise SlackqueryError(f"{path}: refusing ZIP entry {info.filename!r}: {problem}")
            seen.add(info.filename)
        self._zip = archive
        return [info.filename for info in infos if not info.is_dir()]

    def _find_root(self, names: list[str]) -> str:
        """'' when the export lists sit at the top, else the one wrapping folder holding them.

        Two wrapping folders with lists are two exports: refused, as importing one of them
        would silently leave the other out.
        """
        lists = set(USER_LISTS + CONVERSATION_LISTS)
        if any(name in lists for name in names):
            return ""
        roots = sorted(
            {
                f"{root}/"
                for root, _, member in (name.partition("/") for name in names)
                if member in lists
            }
        )
        if len(roots) > 1:
            raise SlackqueryError(
                f"{self.path}: holds {len(roots)} exports ({', '.join(roots)}); "
                "unpack it and import each folder on its own"
            )
        return roots[0] if roots else ""

    def read(self, member: str) -> bytes:
        """The bytes of one member (path relative to the export root)."""
        full = self.root + member
        where = self.describe(member)
        try:
            self._refuse_oversized(full, where)
            if self._zip is not None:
                return self._zip.read(full)
            return (self.path / full).read_bytes()
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise SlackqueryError(f"{where}: damaged in the ZIP file ({error})") from error
        except NotImplementedError as error:
            raise SlackqueryError(
                f"{where}: compressed in a way this reader does not support ({error}); "
                "unpack the ZIP with another tool and import the folder"
            ) from error
        except RuntimeError as error:  # zipfile's "File ... is encrypted, password required"
            problem = (
                "encrypted (password-protected) ZIP entry; unpack the ZIP with its password "
                "and import the folder"
                if "encrypted" in str(error)
                else f"unreadable ({error})"
            )
            raise SlackqueryError(f"{where}: {problem}") from error
        except (OSError, KeyError) as error:
            raise SlackqueryError(f"{where}: unreadable ({error})") from error

    def _refuse_oversized(self, full: str, where: str) -> None:
        """Raise when the member is larger than `max_file_bytes`: a ZIP entry's size as its
        header states it, which is all `zipfile` ever expands."""
        if self._zip is not None:
            size = self._zip.getinfo(full).file_size
        else:
            size = (self.path / full).stat().st_size
        if size > self.max_file_bytes:
            raise SlackqueryError(
                f"{where}: {size:,} bytes, over the {self.max_file_bytes:,} one file of an "
                "export may hold (SLACKQUERY_IMPORT_MAX_FILE_BYTES)"
            )

    def describe(self, member: str) -> str:
        """How errors and warnings name a member: `export.zip:general/2024-01-02.json`."""
        return f"{self.path.name}:{self.root}{member}"

    def load_json(self, member: str) -> Any:
        """Parse one member as JSON, with errors that name the member and the problem."""
        return parse_json(self.read(member), self.describe(member))

    def close(self) -> None:
        """Release the ZIP handle (folders hold nothing open)."""
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    def __enter__(self) -> "ExportReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_json(data: bytes, where: str) -> Any:
    """orjson parse with one-line errors that tell invalid UTF-8 from malformed JSON. A
    leading byte order mark, which JSON forbids but editors on Windows write, is passed over:
    it carries nothing."""
    try:
        return orjson.loads(data.removeprefix(codecs.BOM_UTF8))
    except orjson.JSONDecodeError as error:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as utf8_error:
            raise SlackqueryError(f"{where}: invalid UTF-8 at byte {utf8_error.start}") from error
        raise SlackqueryError(f"{where}: malformed JSON ({error})") from error


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON-lines file."""
    if path.is_dir():
        raise SlackqueryError(f"{path}: is a folder; a Beacon JSON-lines input is one .jsonl file")
    if not path.is_file():
        raise SlackqueryError(f"{path}: no such file")
    with path.open("rb") as handle:
        # A ZIP would fail as "invalid UTF-8" in its binary header: say what the file is.
        if handle.read(4) in _ZIP_SIGNATURES:
            raise SlackqueryError(
                f"{path}: is a ZIP archive, not a Beacon JSON-lines file; import a Slack "
                "export ZIP with --format slack-export"
            )
        handle.seek(0)
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record = parse_json(line, f"{path.name}:{number}")
            if not isinstance(record, dict):
                raise SlackqueryError(f"{path.name}:{number}: expected a JSON object per line")
            yield number, record
