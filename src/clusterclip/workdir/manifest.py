"""The work directory and its manifest: :class:`Workdir`, the stage records and the stage
runner (``W/manifest.json``: inputs with their sizes and hashes, parameters, versions, each
stage's status).

Every stage runs through :meth:`Workdir.run_stage`, the one place that holds
the lock, checks that what the stage reads is complete and current, records
``running`` before the work and ``done`` after. A stage is *current* when its
recorded fingerprint equals the fingerprint of its present inputs and
parameters and its outputs are still the files it wrote. A stage's
fingerprint includes the fingerprints of the stages it reads, so a changed
input invalidates everything downstream; reading the output of a stage that
did not finish, or that is older than the stage it read, is refused (exit 2)
with the stage to rerun.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterclip.errors import InputError
from clusterclip.storage.atomic import write_text
from clusterclip.storage.digests import fingerprint, sha256_file
from clusterclip.storage.jsonfile import read_json
from clusterclip.storage.outputs import OVERWRITE_COMMANDS
from clusterclip.storage.records import MARKER, read_marker
from clusterclip.workdir.layout import (
    _IDENTITY_FILE,
    CORPUS_META,
    LOCK,
    MANIFEST,
    PRODUCERS,
    rerun,
)
from clusterclip.workdir.loaders import Loaders
from clusterclip.workdir.lock import Locking, _now

if TYPE_CHECKING:
    pass

# Bytes reserved in a running stage's manifest for its ``failed`` record (error <= 500).
_FAIL_ROOM = 2048
_VERSIONED = ("clusterclip", "numpy", "torch", "faiss-cpu", "sentence-transformers",
              "transformers", "pyarrow", "matplotlib")


def library_versions() -> dict[str, str]:
    """Versions of the libraries that can change results, as installed."""
    import importlib.metadata  # here: commands that never record a stage skip its import

    out = {}
    for name in _VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out








def _stat_identity(path: Path) -> list[int] | None:
    """What says a written output is still the one written: size and mtime (files),
    mtime (folders). Kept by ``cp -p`` and ``mv``, so a moved work directory stays current."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_mtime_ns] if path.is_dir() else [st.st_size, st.st_mtime_ns]


def _stat_input(path: str | os.PathLike[str]) -> tuple[Path, os.stat_result]:
    p = Path(path).resolve()
    try:
        return p, p.stat()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None


def _ident(st: os.stat_result) -> dict[str, int]:
    """What keys an input's cached hash: a change to any of them means re-hashing."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
            "ctime_ns": st.st_ctime_ns}


def _hash_input(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """``(resolved path, {size, mtime_ns, ino, ctime_ns, sha256})`` of an input file."""
    p, st = _stat_input(path)
    try:
        digest = sha256_file(p)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    return str(p), {**_ident(st), "sha256": digest}




@dataclass
class StageRun:
    """What a stage's work function gets: the work directory, the stage and its fingerprint."""

    workdir: Workdir
    name: str
    fingerprint: str


