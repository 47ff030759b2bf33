"""Read wandb offline runs back (`wandb-offline:DIR`): the same rows the public API would give.

An offline run (`wandb.mode=offline`, the default here) lives in `<run dir>/wandb/offline-run-*/
run-<id>.wandb`, wandb's transaction log: the records `wandb sync` would upload. wandb >= 0.20 reads
and writes it in its Go core only, so this module reads the log format itself: a 7-byte header
(`:W&B`, magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each `<crc32 u32><length u16>
<type u8><data>` (type 1 a whole record, 2/3/4 its first/middle/last piece; a block tail shorter than
a chunk header is zero padding), every record a `wandb_internal_pb2.Record` (run, config, history,
exit, ...). The checksum is crc32 over the type byte then the data, as in LevelDB's log.

The runs it yields answer like public-API runs (`name`, `id`, `state`, `config`, `scan_history()`),
so `wandb_export.rows_from_wandb_runs` turns them into rows and the same tables follow.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK, CHUNK_HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class CorruptWandbLog(ValueError):
    """A .wandb file that is not a readable transaction log (names the file and the offset)."""


def records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    if len(data) < 7 or struct.unpack_from("<4sHB", data, 0)[:2] != (b":W&B", 0xBEE1):
        raise CorruptWandbLog(f"{path}: not a wandb transaction log (bad header)")
    pos, pending = 7, None
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:
            pos += left
            continue
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0 and length == 0:  # zero padding up to the block's end
            pos += left
            continue
        chunk = data[pos + CHUNK_HEADER: pos + CHUNK_HEADER + length]
        if len(chunk) < length:  # a run still writing (or killed) ends mid-chunk: stop there
            break
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            raise CorruptWandbLog(f"{path}: checksum mismatch at byte {pos}")
        pos += CHUNK_HEADER + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind in (MIDDLE, LAST) and pending is not None:
            pending += chunk
            if kind == LAST:
                yield pending
                pending = None


def _key(item) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


class OfflineRun:
    """One offline run, shaped like a `wandb.Api()` run."""

    def __init__(self, path: Path):
        from wandb.proto import wandb_internal_pb2 as pb

        self.path, self.config, self.steps, self.summary = path, {}, [], {}
        self.name = self.id = path.stem.removeprefix("run-")
        self.state = "running"
        for raw in records(path):
            rec = pb.Record()
            rec.ParseFromString(raw)
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                self.id, self.name = rec.run.run_id, rec.run.display_name or rec.run.run_id
                self.group, self.tags, self.job_type = rec.run.run_group, list(rec.run.tags), rec.run.job_type
                self._config(rec.run.config.update)
            elif kind == "config":
                self._config(rec.config.update)
            elif kind == "summary":
                self.summary.update({_key(i): json.loads(i.value_json) for i in rec.summary.update})
            elif kind == "history":
                self.steps.append({_key(i): json.loads(i.value_json) for i in rec.history.item})
            elif kind == "exit":
                self.state = "finished" if rec.exit.exit_code == 0 else "failed"

    def _config(self, updates) -> None:
        for u in updates:
            if _key(u) != "_wandb":
                self.config[_key(u)] = json.loads(u.value_json)

    def scan_history(self) -> Iterator[dict[str, Any]]:
        yield from self.steps


def offline_runs(root: str | Path) -> list[OfflineRun]:
    """Every offline run under `root` (a run directory, an experiment directory or a wandb dir); a
    run resumed in several processes has one file per process with the same id (in time order, by their
    `offline-run-<time>` folders): the last one read wins for config, summary and state, and the histories
    are merged by step, a later process's step replacing an earlier one's (a resumed process logs again
    the rows its checkpoint kept, training.trainer; the killed one may have logged steps past it)."""
    files = sorted(p for p in Path(root).rglob("offline-run-*/run-*.wandb"))
    by_id: dict[str, OfflineRun] = {}
    for f in files:
        run = OfflineRun(f)
        if run.id in by_id:
            first = by_id[run.id]
            later = {s.get("_step") for s in run.steps}
            first.steps = sorted([s for s in first.steps if s.get("_step") not in later] + run.steps,
                                 key=lambda s: s.get("_step", -1))
            first.config.update(run.config)
            first.summary.update(run.summary)
            first.state = run.state
        else:
            by_id[run.id] = run
    return list(by_id.values())