class Workdir(Locking, Loaders):
    """A run's directory and its manifest. Only one process (rank 0) writes it; its lock
    (:class:`~clusterclip.workdir.lock.Locking`) and loaders
    (:class:`~clusterclip.workdir.loaders.Loaders`) live in modules of their own."""

    def __init__(self, path: str | os.PathLike[str], create: bool = True) -> None:
        self.root = Path(path)
        if str(path) == "":
            raise InputError("work directory '': an empty path; give a folder name")
        if self.root.exists() and not self.root.is_dir():
            raise InputError(f"work directory {self.root} exists and is not a directory")
        # made here: removed again when it is still empty on release (a refused command)
        self._made = create and not self.root.exists()
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        elif not self.root.is_dir():
            raise InputError(f"work directory {self.root} does not exist")
        self.manifest_path = self.root / MANIFEST
        self.manifest = self._load()

    # -- paths -------------------------------------------------------------
    def path(self, *parts: str) -> Path:
        """Path of an artifact inside the work directory (an absolute part stays absolute)."""
        return self.root.joinpath(*parts)

    def protected(self, own: Sequence[str] = (), parts: bool = True
                  ) -> tuple[tuple[Path, str, Any], ...]:
        """What an ``--out`` folder must never replace: this directory, what the stages
        write inside it (except ``own``; none without ``parts``), and every input file the
        manifest knows."""
        # Nothing may lie inside W but the parts the command owns (its stages, which
        # write their own parts, check with ``parts`` false).
        inside: Any = tuple(self.path(n) for n in own) if parts else True
        out: list[tuple[Path, str, Any]] = [(self.root, "the work directory", True)]
        for name in sorted(set(PRODUCERS) | {MANIFEST, LOCK}) if parts else []:
            if name not in own:
                out.append((self.path(name), "part of the work directory:", False))
        inputs = set(self.manifest.get("inputs", {}))
        try:
            meta = read_json(self.path(CORPUS_META))
            inputs |= {str(f["path"]) for f in meta.get("files", [])}
        except (OSError, InputError, AttributeError, TypeError, KeyError):
            pass
        root = self.root.resolve()

        def own_part(p: str) -> bool:
            """An input that is one of this directory's parts (``W/search/mixture.json``
            read by ``experiment``): the rule over the parts above covers it, so the stage
            that writes it may replace it."""
            try:
                rel = Path(p).resolve().relative_to(root)
            except ValueError:
                return False
            return bool(rel.parts) and rel.parts[0] in PRODUCERS

        out += [(Path(p), "the input file", False) for p in sorted(inputs) if not own_part(p)]
        # again, last: a part or an input in W is named before "inside the work directory"
        return (*out, (self.root, "the work directory", inside))


















    # -- manifest ----------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        if not self.manifest_path.exists():
            return {"version": 1, "inputs": {}, "stages": {}}
        rec = read_json(self.manifest_path, "a clusterclip manifest")
        if not (isinstance(rec, dict) and isinstance(rec.get("inputs"), dict)
                and isinstance(rec.get("stages"), dict)):
            raise InputError(f"{self.manifest_path}: not a clusterclip manifest (no inputs and "
                             f"stages); use another work directory")
        return rec

    def reload(self) -> None:
        """Re-read the manifest (another command may have written it before our lock); on
        a read-only file system nothing can have, and the records of this command's stages
        live only in memory."""
        if not self.read_only():
            self.manifest = self._load()

    def save(self, reserve: int = 0) -> None:
        """Write the manifest (not on a read-only file system, where a command that only
        reads W, e.g. ``export``, runs without recording itself). ``reserve``: spaces
        after the JSON, room that :meth:`_save_in_place` may write over on a full disk."""
        if not self.read_only():
            write_text(self.manifest_path, json.dumps(self.manifest, indent=2,
                                                      sort_keys=True) + "\n" + " " * reserve)

    def _save_in_place(self) -> None:
        """Write the manifest over the bytes of the one there (no new block on most file
        systems: what a full disk still allows), padded with spaces to its length; OSError
        when it does not fit."""
        text = (json.dumps(self.manifest, indent=2, sort_keys=True) + "\n").encode()
        with open(self.manifest_path, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            if len(text) > size:
                raise OSError(errno.ENOSPC, "the record does not fit", str(self.manifest_path))
            f.write(text + b" " * (size - len(text)))
            f.flush()
            os.fsync(f.fileno())

    def input_record(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """``{path, size, sha256}`` of an input file.

        The hash is cached in the manifest under (size, mtime, inode, ctime), so
        re-running a pipeline over unchanged multi-GB inputs does not re-read
        them, while an edit that keeps size and mtime (``cp -p``, ``touch -r``)
        still changes the ctime and is re-hashed.
        """
        p, st = _stat_input(path)
        key = str(p)
        digest = self._cached_sha256(key, st)
        if digest is None:
            key, ident = _hash_input(path)
            self.manifest["inputs"][key] = ident
            digest = ident["sha256"]
        return {"path": key, "size": st.st_size, "sha256": digest}

    def _cached_sha256(self, key: str, st: os.stat_result) -> str | None:
        cached = self.manifest["inputs"].get(key)
        if cached and all(cached.get(k) == v for k, v in _ident(st).items()):
            return str(cached["sha256"])
        return None

    def hash_inputs(self, files: Sequence[str | os.PathLike[str]]) -> None:
        """Hash the ``files`` whose cached hash is stale into the manifest's cache, the
        files shared among the ``torchrun`` ranks (by size). Every rank calls it with the
        same ``files``; rank 0's manifest gets the hashes."""
        from clusterclip.distributed import map_in_order, on_main

        def stale() -> list[tuple[str, int]]:
            out = []
            for f in files:
                try:
                    p, st = _stat_input(f)
                except InputError:
                    out.append((str(f), 0))  # hashing it raises the error, in file order
                    continue
                if self._cached_sha256(str(p), st) is None:
                    out.append((str(f), st.st_size))
            return out

        todo = on_main(stale)
        hashed = map_in_order(lambda i: _hash_input(todo[i][0]), [size for _, size in todo])
        for key, ident in hashed:
            self.manifest["inputs"][key] = ident

    def stage(self, name: str) -> dict[str, Any] | None:
        """The manifest record of a stage, or None."""
        return self.manifest["stages"].get(name)

    def is_current(self, name: str, fingerprint: str) -> bool:
        """True when stage ``name`` finished with this fingerprint and its outputs are
        still the ones it wrote."""
        rec = self.stage(name)
        if not (rec and rec.get("status") == "done" and rec.get("fingerprint") == fingerprint):
            return False
        return not self.changed_outputs(name)

    def _say_why_again(self, name: str, fingerprint: str) -> None:
        """On stderr: why stage ``name``, done with ``fingerprint``, runs again (an output
        changed or gone: edited, or the work directory copied without ``cp -p``)."""
        changed = self.changed_outputs(name) if (self.stage(name) or {}).get(
            "fingerprint") == fingerprint else []
        if changed:
            print(f"{name}: {changed[0]} is not as `{name}` wrote it (missing, or its size or "
                  f"modification time changed: edited, or copied without `cp -p`); running "
                  f"`{name}` again", file=sys.stderr, flush=True)

    def changed_outputs(self, name: str) -> list[Path]:
        """The outputs of stage ``name`` that are missing or not as it recorded them
        (size and modification time; a folder's modification time)."""
        rec = self.stage(name) or {}
        stats = rec.get("output_stats") or {}
        return [self.path(o) for o in rec.get("outputs", []) if not self.path(o).exists()
                or (o in stats and _stat_identity(self.path(o)) != stats[o])]

    def begin(self, name: str, fingerprint: str, params: dict[str, Any], *,
              upstream: Mapping[str, Any] | None = None,
              inputs: Sequence[Mapping[str, Any]] = (), outputs: Sequence[str] = ()) -> None:
        """Record that a stage started (its old outputs are no longer trusted)."""
        before = self.manifest["stages"].get(name)
        self.manifest["stages"][name] = {
            "status": "running",
            "fingerprint": fingerprint,
            "params": params,
            "upstream": dict(upstream or {}),
            "inputs": [dict(r) for r in inputs],
            "outputs": list(outputs),
            "pid": os.getpid(),
            "started": _now(),
            "versions": library_versions(),
        }
        # room for the record that replaces this one if the work fails on a full disk
        self.save(reserve=_FAIL_ROOM + len(json.dumps({"stages": {name: before}}, indent=2)))

    def finish(self, name: str, fingerprint: str, outputs: Sequence[str],
               info: dict[str, Any] | None = None) -> None:
        """Record that a stage finished; ``outputs`` are paths relative to the root."""
        rec = self.manifest["stages"].setdefault(name, {})
        if rec.get("fingerprint") != fingerprint:
            raise RuntimeError(f"stage {name} finished with a fingerprint it did not begin with")
        rec.update(status="done", outputs=list(outputs), info=info or {}, finished=_now(),
                   output_stats={o: _stat_identity(self.path(o)) for o in outputs})
        self.save()

    def _abandon(self, name: str, before: dict[str, Any] | None,
                 outputs: Sequence[str], error: BaseException) -> None:
        """Record a stage whose work raised (a refusal, an error, Ctrl-C), never as
        ``running`` (which only a killed process leaves): its earlier record again when
        that was ``done`` and its outputs are still the ones it describes, else status
        ``interrupted`` (Ctrl-C) or ``failed`` with the error's first line."""
        if before is not None and before.get("status") == "done":
            stats = before.get("output_stats") or {}
            if all(_stat_identity(self.path(o)) == stats.get(o)
                   for o in before.get("outputs") or []):
                self.manifest["stages"][name] = before
                self._save_anyway()
                return
        rec = self.manifest["stages"][name]
        interrupted = isinstance(error, KeyboardInterrupt)
        rec["status"] = "interrupted" if interrupted else "failed"
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        rec["error"] = None if interrupted else text[:500]
        rec["ended"] = _now()
        self._save_anyway()

    def _save_anyway(self) -> None:
        """Save the manifest; on a full disk (or any error writing a new file), over the
        old one's bytes, in the room :meth:`begin` reserved."""
        try:
            self.save()
        except OSError:
            self._save_in_place()

    # -- what a stage reads ------------------------------------------------
    def require(self, name: str) -> str:
        """The fingerprint of stage ``name`` if its outputs can be used; else InputError
        naming the stage to rerun (the earliest one when several are out of date)."""
        rec = self.stage(name)
        if rec is None:
            raise InputError(f"{self.root}: stage `{name}` has not run; run `{rerun(name)}` "
                             f"first")
        for label, recorded in (rec.get("upstream") or {}).items():
            kind, _, what = label.partition(":")
            now = self.require(what) if kind == "stage" else self._file_identity(what)
            if now != recorded:
                why = (f"`{what}` ran again after it" if kind == "stage"
                       else f"{self.path(what)} changed after it ran")
                raise InputError(f"{self.root}: the results of `{name}` are stale ({why}); "
                                 f"rerun `{rerun(name)}`")
        if rec.get("status") != "done":
            raise InputError(f"{self.root}: stage `{name}` did not finish (status "
                             f"{rec.get('status')!r}: killed, failed or interrupted), so its "
                             f"outputs may be incomplete or mixed; rerun `{rerun(name)}`")
        for r in rec.get("inputs") or []:
            try:
                same = self.input_record(r["path"])["sha256"] == r["sha256"]
            except InputError:
                same = False
            if not same:
                raise InputError(f"{r['path']}: changed or gone since `{name}` read it; "
                                 f"rerun `{rerun(name)}`")
        for o, stat in (rec.get("output_stats") or {}).items():
            if _stat_identity(self.path(o)) != stat:
                raise InputError(f"{self.path(o)}: changed or gone since `{name}` wrote it; "
                                 f"rerun `{rerun(name)}`")
        return str(rec["fingerprint"])

    def _file_identity(self, name: str) -> str | None:
        path = self.path(_IDENTITY_FILE.get(name, name))
        return self.input_record(path)["sha256"] if path.is_file() else None

    def upstream(self, reads: Sequence[str], maybe_reads: Sequence[str] = ()) -> dict[str, Any]:
        """Identities of what a stage reads in W: the fingerprint of the stage that
        wrote each (checked with :meth:`require`), or the file's hash when no stage
        record exists (a file placed by hand). A missing ``reads`` file is an error."""
        out: dict[str, Any] = {}
        for name in [*reads, *maybe_reads]:
            top = Path(name).parts[0]
            producer = PRODUCERS.get(top)
            if producer is not None and self.stage(producer) is not None:
                out[f"stage:{producer}"] = self.require(producer)
                if not self.path(name).exists() and name in reads:
                    raise InputError(f"{self.path(name)}: missing; rerun `{rerun(producer)}`")
            elif self.path(name).exists():
                out[f"file:{top}"] = self._file_identity(top)
            elif name in reads:
                if not self.manifest_path.exists() and not any(
                        self.path(n).exists() for n in PRODUCERS):  # none of W's parts
                    raise InputError(f"{self.root}: not a work directory (no {MANIFEST}, "
                                     f"no {name}); "
                                     f"make one with `clusterclip embed INPUT --workdir "
                                     f"{self.root}` or `clusterclip run`")
                hint = f"; run `{rerun(producer)}` first" if producer else ""
                raise InputError(f"{self.path(name)}: missing{hint}")
        return out

    def _check_owned(self, name: str, paths: Sequence[str], inputs: Sequence[Path],
                     overwrite: bool = False) -> None:
        """Refuse before any work when replacing ``paths`` (in W) would lose a user's files:
        an input inside one of them (always), or one that exists and is not ours (unless
        ``overwrite``)."""
        for rel in paths:
            p = self.path(rel)
            if not p.is_relative_to(self.root):
                continue  # an --out folder elsewhere: checked by check_output_dir
            for f in inputs:
                if f.resolve() == p.resolve() or p.resolve() in f.resolve().parents:
                    raise InputError(f"input {f} is inside {p}, which `{name}` replaces; "
                                     f"move the input or use another work directory")
            if not (p.exists() or p.is_symlink()):
                continue
            folder = p.is_dir() and not p.is_symlink()
            if overwrite and not folder:
                continue
            producer = PRODUCERS.get(p.relative_to(self.root).parts[0])
            ours = (producer is not None and self.stage(producer) is not None) or any(
                rel in (rec.get("outputs") or []) for rec in self.manifest["stages"].values())
            mark = None
            if folder:
                # A folder we write carries our marker (and the list of the files we wrote
                # there, the only ones a rerun replaces); a folder without it is the
                # user's (e.g. made after we removed ours), unless the stage that writes
                # it was killed before it could mark it. --overwrite: any clusterclip
                # marker, never a folder without one.
                rec = read_marker(p)
                mark = None if rec is None else rec["command"]
                if rec is not None and rec["problem"] is not None:
                    raise InputError(f"{p}: its {MARKER} is not a record clusterclip can "
                                     f"trust ({rec['problem']}), so its files may be yours; "
                                     f"move it away or use another work directory")
                killed = producer is not None and (self.stage(producer) or {}).get(
                    "status", "done") != "done"
                ours = (mark == name or (overwrite and mark is not None)
                        or not any(p.iterdir()) or (ours and killed))
            if not ours:
                hint = (" (or pass overwrite)" if name in OVERWRITE_COMMANDS
                        and (not folder or mark is not None) else "")
                raise InputError(f"{p}: exists and was not written by `clusterclip {name}`; "
                                 f"move it away or use another work directory{hint}",
                                 params=("overwrite",) if hint else ())

    def _check_writable(self, name: str, paths: Sequence[str]) -> None:
        """On a read-only file system, refuse (before any work) a stage that writes in W;
        one whose outputs lie elsewhere runs, unrecorded."""
        if not self.read_only():
            return
        for rel in paths:
            if self.path(rel).resolve().is_relative_to(self.root.resolve()):
                raise InputError(f"work directory {self.root}: on a read-only file system, "
                                 f"and `{name}` writes {self.path(rel)} in it")

    def check_can_write(self, stages: Sequence[str]) -> None:
        """Refuse (InputError) before any work when a later stage of a multi-stage command
        (``run``, ``demo``) would find a name it writes in W taken by a user's file."""
        self.reload()
        for stage in stages:
            self._check_owned(stage, [n for n, p in PRODUCERS.items() if p == stage], ())

    # -- the stage runner --------------------------------------------------
    def run_stage(self, name: str, *, work: Callable[[StageRun], dict[str, Any] | None],
                  key: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
                  reads: Sequence[str] = (), maybe_reads: Sequence[str] = (),
                  inputs: Sequence[str | os.PathLike[str]]
                  | Callable[[], Sequence[str | os.PathLike[str]]] = (),
                  outputs: Sequence[str] = (), scratch: Sequence[str] = (),
                  params: Mapping[str, Any] | None = None, cache: bool = True,
                  overwrite: bool = False) -> dict[str, Any]:
        """Run stage ``name``: the one sequence every stage goes through.

        Under the lock, on rank 0: check that the stages that wrote ``reads``
        (and ``maybe_reads``, if present) finished and are current, else
        InputError naming the one to rerun; hash the external ``inputs``;
        fingerprint those with ``key`` (what determines the result); if the
        stage is current with that fingerprint (and ``cache``), return its
        recorded info with ``skipped=True``. Otherwise refuse ``outputs`` and
        ``scratch`` (paths in W) that exist and are not ours (unless
        ``overwrite``) or hold an input, record ``running``, call ``work`` on
        every rank, and record ``done`` with rank 0's returned info, which every
        rank gets back (with ``skipped=False``). ``key``/``inputs`` may be
        callables, evaluated on rank 0 under the lock.
        """
        from clusterclip.distributed import is_main, on_main

        with self.locked():
            given: dict[str, Any] = {}  # what rank 0 read before the inputs were hashed

            def read() -> list[str]:
                self.reload()
                given["up"] = self.upstream(reads, maybe_reads)
                given["key"] = dict(key() if callable(key) else key)
                given["files"] = [Path(f) for f in (inputs() if callable(inputs) else inputs)]
                return [str(f) for f in given["files"]]

            # Every rank hashes a share of the inputs (rank 0 keeps the hashes).
            self.hash_inputs(on_main(read))

            def decide() -> dict[str, Any]:
                up, k, files = given["up"], given["key"], given["files"]
                records = [self.input_record(f) for f in files]
                fp = fingerprint({"upstream": up, "inputs": records, "key": k})
                if cache and self.is_current(name, fp):
                    self.save()  # the refreshed input-hash cache
                    return {"current": True, "info": self.stage(name).get("info", {})}
                if cache:
                    self._say_why_again(name, fp)
                self._check_writable(name, [*outputs, *scratch])
                self._check_owned(name, [*outputs, *scratch], files, overwrite)
                given["before"] = json.loads(json.dumps(self.stage(name)))
                self.begin(name, fp, dict(params if params is not None else k), upstream=up,
                           inputs=records, outputs=outputs)
                return {"current": False, "fingerprint": fp}

            decision = on_main(decide)
            if decision["current"]:
                return {**decision["info"], "skipped": True}
            run = StageRun(self, name, decision["fingerprint"])
            try:
                info = work(run) or {}
            except BaseException as e:
                if is_main():  # no collective call here: the other ranks may not have failed
                    with contextlib.suppress(Exception):  # never hide the error reported
                        self._abandon(name, given.get("before"), outputs, e)
                raise

            def done() -> dict[str, Any]:
                try:
                    self.finish(name, run.fingerprint, outputs, info)
                except BaseException as e:  # e.g. a full disk: never left `running`
                    with contextlib.suppress(Exception):
                        self._abandon(name, given.get("before"), outputs, e)
                    raise
                return info

            return {**on_main(done), "skipped": False}
